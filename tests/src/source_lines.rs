//! Source lines, for the frames `--lines` names: where a frame says it was
//! (`name (file:line)`), and which lines of a workload's source a function
//! or a call is on.

use std::ops::RangeInclusive;

use crate::Stack;

/// A frame's name, file and line ([`frame_location`]).
pub type Located<'a> = Option<(&'a str, &'a str, u32)>;

/// Adds the samples of `stack`, whose frames are `located`, to `counts`
/// for each function of `bodies` (its name and lines) it is in, after
/// checking that every frame of the function is on one of its lines.
pub fn count_in_bodies<const N: usize>(
    stack: &Stack,
    located: &[Located],
    bodies: &[(&str, RangeInclusive<u32>); N],
    counts: &mut [u64; N],
) {
    for (&(name, ref lines), count) in bodies.iter().zip(counts) {
        for &(_, _, line) in located.iter().flatten().filter(|frame| frame.0 == name) {
            assert!(
                lines.contains(&line),
                "{name} on line {line}, outside its lines {lines:?}: {}",
                stack.joined()
            );
            *count += stack.count;
        }
    }
}

/// The name, file and line of a frame named `name (file:line)`, as
/// `--lines` names native frames and Java frames (the latter without their
/// kind suffix: see [`crate::java_method`]).
pub fn frame_location(frame: &str) -> Option<(&str, &str, u32)> {
    let (name, location) = frame.strip_suffix(')')?.rsplit_once(" (")?;
    let (file, line) = location.rsplit_once(':')?;
    Some((name, file, line.parse().ok()?))
}

/// The number (from 1) of the one line of `source` that contains `text`.
///
/// # Panics
///
/// If no line or more than one contains it.
pub fn line_of(source: &str, text: &str) -> u32 {
    let lines: Vec<u32> = numbered(source)
        .filter(|(_, line)| line.contains(text))
        .map(|(number, _)| number)
        .collect();
    assert_eq!(lines.len(), 1, "`{text}` is on lines {lines:?}, not one");
    lines[0]
}

/// The lines of the function whose header line contains `header`: from
/// that line to the first `}` after it indented no deeper.
///
/// # Panics
///
/// If the header is not on one line, or its function does not end.
pub fn function_lines(source: &str, header: &str) -> RangeInclusive<u32> {
    let start = line_of(source, header);
    let indent = |line: &str| line.len() - line.trim_start().len();
    let header_indent = numbered(source)
        .find(|&(number, _)| number == start)
        .map(|(_, line)| indent(line))
        .unwrap();
    let end = numbered(source)
        .skip(start as usize)
        .find(|(_, line)| line.trim() == "}" && indent(line) <= header_indent)
        .map(|(number, _)| number)
        .unwrap_or_else(|| panic!("the function of `{header}` does not end"));
    start..=end
}

fn numbered(source: &str) -> impl Iterator<Item = (u32, &str)> {
    (1..).zip(source.lines())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SOURCE: &str =
        "int f(void)\n{\n\treturn g();\n}\n\nstatic void h(void) {\n    if (x) {\n    }\n}\n";

    #[test]
    fn functions_and_calls_are_found_by_their_text() {
        assert_eq!(function_lines(SOURCE, "int f("), 1..=4);
        assert_eq!(function_lines(SOURCE, "void h("), 6..=9);
        assert_eq!(line_of(SOURCE, "return g()"), 3);
    }

    #[test]
    fn frames_name_their_location() {
        assert_eq!(
            frame_location("spin (fp_split.c:22)"),
            Some(("spin", "fp_split.c", 22))
        );
        assert_eq!(
            frame_location("A.run (A.java:7)"),
            Some(("A.run", "A.java", 7))
        );
        assert_eq!(frame_location("A.run (A.java)"), None);
        assert_eq!(frame_location("spin"), None);
    }
}
