//! Target `attach`: a JVM's answers to attach commands, as `execute` and
//! `load_agent` read them. Whatever the JVM answers, stoke must end with a
//! result or one bounded line of error, printable, quoting at most
//! `MAX_QUOTE_CHARS` of the answer.

use bolero::TypeGenerator;

use super::harness::{self, Run};
use crate::jvm::attach::protocol::{load_failure, load_outcome, one_line, parse_reply};

/// The longest error line a reply may lead to: the messages' own words,
/// the agent path and the quoted part of the answer.
const MAX_ERROR_LEN: usize = 1_000;

#[derive(Debug, TypeGenerator)]
struct ReplyInput {
    /// A status line from a number (else `raw` starts the reply).
    status: Option<i32>,
    /// Spaces or a `\r` around the status.
    padding: u8,
    /// `return code: N` as JDK 9+ answer `load`, or a bare number.
    return_code: Option<(bool, i32)>,
    raw: Vec<u8>,
    /// Repeat `raw` this many times, for long answers.
    repeat: u8,
}

fn reply_bytes(input: &ReplyInput) -> Vec<u8> {
    let mut bytes = Vec::new();
    if let Some(status) = input.status {
        let pad = [" ", "\t", "\r", ""][usize::from(input.padding % 4)];
        bytes.extend_from_slice(format!("{pad}{status}{pad}\n").as_bytes());
    }
    if let Some((prefixed, code)) = input.return_code {
        let prefix = if prefixed { "return code: " } else { "" };
        bytes.extend_from_slice(format!("{prefix}{code}\n").as_bytes());
    }
    for _ in 0..=input.repeat % 64 {
        bytes.extend_from_slice(&input.raw);
    }
    bytes
}

fn check_line(error: &impl std::fmt::Display) {
    let line = error.to_string();
    assert!(
        !line.chars().any(char::is_control),
        "a control character in {line:?}"
    );
    assert!(
        line.chars().count() <= MAX_ERROR_LEN,
        "an error of {} characters",
        line.chars().count()
    );
}

#[test]
fn attach() {
    let run = Run::start("attach");
    let path = "/tmp/libstoke_agent-0123456789abcdef.so";
    bolero::check!()
        .with_type::<ReplyInput>()
        .with_test_time(harness::budget())
        .with_shrink_time(harness::SHRINK_TIME)
        .for_each(|input| {
            run.input(|| {
                let bytes = reply_bytes(input);
                let quote = one_line(&String::from_utf8_lossy(&bytes));
                check_line(&quote);
                // What load_agent does with a reply (through execute).
                let outcome = parse_reply(7, &bytes).and_then(|reply| {
                    if reply.status == 0 {
                        load_outcome(7, path, &reply.body)
                    } else {
                        Err(load_failure(7, path, one_line(&reply.body)))
                    }
                });
                if let Err(error) = outcome {
                    check_line(&error);
                }
            })
        });
}
