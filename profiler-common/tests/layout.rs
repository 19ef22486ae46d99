//! Compiles `include/stoke_abi.h` with the host C compiler and checks that the
//! C and Rust sides agree on every size, offset and constant.

use std::{collections::HashMap, mem::offset_of, path::Path, process::Command};

use profiler_common::{
    unwind::{
        Mapping, ProcessMappings, RbpRule, RowKind, StopReason, UnwindRow, MAX_MAPPINGS, STOP_MASK,
        STOP_SHIFT,
    },
    Counter, RecordHeader, RecordKind, COMM_LEN, COUNTER_COUNT, MAX_FRAMES, SAMPLE_IN_KERNEL,
    SAMPLE_SIGNALLED,
};

const PROBE: &str = r#"
#include <stddef.h>
#include <stdio.h>
#include <linux/types.h>
#include "stoke_abi.h"
#define SHOW(name, value) printf("%s %llu\n", name, (unsigned long long)(value))
#define FIELD(f) SHOW("header." #f, offsetof(struct stoke_record_header, f))
int main(void) {
	SHOW("header.size", sizeof(struct stoke_record_header));
	FIELD(kind); FIELD(cpu); FIELD(tgid); FIELD(tid); FIELD(time_ns);
	FIELD(comm); FIELD(kernel_frames); FIELD(user_frames); FIELD(flags);
	SHOW("max_frames", STOKE_MAX_FRAMES);
	SHOW("comm_len", STOKE_COMM_LEN);
	SHOW("sample_in_kernel", STOKE_SAMPLE_IN_KERNEL);
	SHOW("sample_signalled", STOKE_SAMPLE_SIGNALLED);
	SHOW("kind.sample", STOKE_RECORD_SAMPLE);
	SHOW("kind.exec", STOKE_RECORD_EXEC);
	SHOW("kind.exit", STOKE_RECORD_EXIT);
	SHOW("counter.sent", STOKE_COUNTER_SENT);
	SHOW("counter.lost_ring_full", STOKE_COUNTER_LOST_RING_FULL);
	SHOW("counter.kernel_stack_failed", STOKE_COUNTER_KERNEL_STACK_FAILED);
	SHOW("counter.user_stack_failed", STOKE_COUNTER_USER_STACK_FAILED);
	SHOW("counter.idle_skipped", STOKE_COUNTER_IDLE_SKIPPED);
	SHOW("counter.lost_lifecycle", STOKE_COUNTER_LOST_LIFECYCLE);
	SHOW("counter.signal_failed", STOKE_COUNTER_SIGNAL_FAILED);
	SHOW("counter.count", STOKE_COUNTER_COUNT);
	SHOW("row.size", sizeof(struct stoke_unwind_row));
	SHOW("row.pc", offsetof(struct stoke_unwind_row, pc));
	SHOW("row.cfa_offset", offsetof(struct stoke_unwind_row, cfa_offset));
	SHOW("row.rbp_offset", offsetof(struct stoke_unwind_row, rbp_offset));
	SHOW("row.kind", offsetof(struct stoke_unwind_row, kind));
	SHOW("row.rbp", offsetof(struct stoke_unwind_row, rbp));
	SHOW("row.kind.plt", STOKE_ROW_PLT);
	SHOW("row.kind.unsupported", STOKE_ROW_UNSUPPORTED);
	SHOW("row.kind.signal", STOKE_ROW_SIGNAL);
	SHOW("row.rbp.at_rbp", STOKE_RBP_AT_RBP);
	SHOW("mapping.size", sizeof(struct stoke_mapping));
	SHOW("mapping.row_base", offsetof(struct stoke_mapping, row_base));
	SHOW("mapping.rows_start", offsetof(struct stoke_mapping, rows_start));
	SHOW("mapping.rows_count", offsetof(struct stoke_mapping, rows_count));
	SHOW("process.size", sizeof(struct stoke_process_mappings));
	SHOW("process.mappings", offsetof(struct stoke_process_mappings, mappings));
	SHOW("max_mappings", STOKE_MAX_MAPPINGS);
	SHOW("stop.shift", STOKE_STOP_SHIFT);
	SHOW("stop.mask", STOKE_STOP_MASK);
	SHOW("stop.unknown_code", STOKE_STOP_UNKNOWN_CODE);
	SHOW("stop.bad_frame", STOKE_STOP_BAD_FRAME);
	return 0;
}
"#;

fn c_side() -> HashMap<String, u64> {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("abi-layout");
    std::fs::create_dir_all(&dir).unwrap();
    let source = dir.join("probe.c");
    let binary = dir.join("probe");
    std::fs::write(&source, PROBE).unwrap();
    let include = Path::new(env!("CARGO_MANIFEST_DIR")).join("include");
    let status = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .arg("-I")
        .arg(&include)
        .arg(&source)
        .arg("-o")
        .arg(&binary)
        .status()
        .expect("a C compiler (cc) is needed for the ABI layout test");
    assert!(status.success(), "compiling the ABI probe failed");
    let output = Command::new(&binary).output().unwrap();
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|line| {
            let (name, value) = line.split_once(' ').unwrap();
            (name.to_owned(), value.parse().unwrap())
        })
        .collect()
}

#[test]
fn c_header_matches_rust_types() {
    let c = c_side();
    let rust: [(&str, usize); 49] = [
        ("header.size", size_of::<RecordHeader>()),
        ("header.kind", offset_of!(RecordHeader, kind)),
        ("header.cpu", offset_of!(RecordHeader, cpu)),
        ("header.tgid", offset_of!(RecordHeader, tgid)),
        ("header.tid", offset_of!(RecordHeader, tid)),
        ("header.time_ns", offset_of!(RecordHeader, time_ns)),
        ("header.comm", offset_of!(RecordHeader, comm)),
        (
            "header.kernel_frames",
            offset_of!(RecordHeader, kernel_frames),
        ),
        ("header.user_frames", offset_of!(RecordHeader, user_frames)),
        ("header.flags", offset_of!(RecordHeader, flags)),
        ("max_frames", MAX_FRAMES),
        ("comm_len", COMM_LEN),
        ("sample_in_kernel", SAMPLE_IN_KERNEL as usize),
        ("sample_signalled", SAMPLE_SIGNALLED as usize),
        ("kind.sample", RecordKind::Sample as usize),
        ("kind.exec", RecordKind::Exec as usize),
        ("kind.exit", RecordKind::Exit as usize),
        ("counter.sent", Counter::Sent as usize),
        ("counter.lost_ring_full", Counter::LostRingFull as usize),
        (
            "counter.kernel_stack_failed",
            Counter::KernelStackFailed as usize,
        ),
        (
            "counter.user_stack_failed",
            Counter::UserStackFailed as usize,
        ),
        ("counter.idle_skipped", Counter::IdleSkipped as usize),
        ("counter.lost_lifecycle", Counter::LostLifecycle as usize),
        ("counter.signal_failed", Counter::SignalFailed as usize),
        ("counter.count", COUNTER_COUNT as usize),
        ("row.size", size_of::<UnwindRow>()),
        ("row.pc", offset_of!(UnwindRow, pc)),
        ("row.cfa_offset", offset_of!(UnwindRow, cfa_offset)),
        ("row.rbp_offset", offset_of!(UnwindRow, rbp_offset)),
        ("row.kind", offset_of!(UnwindRow, kind)),
        ("row.rbp", offset_of!(UnwindRow, rbp)),
        ("row.kind.plt", RowKind::Plt as usize),
        ("row.kind.unsupported", RowKind::Unsupported as usize),
        ("row.kind.signal", RowKind::Signal as usize),
        ("row.rbp.at_rbp", RbpRule::AtRbp as usize),
        ("mapping.size", size_of::<Mapping>()),
        ("mapping.row_base", offset_of!(Mapping, row_base)),
        ("mapping.rows_start", offset_of!(Mapping, rows_start)),
        ("mapping.rows_count", offset_of!(Mapping, rows_count)),
        ("process.size", size_of::<ProcessMappings>()),
        ("process.mappings", offset_of!(ProcessMappings, mappings)),
        ("max_mappings", MAX_MAPPINGS),
        ("stop.shift", STOP_SHIFT as usize),
        ("stop.mask", STOP_MASK as usize),
        ("stop.unknown_code", StopReason::UnknownCode as usize),
        ("stop.bad_frame", StopReason::BadFrame as usize),
        ("header.size", profiler_common::RECORD_HEADER_SIZE),
        ("counter.count", Counter::ALL.len()),
        ("kind.exec", RecordKind::from_raw(2).unwrap() as usize),
    ];
    for (name, value) in rust {
        assert_eq!(
            c.get(name).copied(),
            Some(value as u64),
            "{name} differs between C and Rust"
        );
    }
    assert_eq!(c.len(), 46, "every value the probe prints is compared");
}
