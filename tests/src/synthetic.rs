//! Profiles made up for tests and the bench: as many distinct stacks as
//! wanted, shaped like real ones.

/// A synthetic profile of `count` distinct stacks, shaped like a real one:
/// a few processes, call paths that repeat near the root and spread out
/// towards the leaves, counts skewed so that some paths are hot.
pub fn synthetic_profile(count: usize) -> String {
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    let mut random = move |n: u64| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % n
    };
    let mut seen = std::collections::HashSet::new();
    let mut text = String::new();
    while seen.len() < count {
        let mut stack = format!("app{} [{}]", random(4), 1000 + random(4));
        let depth = 6 + random(30);
        for level in 0..depth {
            // Few choices near the root, more further down; low indices hot.
            let choices = 2 + level * level;
            let pick = random(choices).min(random(choices));
            let kind = ["", "_[j]", "_[i]", "_[k]"][(pick % 4) as usize];
            stack.push_str(&format!(";pkg.Class{level}.method{pick}{kind}"));
        }
        if seen.insert(stack.clone()) {
            text.push_str(&format!("{stack} {}\n", 1 + random(10) * random(10)));
        }
    }
    text
}
