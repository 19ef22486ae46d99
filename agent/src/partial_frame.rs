//! Where the return address is while a compiled method or stub builds or
//! tears down its frame, told by the instruction bytes around the
//! interrupted one.
//!
//! HotSpot cannot walk from a frame it considers incomplete: the first
//! instructions of a compiled method (the stack bang, `push %rbp`,
//! `sub $size,%rsp`, and from JDK 21 or so the nmethod entry barrier), its
//! last ones (`add $size,%rsp`, `pop %rbp`, the return poll, `ret`), and the
//! same in stubs. These shapes tell where the return address is there.

/// Where the caller's state is, in bytes above the stack pointer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartialFrame {
    /// The return address.
    pub return_address: u64,
    /// The caller's RBP, if the frame saved it; otherwise RBP still holds it.
    pub saved_rbp: Option<u64>,
}

impl PartialFrame {
    /// The caller's RBP on top of the stack, the return address above it:
    /// right after `push %rbp`, or at `pop %rbp`.
    const SAVED_RBP: Self = Self {
        return_address: 8,
        saved_rbp: Some(0),
    };
}

const PUSH_RBP: u8 = 0x55;
const POP_RBP: u8 = 0x5d;
/// What follows `push %rbp` in a stub: `mov %rsp,%rbp` in either encoding.
const SET_RBP: [[u8; 3]; 2] = [[0x48, 0x89, 0xe5], [0x48, 0x8b, 0xec]];
/// `sub $imm8,%rsp` and `sub $imm32,%rsp`.
const SUB_IMM8_FROM_RSP: [u8; 3] = [0x48, 0x83, 0xec];
const SUB_IMM32_FROM_RSP: [u8; 3] = [0x48, 0x81, 0xec];
/// `mov %rbp,(%rsp)`: C2's runtime stubs begin `sub $8,%rsp` and this.
const SAVE_RBP_ON_TOP: [u8; 4] = [0x48, 0x89, 0x2c, 0x24];
/// The nmethod entry barrier's `cmpl $imm32,disp8(%r15)`, 8 bytes.
const ENTRY_BARRIER: [u8; 3] = [0x41, 0x81, 0x7f];
const ENTRY_BARRIER_LEN: usize = 8;
/// Frames larger than this are not taken from a prologue's bytes.
const MAX_FRAME: u64 = 64 << 10;

/// The frame's shape at an instruction, from the 16 bytes before it and
/// the 8 bytes from it. Every shape needs two instructions to match, so
/// that an immediate or displacement that happens to end like a push or a
/// `sub` cannot pass for one: a wrong shape would take a stale word for the
/// return address.
pub fn partial_frame(before: [u8; 16], at: [u8; 8]) -> Option<PartialFrame> {
    let after_push = SET_RBP.iter().any(|set| at.starts_with(set)) || frame_sub(&at).is_some();
    if at[0] == POP_RBP || (before[15] == PUSH_RBP && after_push) {
        return Some(PartialFrame::SAVED_RBP);
    }
    // After `push %rbp; sub $size,%rsp`, and maybe the entry barrier's
    // compare: the whole frame is built, but HotSpot does not know yet.
    let (rest, barrier) = before.split_at(before.len() - ENTRY_BARRIER_LEN);
    let built = built_frame(&before).or_else(|| {
        barrier
            .starts_with(&ENTRY_BARRIER)
            .then(|| built_frame(rest))?
    });
    if let Some(size) = built {
        return Some(PartialFrame {
            return_address: size + 8,
            saved_rbp: Some(size),
        });
    }
    let reserved = frame_sub(&before[before.len() - 4..]) == Some((8, 4))
        || frame_sub(&before[before.len() - 7..]) == Some((8, 7));
    (reserved && at.starts_with(&SAVE_RBP_ON_TOP)).then_some(PartialFrame {
        return_address: 8,
        saved_rbp: None,
    })
}

/// The size a `sub $size,%rsp` at the start of `code` takes from the
/// stack, and the instruction's length.
fn frame_sub(code: &[u8]) -> Option<(u64, usize)> {
    let (size, length) = if code.starts_with(&SUB_IMM8_FROM_RSP) {
        (u64::from(*code.get(3)?), 4)
    } else if code.starts_with(&SUB_IMM32_FROM_RSP) {
        let immediate = code.get(3..7)?.try_into().ok()?;
        (u64::from(u32::from_le_bytes(immediate)), 7)
    } else {
        return None;
    };
    (size.is_multiple_of(8) && size <= MAX_FRAME).then_some((size, length))
}

/// The frame size if `code` ends with `push %rbp; sub $size,%rsp`.
fn built_frame(code: &[u8]) -> Option<u64> {
    [4, 7].into_iter().find_map(|length| {
        let push = code.len().checked_sub(length + 1)?;
        let (size, found) = frame_sub(&code[push + 1..])?;
        (code[push] == PUSH_RBP && found == length).then_some(size)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn before(code: &[u8]) -> [u8; 16] {
        let mut padded = [0x90; 16];
        padded[16 - code.len()..].copy_from_slice(code);
        padded
    }

    fn at(code: &[u8]) -> [u8; 8] {
        let mut padded = [0x90; 8];
        padded[..code.len()].copy_from_slice(code);
        padded
    }

    const BANG: [u8; 7] = [0x89, 0x84, 0x24, 0x00, 0xc0, 0xfe, 0xff];
    const SUB_0X60: [u8; 4] = [0x48, 0x83, 0xec, 0x60];
    const BARRIER: [u8; 8] = [0x41, 0x81, 0x7f, 0x20, 0x01, 0x00, 0x00, 0x00];

    fn built(size: u64) -> Option<PartialFrame> {
        Some(PartialFrame {
            return_address: size + 8,
            saved_rbp: Some(size),
        })
    }

    /// Bytes seen in HotSpot's code: C2's java.util.HashMap.merge on JDK 17
    /// and 25, DualPivotQuicksort.sort's epilogue, the jbyte_arraycopy and
    /// _new_array_Java stubs.
    #[test]
    fn knows_hotspot_prologues_and_epilogues() {
        let saved_rbp = Some(PartialFrame::SAVED_RBP);
        // Stack bang, push %rbp | sub $0x60,%rsp
        let bang_push = [&BANG[..], &[0x55]].concat();
        assert_eq!(partial_frame(before(&bang_push), at(&SUB_0X60)), saved_rbp);
        // add $0x40,%rsp | pop %rbp
        let add = [0x48, 0x83, 0xc4, 0x40];
        assert_eq!(
            partial_frame(before(&add), at(&[0x5d, 0x49, 0x3b])),
            saved_rbp
        );
        // push %rbp | mov %rsp,%rbp
        let mov = [0x48, 0x8b, 0xec];
        assert_eq!(partial_frame(before(&[0x55]), at(&mov)), saved_rbp);
        // push %rbp; sub $0x60,%rsp | the entry barrier (JDK 25)
        let push_sub = [&[0x55][..], &SUB_0X60].concat();
        assert_eq!(partial_frame(before(&push_sub), at(&BARRIER)), built(0x60));
        // push %rbp; sub $0x60,%rsp; the entry barrier | jne
        let push_sub_barrier = [&push_sub[..], &BARRIER].concat();
        let jne = [0x0f, 0x85, 0x6e, 0x0f, 0x00, 0x00];
        assert_eq!(
            partial_frame(before(&push_sub_barrier), at(&jne)),
            built(0x60)
        );
        // push %rbp; sub $0x1000,%rsp | anything
        let big = [0x55, 0x48, 0x81, 0xec, 0x00, 0x10, 0x00, 0x00];
        assert_eq!(partial_frame(before(&big), at(&jne)), built(0x1000));
        // sub $0x8,%rsp | mov %rbp,(%rsp)
        let reserve = [0x48, 0x81, 0xec, 0x08, 0x00, 0x00, 0x00];
        let save = [0x48, 0x89, 0x2c, 0x24];
        let reserved = Some(PartialFrame {
            return_address: 8,
            saved_rbp: None,
        });
        assert_eq!(partial_frame(before(&reserve), at(&save)), reserved);
    }

    #[test]
    fn one_instruction_alone_is_no_shape() {
        let jne = [0x0f, 0x85, 0x6e, 0x0f, 0x00, 0x00];
        // mov $0x55,%eax | add %eax,%ecx: 0x55 ends an immediate, and what
        // follows builds no frame.
        let immediate = [0xb8, 0x00, 0x00, 0x00, 0x55];
        assert_eq!(partial_frame(before(&immediate), at(&[0x01, 0xc1])), None);
        // A `sub` with no push before it.
        assert_eq!(
            partial_frame(before(&[0x90, 0x48, 0x83, 0xec, 0x60]), at(&jne)),
            None
        );
        // sub $0x8,%rsp not followed by saving RBP.
        let reserve = [0x48, 0x83, 0xec, 0x08];
        assert_eq!(
            partial_frame(before(&reserve), at(&[0x48, 0x89, 0x04, 0x24])),
            None
        );
        // A frame size that is not a whole number of words.
        let odd = [0x55, 0x48, 0x83, 0xec, 0x61];
        assert_eq!(partial_frame(before(&odd), at(&jne)), None);
        // A method body.
        assert_eq!(
            partial_frame(before(&[0x8b, 0xc1]), at(&[0xff, 0xc8])),
            None
        );
    }
}
