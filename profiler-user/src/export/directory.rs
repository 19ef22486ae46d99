//! Profiles as files: `DIR/SERVICE/UNTIL.pb.gz` (CPU) and
//! `DIR/SERVICE/UNTIL.EVENT.pb.gz` (the other events), each appearing whole
//! (see [`OutputFile`]), and per service and event only the newest `keep`
//! of them. A service that stopped (a container removed) would keep its
//! last files forever: once the newest was written longer than the
//! retention ago, its directory is removed, so that the disk taken stays
//! bounded however many services come and go. Only regular files named as
//! stoke names them are ever removed, and a stopped service's directory
//! only when it holds nothing else; links are never followed.

use std::{
    collections::HashMap,
    io::{self, Write},
    path::{Path, PathBuf},
    time::{Duration, SystemTime},
};

use super::{
    pyroscope::sanitize_service,
    unix_seconds,
    worker::{Delivery, Destination},
    Batch, ServiceProfile,
};
use crate::{event::Event, write::OutputFile};

/// The file suffix: gzipped pprof, as `go tool pprof` and Pyroscope read it.
const SUFFIX: &str = ".pb.gz";

/// The directory destination.
pub(super) struct Directory {
    root: PathBuf,
    keep: usize,
    /// How long the files of a service that stopped are kept.
    retention: Duration,
    /// The batch whose end the stopped services were last looked for at.
    swept_until: u64,
}

impl Directory {
    pub fn new(root: PathBuf, keep: usize, retention: Duration) -> Self {
        Self {
            root,
            keep,
            retention,
            swept_until: 0,
        }
    }

    /// Once per batch: removes the directories of services whose newest
    /// profile was written longer than the retention before `now`. A
    /// directory that cannot be read is left for the next sweep.
    fn sweep_stopped(&mut self, now: SystemTime) -> io::Result<()> {
        let until = unix_seconds(now);
        if until == self.swept_until {
            return Ok(());
        }
        self.swept_until = until;
        let Some(oldest_kept) = now.checked_sub(self.retention) else {
            return Ok(());
        };
        for entry in std::fs::read_dir(&self.root)? {
            let entry = entry?;
            // Not followed: a link someone put there leads elsewhere.
            if !entry.file_type()?.is_dir() {
                continue;
            }
            let dir = entry.path();
            if let Ok(Some(profiles)) = stopped_service(&dir, oldest_kept) {
                remove_profiles(profiles)?;
                // Kept if something came in meanwhile.
                let _ = std::fs::remove_dir(&dir);
            }
        }
        Ok(())
    }

    fn write(&mut self, batch: &Batch, profile: &ServiceProfile) -> io::Result<()> {
        self.sweep_stopped(batch.until)?;
        let dir = self.root.join(file_name(&profile.service));
        std::fs::create_dir_all(&dir)?;
        let event = match profile.event {
            Event::Cpu => String::new(),
            event => format!(".{}", event.name()),
        };
        let until = unix_seconds(batch.until);
        // A later profile ending in the same second (the last, short
        // interval at a stop) gets a name of its own.
        let mut path = dir.join(format!("{until}{event}{SUFFIX}"));
        for sequence in 1..=MAX_SAME_SECOND {
            if path.symlink_metadata().is_err() {
                break;
            }
            path = dir.join(format!("{until}-{sequence}{event}{SUFFIX}"));
        }
        let mut file = OutputFile::create(&path, 0o644)?;
        file.file().write_all(&profile.pprof)?;
        file.commit()?;
        rotate(&dir, self.keep)
    }
}

impl Destination for Directory {
    fn name(&self) -> &'static str {
        "output-dir"
    }

    /// A file that cannot be written is not retried: a full or read-only
    /// disk will not be better a moment later, and the next interval tries
    /// again anyway.
    fn deliver(
        &mut self,
        batch: &Batch,
        profile: &ServiceProfile,
        _: Option<Duration>,
    ) -> Delivery {
        match self.write(batch, profile) {
            Ok(()) => Delivery::Delivered,
            Err(error) => Delivery::Refused {
                kind: format!("{:?}", error.kind()),
                detail: format!("{}: {error}", self.root.display()),
            },
        }
    }
}

/// A service's directory name: the application name's characters, and no
/// leading dot, so never `.`, `..` or hidden.
fn file_name(service: &str) -> String {
    let name = sanitize_service(service);
    match name.strip_prefix('.') {
        Some(rest) => format!("_{rest}"),
        None => name,
    }
}

/// Removes the oldest profiles of each event in `dir` beyond the newest
/// `keep`.
fn rotate(dir: &Path, keep: usize) -> io::Result<()> {
    let mut by_event: HashMap<Option<String>, Vec<Profile>> = HashMap::new();
    for profile in profiles_in(dir)? {
        by_event.entry(profile.1.clone()).or_default().push(profile);
    }
    for mut profiles in by_event.into_values() {
        if profiles.len() > keep {
            profiles.sort_unstable_by_key(|profile| profile.0);
            let excess = profiles.len() - keep;
            remove_profiles(profiles.drain(..excess).collect())?;
        }
    }
    Ok(())
}

/// Most profiles of one service and event ending in the same second.
const MAX_SAME_SECOND: u32 = 100;

/// A profile stoke wrote: the UNIX seconds it ends at with its place among
/// those ending in the same second, its event's name (`None`: CPU), its
/// path.
type Profile = ((u64, u64), Option<String>, PathBuf);

/// The profiles stoke wrote in `dir`.
fn profiles_in(dir: &Path) -> io::Result<Vec<Profile>> {
    let mut profiles = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        profiles.extend(profile(&entry?)?);
    }
    Ok(profiles)
}

/// The profiles of `dir` if it holds nothing else, at least one, all
/// written before `oldest_kept`.
fn stopped_service(dir: &Path, oldest_kept: SystemTime) -> io::Result<Option<Vec<Profile>>> {
    let mut profiles = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let Some(profile) = profile(&entry)? else {
            return Ok(None);
        };
        // The entry's own time: a link is not a profile, never followed.
        if entry.metadata()?.modified()? >= oldest_kept {
            return Ok(None);
        }
        profiles.push(profile);
    }
    Ok((!profiles.is_empty()).then_some(profiles))
}

/// `entry` as a profile, if it is a regular file named as stoke names them.
fn profile(entry: &std::fs::DirEntry) -> io::Result<Option<Profile>> {
    let name = entry.file_name();
    let Some(stem) = name.to_str().and_then(|name| name.strip_suffix(SUFFIX)) else {
        return Ok(None);
    };
    let (seconds, event) = match stem.split_once('.') {
        Some((seconds, event)) => {
            // An event's name: a known one, or a probe's (letters,
            // digits, `_` and `-`).
            let named = !event.is_empty()
                && event
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
            if !named || event == Event::Cpu.name() {
                return Ok(None);
            }
            (seconds, Some(event.to_owned()))
        }
        None => (stem, None),
    };
    let (seconds, sequence) = seconds.split_once('-').unwrap_or((seconds, "0"));
    let number = |digits: &str| {
        (!digits.is_empty() && digits.bytes().all(|byte| byte.is_ascii_digit()))
            .then(|| digits.parse().ok())
            .flatten()
    };
    let (Some(seconds), Some(sequence)) = (number(seconds), number(sequence)) else {
        return Ok(None);
    };
    if !entry.file_type()?.is_file() {
        return Ok(None);
    }
    Ok(Some(((seconds, sequence), event, entry.path())))
}

fn remove_profiles(profiles: Vec<Profile>) -> io::Result<()> {
    for (_, _, path) in profiles {
        match std::fs::remove_file(&path) {
            // Another stoke, or a person, removed it first.
            Err(error) if error.kind() == io::ErrorKind::NotFound => {}
            result => result?,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: Duration = Duration::from_secs(86400);

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    fn batch(until: u64, service: &str) -> Batch {
        Batch {
            from: SystemTime::UNIX_EPOCH,
            until: SystemTime::UNIX_EPOCH + Duration::from_secs(until),
            sample_rate_hz: 99,
            profiles: vec![ServiceProfile {
                service: service.to_owned(),
                labels: Vec::new(),
                pprof: format!("profile {until}").into_bytes(),
                event: Event::Cpu,
            }],
        }
    }

    /// Delivers a profile of service "web" ending at each of `untils`.
    fn deliver_all(directory: &mut Directory, untils: &[u64]) {
        for &until in untils {
            let batch = batch(until, "web");
            assert!(matches!(
                directory.deliver(&batch, &batch.profiles[0], None),
                Delivery::Delivered
            ));
        }
    }

    #[test]
    fn rotation_keeps_exactly_the_newest_and_only_touches_profiles() {
        let root = tempfile::tempdir().unwrap();
        let mut directory = Directory::new(root.path().to_owned(), 3, DAY);
        let service_dir = root.path().join("web");
        std::fs::create_dir(&service_dir).unwrap();
        for foreign in ["notes.txt", "12.pb.gz.bak", "x1.pb.gz"] {
            std::fs::write(service_dir.join(foreign), "").unwrap();
        }
        // Out of order, as a clock step could make them.
        deliver_all(
            &mut directory,
            &[
                1_700_000_002,
                1_700_000_001,
                1_700_000_005,
                1_700_000_003,
                1_700_000_004,
            ],
        );
        assert_eq!(
            names(&service_dir),
            [
                "12.pb.gz.bak",
                "1700000003.pb.gz",
                "1700000004.pb.gz",
                "1700000005.pb.gz",
                "notes.txt",
                "x1.pb.gz"
            ]
        );
        assert_eq!(
            std::fs::read(service_dir.join("1700000004.pb.gz")).unwrap(),
            b"profile 1700000004"
        );
    }

    #[test]
    fn profiles_ending_in_the_same_second_keep_each_its_own_file() {
        let root = tempfile::tempdir().unwrap();
        let mut directory = Directory::new(root.path().to_owned(), 3, DAY);
        let service_dir = root.path().join("web");
        deliver_all(
            &mut directory,
            &[1_700_000_001, 1_700_000_002, 1_700_000_002, 1_700_000_002],
        );
        // The newest three: the second one's, then its sequels in order.
        assert_eq!(
            names(&service_dir),
            [
                "1700000002-1.pb.gz",
                "1700000002-2.pb.gz",
                "1700000002.pb.gz"
            ]
        );
        let mut sorted = profiles_in(&service_dir).unwrap();
        sorted.sort_unstable_by_key(|profile| profile.0);
        let order: Vec<_> = sorted.iter().map(|profile| profile.0).collect();
        assert_eq!(
            order,
            [(1_700_000_002, 0), (1_700_000_002, 1), (1_700_000_002, 2)]
        );
    }

    /// Writes `files` in `dir`, last written `age` before `now`.
    fn old_files(dir: &Path, files: &[&str], now: SystemTime, age: Duration) {
        std::fs::create_dir_all(dir).unwrap();
        for file in files {
            let path = dir.join(file);
            std::fs::write(&path, "old").unwrap();
            let file = std::fs::File::options().write(true).open(path).unwrap();
            file.set_modified(now - age).unwrap();
        }
    }

    #[test]
    fn services_stopped_longer_than_the_retention_go_and_nothing_else() {
        let root = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let (hour, now) = (Duration::from_secs(3600), SystemTime::now());
        let mut directory = Directory::new(root.path().to_owned(), 5, hour);
        let profiles = [
            "1700000000.pb.gz",
            "1700000010.pb.gz",
            "1700000010.offcpu.pb.gz",
        ];
        let at = |name: &str| root.path().join(name);
        old_files(&at("gone"), &profiles, now, 2 * hour);
        old_files(&at("recent"), &profiles, now, hour / 2);
        // The newest file counts, whatever its name says.
        old_files(&at("one-recent"), &profiles[..2], now, 2 * hour);
        old_files(&at("one-recent"), &["1600000000.pb.gz"], now, hour / 2);
        old_files(&at("mixed"), &profiles, now, 2 * hour);
        old_files(&at("mixed"), &["notes.txt"], now, 2 * hour);
        old_files(outside.path(), &profiles, now, 2 * hour);
        std::os::unix::fs::symlink(outside.path(), at("linked-dir")).unwrap();
        std::fs::create_dir(at("linked-file")).unwrap();
        std::os::unix::fs::symlink(
            outside.path().join(profiles[0]),
            at("linked-file").join(profiles[0]),
        )
        .unwrap();
        std::fs::create_dir_all(at("nested").join(profiles[0])).unwrap();
        std::fs::create_dir(at("empty")).unwrap();
        old_files(root.path(), &["1700000000.pb.gz"], now, 2 * hour);

        let mut batch = batch(unix_seconds(now), "web");
        batch.until = now;
        assert!(matches!(
            directory.deliver(&batch, &batch.profiles[0], None),
            Delivery::Delivered
        ));
        assert_eq!(
            names(root.path()),
            [
                "1700000000.pb.gz",
                "empty",
                "linked-dir",
                "linked-file",
                "mixed",
                "nested",
                "one-recent",
                "recent",
                "web"
            ]
        );
        assert_eq!(names(&at("mixed")).len(), 4);
        assert_eq!(names(&at("recent")).len(), 3);
        assert_eq!(names(outside.path()).len(), 3);

        // An hour later, only what was written since stays.
        let mut later = batch.clone();
        later.until = now + hour;
        assert!(matches!(
            directory.deliver(&later, &later.profiles[0], None),
            Delivery::Delivered
        ));
        let left = names(root.path());
        assert!(!left.contains(&"recent".to_owned()) && !left.contains(&"one-recent".to_owned()));
        assert!(left.contains(&"web".to_owned()) && left.contains(&"mixed".to_owned()));
    }

    #[test]
    fn each_event_has_its_files_and_its_rotation() {
        let root = tempfile::tempdir().unwrap();
        let mut directory = Directory::new(root.path().to_owned(), 1, DAY);
        for until in [1_700_000_001, 1_700_000_002] {
            for event in [Event::Cpu, Event::Offcpu] {
                let mut batch = batch(until, "web");
                batch.profiles[0].event = event;
                assert!(matches!(
                    directory.deliver(&batch, &batch.profiles[0], None),
                    Delivery::Delivered
                ));
            }
        }
        assert_eq!(
            names(&root.path().join("web")),
            ["1700000002.offcpu.pb.gz", "1700000002.pb.gz"]
        );
    }

    #[test]
    fn service_names_stay_inside_the_directory() {
        assert_eq!(file_name("../../etc"), "_._.._etc");
        assert_eq!(file_name(".."), "_.");
        assert_eq!(file_name("."), "_");
        assert_eq!(file_name("web api"), "web_api");
        let root = tempfile::tempdir().unwrap();
        let mut directory = Directory::new(root.path().to_owned(), 1, DAY);
        let batch = batch(7, "../escape");
        assert!(matches!(
            directory.deliver(&batch, &batch.profiles[0], None),
            Delivery::Delivered
        ));
        assert_eq!(names(root.path()), ["_._escape"]);
    }

    #[test]
    fn an_unwritable_directory_is_refused_not_retried() {
        let root = tempfile::tempdir().unwrap();
        let file = root.path().join("file");
        std::fs::write(&file, "").unwrap();
        let mut directory = Directory::new(file, 1, DAY);
        let batch = batch(7, "web");
        assert!(matches!(
            directory.deliver(&batch, &batch.profiles[0], None),
            Delivery::Refused { .. }
        ));
    }
}
