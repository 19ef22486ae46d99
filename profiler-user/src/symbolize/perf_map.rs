//! JIT code named by its runtime: `/tmp/perf-PID.map`, which V8 (`node
//! --perf-basic-prof`), .NET (`DOTNET_PerfMapEnabled=1`), LuaJIT, Python
//! 3.12+ (`-X perf`), Julia and Erlang (`+JPperf`) write, one line per
//! compiled function: `START SIZE NAME`, hexadecimal. The file is the
//! process's own: found in its filesystem under its pid in its own pid
//! namespace, a regular file only, and read as it grows, from where the
//! last read stopped. What a process writes is hostile input: lines, names,
//! bytes read per process and names kept in all are bounded.

use std::{
    collections::BTreeMap,
    fs::File,
    io::{self, BufRead, BufReader, Read, Seek, SeekFrom},
    path::Path,
    sync::Arc,
};

use foldhash::HashMap;

use crate::{procfs, rootfs::Root};

/// The most bytes of one process's map read: a runaway JIT's is cut there.
const MAX_MAP_BYTES: u64 = 32 << 20;

/// The most bytes of names kept over every process's map.
const MAX_KEPT_BYTES: usize = 64 << 20;

/// The longest line taken; a longer one (and the name in it) is skipped.
const MAX_LINE: usize = 4096;

/// The perf maps of the processes whose JIT code was sampled.
#[derive(Default)]
pub struct PerfMaps {
    maps: HashMap<u32, PerfMap>,
    kept_bytes: usize,
}

/// One process's map, as far as it was read.
struct PerfMap {
    /// Open for reading what the runtime appends; `None` if there is none.
    file: Option<File>,
    read: u64,
    /// Functions by start address: their end and name.
    functions: BTreeMap<u64, (u64, Arc<str>)>,
    cut: bool,
}

impl PerfMaps {
    /// Reads what process `pid`'s map holds since the last read (its
    /// beginning, the first time).
    pub fn refresh(&mut self, pid: u32) {
        let map = self.maps.entry(pid).or_insert_with(|| PerfMap {
            file: open(pid).ok(),
            read: 0,
            functions: BTreeMap::new(),
            cut: false,
        });
        let room = MAX_KEPT_BYTES.saturating_sub(self.kept_bytes);
        let (added, cut) = map.read_on(room);
        self.kept_bytes += added;
        if cut && !map.cut {
            map.cut = true;
            eprintln!(
                "stoke: warning: process {pid}: its perf map (/tmp/perf-PID.map) is cut at {} MiB of {} MiB for all: its JIT frames beyond are unnamed",
                MAX_MAP_BYTES >> 20,
                MAX_KEPT_BYTES >> 20
            );
        }
    }

    /// The name of the function of process `pid` that holds `address`.
    pub fn name(&self, pid: u32, address: u64) -> Option<Arc<str>> {
        let map = self.maps.get(&pid)?;
        let (_, (end, name)) = map.functions.range(..=address).next_back()?;
        (address < *end).then(|| name.clone())
    }

    /// Forgets the maps of processes that have ended.
    pub fn forget_ended(&mut self) {
        let kept = &mut self.kept_bytes;
        self.maps.retain(|&pid, map| {
            let ended = procfs::has_exited(pid);
            if ended {
                *kept = kept.saturating_sub(map.kept_bytes());
            }
            !ended
        });
    }
}

impl PerfMap {
    /// Reads the lines appended since the last read, keeping at most
    /// `room` bytes of names: the bytes kept, and whether the map was cut.
    fn read_on(&mut self, room: usize) -> (usize, bool) {
        let Some(file) = &mut self.file else {
            return (0, false);
        };
        let left = MAX_MAP_BYTES.saturating_sub(self.read);
        if file.seek(SeekFrom::Start(self.read)).is_err() {
            return (0, false);
        }
        let mut lines = BufReader::new(file.take(left));
        let mut line = Vec::new();
        let mut added = 0;
        loop {
            line.clear();
            let Ok(length) = read_line(&mut lines, &mut line) else {
                break;
            };
            // A line the runtime is still writing is read whole next time.
            if length == 0 || line.last() != Some(&b'\n') {
                break;
            }
            self.read += length as u64;
            let Some((start, end, name)) = parse(&line) else {
                continue;
            };
            if added + name.len() > room {
                return (added, true);
            }
            added += name.len();
            self.functions.insert(start, (end, name.into()));
        }
        (added, self.read >= MAX_MAP_BYTES)
    }

    fn kept_bytes(&self) -> usize {
        self.functions.values().map(|(_, name)| name.len()).sum()
    }
}

/// Reads one line of at most [`MAX_LINE`] bytes (a longer one is consumed
/// and given without its end, so that it is skipped); its length in the
/// file.
fn read_line(reader: &mut impl BufRead, line: &mut Vec<u8>) -> io::Result<usize> {
    let mut length = 0;
    loop {
        let buffer = reader.fill_buf()?;
        if buffer.is_empty() {
            return Ok(length);
        }
        let (taken, done) = match memchr(buffer) {
            Some(end) => (end + 1, true),
            None => (buffer.len(), false),
        };
        if line.len() < MAX_LINE {
            let keep = taken.min(MAX_LINE - line.len());
            line.extend_from_slice(&buffer[..keep]);
        }
        reader.consume(taken);
        length += taken;
        if done {
            if line.last() != Some(&b'\n') {
                // Too long: marked as no line to take.
                line.clear();
                line.push(b'\n');
            }
            return Ok(length);
        }
    }
}

fn memchr(bytes: &[u8]) -> Option<usize> {
    bytes.iter().position(|&byte| byte == b'\n')
}

/// `START SIZE NAME` (hexadecimal, `0x` or not): the function's range and
/// name.
fn parse(line: &[u8]) -> Option<(u64, u64, String)> {
    let line = std::str::from_utf8(line).ok()?.trim_end();
    let mut fields = line.splitn(3, ' ');
    let start = hex(fields.next()?)?;
    let size = hex(fields.next()?)?;
    let name = fields.next()?.trim();
    if name.is_empty() || size == 0 {
        return None;
    }
    Some((start, start.checked_add(size)?, name.to_owned()))
}

fn hex(text: &str) -> Option<u64> {
    let digits = text.strip_prefix("0x").unwrap_or(text);
    u64::from_str_radix(digits, 16).ok()
}

/// Process `pid`'s map: `/tmp/perf-NSPID.map` of its own root.
fn open(pid: u32) -> io::Result<File> {
    let status = procfs::read_status(format!("/proc/{pid}/status"))?;
    let ns_pid = procfs::innermost_pid(&status).ok_or(io::ErrorKind::NotFound)?;
    Root::of_process(pid)?.open_file(Path::new(&format!("/tmp/perf-{ns_pid}.map")))
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    fn map_of(text: &[u8]) -> PerfMap {
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(text).unwrap();
        PerfMap {
            file: Some(file),
            read: 0,
            functions: BTreeMap::new(),
            cut: false,
        }
    }

    fn named(map: &PerfMap, address: u64) -> Option<&str> {
        let (_, (end, name)) = map.functions.range(..=address).next_back()?;
        (address < *end).then_some(&**name)
    }

    #[test]
    fn lines_name_their_ranges_and_later_lines_win() {
        let mut map = map_of(
            b"7f0000001000 40 LazyCompile:*hotA /app/work.js:3\n\
              0x7f0000002000 0x10 hotB\n\
              junk\n\
              7f0000001000 40 hotA again\n\
              7f0000003000 8 half writ",
        );
        let (added, cut) = map.read_on(usize::MAX);
        assert!(!cut && added > 0);
        assert_eq!(named(&map, 0x7f0000001010), Some("hotA again"));
        assert_eq!(named(&map, 0x7f000000200f), Some("hotB"));
        assert_eq!(named(&map, 0x7f0000002010), None);
        assert_eq!(
            named(&map, 0x7f0000003000),
            None,
            "an unfinished line waits"
        );
        let file = map.file.as_mut().unwrap();
        file.write_all(b"ten\n").unwrap();
        map.read_on(usize::MAX);
        assert_eq!(named(&map, 0x7f0000003004), Some("half written"));
    }

    #[test]
    fn long_lines_and_big_maps_are_bounded() {
        let mut text = format!("1000 10 {}\n", "x".repeat(MAX_LINE * 2)).into_bytes();
        text.extend_from_slice(b"2000 10 short\n");
        let mut map = map_of(&text);
        map.read_on(usize::MAX);
        assert_eq!(named(&map, 0x1000), None, "an overlong line is skipped");
        assert_eq!(named(&map, 0x2000), Some("short"));

        let mut big = Vec::new();
        for index in 0..1000u64 {
            writeln!(big, "{:x} 10 function_{index}", 0x10_0000 + index * 0x10).unwrap();
        }
        let mut map = map_of(&big);
        let (added, cut) = map.read_on(100);
        assert!(cut && added <= 100, "{added}");
    }
}
