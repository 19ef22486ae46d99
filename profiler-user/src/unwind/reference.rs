//! The reference unwinder: walks a stack with compiled rows the way the
//! BPF unwinder does, so that tests can check tables by unwinding real
//! stacks with them.

use super::table::{RbpRule, RowKind, UnwindRow};

/// How many frames [`unwind`] walks at most.
pub const MAX_FRAMES: usize = 128;

/// Walks a stack with compiled rows, as the BPF unwinder will: the reference
/// that tests validate tables with.
///
/// `row_for_pc` gives the row for an absolute address (finding the mapping,
/// subtracting its load bias and the table's base); `regs` are the sampled
/// `(pc, sp, bp)`; `read_memory` reads 8 bytes of the stack. Returns the
/// frames' addresses: `pc`, then each return address. For every frame but
/// the first, the row is looked up at the return address minus one: a call
/// can be a function's last instruction (a call to a `noreturn` function),
/// so its return address may be in the next function.
pub fn unwind(
    row_for_pc: impl Fn(u64) -> Option<UnwindRow>,
    regs: (u64, u64, u64),
    read_memory: impl Fn(u64) -> Option<u64>,
) -> Vec<u64> {
    let (mut pc, mut sp, bp) = regs;
    // None once a frame lost track of RBP (an RbpRule::Unsupported row).
    let mut bp = Some(bp);
    let mut frames = vec![pc];
    while frames.len() < MAX_FRAMES {
        let lookup = if frames.len() == 1 { pc } else { pc - 1 };
        let Some(row) = row_for_pc(lookup) else {
            break;
        };
        let offset = i64::from(row.cfa_offset);
        let cfa = match row.kind {
            RowKind::CfaRsp => sp.checked_add_signed(offset),
            RowKind::CfaRbp => bp.and_then(|bp| bp.checked_add_signed(offset)),
            RowKind::CfaRbpDeref => bp
                .and_then(|bp| bp.checked_add_signed(offset))
                .and_then(&read_memory),
            // The entry's `push` is at offset 11 of its 16 bytes: past it,
            // RSP moved by 8 more.
            RowKind::Plt => sp
                .checked_add_signed(offset)
                .map(|cfa| cfa + if pc & 15 >= 11 { 8 } else { 0 }),
            RowKind::End | RowKind::NoCfi | RowKind::Unsupported | RowKind::Signal => None,
        };
        // The caller's frame is above this one: anything else is a loop.
        let Some(cfa) = cfa.filter(|&cfa| cfa > sp) else {
            break;
        };
        let Some(return_address) = read_memory(cfa - 8) else {
            break;
        };
        let rbp_offset = i64::from(row.rbp_offset);
        bp = match row.rbp {
            RbpRule::Unchanged => bp,
            RbpRule::AtCfa => cfa.checked_add_signed(rbp_offset).and_then(&read_memory),
            RbpRule::AtRbp => bp
                .and_then(|bp| bp.checked_add_signed(rbp_offset))
                .and_then(&read_memory),
            RbpRule::Unsupported => None,
        };
        if return_address == 0 {
            break;
        }
        sp = cfa;
        pc = return_address;
        frames.push(pc);
    }
    frames
}
