//! Stoke itself in a container, as deploy/stoke-daemonset.yaml runs it: the
//! host's pid namespace, /sys and the runtime's container files mounted
//! read-only, and only the capabilities the deploy files list beyond
//! docker's defaults (SYS_ADMIN, SYS_PTRACE, DAC_READ_SEARCH), under
//! docker's default seccomp profile. From there it profiles a JVM of the
//! host with Java frames and a C workload in another container under that
//! container's name, and `stoke continuous` writes its profiles into a
//! mounted directory.

use std::fs;
use std::path::Path;
use std::thread;
use std::time::Duration;

use stoke_tests::docker::{Container, Engine, Image, Rootfs};
use stoke_tests::{
    describe, prepare, read_folded, samples_where, stacks_of, stoke_bin, total_samples,
    JavaWorkload, JDK_17,
};

/// The capabilities stoke gets beyond docker's defaults (which hold KILL,
/// SETUID and SETGID, for attaching to JVMs): BPF and perf events (which
/// docker's seccomp profile allows with SYS_ADMIN), other processes' maps
/// and memory, other users' files.
const CAPABILITIES: [&str; 3] = ["SYS_ADMIN", "SYS_PTRACE", "DAC_READ_SEARCH"];

/// An image holding the stoke binary (and `timeout`, to stop `stoke
/// continuous` with SIGTERM) with their libraries.
fn stoke_image(dir: &Path) -> Image {
    let mut rootfs = Rootfs::new(&dir.join("stoke-rootfs"));
    rootfs.add_program(&stoke_bin(), "/usr/local/bin/stoke");
    rootfs.add_program(Path::new("/usr/bin/timeout"), "/usr/bin/timeout");
    Image::import(Engine::Docker, "stoke", &rootfs)
}

/// The options of the deploy files: host pid namespace, mounts (`out` at
/// `/out`), capabilities.
fn deploy_options(out: &Path) -> Vec<String> {
    let mut options: Vec<String> = [
        "--pid=host",
        "-v",
        "/sys:/sys:ro",
        "-v",
        "/var/lib/docker/containers:/var/lib/docker/containers:ro",
    ]
    .map(str::to_owned)
    .to_vec();
    options.push("-v".to_owned());
    options.push(format!("{}:/out", out.display()));
    for capability in CAPABILITIES {
        options.push(format!("--cap-add={capability}"));
    }
    options
}

fn run(image: &Image, options: &[String], command: &[&str]) -> String {
    let options: Vec<&str> = options.iter().map(String::as_str).collect();
    let (ok, stdout, stderr) = image.run_to_end(&options, command);
    println!("{stdout}{stderr}");
    assert!(ok, "stoke in its container failed:\n{stderr}");
    stderr
}

#[test]
fn stoke_in_a_container_profiles_the_host_and_other_containers() {
    let (dir, workload) = prepare("in-container", "busy_other");
    let java = JavaWorkload::build("JavaBusy", JDK_17, dir.path());
    let jvm = java.spawn(&["60"]);
    let mut rootfs = Rootfs::new(&dir.join("workload-rootfs"));
    rootfs.add_program(workload.exe(), "/app/busy_other");
    let workload_image = Image::import(Engine::Docker, "busy", &rootfs);
    let container = Container::run("busy", &workload_image, &["/app/busy_other", "60"]);
    // Past the JVM's start, so that the recording sees its Java code run.
    thread::sleep(Duration::from_secs(1));

    let image = stoke_image(dir.path());
    let out = dir.join("out");
    fs::create_dir(&out).unwrap();
    let options = deploy_options(&out);
    let said = run(
        &image,
        &options,
        &[
            "/usr/local/bin/stoke",
            "record",
            "-a",
            "-F",
            "199",
            "-d",
            "4",
            "-o",
            "/out/host.folded",
        ],
    );
    let stacks = read_folded(&out.join("host.folded"));

    let jvm_stacks = stacks_of(&stacks, &jvm.root_frame());
    let jvm_total = total_samples(jvm_stacks.iter().copied());
    let java = samples_where(jvm_stacks.iter().copied(), |s| {
        s.has_java("JavaBusy.crunch")
    });
    println!(
        "{}: {jvm_total} samples, {java} in JavaBusy.crunch",
        jvm.root_frame()
    );
    assert!(
        jvm_total > 200 && java as f64 >= 0.9 * jvm_total as f64,
        "the host JVM: {java} of {jvm_total} samples in JavaBusy.crunch\n{said}\n{}",
        describe(jvm_stacks.iter().copied(), 10)
    );

    let frame = container.container_frame();
    let mine = stacks_of(&stacks, &frame);
    let in_workload = samples_where(mine.iter().copied(), |s| s.contains("other_spin"));
    println!("{frame}: {}", describe(mine.iter().copied(), 5));
    assert!(
        in_workload > 200,
        "{in_workload} samples of the other container's workload under `{frame}`\n{}",
        describe(stacks.iter(), 15)
    );

    run(
        &image,
        &options,
        &[
            "/usr/bin/timeout",
            "--preserve-status",
            "-s",
            "TERM",
            "7",
            "/usr/local/bin/stoke",
            "continuous",
            "-a",
            "--interval",
            "2",
            "--output-dir",
            "/out/profiles",
        ],
    );
    let service = out.join("profiles").join(container.name());
    let files = fs::read_dir(&service)
        .unwrap_or_else(|e| panic!("{}: {e}", service.display()))
        .count();
    assert!(files >= 2, "{files} profiles in {}", service.display());
}
