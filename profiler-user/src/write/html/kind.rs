//! What kind of frame each frame is, for the page's colours: read from the
//! suffixes and context frames that Stoke names frames with.

/// The kinds of frame the page colours apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::write) enum FrameKind {
    /// Native user code.
    Native,
    /// Kernel code: `_[k]`.
    Kernel,
    /// JIT-compiled Java: `_[j]`.
    Compiled,
    /// Java inlined into a caller's compiled code: `_[i]`.
    Inlined,
    /// Interpreted Java: `_[0]`.
    Interpreted,
    /// A container or service frame: `name [container id]`, `[container
    /// id]`, `name [service]`.
    Container,
    /// A process frame: `comm [pid]`.
    Process,
    /// A thread frame: `name [tid N]`.
    Thread,
    /// A Python frame: `_[py]`.
    Python,
}

impl FrameKind {
    /// The digit the page knows this kind by (flamegraph.js's `KINDS`).
    pub(super) fn digit(self) -> char {
        match self {
            Self::Native => '0',
            Self::Kernel => '1',
            Self::Compiled => '2',
            Self::Inlined => '3',
            Self::Interpreted => '4',
            Self::Container => '5',
            Self::Process => '6',
            Self::Thread => '7',
            Self::Python => '8',
        }
    }
}

/// The kind of each of `frames`, whose first `context_frames` name where
/// the code ran.
pub(super) fn kinds<S: AsRef<str>>(frames: &[S], context_frames: usize) -> Vec<FrameKind> {
    frames
        .iter()
        .enumerate()
        .map(|(index, frame)| {
            let frame = frame.as_ref();
            if index < context_frames {
                context_kind(frame).unwrap_or(FrameKind::Process)
            } else {
                code_kind(frame)
            }
        })
        .collect()
}

/// How many of `frames` (from a folded file, which does not say) are
/// context frames: the leading ones named as Stoke names them.
pub fn count_context_frames<S: AsRef<str>>(frames: &[S]) -> usize {
    frames
        .iter()
        .take_while(|frame| context_kind(frame.as_ref()).is_some())
        .count()
}

fn context_kind(frame: &str) -> Option<FrameKind> {
    if frame.ends_with(" [service]") || bracketed(frame, "[container ", |_| true) {
        Some(FrameKind::Container)
    } else if bracketed(frame, " [tid ", is_id) {
        Some(FrameKind::Thread)
    } else if bracketed(frame, " [", is_id) {
        Some(FrameKind::Process)
    } else {
        None
    }
}

/// Whether `frame` ends in `open`, then text that `inside` accepts, then `]`.
fn bracketed(frame: &str, open: &str, inside: impl Fn(&str) -> bool) -> bool {
    frame
        .strip_suffix(']')
        .and_then(|rest| rest.rfind(open).map(|at| &rest[at + open.len()..]))
        .is_some_and(|text| !text.contains(']') && inside(text))
}

/// A pid or tid, or `*` for one `stoke diff` took out.
fn is_id(text: &str) -> bool {
    text == "*" || (!text.is_empty() && text.bytes().all(|byte| byte.is_ascii_digit()))
}

/// The kind of code frame `frame`, by its suffix.
pub(in crate::write) fn code_kind(frame: &str) -> FrameKind {
    if frame.ends_with("_[py]") {
        return FrameKind::Python;
    }
    match frame.get(frame.len().saturating_sub(4)..) {
        Some("_[k]") => FrameKind::Kernel,
        Some("_[j]") => FrameKind::Compiled,
        Some("_[i]") => FrameKind::Inlined,
        Some("_[0]") => FrameKind::Interpreted,
        _ => FrameKind::Native,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use FrameKind::*;

    #[test]
    fn suffixes_and_context_frames_name_kinds() {
        let frames = [
            "web [container 0123abcd]",
            "java [42]",
            "main [tid 43]",
            "com.A.run_[j]",
            "com.A.get_[i]",
            "com.A.slow_[0]",
            "JVM_Sleep",
            "do_syscall_64_[k]",
            "handle (app.py:12)_[py]",
        ];
        assert_eq!(
            kinds(&frames, 3),
            [
                Container,
                Process,
                Thread,
                Compiled,
                Inlined,
                Interpreted,
                Native,
                Kernel,
                Python
            ]
        );
        assert_eq!(kinds(&["my [service]", "a [1]"], 2), [Container, Process]);
        assert_eq!(
            kinds(&["odd name"], 1),
            [Process],
            "a context frame all the same"
        );
        assert_eq!(kinds(&["é"], 0), [Native]);
    }

    #[test]
    fn context_frames_of_folded_stacks() {
        assert_eq!(
            count_context_frames(&["[container ab]", "x [7]", "main"]),
            2
        );
        assert_eq!(count_context_frames(&["app [1]", "t [tid 2]", "main"]), 2);
        assert_eq!(count_context_frames(&["app [*]", "t [tid *]", "main"]), 2);
        assert_eq!(count_context_frames(&["java", "main"]), 0);
        assert_eq!(count_context_frames(&["f [x]", "g [1 2]"]), 0);
    }
}
