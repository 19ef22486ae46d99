//! JVMs already running when a recording starts, looked for before the
//! first sample so that an agent a stoke loaded before is in use from the
//! first sample on (otherwise a JVM is found through its samples, and the
//! ones taken until its agent answers have no Java frames).

use std::path::Path;

use crate::procfs;

/// At most this many processes are looked at: on a host with more, the
/// others are found through their samples, as ever.
const MAX_PROCESSES: usize = 8192;

/// The processes whose executable is named `java` (the launcher every JDK
/// ships), from `/proc`: a cheap first guess, a link read per process;
/// whether each maps libjvm is checked after. JVMs started by other
/// launchers are found through their samples.
pub fn java_launchers() -> Vec<u32> {
    procfs::pids(MAX_PROCESSES)
        .into_iter()
        .filter(|pid| {
            std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|exe| {
                Path::new(&exe)
                    .file_name()
                    .is_some_and(|name| name == "java")
            })
        })
        .collect()
}
