//! The outputs of one recording: every `-o`, each in its format, for each
//! recorded event (named apart by [`event::output_path`] when there are
//! several), checked and opened before the recording starts, written after
//! it.

use std::{collections::HashSet, io::Write, path::PathBuf};

use anyhow::{bail, Context, Result};

use super::{output_file::Destination, write_profile, Format, GraphOptions, OutputFile};
use crate::{
    event::{self, Event},
    model::Profile,
};

/// The outputs asked for, each with its format and event: not opened yet.
#[derive(Debug)]
pub struct OutputPlan(Vec<(PathBuf, Format, Event)>);

/// The outputs, open under no name until written whole.
pub struct Outputs(Vec<(PathBuf, Format, Event, OutputFile)>);

impl OutputPlan {
    /// The format of each of `paths`: `flag` (`--format`) if given, which
    /// only a single output may have, else the one its extension names;
    /// each path once per event of `events`.
    pub fn new(paths: &[PathBuf], flag: Option<Format>, events: &[Event]) -> Result<Self> {
        if flag.is_some() && paths.len() > 1 {
            bail!("--format applies to a single -o: name each of several outputs by its extension");
        }
        let mut seen = HashSet::new();
        let mut plan = Vec::with_capacity(paths.len());
        for path in paths {
            let format = Format::for_output(path, flag)?;
            let destination = Destination::of(path)
                .with_context(|| format!("cannot write the profile to {}", path.display()))?;
            if !destination.is_file() && events.len() > 1 {
                bail!(
                    "-o {} takes one profile, and {} events are recorded: name a file, which gets a profile per event",
                    path.display(),
                    events.len()
                );
            }
            for &event in events {
                let path = event::output_path(path, event, events.len() > 1);
                if !seen.insert(path.clone()) {
                    bail!("-o {} is given twice", path.display());
                }
                plan.push((path, format, event));
            }
        }
        Ok(Self(plan))
    }

    /// The format of each output, in the order given.
    pub fn formats(&self) -> impl Iterator<Item = Format> + '_ {
        self.0.iter().map(|(_, format, _)| *format)
    }

    /// Opens every output, so that a bad path fails before the recording,
    /// not after.
    pub fn create(self) -> Result<Outputs> {
        let mut outputs = Vec::with_capacity(self.0.len());
        for (path, format, event) in self.0 {
            let file = OutputFile::create(&path, 0o644)
                .with_context(|| format!("cannot write the profile to {}", path.display()))?;
            outputs.push((path, format, event, file));
        }
        Ok(Outputs(outputs))
    }
}

impl Outputs {
    /// Writes to every output the profile of its event (one of
    /// `profiles`), flame graphs drawn as `graph` says, each named only
    /// once whole.
    pub fn write(self, profiles: &[Profile], graph: &GraphOptions) -> Result<()> {
        self.write_with(|format, event, out| {
            let profile = profiles
                .iter()
                .find(|profile| profile.event == event)
                .with_context(|| format!("no {} profile", event.name()))?;
            write_profile(profile, format, graph, out)
        })
    }

    /// Writes every output with `write`, given its format and event, each
    /// named only once whole.
    pub fn write_with(
        self,
        write: impl Fn(Format, Event, &mut dyn Write) -> Result<()>,
    ) -> Result<()> {
        for (path, format, event, mut file) in self.0 {
            write(format, event, file.file())
                .and_then(|()| Ok(file.commit()?))
                .with_context(|| format!("writing the profile to {}", path.display()))?;
        }
        Ok(())
    }

    /// The outputs' paths, comma-separated, for telling the user where the
    /// profile went.
    pub fn names(&self) -> String {
        let names: Vec<String> = self
            .0
            .iter()
            .map(
                |(path, ..)| match super::output_file::is_standard_output(path) {
                    true => "standard output".to_owned(),
                    false => path.display().to_string(),
                },
            )
            .collect();
        names.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(names: &[&str]) -> Vec<PathBuf> {
        names.iter().map(PathBuf::from).collect()
    }

    #[test]
    fn each_output_takes_its_extensions_format() {
        let plan =
            OutputPlan::new(&paths(&["a.svg", "b.pb.gz", "c.json"]), None, &[Event::Cpu]).unwrap();
        let formats: Vec<Format> = plan.0.iter().map(|(_, format, _)| *format).collect();
        assert_eq!(formats, [Format::Svg, Format::Pprof, Format::Json]);
    }

    #[test]
    fn format_flag_needs_a_single_output_and_paths_are_distinct() {
        for (names, flag, expected) in [
            (&["a", "b"][..], Some(Format::Txt), "--format"),
            (&["a.svg", "a.svg"][..], None, "twice"),
            (&["a.svg", "b"][..], None, "cannot tell"),
        ] {
            let error = OutputPlan::new(&paths(names), flag, &[Event::Cpu])
                .unwrap_err()
                .to_string();
            assert!(error.contains(expected) && !error.contains('\n'), "{error}");
        }
        assert!(OutputPlan::new(&paths(&["a"]), Some(Format::Txt), &[Event::Cpu]).is_ok());
    }

    #[test]
    fn several_events_give_an_output_each() {
        let plan = OutputPlan::new(
            &paths(&["p.svg", "q.pb.gz"]),
            None,
            &[Event::Cpu, Event::Offcpu],
        )
        .unwrap();
        let names: Vec<String> = plan
            .0
            .iter()
            .map(|(path, _, event)| format!("{} {}", path.display(), event.name()))
            .collect();
        assert_eq!(
            names,
            [
                "p.cpu.svg cpu",
                "p.offcpu.svg offcpu",
                "q.cpu.pb.gz cpu",
                "q.offcpu.pb.gz offcpu"
            ]
        );
    }

    #[test]
    fn every_output_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let names = [dir.path().join("p.folded"), dir.path().join("p.pb.gz")];
        let outputs = OutputPlan::new(&names, None, &[Event::Cpu])
            .unwrap()
            .create()
            .unwrap();
        assert_eq!(
            outputs.names(),
            format!("{}, {}", names[0].display(), names[1].display())
        );
        outputs
            .write(
                &[super::super::tests::profile(&[("app;main", 2)])],
                &GraphOptions::default(),
            )
            .unwrap();
        assert_eq!(std::fs::read_to_string(&names[0]).unwrap(), "app;main 2\n");
        assert_eq!(&std::fs::read(&names[1]).unwrap()[..2], [0x1f, 0x8b]);
    }
}
