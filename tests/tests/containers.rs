//! Processes in real docker containers, recorded from the host (`-a`):
//! their stacks under the container's frame (`NAME [container SHORTID]`,
//! or `NAME [service]`, or none, as `--group-by` says), their JSON labels
//! naming the container as docker (or podman) does, and a JVM in a
//! container attached across its pid and mount namespaces. The same binary
//! run on the host at the same time has no container frame.

use std::fs;
use std::path::Path;
use std::thread;
use std::time::Duration;

use serde_json::Value;
use stoke_tests::docker::{Container, Engine, Image, Rootfs};
use stoke_tests::{
    args, assert_share, cpu_time, describe, pprof_tags, prepare, read_folded, record_args,
    record_to, require_root, samples_where, stacks_of, total_samples, JavaWorkload, Stack, Stoke,
    StokeOutput, TempDir, Workload, JDK_17,
};

/// Samples per second of the recordings.
const HZ: u32 = 299;

/// Where a workload lives in its image.
const APP: &str = "/app";

/// An image of `engine` holding `workload` (at `/app/<name>`) and its
/// libraries.
fn workload_image(engine: Engine, dir: &TempDir, workload: &Workload) -> Image {
    let mut rootfs = Rootfs::new(&dir.join("rootfs"));
    rootfs.add_program(workload.exe(), &format!("{APP}/{}", workload.name()));
    Image::import(engine, workload.name(), &rootfs)
}

/// Runs `workload` for 60 s in a container of `image`.
fn run_workload(image: &Image, workload: &Workload) -> Container {
    let exe = format!("{APP}/{}", workload.name());
    Container::run(workload.name(), image, &[&exe, "60"])
}

/// Records the whole host (`-a`) at HZ for `seconds` into `out`, and
/// returns stoke's output and the samples process `pid` should have in the
/// profile: its CPU time while stoke samples, at HZ (the machine is shared,
/// so measured, not assumed; and stoke's own start and end, which compete
/// with it for the CPUs, are left out).
///
/// # Panics
///
/// If it got less than a fifth of a CPU: too little to measure.
fn record_measuring(pid: u32, seconds: f64, out: &Path) -> (StokeOutput, f64) {
    let mut stoke = Stoke::spawn(&record_args(&args!["-a"], HZ, seconds, out));
    stoke.wait_for_stderr("stoke: sampling", Duration::from_secs(60));
    let cpu_before = cpu_time(pid);
    thread::sleep(Duration::from_secs_f64(seconds));
    let cpu_share = (cpu_time(pid) - cpu_before).as_secs_f64() / seconds;
    let output = stoke.wait_recording(seconds);
    let expected = cpu_share * seconds * f64::from(HZ);
    println!("{pid}: {expected:.0} samples expected from a CPU share of {cpu_share:.2}");
    assert!(
        cpu_share > 0.2,
        "process {pid} got only {cpu_share:.2} of a CPU: too little to measure"
    );
    (output, expected)
}

/// Panics unless the stacks under `frame` hold about `expected` samples
/// (a fifth fewer at most, for samples lost on a loaded machine, a tenth
/// more at most); returns their number.
fn assert_about(mine: &[&Stack], expected: f64, frame: &str) -> u64 {
    let total = total_samples(mine.iter().copied());
    println!("{frame}: {total} samples, {expected:.0} expected");
    assert!(
        (0.8 * expected..=1.1 * expected + 10.0).contains(&(total as f64)),
        "{total} samples under `{frame}`, {expected:.0} expected\n{}",
        describe(mine.iter().copied(), 10)
    );
    total
}

#[test]
fn a_containerized_workload_is_under_its_container_frame_and_a_host_copy_is_not() {
    let (dir, workload) = prepare("container-frame", "busy_other");
    let image = workload_image(Engine::Docker, &dir, &workload);
    let container = run_workload(&image, &workload);
    let host_copy = workload.spawn(&["60"]);
    let inspected = container.inspect("{{.Id}}");
    assert_eq!(container.id(), inspected, "docker run and docker inspect");
    let out = dir.join("host.folded");

    let (_, expected) = record_measuring(container.pid(), 3.0, &out);
    let stacks = read_folded(&out);
    println!("{}", describe(&stacks, 20));
    let frame = container.container_frame();
    let mine = stacks_of(&stacks, &frame);
    let total = assert_about(&mine, expected, &frame);

    // All of them its process's, in the workload's own functions.
    let process = container.process_frame(&workload.comm());
    let misplaced = samples_where(mine.iter().copied(), |s| s.frames.get(1) != Some(&process));
    assert_eq!(
        misplaced, 0,
        "stacks under `{frame}` of another process than `{process}`"
    );
    let hot = samples_where(mine.iter().copied(), |s| {
        s.contains_run(&["main", "other_work", "other_spin"])
    });
    assert_share(
        hot,
        total,
        0.8,
        format_args!(
            "under `{frame}` in main;other_work;other_spin\n{}",
            describe(mine.iter().copied(), 10)
        ),
    );
    // Its process frame nowhere else.
    let elsewhere = samples_where(&stacks, |s| s.root() != frame && s.contains(&process));
    assert_eq!(elsewhere, 0, "`{process}` outside `{frame}`");

    // The same binary on the host: its process frame is the root.
    let host_root = host_copy.root_frame();
    let host = samples_where(&stacks, |s| s.contains(&host_root));
    let host_rooted = samples_where(&stacks, |s| s.root() == host_root);
    println!("{host_root}: {host} samples");
    assert!(
        host > 100,
        "only {host} samples of the host's `{host_root}`"
    );
    assert_eq!(
        host,
        host_rooted,
        "the host's `{host_root}` is below some frame\n{}",
        describe(&stacks, 20)
    );
}

/// The stacks of a JSON profile (`-o FILE.json`), after checking its
/// format and version.
fn json_stacks(path: &Path) -> Vec<Value> {
    let text = fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("reading the JSON profile {}: {e}", path.display()));
    let mut document: Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("the JSON profile {} is not JSON: {e}", path.display()));
    assert_eq!(document["format"], "stoke-profile");
    assert_eq!(document["version"], 2);
    match document["stacks"].take() {
        Value::Array(stacks) => stacks,
        other => panic!("the JSON profile's `stacks` is not an array: {other}"),
    }
}

/// A label of a JSON stack, if it has it.
fn label<'a>(stack: &'a Value, key: &str) -> Option<&'a str> {
    stack["labels"][key].as_str()
}

/// The samples of a JSON stack.
fn samples(stack: &Value) -> u64 {
    stack["samples"]
        .as_u64()
        .expect("a stack's samples are a number")
}

/// The stacks of `container` in a JSON profile, found by its full id,
/// after checking that each has the labels and context frames of its
/// process (`comm`, its first) in it, as `runtime` runs it from `image`,
/// and that most of their samples are in the workload's `hot` function.
fn container_json_stacks<'a>(
    stacks: &'a [Value],
    container: &Container,
    runtime: &str,
    image: &str,
    comm: &str,
    hot: &str,
) -> Vec<&'a Value> {
    let mine: Vec<&Value> = stacks
        .iter()
        .filter(|s| label(s, "container_id") == Some(container.id()))
        .collect();
    let total: u64 = mine.iter().map(|s| samples(s)).sum();
    println!(
        "{} stacks, {total} samples labelled {}",
        mine.len(),
        container.id()
    );
    assert!(
        total > 100,
        "only {total} samples labelled with the container's id"
    );
    let pid = container.pid().to_string();
    let expected = [
        ("container_runtime", runtime),
        ("container_name", container.name()),
        ("container_image", image),
        ("pid", &pid),
        ("comm", comm),
    ];
    let frame = container.container_frame();
    let process = container.process_frame(comm);
    for stack in &mine {
        for (key, value) in expected {
            assert_eq!(label(stack, key), Some(value), "label {key} of {stack}");
        }
        // The container frame and the process frame are context, the rest
        // is code.
        assert_eq!(stack["context_frames"], 2, "{stack}");
        assert_eq!(stack["frames"][0].as_str(), Some(&*frame), "{stack}");
        assert_eq!(stack["frames"][1].as_str(), Some(&*process), "{stack}");
    }
    let in_hot: u64 = mine
        .iter()
        .filter(|s| {
            s["frames"]
                .as_array()
                .is_some_and(|f| f.iter().any(|f| f == hot))
        })
        .map(|s| samples(s))
        .sum();
    assert_share(in_hot, total, 0.8, format_args!("of {frame} are in {hot}"));
    mine
}

#[test]
fn json_labels_name_the_container_as_docker_does() {
    let (dir, workload) = prepare("container-json", "busy_other");
    let image = workload_image(Engine::Docker, &dir, &workload);
    let container = run_workload(&image, &workload);
    let host_copy = workload.spawn(&["60"]);
    let out = dir.join("host.json");
    let pprof = dir.join("host.pb.gz");

    record_to(&args!["-a", "-o", pprof.display()], HZ, 2.0, &out);
    let stacks = json_stacks(&out);
    let mine = container_json_stacks(
        &stacks,
        &container,
        "docker",
        image.name(),
        &workload.comm(),
        "other_spin",
    );

    // The same recording as pprof, read by Go's own reader: the container's
    // samples carry its id and name.
    let in_container: u64 = mine.iter().map(|s| samples(s)).sum();
    let tags = pprof_tags(&pprof);
    for (key, value) in [
        ("container_id", container.id()),
        ("container_name", container.name()),
    ] {
        assert_eq!(
            tags.get(key).and_then(|values| values.get(value)),
            Some(&in_container),
            "pprof's {key} tags: {:?}",
            tags.get(key)
        );
    }

    // The host's copy: its own pid, no container label.
    let host_pid = host_copy.pid().to_string();
    let host: Vec<&Value> = stacks
        .iter()
        .filter(|s| label(s, "pid") == Some(&*host_pid))
        .collect();
    assert!(
        !host.is_empty(),
        "no stack of the host's copy (pid {host_pid})"
    );
    for stack in host {
        for key in ["container_id", "container_name", "container_runtime"] {
            assert_eq!(
                label(stack, key),
                None,
                "the host's copy has {key}: {stack}"
            );
        }
    }
}

#[test]
fn a_podman_container_is_named_as_podman_does() {
    let (dir, workload) = prepare("container-podman", "busy_other");
    let image = workload_image(Engine::Podman, &dir, &workload);
    let container = run_workload(&image, &workload);
    let out = dir.join("host.json");

    record_to(&args!["-a"], HZ, 2.0, &out);
    let stacks = json_stacks(&out);
    // Podman names the image in full (`localhost/NAME:latest`).
    let image_name = container.inspect("{{.ImageName}}");
    assert!(
        image_name.contains(image.name()),
        "podman's image {image_name}"
    );
    container_json_stacks(
        &stacks,
        &container,
        "podman",
        &image_name,
        &workload.comm(),
        "other_spin",
    );
}

#[test]
fn group_by_service_names_the_container_and_none_drops_the_frame() {
    let (dir, workload) = prepare("container-group-by", "busy_other");
    let image = workload_image(Engine::Docker, &dir, &workload);
    let container = run_workload(&image, &workload);
    let process = container.process_frame(&workload.comm());

    for (group_by, root) in [("service", Some(container.service_frame())), ("none", None)] {
        let out = dir.join(format!("{group_by}.folded"));
        record_to(&args!["-a", "--group-by", group_by], HZ, 1.5, &out);
        let stacks = read_folded(&out);
        let with_process: Vec<&Stack> = stacks.iter().filter(|s| s.contains(&process)).collect();
        let total = total_samples(with_process.iter().copied());
        println!(
            "--group-by {group_by}: {}",
            describe(with_process.iter().copied(), 5)
        );
        assert!(
            total > 100,
            "--group-by {group_by}: only {total} samples of `{process}`"
        );
        // The process frame comes first, or right below the service frame.
        let process_at = usize::from(root.is_some());
        for stack in &with_process {
            assert_eq!(
                stack.frames.get(process_at),
                Some(&process),
                "--group-by {group_by}: `{process}` is not frame {process_at}: {}",
                stack.joined()
            );
            if let Some(root) = &root {
                assert_eq!(stack.root(), root, "--group-by {group_by}");
            }
        }
    }
}

/// A docker image holding `java`'s JDK (its home at the same path, with
/// the libraries `ldd` lists for its programs and libraries) and classes.
fn jdk_image(dir: &TempDir, java: &JavaWorkload) -> Image {
    let jdk = java.jdk();
    let home = Path::new(jdk.home);
    let mut rootfs = Rootfs::new(&dir.join("rootfs"));
    // Only what `java` runs with: no sources, docs, headers or jmods (and
    // Debian's dangling links among them).
    let excludes = [
        "*/lib/src.zip",
        "*/legal",
        "*/man",
        "*/docs",
        "*/include",
        "*/jmods",
    ];
    rootfs.add_host_tree(home, &excludes);
    let mut objects = vec![jdk.tool("java"), jdk.libjvm()];
    for entry in fs::read_dir(home.join("lib")).expect("reading the JDK's lib") {
        let path = entry.expect("reading the JDK's lib").path();
        if path.extension().is_some_and(|e| e == "so") {
            objects.push(path);
        }
    }
    let objects: Vec<&Path> = objects.iter().map(|p| p.as_path()).collect();
    rootfs.libraries_of(&objects);
    rootfs.add_host_tree(java.classes(), &[]);
    Image::import(Engine::Docker, jdk.label, &rootfs)
}

#[test]
fn a_jvm_in_a_container_is_attached_and_has_java_frames() {
    require_root();
    let dir = TempDir::new("container-jvm");
    let java = JavaWorkload::build("JavaBusy", JDK_17, dir.path());
    let image = jdk_image(&dir, &java);

    let java_bin = java.jdk().tool("java").display().to_string();
    let classes = java.classes().display().to_string();
    let container = Container::run(
        "jvm",
        &image,
        &[&java_bin, "-cp", &classes, java.class(), "60"],
    );
    // Past the JVM's start, so that the recording sees its Java code run.
    thread::sleep(Duration::from_secs(1));
    let out = dir.join("host.folded");
    let (output, expected) = record_measuring(container.pid(), 4.0, &out);
    let stacks = read_folded(&out);
    let pid = container.pid();
    assert!(
        !output
            .stderr
            .contains(&format!("stoke: warning: JVM {pid}:")),
        "stoke could not attach to the JVM {pid} in the container:\n{}",
        output.stderr
    );

    let frame = container.container_frame();
    let process = container.process_frame("java");
    let mine = stacks_of(&stacks, &frame);
    println!("{frame}: {}", describe(mine.iter().copied(), 10));
    let total = assert_about(&mine, expected, &frame);
    assert_eq!(
        samples_where(mine.iter().copied(), |s| s.frames[1] != process),
        0,
        "stacks under `{frame}` of another process than `{process}`"
    );
    // JavaBusy's methods as Java frames from the process frame on, down to
    // its hot loop.
    let java_named = samples_where(mine.iter().copied(), |s| {
        s.java_at(2).is_some_and(|m| m.starts_with("JavaBusy.")) && s.has_java("JavaBusy.crunch")
    });
    assert_share(
        java_named,
        total,
        0.7,
        format_args!(
            "under `{frame}` are `{process};JavaBusy.*_[..];...;JavaBusy.crunch_[..]`\n{}",
            describe(mine.iter().copied(), 10)
        ),
    );
}
