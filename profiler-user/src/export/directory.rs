//! Profiles as files: `DIR/SERVICE/UNTIL.pb.gz` for cpu and
//! `DIR/SERVICE/UNTIL.EVENT.pb.gz` for the other events, each appearing
//! whole (see [`OutputFile`]), and per service and event only the newest
//! `keep` of them. Only files named as stoke names them are ever removed.

use std::{
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
}

impl Directory {
    pub fn new(root: PathBuf, keep: usize) -> Self {
        Self { root, keep }
    }

    fn write(&self, batch: &Batch, profile: &ServiceProfile) -> io::Result<()> {
        let dir = self.root.join(file_name(&profile.service));
        std::fs::create_dir_all(&dir)?;
        let tag = event_tag(profile.event);
        let path = dir.join(format!("{}{tag}{SUFFIX}", unix_seconds(batch.until)));
        let mut file = OutputFile::create(&path, 0o644)?;
        file.file().write_all(&profile.pprof)?;
        file.commit()?;
        rotate(&dir, &tag, self.keep)
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

/// What goes between a file's time and its suffix: nothing for cpu (as
/// before there were other events), `.EVENT` for the others.
fn event_tag(event: Event) -> String {
    match event {
        Event::Cpu => String::new(),
        event => format!(".{event}"),
    }
}

/// Removes the oldest profiles of one event (named `UNTIL{tag}.pb.gz`) in
/// `dir` beyond the newest `keep`.
fn rotate(dir: &Path, tag: &str, keep: usize) -> io::Result<()> {
    let mut profiles: Vec<(u64, PathBuf)> = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let seconds = name
            .to_str()
            .and_then(|name| name.strip_suffix(SUFFIX))
            .and_then(|name| name.strip_suffix(tag))
            .filter(|stem| !stem.is_empty() && stem.bytes().all(|byte| byte.is_ascii_digit()))
            .and_then(|stem| stem.parse().ok());
        if let Some(seconds) = seconds {
            profiles.push((seconds, entry.path()));
        }
    }
    if profiles.len() <= keep {
        return Ok(());
    }
    profiles.sort_unstable();
    let excess = profiles.len() - keep;
    for (_, path) in profiles.drain(..excess) {
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
        batch_of(until, service, Event::Cpu)
    }

    fn batch_of(until: u64, service: &str, event: Event) -> Batch {
        Batch {
            from: SystemTime::UNIX_EPOCH,
            until: SystemTime::UNIX_EPOCH + Duration::from_secs(until),
            sample_rate_hz: 99,
            profiles: vec![ServiceProfile {
                service: service.to_owned(),
                event,
                labels: Vec::new(),
                pprof: format!("profile {until}").into_bytes(),
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
    fn each_event_has_its_files_and_its_rotation() {
        let root = tempfile::tempdir().unwrap();
        let mut directory = Directory::new(root.path().to_owned(), 1);
        for until in [1, 2] {
            for event in [Event::Cpu, Event::Offcpu] {
                let batch = batch_of(until, "web", event);
                assert!(matches!(
                    directory.deliver(&batch, &batch.profiles[0], None),
                    Delivery::Delivered
                ));
            }
        }
        assert_eq!(
            names(&root.path().join("web")),
            ["2.offcpu.pb.gz", "2.pb.gz"]
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
