//! Requests and answers of the attach protocol, as bytes: a request is
//! `1\0<command>\0<arg>\0<arg>\0<arg>\0`, an answer a status line then the
//! command's output; and what a `load` command's answer means.

use super::AttachError;

/// Protocol version 1, which every HotSpot since JDK 6 accepts. HotSpot
/// drops without an answer a request whose command or arguments exceed
/// these limits, so they are checked before sending.
const PROTOCOL_VERSION: &str = "1";
const MAX_COMMAND_LEN: usize = 16;
const MAX_ARG_LEN: usize = 1024;
const ARG_COUNT: usize = 3;
/// HotSpot's `ATTACH_ERROR_BADVERSION`: the JVM does not speak version 1.
const STATUS_BAD_VERSION: i32 = 101;

/// The longest piece of a JVM's answer quoted in an error.
const MAX_QUOTE_CHARS: usize = 500;

/// A JVM's answer: the status line, then the rest.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Reply {
    pub(crate) status: i32,
    pub(crate) body: String,
}

/// `1\0<command>\0<arg1>\0<arg2>\0<arg3>\0`: always three arguments,
/// missing ones empty.
pub(super) fn encode_request(command: &str, args: &[&str]) -> Result<Vec<u8>, AttachError> {
    let invalid = |why: String| Err(AttachError::InvalidRequest(why));
    if command.is_empty() || command.len() > MAX_COMMAND_LEN {
        return invalid(format!(
            "the command {command:?} must have 1 to {MAX_COMMAND_LEN} bytes"
        ));
    }
    if args.len() > ARG_COUNT {
        return invalid(format!(
            "{} arguments to {command:?}, at most {ARG_COUNT} allowed",
            args.len()
        ));
    }
    if let Some(arg) = args.iter().find(|arg| arg.len() > MAX_ARG_LEN) {
        return invalid(format!(
            "an argument of {} bytes, at most {MAX_ARG_LEN} allowed",
            arg.len()
        ));
    }
    if command.contains('\0') || args.iter().any(|arg| arg.contains('\0')) {
        return invalid("a NUL byte in the command or an argument".to_owned());
    }
    let arguments = (0..ARG_COUNT).map(|i| args.get(i).copied().unwrap_or(""));
    let mut request = Vec::new();
    for field in [PROTOCOL_VERSION, command].into_iter().chain(arguments) {
        request.extend_from_slice(field.as_bytes());
        request.push(0);
    }
    Ok(request)
}

/// A JVM's answer split into its status and the rest; an error for no
/// answer, no status line, or a JVM that does not speak version 1.
pub(crate) fn parse_reply(pid: u32, bytes: &[u8]) -> Result<Reply, AttachError> {
    if bytes.is_empty() {
        return Err(AttachError::NoAnswer { pid });
    }
    let mut parts = bytes.splitn(2, |&byte| byte == b'\n');
    let line = parts.next().unwrap_or_default();
    let rest = parts.next().unwrap_or_default();
    let body = String::from_utf8_lossy(rest).into_owned();
    let status = std::str::from_utf8(line)
        .ok()
        .and_then(|line| line.trim().parse::<i32>().ok())
        .ok_or_else(|| AttachError::BadReply {
            pid,
            detail: "no numeric status line",
            quote: one_line(&String::from_utf8_lossy(bytes)),
        })?;
    if status == STATUS_BAD_VERSION {
        return Err(AttachError::ProtocolMismatch {
            pid,
            status,
            message: one_line(&body),
        });
    }
    Ok(Reply { status, body })
}

/// What a successful `load` command's answer says. JDK 9+ answer
/// `return code: N`, the agent's result; JDK 8 the bare number. From JDK
/// 21, a library that cannot be loaded is an answer too, the loader's
/// error.
pub(crate) fn load_outcome(pid: u32, path: &str, answer: &str) -> Result<(), AttachError> {
    let Some(first_line) = answer.lines().map(str::trim).find(|line| !line.is_empty()) else {
        return Err(AttachError::BadReply {
            pid,
            detail: "no agent return code",
            quote: String::new(),
        });
    };
    let number = first_line
        .strip_prefix("return code:")
        .unwrap_or(first_line);
    match number.trim().parse::<i32>() {
        Ok(0) => Ok(()),
        Ok(code) => Err(AttachError::AgentInit {
            pid,
            path: path.to_owned(),
            code,
        }),
        Err(_) => Err(load_failure(pid, path, one_line(answer))),
    }
}

/// The error for a JVM's refusal to load the agent, from its message.
pub(crate) fn load_failure(pid: u32, path: &str, message: String) -> AttachError {
    if message.contains("Dynamic agent loading is not enabled") {
        return AttachError::DynamicLoadingDisabled { pid };
    }
    AttachError::AgentLoad {
        pid,
        path: path.to_owned(),
        hint: load_hint(&message),
        message,
    }
}

/// The likely cause behind a loader's error message.
fn load_hint(message: &str) -> &'static str {
    if message.contains("failed to map segment") {
        " (is /tmp mounted noexec?)"
    } else if message.contains("cannot open shared object file") {
        " (the path must exist in the JVM's own filesystem)"
    } else {
        ""
    }
}

/// A JVM's text made into one bounded line of printable characters, to
/// quote in an error.
pub(crate) fn one_line(text: &str) -> String {
    let joined = text
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect::<Vec<_>>()
        .join("; ");
    let mut quote: String = joined
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(MAX_QUOTE_CHARS)
        .collect();
    if joined.chars().nth(MAX_QUOTE_CHARS).is_some() {
        quote.push_str("...");
    }
    quote
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_always_carry_three_arguments() {
        assert_eq!(
            encode_request("properties", &[]).unwrap(),
            b"1\0properties\0\0\0\0"
        );
        assert_eq!(
            encode_request("load", &["/tmp/a.so", "true", "x=1"]).unwrap(),
            b"1\0load\0/tmp/a.so\0true\0x=1\0"
        );
        let long = "x".repeat(MAX_ARG_LEN + 1);
        for (command, args) in [
            ("", &[][..]),
            ("a-command-too-long", &[]),
            ("load", &["a", "b", "c", "d"]),
            ("load", &[long.as_str()]),
            ("load", &["a\0b"]),
        ] {
            let error = encode_request(command, args).unwrap_err();
            assert!(matches!(error, AttachError::InvalidRequest(_)), "{error}");
        }
    }

    #[test]
    fn replies_split_into_status_and_answer() {
        let reply = parse_reply(7, b"0\nline 1\nline 2\n").unwrap();
        assert_eq!((reply.status, reply.body.as_str()), (0, "line 1\nline 2\n"));
        let reply = parse_reply(7, b"-1\nOperation x not recognized!").unwrap();
        assert_eq!(reply.status, -1);
        assert_eq!(parse_reply(7, b"0").unwrap().body, "");
        assert!(matches!(
            parse_reply(7, b""),
            Err(AttachError::NoAnswer { pid: 7 })
        ));
        assert!(matches!(
            parse_reply(7, b"HTTP/1.1 400\n"),
            Err(AttachError::BadReply { .. })
        ));
        let error = parse_reply(7, b"101\nunknown version").unwrap_err();
        assert!(
            matches!(error, AttachError::ProtocolMismatch { status: 101, .. }),
            "{error}"
        );
        assert!(error.to_string().contains("version 1"), "{error}");
    }

    #[test]
    fn load_answers_of_every_jdk_are_understood() {
        let path = "/tmp/a.so";
        assert!(load_outcome(1, path, "return code: 0\n").is_ok());
        // JDK 8.
        assert!(load_outcome(1, path, "0\n").is_ok());
        assert!(matches!(
            load_outcome(1, path, "return code: 42\n"),
            Err(AttachError::AgentInit { code: 42, .. })
        ));
        // A JVM attached before it is live: said, and worth a retry.
        let starting = load_outcome(1, path, "return code: 2\n").unwrap_err();
        assert!(starting.jvm_starting());
        assert!(
            starting.to_string().contains("still starting"),
            "{starting}"
        );
        // JDK 21+: status 0, the loader's error as the answer.
        let answer = "/tmp/a.so was not loaded.\n/tmp/a.so: cannot open shared object file: No such file or directory\n";
        let error = load_outcome(1, path, answer).unwrap_err();
        assert!(matches!(error, AttachError::AgentLoad { .. }), "{error}");
        let text = error.to_string();
        assert!(
            text.contains("No such file") && !text.contains('\n'),
            "{text}"
        );
        let noexec = "/tmp/a.so: failed to map segment from shared object";
        let error = load_outcome(1, path, noexec).unwrap_err();
        assert!(error.to_string().contains("noexec"), "{error}");
        assert!(matches!(
            load_failure(
                1,
                path,
                "Dynamic agent loading is not enabled. Use ...".to_owned()
            ),
            AttachError::DynamicLoadingDisabled { pid: 1 }
        ));
        assert!(matches!(
            load_outcome(1, path, "\n"),
            Err(AttachError::BadReply { .. })
        ));
    }

    #[test]
    fn quotes_are_one_bounded_line() {
        assert_eq!(one_line("a\n\n  b \r\nc\u{7}"), "a; b; c ");
        let quote = one_line(&"y".repeat(10_000));
        assert_eq!(quote.len(), MAX_QUOTE_CHARS + 3);
    }
}
