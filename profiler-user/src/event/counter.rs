//! The perf counter events `-e` takes by name (perf's names): the
//! kernel's software events and the CPU's hardware ones, with what the
//! kernel needs to open each, and raw PMU events (`rHEX`, perf's spelling
//! of a CPU-specific event code).

/// perf's `PERF_TYPE_HARDWARE`.
const HARDWARE: u32 = 0;
/// perf's `PERF_TYPE_SOFTWARE`.
const SOFTWARE: u32 = 1;
/// perf's `PERF_TYPE_HW_CACHE`: the config is cache | operation << 8 |
/// result << 16.
const HW_CACHE: u32 = 3;
/// perf's `PERF_TYPE_RAW`: the config is the CPU's own event code.
const RAW: u32 = 4;

/// A hardware cache event's config: a read of `cache` that missed.
const fn read_miss(cache: u64) -> u64 {
    cache | 1 << 16
}

/// One named event: its names (perf's first), kind, and perf type and
/// config.
struct Known {
    names: &'static [&'static str],
    perf_type: u32,
    config: u64,
    about: &'static str,
}

/// Every counter event, software first.
const KNOWN: &[Known] = &[
    Known {
        names: &["page-faults", "faults"],
        perf_type: SOFTWARE,
        config: 2,
        about: "page faults (minor and major)",
    },
    Known {
        names: &["minor-faults"],
        perf_type: SOFTWARE,
        config: 5,
        about: "page faults served without I/O",
    },
    Known {
        names: &["major-faults"],
        perf_type: SOFTWARE,
        config: 6,
        about: "page faults that read from disk",
    },
    Known {
        names: &["context-switches", "cs"],
        perf_type: SOFTWARE,
        config: 3,
        about: "context switches",
    },
    Known {
        names: &["cpu-migrations", "migrations"],
        perf_type: SOFTWARE,
        config: 4,
        about: "moves of a thread to another CPU",
    },
    Known {
        names: &["alignment-faults"],
        perf_type: SOFTWARE,
        config: 7,
        about: "unaligned accesses the kernel fixed up",
    },
    Known {
        names: &["emulation-faults"],
        perf_type: SOFTWARE,
        config: 8,
        about: "instructions the kernel emulated",
    },
    Known {
        names: &["task-clock"],
        perf_type: SOFTWARE,
        config: 1,
        about: "nanoseconds of thread CPU time",
    },
    Known {
        names: &["cpu-clock"],
        perf_type: SOFTWARE,
        config: 0,
        about: "nanoseconds of CPU time",
    },
    Known {
        names: &["cycles", "cpu-cycles"],
        perf_type: HARDWARE,
        config: 0,
        about: "CPU cycles",
    },
    Known {
        names: &["instructions"],
        perf_type: HARDWARE,
        config: 1,
        about: "instructions retired",
    },
    Known {
        names: &["cache-references"],
        perf_type: HARDWARE,
        config: 2,
        about: "last-level cache accesses",
    },
    Known {
        names: &["cache-misses"],
        perf_type: HARDWARE,
        config: 3,
        about: "last-level cache misses",
    },
    Known {
        names: &["branches", "branch-instructions"],
        perf_type: HARDWARE,
        config: 4,
        about: "branch instructions retired",
    },
    Known {
        names: &["branch-misses"],
        perf_type: HARDWARE,
        config: 5,
        about: "mispredicted branches",
    },
    Known {
        names: &["bus-cycles"],
        perf_type: HARDWARE,
        config: 6,
        about: "bus cycles",
    },
    Known {
        names: &["stalled-cycles-frontend"],
        perf_type: HARDWARE,
        config: 7,
        about: "cycles the front end stalled",
    },
    Known {
        names: &["stalled-cycles-backend"],
        perf_type: HARDWARE,
        config: 8,
        about: "cycles the back end stalled",
    },
    Known {
        names: &["ref-cycles"],
        perf_type: HARDWARE,
        config: 9,
        about: "reference cycles, unscaled by frequency",
    },
    Known {
        names: &["L1-dcache-load-misses"],
        perf_type: HW_CACHE,
        config: read_miss(0),
        about: "level 1 data cache load misses",
    },
    Known {
        names: &["L1-icache-load-misses"],
        perf_type: HW_CACHE,
        config: read_miss(1),
        about: "level 1 instruction cache load misses",
    },
    Known {
        names: &["LLC-load-misses"],
        perf_type: HW_CACHE,
        config: read_miss(2),
        about: "last-level cache load misses",
    },
    Known {
        names: &["dTLB-load-misses"],
        perf_type: HW_CACHE,
        config: read_miss(3),
        about: "data TLB load misses",
    },
    Known {
        names: &["iTLB-load-misses"],
        perf_type: HW_CACHE,
        config: read_miss(4),
        about: "instruction TLB load misses",
    },
    Known {
        names: &["branch-load-misses"],
        perf_type: HW_CACHE,
        config: read_miss(5),
        about: "branch predictor misses",
    },
];

/// A perf counter event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Counter(Kind);

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Kind {
    /// By its place in the catalogue.
    Known(u8),
    /// A raw PMU event: its name as given (lives as long as stoke; a few
    /// per command line) and its code.
    Raw(&'static str, u64),
}

impl Counter {
    /// The event named `name` (any of its names, case as perf spells it;
    /// `rHEX` for a raw PMU event).
    pub fn from_name(name: &str) -> Option<Self> {
        if let Some(index) = KNOWN.iter().position(|known| known.names.contains(&name)) {
            return Some(Self(Kind::Known(index as u8)));
        }
        let hex = name.strip_prefix('r')?;
        let config =
            (!hex.is_empty() && hex.len() <= 16).then(|| u64::from_str_radix(hex, 16).ok())??;
        Some(Self(Kind::Raw(Box::leak(name.into()), config)))
    }

    /// Every counter event of the catalogue.
    pub fn all() -> impl Iterator<Item = Self> {
        (0..KNOWN.len()).map(|index| Self(Kind::Known(index as u8)))
    }

    fn known(self) -> Option<&'static Known> {
        match self.0 {
            Kind::Known(index) => Some(&KNOWN[usize::from(index)]),
            Kind::Raw(..) => None,
        }
    }

    /// Its name (perf's).
    pub fn name(self) -> &'static str {
        match self.0 {
            Kind::Known(index) => KNOWN[usize::from(index)].names[0],
            Kind::Raw(name, _) => name,
        }
    }

    /// What it counts, in a few words.
    pub fn about(self) -> &'static str {
        self.known().map_or("a raw PMU event", |known| known.about)
    }

    /// perf_event_attr's `type`.
    pub fn perf_type(self) -> u32 {
        self.known().map_or(RAW, |known| known.perf_type)
    }

    /// perf_event_attr's `config`.
    pub fn config(self) -> u64 {
        match self.0 {
            Kind::Known(index) => KNOWN[usize::from(index)].config,
            Kind::Raw(_, config) => config,
        }
    }

    /// Whether its events come as a thread leaves the CPU, when a signal
    /// for its Java stack would wake it.
    pub fn at_switch(self) -> bool {
        self.perf_type() == SOFTWARE && matches!(self.config(), 3 | 4)
    }

    /// Whether the CPU's performance monitoring unit counts it, not the
    /// kernel.
    pub fn hardware(self) -> bool {
        self.perf_type() != SOFTWARE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_finds_its_event_once() {
        let mut seen = std::collections::HashSet::new();
        for counter in Counter::all() {
            for name in counter.known().unwrap().names {
                assert!(seen.insert(*name), "{name} twice");
                assert_eq!(Counter::from_name(name), Some(counter));
            }
        }
        assert_eq!(
            Counter::from_name("faults").map(Counter::name),
            Some("page-faults")
        );
        assert!(Counter::from_name("cycles").unwrap().hardware());
        assert!(!Counter::from_name("cs").unwrap().hardware());
        assert_eq!(
            Counter::from_name("LLC-load-misses").unwrap().config(),
            0x10002
        );
        assert_eq!(Counter::from_name("page-fault"), None);
        let raw = Counter::from_name("r1a8").unwrap();
        assert_eq!(
            (raw.name(), raw.perf_type(), raw.config()),
            ("r1a8", RAW, 0x1a8)
        );
        assert!(raw.hardware());
        for not_raw in ["r", "rxyz", "r12345678901234567"] {
            assert_eq!(Counter::from_name(not_raw), None, "{not_raw}");
        }
    }
}
