//! Parses the sampler's ring-buffer records (`profiler_common`'s ABI),
//! checking every length against the bytes actually received.

use std::time::Duration;

use profiler_common::{
    python::PYTHON_MAX_FRAMES, unwind::StopReason, RecordHeader, RecordKind, MAX_COUNTERS,
    MAX_FRAMES, RECORD_HEADER_SIZE, SAMPLE_COUNTER_SHIFT, SAMPLE_EXITING, SAMPLE_IN_CODE_CACHE,
    SAMPLE_KERNEL_THREAD, SAMPLE_SIGNALLED, SAMPLE_WALL_ONLY,
};

use crate::model::{Comm, Measure, PythonFrame, Sample};

/// One record from the sampler: parsed and taken in at once, never kept
/// in bulk, so its variants' sizes need not match.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    /// A CPU sample, or a thread's wait off the CPU.
    Sample(Sample),
    /// Process `tgid` called execve: its earlier memory maps no longer apply.
    Exec {
        /// The process.
        tgid: u32,
    },
    /// Process `tgid` ended.
    Exit {
        /// The process.
        tgid: u32,
    },
}

/// Why a record could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RecordError {
    /// Shorter than its header says.
    #[error("record of {0} bytes is truncated")]
    Truncated(usize),
    /// A kind this version does not know.
    #[error("record of unknown kind {0}")]
    UnknownKind(u32),
}

impl Record {
    /// Reads one record from the ring buffer's bytes.
    pub fn parse(bytes: &[u8]) -> Result<Self, RecordError> {
        let header_bytes = bytes
            .get(..RECORD_HEADER_SIZE)
            .ok_or(RecordError::Truncated(bytes.len()))?;
        // SAFETY: RecordHeader is repr(C) plain data, every bit pattern is
        // valid, and read_unaligned needs no alignment.
        let header: RecordHeader =
            unsafe { std::ptr::read_unaligned(header_bytes.as_ptr().cast()) };
        match RecordKind::try_from(header.kind).ok() {
            Some(RecordKind::Exec) => Ok(Self::Exec { tgid: header.tgid }),
            Some(RecordKind::Exit) => Ok(Self::Exit { tgid: header.tgid }),
            Some(kind @ (RecordKind::Sample | RecordKind::OffCpu | RecordKind::Counted)) => {
                let kernel_frames = usize::from(header.kernel_frames).min(MAX_FRAMES);
                let user_frames = usize::from(header.user_frames).min(MAX_FRAMES);
                let python_frames = usize::from(header.python_frames).min(PYTHON_MAX_FRAMES);
                let frame_bytes = &bytes[RECORD_HEADER_SIZE..];
                if frame_bytes.len() < (kernel_frames + user_frames + 2 * python_frames) * 8 {
                    return Err(RecordError::Truncated(bytes.len()));
                }
                let mut frames = frame_bytes
                    .chunks_exact(8)
                    .map(|chunk| u64::from_ne_bytes(chunk.try_into().expect("8-byte chunk")));
                let kernel = frames.by_ref().take(kernel_frames).collect();
                let user = frames.by_ref().take(user_frames).collect();
                let python = (0..python_frames)
                    .map_while(|_| Some(PythonFrame::from_words(frames.next()?, frames.next()?)))
                    .collect();
                let sample = Sample {
                    tgid: header.tgid,
                    tid: header.tid,
                    cpu: header.cpu,
                    time_ns: header.time_ns,
                    comm: Comm::new(&header.comm),
                    kernel,
                    user,
                    python,
                    signalled: header.flags & SAMPLE_SIGNALLED != 0,
                    exiting: header.flags & SAMPLE_EXITING != 0,
                    kernel_thread: header.flags & SAMPLE_KERNEL_THREAD != 0,
                    in_code_cache: header.flags & SAMPLE_IN_CODE_CACHE != 0,
                    cgroup_key: (header.cgroup_key != 0).then_some(header.cgroup_key),
                    exe_file: (header.exe_inode != 0)
                        .then(|| (device_of(header.exe_device), header.exe_inode)),
                    age: (header.age_ns != 0).then(|| Duration::from_nanos(header.age_ns)),
                    stop: StopReason::from_flags(header.flags),
                    measure: match kind {
                        RecordKind::OffCpu if header.flags & SAMPLE_WALL_ONLY != 0 => {
                            Measure::WallOnly(header.weight)
                        }
                        RecordKind::OffCpu => Measure::OffCpu(header.weight),
                        RecordKind::Counted => Measure::Counted {
                            index: ((header.flags >> SAMPLE_COUNTER_SHIFT) % MAX_COUNTERS) as u8,
                            events: header.weight,
                        },
                        _ => Measure::Cpu,
                    },
                };
                Ok(Self::Sample(sample))
            }
            None => Err(RecordError::UnknownKind(header.kind)),
        }
    }
}

/// The kernel's `dev_t` (major << 20 | minor) as major and minor.
fn device_of(dev: u64) -> (u32, u32) {
    ((dev >> 20) as u32, (dev & 0xf_ffff) as u32)
}

#[cfg(test)]
mod tests {
    use profiler_common::COMM_LEN;

    use super::*;

    fn raw(kind: RecordKind, kernel: &[u64], user: &[u64]) -> Vec<u8> {
        raw_with_python(kind, kernel, user, &[])
    }

    fn raw_with_python(
        kind: RecordKind,
        kernel: &[u64],
        user: &[u64],
        python: &[[u64; 2]],
    ) -> Vec<u8> {
        let mut comm = [0u8; COMM_LEN];
        comm[..4].copy_from_slice(b"work");
        let header = RecordHeader {
            kind: kind as u32,
            cpu: 1,
            tgid: 42,
            tid: 43,
            time_ns: 7,
            comm,
            kernel_frames: kernel.len() as u16,
            user_frames: user.len() as u16,
            flags: SAMPLE_SIGNALLED | 3 << SAMPLE_COUNTER_SHIFT,
            weight: 5_000_000,
            cgroup_key: 77,
            exe_device: (259 << 20) | 3,
            exe_inode: 1234,
            age_ns: 3_000_000_000,
            python_frames: python.len() as u16,
            padding: [0; 3],
        };
        // SAFETY: reading a repr(C) value's bytes.
        let mut bytes = unsafe {
            std::slice::from_raw_parts(
                (&header as *const RecordHeader).cast::<u8>(),
                RECORD_HEADER_SIZE,
            )
        }
        .to_vec();
        for frame in kernel.iter().chain(user).chain(python.iter().flatten()) {
            bytes.extend_from_slice(&frame.to_ne_bytes());
        }
        bytes
    }

    #[test]
    fn python_frames_follow_the_native_ones() {
        let python = [
            [0x1000, 0x40],
            [0x2000, 0x8 | profiler_common::python::PYTHON_FRAME_ENTRY],
        ];
        let full = raw_with_python(RecordKind::Sample, &[1], &[2], &python);
        let Ok(Record::Sample(sample)) = Record::parse(&full) else {
            panic!("not a sample")
        };
        assert_eq!((sample.kernel, sample.user), (vec![1], vec![2]));
        let frame = |code, instruction, entry| PythonFrame {
            code,
            instruction,
            entry,
        };
        assert_eq!(
            sample.python,
            [frame(0x1000, 0x40, false), frame(0x2000, 0x8, true)]
        );
        assert_eq!(
            Record::parse(&full[..full.len() - 8]),
            Err(RecordError::Truncated(full.len() - 8))
        );
    }

    #[test]
    fn sample_splits_kernel_and_user_frames() {
        let record = Record::parse(&raw(RecordKind::Sample, &[1, 2], &[3, 4, 5])).unwrap();
        let Record::Sample(sample) = record else {
            panic!("not a sample")
        };
        assert_eq!(
            (sample.tgid, sample.tid, sample.cpu, sample.time_ns),
            (42, 43, 1, 7)
        );
        assert_eq!(sample.comm, "work");
        assert_eq!(sample.kernel, [1, 2]);
        assert_eq!(sample.user, [3, 4, 5]);
        assert!(sample.signalled);
        assert!(!sample.kernel_thread);
        assert_eq!(sample.cgroup_key, Some(77));
        assert_eq!(sample.exe_file, Some(((259, 3), 1234)));
        assert_eq!(sample.age, Some(Duration::from_secs(3)));
        assert_eq!(sample.measure, Measure::Cpu);
    }

    #[test]
    fn off_cpu_records_carry_their_time_and_stacks() {
        let record = Record::parse(&raw(RecordKind::OffCpu, &[1], &[2, 3])).unwrap();
        let Record::Sample(sample) = record else {
            panic!("not an off-CPU record")
        };
        assert_eq!(sample.measure, Measure::OffCpu(5_000_000));
        assert_eq!((sample.kernel, sample.user), (vec![1], vec![2, 3]));

        let mut wall_only = raw(RecordKind::OffCpu, &[1], &[2, 3]);
        let flags = std::mem::offset_of!(RecordHeader, flags);
        wall_only[flags] |= SAMPLE_WALL_ONLY as u8;
        let Ok(Record::Sample(sample)) = Record::parse(&wall_only) else {
            panic!("not an off-CPU record")
        };
        assert_eq!(sample.measure, Measure::WallOnly(5_000_000));
    }

    #[test]
    fn counted_records_name_their_counter_and_weight() {
        let record = Record::parse(&raw(RecordKind::Counted, &[1], &[2])).unwrap();
        let Record::Sample(sample) = record else {
            panic!("not a counted record")
        };
        let counted = Measure::Counted {
            index: 3,
            events: 5_000_000,
        };
        assert_eq!(sample.measure, counted);
    }

    #[test]
    fn lifecycle_records_name_the_process() {
        assert_eq!(
            Record::parse(&raw(RecordKind::Exec, &[], &[])),
            Ok(Record::Exec { tgid: 42 })
        );
        assert_eq!(
            Record::parse(&raw(RecordKind::Exit, &[], &[])),
            Ok(Record::Exit { tgid: 42 })
        );
    }

    #[test]
    fn short_and_unknown_records_are_refused() {
        let full = raw(RecordKind::Sample, &[1, 2], &[3]);
        assert_eq!(
            Record::parse(&full[..full.len() - 1]),
            Err(RecordError::Truncated(full.len() - 1))
        );
        assert_eq!(Record::parse(&full[..10]), Err(RecordError::Truncated(10)));
        let mut unknown = full.clone();
        unknown[0] = 99;
        assert_eq!(Record::parse(&unknown), Err(RecordError::UnknownKind(99)));
    }
}
