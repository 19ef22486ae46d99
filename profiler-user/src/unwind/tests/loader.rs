//! The loader on real BPF maps: the tables of files no process maps any
//! more make room for new ones.

use crate::{
    model::UnwindSummary,
    process::{maps::sleeping_child, ProcessRegistry},
    sample::sampler::{Sampler, SamplerConfig},
    unwind::loader::{UnwindLoader, UnwindMaps},
};

/// Loads the image of process `first`, then, `first` having ended, that of
/// `second`, into maps of `rows` rows.
fn load_in_turn(rows: u32, first: u32, second: u32) -> UnwindSummary {
    let mut sampler = Sampler::load(&SamplerConfig {
        frequency_hz: 1,
        pids: Some(vec![std::process::id()]),
        include_idle: false,
        bpf_stats: false,
        legacy: false,
        unwind_rows: rows,
        cpu: false,
        cpu_java_stacks: false,
        offcpu: None,
        counters: Vec::new(),
        counter_rate: crate::sample::counter_events::Rate::Period(1),
    })
    .unwrap();
    let loader = UnwindLoader::start(UnwindMaps::take_from(sampler.object_mut()).unwrap()).unwrap();
    let mut processes = ProcessRegistry::default();
    let image = processes.image_for(first, "first");
    loader.update(Vec::new(), std::iter::once(processes.image(image)));
    processes.exited(first);
    let image = processes.image_for(second, "second");
    loader.update(vec![first], std::iter::once(processes.image(image)));
    loader.finish()
}

/// This test process's files fill the maps; once it is taken as ended,
/// `sleep`'s own binary gets room from the files `sleep` does not map
/// (this test binary), while libc's table, which `sleep` maps too, stays.
#[test]
fn tables_of_files_no_process_maps_make_room_for_new_ones() {
    let mut child = sleeping_child();
    let (own, sleep) = (std::process::id(), child.id());
    let own_rows = load_in_turn(1 << 20, own, own).rows;
    let roomy = load_in_turn(1 << 20, own, sleep);
    let sleep_rows = roomy.rows - own_rows;
    assert!(sleep_rows > 0, "sleep has no table of its own: {roomy:?}");

    let full = load_in_turn(own_rows as u32, own, sleep);
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(full.files_without_room, 0, "{full:?}");
    assert!(full.files_removed >= 1, "{full:?}");
    assert_eq!(
        (full.files, full.rows),
        (roomy.files, roomy.rows),
        "{full:?}"
    );
}
