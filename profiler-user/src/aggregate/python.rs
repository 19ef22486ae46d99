//! Puts a sample's Python frames where the interpreter ran them. Each call
//! of `_PyEval_EvalFrameDefault` in the native stack runs one group of
//! Python frames, ending at an entry frame: the innermost call the
//! innermost group, and so on outwards. The native frames between the
//! calls (C functions calling back into Python, C extensions) stay where
//! they are. Groups past the outermost call (its native frames not
//! unwound) go above it; with no call in the native stack, every group
//! goes above the native frames. CPython's perf trampolines (`-X perf`),
//! which the Python frames name again, are left out.

use std::sync::Arc;

use crate::{
    interpreter::python::{EVAL_FUNCTION, TRAMPOLINE_PREFIX},
    model::NamedFrame,
    symbolize::Frames,
};

/// One stack's merge, as its native frames are named, outermost first.
pub struct PythonMerge<'a> {
    /// Innermost group first, each innermost frame first.
    groups: Vec<&'a [NamedFrame]>,
    /// Calls of the interpreter in the native stack.
    calls: usize,
    /// Calls met so far.
    met: usize,
}

fn is_call(named: &Frames) -> bool {
    named.iter().any(|name| &**name == EVAL_FUNCTION)
}

fn is_trampoline(named: &Frames) -> bool {
    named.iter().any(|name| name.starts_with(TRAMPOLINE_PREFIX))
}

fn outermost_first(group: &[NamedFrame]) -> impl Iterator<Item = Arc<str>> + '_ {
    group.iter().rev().map(|frame| frame.name.clone())
}

impl<'a> PythonMerge<'a> {
    /// The merge of `python` into a native stack whose frames are named
    /// `user`.
    pub fn new(python: &'a [NamedFrame], user: &[Frames]) -> Self {
        let groups: Vec<_> = python
            .split_inclusive(|frame| frame.entry)
            .filter(|group| !group.is_empty())
            .collect();
        let calls = if groups.is_empty() {
            0
        } else {
            user.iter().filter(|named| is_call(named)).count()
        };
        Self {
            groups,
            calls,
            met: 0,
        }
    }

    /// The Python frames above every native frame.
    pub fn before_native(&self) -> Vec<Arc<str>> {
        if self.calls > 0 {
            return Vec::new();
        }
        self.groups
            .iter()
            .rev()
            .flat_map(|group| outermost_first(group))
            .collect()
    }

    /// The Python frames in place of the native frame named `named`, the
    /// next one outermost first, if it is a call of the interpreter that
    /// ran some; none in place of a perf trampoline (a perf map's name for
    /// code in no file: `in_jit_code` tells) when there are Python frames.
    pub fn at(
        &mut self,
        named: &Frames,
        in_jit_code: impl FnOnce() -> bool,
    ) -> Option<Vec<Arc<str>>> {
        if !self.groups.is_empty() && is_trampoline(named) && in_jit_code() {
            return Some(Vec::new());
        }
        if self.calls == 0 || !is_call(named) {
            return None;
        }
        let mut frames = Vec::new();
        if self.met == 0 {
            for group in self.groups.iter().skip(self.calls).rev() {
                frames.extend(outermost_first(group));
            }
        }
        self.met += 1;
        if let Some(group) = self.groups.get(self.calls - self.met) {
            frames.extend(outermost_first(group));
        }
        (!frames.is_empty()).then_some(frames)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::symbolize::names::call_site;

    fn frame(name: &str, entry: bool) -> NamedFrame {
        NamedFrame {
            name: name.into(),
            entry,
        }
    }

    /// Folds native `user` (innermost first, return addresses: the call
    /// at address 1 is the interpreter's, 3 a perf trampoline's, 5 a file's
    /// function in a C++ namespace `py`, others `cN`) with `python`.
    fn merged(user: &[u64], python: &[NamedFrame]) -> Vec<String> {
        let named: Vec<Frames> = user
            .iter()
            .enumerate()
            .map(|(index, &address)| {
                let name = match call_site(index, address) {
                    1 => EVAL_FUNCTION.to_owned(),
                    3 => format!("{TRAMPOLINE_PREFIX}f:/f.py"),
                    5 => format!("{TRAMPOLINE_PREFIX}native"),
                    other => format!("c{other}"),
                };
                Arc::from([Arc::from(name)])
            })
            .collect();
        let mut merge = PythonMerge::new(python, &named);
        let mut frames = merge.before_native();
        for (named, &address) in named.iter().zip(user).rev() {
            match merge.at(named, || address == 4) {
                Some(python) => frames.extend(python),
                None => frames.extend(named.iter().cloned()),
            }
        }
        frames.iter().map(|name| name.to_string()).collect()
    }

    #[test]
    fn each_call_of_the_interpreter_runs_its_group() {
        // c8 -> eval(outer, mid) -> c4 -> eval(inner) -> c7
        let python = [
            frame("inner", true),
            frame("mid", false),
            frame("outer", true),
        ];
        assert_eq!(
            merged(&[7, 2, 5, 2, 9], &python),
            ["c8", "outer", "mid", "c4", "inner", "c7"]
        );
    }

    #[test]
    fn groups_past_the_unwound_calls_go_above_the_outermost() {
        let python = [frame("inner", true), frame("outer", true)];
        assert_eq!(merged(&[7, 2], &python), ["outer", "inner", "c7"]);
        // No call unwound: every frame above the native ones.
        assert_eq!(merged(&[7, 9], &python), ["outer", "inner", "c8", "c7"]);
    }

    #[test]
    fn perf_trampolines_go_where_python_frames_name_them() {
        // c8 -> trampoline -> eval(outer) -> trampoline -> eval(inner)
        let python = [frame("inner", true), frame("outer", true)];
        assert_eq!(
            merged(&[7, 2, 4, 2, 4, 9], &python),
            ["c8", "outer", "inner", "c7"]
        );
        // A file's function of that name is no trampoline.
        assert_eq!(
            merged(&[7, 2, 6, 2, 9], &python),
            ["c8", "outer", "py::native", "inner", "c7"]
        );
        // Without Python frames they keep their name.
        assert_eq!(
            merged(&[7, 2, 4], &[]),
            ["py::f:/f.py", EVAL_FUNCTION, "c7"]
        );
    }

    #[test]
    fn calls_without_python_frames_keep_their_name() {
        assert_eq!(merged(&[7, 2], &[]), [EVAL_FUNCTION, "c7"]);
        let python = [frame("only", true)];
        assert_eq!(merged(&[7, 2, 2], &python), [EVAL_FUNCTION, "only", "c7"]);
    }
}
