//! Profiles as files: `DIR/SERVICE/UNTIL.pb.gz` (CPU) and
//! `DIR/SERVICE/UNTIL.EVENT.pb.gz` (the other events), each appearing whole
//! (see [`OutputFile`]), and per service and event only the newest `keep`
//! of them. A
//! service that stopped (a container removed) would keep its last `keep`
//! files forever; once its newest is older than `keep` intervals, when
//! they would all have rotated out had it run on, they are removed with its
//! directory, so that the disk taken stays bounded however many services
//! come and go. Only files named as stoke names them, and directories they
//! leave empty, are ever removed.

use std::{
    collections::HashMap,
    io::{self, Write},
    path::{Path, PathBuf},
    time::Duration,
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
    /// The batch whose end the stopped services were last looked for at.
    swept_until: u64,
}

impl Directory {
    pub fn new(root: PathBuf, keep: usize) -> Self {
        Self {
            root,
            keep,
            swept_until: 0,
        }
    }

    /// Once per batch: removes the profiles of services whose newest is
    /// older than `keep` intervals before this batch's end.
    fn sweep_stopped(&mut self, batch: &Batch) -> io::Result<()> {
        let until = unix_seconds(batch.until);
        if until == self.swept_until {
            return Ok(());
        }
        self.swept_until = until;
        let interval = batch
            .until
            .duration_since(batch.from)
            .map_or(1, |interval| interval.as_secs().max(1));
        let oldest_kept = until.saturating_sub(interval.saturating_mul(self.keep as u64));
        for entry in std::fs::read_dir(&self.root)? {
            let entry = entry?;
            // Not followed: a link someone put there leads elsewhere.
            if !entry.file_type()?.is_dir() {
                continue;
            }
            let dir = entry.path();
            let profiles = profiles_in(&dir)?;
            if !profiles.is_empty() && profiles.iter().all(|profile| profile.0 < oldest_kept) {
                remove_profiles(profiles)?;
                // Kept when something else is in it.
                let _ = std::fs::remove_dir(&dir);
            }
        }
        Ok(())
    }

    fn write(&mut self, batch: &Batch, profile: &ServiceProfile) -> io::Result<()> {
        self.sweep_stopped(batch)?;
        let dir = self.root.join(file_name(&profile.service));
        std::fs::create_dir_all(&dir)?;
        let event = match profile.event {
            Event::Cpu => String::new(),
            event => format!(".{}", event.name()),
        };
        let path = dir.join(format!("{}{event}{SUFFIX}", unix_seconds(batch.until)));
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
    let mut by_event: HashMap<Option<Event>, Vec<Profile>> = HashMap::new();
    for profile in profiles_in(dir)? {
        by_event.entry(profile.1).or_default().push(profile);
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

/// A profile stoke wrote: the UNIX seconds it ends at, its event (`None`:
/// CPU), its path.
type Profile = (u64, Option<Event>, PathBuf);

/// The profiles stoke wrote in `dir`.
fn profiles_in(dir: &Path) -> io::Result<Vec<Profile>> {
    let mut profiles = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(stem) = name.to_str().and_then(|name| name.strip_suffix(SUFFIX)) else {
            continue;
        };
        let (seconds, event) = match stem.split_once('.') {
            Some((seconds, event)) => {
                let Some(event) = Event::from_name(event).filter(|&e| e != Event::Cpu) else {
                    continue;
                };
                (seconds, Some(event))
            }
            None => (stem, None),
        };
        if seconds.is_empty() || !seconds.bytes().all(|byte| byte.is_ascii_digit()) {
            continue;
        }
        if let Ok(seconds) = seconds.parse() {
            profiles.push((seconds, event, entry.path()));
        }
    }
    Ok(profiles)
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
    use std::time::SystemTime;

    use super::*;

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

    #[test]
    fn rotation_keeps_exactly_the_newest_and_only_touches_profiles() {
        let root = tempfile::tempdir().unwrap();
        let mut directory = Directory::new(root.path().to_owned(), 3);
        let service_dir = root.path().join("web");
        std::fs::create_dir(&service_dir).unwrap();
        for foreign in ["notes.txt", "12.pb.gz.bak", "x1.pb.gz"] {
            std::fs::write(service_dir.join(foreign), "").unwrap();
        }
        // Out of order, as a clock step could make them.
        for until in [
            1_700_000_002,
            1_700_000_001,
            1_700_000_005,
            1_700_000_003,
            1_700_000_004,
        ] {
            let batch = batch(until, "web");
            assert!(matches!(
                directory.deliver(&batch, &batch.profiles[0], None),
                Delivery::Delivered
            ));
        }
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
    fn services_that_stopped_are_removed_once_their_files_would_have_rotated_out() {
        let root = tempfile::tempdir().unwrap();
        let mut directory = Directory::new(root.path().to_owned(), 2);
        let deliver = |directory: &mut Directory, until: u64, service: &str| {
            let mut batch = batch(until, service);
            batch.from = SystemTime::UNIX_EPOCH + Duration::from_secs(until - 10);
            assert!(matches!(
                directory.deliver(&batch, &batch.profiles[0], None),
                Delivery::Delivered
            ));
        };
        for until in [100, 110] {
            deliver(&mut directory, until, "gone");
            deliver(&mut directory, until, "other");
        }
        std::fs::write(root.path().join("other").join("notes.txt"), "").unwrap();
        std::fs::create_dir(root.path().join("empty")).unwrap();
        for until in [120, 130] {
            deliver(&mut directory, until, "web");
        }
        // At 130, 110 is two intervals back: still within what --keep 2 keeps.
        assert_eq!(names(root.path()), ["empty", "gone", "other", "web"]);
        deliver(&mut directory, 140, "web");
        assert_eq!(names(root.path()), ["empty", "other", "web"]);
        assert_eq!(names(&root.path().join("other")), ["notes.txt"]);
    }

    #[test]
    fn each_event_has_its_files_and_its_rotation() {
        let root = tempfile::tempdir().unwrap();
        let mut directory = Directory::new(root.path().to_owned(), 1);
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
        let mut directory = Directory::new(root.path().to_owned(), 1);
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
        let mut directory = Directory::new(file, 1);
        let batch = batch(7, "web");
        assert!(matches!(
            directory.deliver(&batch, &batch.profiles[0], None),
            Delivery::Refused { .. }
        ));
    }
}
