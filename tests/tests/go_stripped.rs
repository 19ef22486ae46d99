//! A Go program built stripped (`-ldflags='-s -w'`, as distributions and
//! images ship Go) has no symbol table: its functions are named from the
//! runtime's own `.gopclntab`. A 70:30 split between `main.hotA` and
//! `main.hotB` comes out at 70 ± 3, with `main.main` on its stacks (Go
//! keeps frame pointers).

use std::process::Command;

use stoke_tests::{
    args, describe, read_folded, record_args, require_root, samples_where, total_samples,
    workloads_dir, Running, Stoke, TempDir,
};

#[test]
fn a_stripped_go_program_is_named_from_its_pclntab() {
    require_root();
    let dir = TempDir::new("go-stripped");
    let exe = dir.join("split_stripped");
    let built = Command::new("go")
        .args(["build", "-ldflags=-s -w", "-o"])
        .arg(&exe)
        .arg(workloads_dir().join("go/split.go"))
        .env("GOCACHE", dir.join("go-cache"))
        .env("GOPATH", dir.join("go-path"))
        .env("GO111MODULE", "off")
        .output()
        .expect("running go build (cargo xtask setup installs golang-go)");
    assert!(built.status.success(), "go build: {built:?}");
    let sections = Command::new("readelf")
        .arg("-S")
        .arg(&exe)
        .output()
        .unwrap();
    let sections = String::from_utf8_lossy(&sections.stdout);
    assert!(
        !sections.contains(".symtab") && sections.contains(".gopclntab"),
        "not a stripped Go program:\n{sections}"
    );

    let mut command = Command::new(&exe);
    command.arg("30");
    let running = Running::start(command, "split_stripped", "split_stripped");
    let out = dir.join("go.folded");
    Stoke::spawn(&record_args(&args!["-p", running.pid()], 999, 4.0, &out)).wait_recording(4.0);

    let stacks = read_folded(&out);
    let total = total_samples(&stacks);
    let a = samples_where(&stacks, |s| s.contains("main.hotA"));
    let b = samples_where(&stacks, |s| s.contains("main.hotB"));
    let main = samples_where(&stacks, |s| s.contains("main.main"));
    let share = 100.0 * a as f64 / (a + b).max(1) as f64;
    println!("{total} samples: main.hotA {a}, main.hotB {b} ({share:.1}%), main.main {main}");
    assert!(total > 2000, "{total} samples\n{}", describe(&stacks, 10));
    assert!(
        main * 10 >= total * 9,
        "{main} of {total} samples under main.main\n{}",
        describe(&stacks, 10)
    );
    assert!(
        (67.0..=73.0).contains(&share),
        "main.hotA has {share:.1}% of the hot samples ({a} vs {b})\n{}",
        describe(&stacks, 10)
    );
}
