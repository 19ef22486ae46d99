//! A read()-heavy workload must show kernel frames (`vfs_read_[k]` ...) on
//! top of its own user frames, in the same stacks: user frames root first,
//! then the kernel frames, never mixed the other way round.

use stoke_tests::{
    args, describe, is_kernel_frame, prepare, record_process, samples_where, total_samples,
};

#[test]
fn read_heavy_workload_shows_kernel_frames_under_its_user_frames() {
    let (dir, workload) = prepare("kernel-frames", "read_loop");
    let data = dir.join("read_loop.data");
    let running = workload.spawn(&args![30, data.display()]);
    let out = dir.join("read.folded");

    let stacks = record_process(&running, 499, 3.0, &out);
    let total = total_samples(&stacks);
    assert!(
        total > 600,
        "only {total} samples of a busy process in 3 s at 499 Hz (about 1500 expected)"
    );

    // In every stack, once a kernel frame appears, all frames after it
    // (leafward) are kernel frames: user frames are never on top of kernel
    // frames.
    for stack in &stacks {
        if let Some(first_kernel) = stack.frames.iter().position(|f| is_kernel_frame(f)) {
            assert!(
                stack.frames[first_kernel..]
                    .iter()
                    .all(|f| is_kernel_frame(f)),
                "a user frame leafward of a kernel frame: {}",
                stack.joined()
            );
            assert!(
                first_kernel > 0,
                "the root frame is a kernel frame: {}",
                stack.joined()
            );
        }
    }

    // The reads: vfs_read_[k] with the workload's own read_chunks (below
    // main) rootward of the first kernel frame.
    let reads = samples_where(&stacks, |s| {
        let Some(vfs_read) = s.position("vfs_read_[k]") else {
            return false;
        };
        let first_kernel = s.frames.iter().position(|f| is_kernel_frame(f)).unwrap();
        matches!(
            (s.position("main"), s.position("read_chunks")),
            (Some(m), Some(r)) if 0 < m && m < r && r < first_kernel && first_kernel <= vfs_read
        )
    });
    let share = 100.0 * reads as f64 / total as f64;
    println!(
        "{reads} of {total} samples ({share:.1}%) read through vfs_read under main;read_chunks"
    );
    assert!(
        share > 30.0,
        "only {reads} of {total} samples ({share:.1}%) have `main;read_chunks;...;vfs_read_[k]` \
         (the workload spends most of its time in pread64 of a page-cached file)\n{}",
        describe(&stacks, 15)
    );
}
