//! Target `record`: the sampler's ring-buffer records. The BPF side is
//! trusted, but a record's lengths still must never make stoke read past
//! what it received: inputs are headers with chosen kinds and frame counts
//! (kernel, user, Python) over random bytes, cut anywhere.

use std::mem::offset_of;

use bolero::TypeGenerator;
use profiler_common::{
    python::{PYTHON_FRAME_ENTRY, PYTHON_MAX_FRAMES},
    RecordHeader, MAX_FRAMES, RECORD_HEADER_SIZE,
};

use super::harness::{self, Run};
use crate::sample::ring_record::Record;

#[derive(Debug, TypeGenerator)]
struct RecordInput {
    bytes: Vec<u8>,
    /// A kind (modulo 5: the three known, and unknown ones).
    kind: Option<u8>,
    kernel_frames: Option<u16>,
    user_frames: Option<u16>,
    python_frames: Option<u16>,
    /// Frame words appended after the header.
    frames: Vec<u64>,
    /// Cut the record to this many bytes (modulo its length).
    cut: Option<u16>,
}

fn record_bytes(input: &RecordInput) -> Vec<u8> {
    let mut bytes = input.bytes.clone();
    if bytes.len() < RECORD_HEADER_SIZE && !input.frames.is_empty() {
        bytes.resize(RECORD_HEADER_SIZE, 0);
    }
    let mut put = |at: usize, value: &[u8]| {
        if let Some(field) = bytes.get_mut(at..at + value.len()) {
            field.copy_from_slice(value);
        }
    };
    if let Some(kind) = input.kind {
        put(
            offset_of!(RecordHeader, kind),
            &u32::from(kind % 5).to_ne_bytes(),
        );
    }
    if let Some(count) = input.kernel_frames {
        put(
            offset_of!(RecordHeader, kernel_frames),
            &count.to_ne_bytes(),
        );
    }
    if let Some(count) = input.user_frames {
        put(offset_of!(RecordHeader, user_frames), &count.to_ne_bytes());
    }
    if let Some(count) = input.python_frames {
        put(
            offset_of!(RecordHeader, python_frames),
            &count.to_ne_bytes(),
        );
    }
    for frame in &input.frames {
        bytes.extend_from_slice(&frame.to_ne_bytes());
    }
    if let Some(cut) = input.cut {
        bytes.truncate(usize::from(cut) % (bytes.len() + 1));
    }
    bytes
}

#[test]
fn record() {
    let run = Run::start("record");
    bolero::check!()
        .with_type::<RecordInput>()
        .with_test_time(harness::budget())
        .with_shrink_time(harness::SHRINK_TIME)
        .for_each(|input| {
            run.input(|| {
                let bytes = record_bytes(input);
                let Ok(Record::Sample(sample)) = Record::parse(&bytes) else {
                    return;
                };
                // Every frame came from the bytes received, in order.
                assert!(sample.kernel.len() <= MAX_FRAMES && sample.user.len() <= MAX_FRAMES);
                let words: Vec<u64> = bytes[RECORD_HEADER_SIZE..]
                    .chunks_exact(8)
                    .map(|word| u64::from_ne_bytes(word.try_into().unwrap()))
                    .collect();
                let python = sample.python.iter().flat_map(|frame| {
                    let entry = if frame.entry { PYTHON_FRAME_ENTRY } else { 0 };
                    [frame.code, u64::from(frame.instruction) | entry]
                });
                let frames: Vec<u64> = sample
                    .kernel
                    .iter()
                    .chain(&sample.user)
                    .copied()
                    .chain(python)
                    .collect();
                assert_eq!(sample.python.len(), {
                    let header = offset_of!(RecordHeader, python_frames);
                    usize::from(u16::from_ne_bytes([bytes[header], bytes[header + 1]]))
                        .min(PYTHON_MAX_FRAMES)
                });
                // The instruction word's middle bits are not kept.
                let kept = |word: u64, index: usize| {
                    if index >= sample.kernel.len() + sample.user.len()
                        && (index - sample.kernel.len() - sample.user.len()) % 2 == 1
                    {
                        word & (PYTHON_FRAME_ENTRY | u64::from(u32::MAX))
                    } else {
                        word
                    }
                };
                let received: Vec<u64> = words[..frames.len()]
                    .iter()
                    .enumerate()
                    .map(|(index, &word)| kept(word, index))
                    .collect();
                assert_eq!(frames, received);
                assert!(!sample.comm.contains('\0'));
            })
        });
}
