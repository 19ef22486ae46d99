//! Links the BPF programs' calls of kernel functions
//! ([`profiler_common::kfunc`]): the marker in each such call becomes the
//! function's BTF id in the running kernel. A kernel without the function
//! keeps the marker, and the programs calling it are not loaded.

use aya::Btf;
use aya_obj::btf::BtfKind;
use object::{Object, ObjectSection, SectionKind};
use profiler_common::kfunc::KFUNC_TASK_WORK_SCHEDULE_RESUME;

/// BPF_JMP | BPF_CALL, and its register byte for a kfunc call: source
/// BPF_PSEUDO_KFUNC_CALL, destination 0.
const CALL: u8 = 0x85;
const KFUNC_REGISTERS: u8 = 0x20;
const INSTRUCTION: usize = 8;

/// The sampler object with its kfunc calls linked, and which kfuncs the
/// kernel has.
pub struct Linked {
    /// The object, in 8-byte words: the ELF parsers want it aligned.
    words: Vec<u64>,
    len: usize,
    /// `bpf_task_work_schedule_resume_impl`: off-CPU user stacks taken by
    /// task work rather than at syscall exits.
    pub task_work: bool,
}

impl Linked {
    /// The linked object, for `aya::EbpfLoader::load`.
    pub fn object(&self) -> &[u8] {
        // SAFETY: the words' bytes, `len` of them, all initialized.
        unsafe { std::slice::from_raw_parts(self.words.as_ptr().cast(), self.len) }
    }
}

/// Links `object`'s kfunc calls against the kernel's `btf`.
pub fn link(object: &[u8], btf: &Btf) -> Linked {
    let task_work = btf
        .id_by_type_name_kind("bpf_task_work_schedule_resume_impl", BtfKind::Func)
        .ok();
    let mut words = vec![0u64; object.len().div_ceil(INSTRUCTION)];
    // SAFETY: as in `Linked::object`, mutably, for the copy.
    let bytes = unsafe { std::slice::from_raw_parts_mut(words.as_mut_ptr().cast(), object.len()) };
    bytes.copy_from_slice(object);
    if let Some(id) = task_work {
        for range in program_ranges(object) {
            let Some(program) = bytes.get_mut(range) else {
                continue;
            };
            for instruction in program.chunks_exact_mut(INSTRUCTION) {
                let imm = u32::from_le_bytes([
                    instruction[4],
                    instruction[5],
                    instruction[6],
                    instruction[7],
                ]);
                if instruction[0] == CALL
                    && instruction[1] == KFUNC_REGISTERS
                    && imm == KFUNC_TASK_WORK_SCHEDULE_RESUME
                {
                    instruction[4..].copy_from_slice(&id.to_le_bytes());
                }
            }
        }
    }
    Linked {
        words,
        len: object.len(),
        task_work: task_work.is_some(),
    }
}

/// Where the object's code sections are in it.
fn program_ranges(object: &[u8]) -> Vec<std::ops::Range<usize>> {
    let Ok(file) = object::File::parse(object) else {
        return Vec::new();
    };
    file.sections()
        .filter(|section| section.kind() == SectionKind::Text)
        .filter_map(|section| {
            let (offset, size) = section.file_range()?;
            let start = usize::try_from(offset).ok()?;
            Some(start..start.checked_add(usize::try_from(size).ok()?)?)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_the_task_work_call_of_the_sampler_object() {
        let btf = Btf::from_sys_fs().expect("the kernel's BTF");
        let linked = link(profiler_ebpf::sampler_object(true), &btf);
        let marker = KFUNC_TASK_WORK_SCHEDULE_RESUME.to_le_bytes();
        let calls = |object: &[u8]| {
            object
                .chunks_exact(INSTRUCTION)
                .filter(|i| i[0] == CALL && i[1] == KFUNC_REGISTERS && i[4..] == marker)
                .count()
        };
        assert!(
            calls(profiler_ebpf::sampler_object(true)) > 0,
            "no marked call in the object"
        );
        assert!(
            linked.task_work,
            "this kernel (6.18) has bpf_task_work_schedule_resume_impl"
        );
        assert_eq!(calls(linked.object()), 0, "a marked call was left unlinked");
        assert_eq!(
            linked.object().len(),
            profiler_ebpf::sampler_object(true).len()
        );
        assert_eq!(
            calls(profiler_ebpf::sampler_object(false)),
            0,
            "the object without off-CPU programs calls the off-CPU kfunc"
        );
    }
}
