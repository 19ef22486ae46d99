//! Target `folded`: folded files as a user may give `stoke convert`, `stoke
//! diff` or `--baseline`: lines of frames from a small vocabulary (so that
//! stacks repeat), counts at the edges of a `u64`, bytes that are not
//! UTF-8, deep stacks and long lines. Whatever the file, the reader ends
//! with a profile within the bounds whose counts add up, or with one line
//! of error naming the file.

use std::{path::Path, sync::Arc};

use bolero::TypeGenerator;

use super::harness::{self, Run};
use crate::{
    model::Profile,
    read::{
        read_input,
        stacks::{MAX_FRAMES, MAX_STACKS},
    },
};

/// The name the inputs go by in messages.
pub(super) const NAME: &str = "fuzzed.input";

#[derive(Debug, TypeGenerator)]
struct Line {
    /// Frames, each from the vocabulary.
    frames: Vec<u8>,
    /// Repeat the frames this many times (deep stacks).
    repeat: u16,
    count: Count,
    /// Raw bytes put inside the line (not UTF-8, `;`, spaces, newlines).
    raw: Option<(u8, Vec<u8>)>,
}

#[derive(Debug, TypeGenerator)]
enum Count {
    Small(u8),
    NearMax(u8),
    Any(u64),
    Text(Vec<u8>),
    None,
}

const FRAMES: [&str; 8] = [
    "main",
    "app [12]",
    "worker [tid 13]",
    "f_[k]",
    "g_[j]",
    "",
    "web [container 0123456789ab]",
    "é",
];

fn line_bytes(line: &Line) -> Vec<u8> {
    let mut bytes = Vec::new();
    for _ in 0..=line.repeat % 5000 {
        for &frame in &line.frames {
            bytes.extend_from_slice(FRAMES[usize::from(frame % 8)].as_bytes());
            bytes.push(b';');
        }
    }
    bytes.pop();
    if let Some((at, raw)) = &line.raw {
        let at = usize::from(*at).min(bytes.len());
        bytes.splice(at..at, raw.iter().copied());
    }
    match &line.count {
        Count::Small(count) => bytes.extend(format!(" {count}").bytes()),
        Count::NearMax(below) => bytes.extend(format!(" {}", u64::MAX - u64::from(*below)).bytes()),
        Count::Any(count) => bytes.extend(format!(" {count}").bytes()),
        Count::Text(text) => {
            bytes.push(b' ');
            bytes.extend_from_slice(text);
        }
        Count::None => {}
    }
    bytes.push(b'\n');
    bytes
}

/// Checks what a reader made of an input.
pub(super) fn check(read: anyhow::Result<Profile>) {
    match read {
        Ok(profile) => {
            assert!(profile.stacks.len() <= MAX_STACKS);
            let total: u128 = profile
                .stacks
                .iter()
                .map(|stack| u128::from(stack.samples))
                .sum();
            assert_eq!(total, u128::from(profile.summary.samples), "counts add up");
            for stack in &profile.stacks {
                assert!(
                    stack.frames.len() <= MAX_FRAMES,
                    "a stack of {}",
                    stack.frames.len()
                );
                assert!(stack.context_frames <= stack.frames.len());
            }
            let mut distinct: Vec<&[Arc<str>]> = profile
                .stacks
                .iter()
                .map(|stack| &stack.frames[..])
                .collect();
            distinct.sort();
            distinct.dedup();
            assert_eq!(distinct.len(), profile.stacks.len(), "stacks are distinct");
        }
        Err(error) => {
            let line = format!("{error:#}");
            assert!(line.contains(NAME), "an error not naming the file: {line}");
            assert!(!line.contains('\n'), "an error of lines: {line:?}");
        }
    }
}

#[test]
fn folded() {
    let run = Run::start("folded");
    bolero::check!()
        .with_type::<Vec<Line>>()
        .with_test_time(harness::budget())
        .with_shrink_time(harness::SHRINK_TIME)
        .for_each(|lines| {
            let bytes: Vec<u8> = lines.iter().flat_map(line_bytes).collect();
            run.input(|| {
                check(read_input(&bytes[..], Path::new(NAME)).map(|(profile, _)| profile));
            })
        });
}
