//! A process names itself, its threads and its files as it likes: names
//! with `;` (the folded format's separator) or a line break must not forge
//! frames or lines in stoke's output.

use std::fs;
use std::process::Command;

use stoke_tests::{
    args, describe, prepare, read_folded, record_to, samples_where, Running, Workload,
};

#[test]
fn separators_and_line_breaks_in_names_forge_nothing() {
    let (dir, workload) = prepare("hostile-names", "hostile_names");
    let lib = Workload::build_with(
        "hostile_names_lib",
        dir.path(),
        &["-O1", "-shared", "-fPIC", "-s"],
    );
    let evil_lib = dir.join("lib;ev\nil.so");
    fs::copy(lib.exe(), &evil_lib).unwrap();
    let mut command = Command::new(workload.exe());
    command.arg("6").arg(&evil_lib);
    let running = Running::start(command, "hostile_names", "ev;il\nx");
    let pid = running.pid();
    let out = dir.join("names.folded");
    record_to(&args!["-p", pid, "-t"], 499, 2.0, &out);

    let text = fs::read_to_string(&out).unwrap();
    let stacks = read_folded(&out);
    println!("{}", describe(&stacks, 10));
    assert_eq!(
        text.lines().count(),
        stacks.len(),
        "a name broke a line of the folded output:\n{text}"
    );
    let process = format!("ev:il x [{pid}]");
    let total: u64 = stacks.iter().map(|s| s.count).sum();
    assert!(total > 200, "only {total} samples");
    for stack in &stacks {
        assert_eq!(stack.frames[0], process, "{}", stack.joined());
        assert!(
            stack.frames[1].ends_with(']') && !stack.frames[1].contains(';'),
            "{}",
            stack.joined()
        );
    }
    let in_lib = samples_where(&stacks, |s| {
        s.frames[1].starts_with("th:r ead [tid ")
            && s.frames
                .iter()
                .any(|f| f.starts_with("lib:ev") && f.contains(".so+0x"))
    });
    assert!(
        in_lib as f64 > 0.8 * total as f64,
        "only {in_lib} of {total} samples name the thread and the library file whole"
    );
}
