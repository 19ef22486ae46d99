//! `stoke continuous`: one recording that runs until stopped and, every
//! interval, folds what it counted into one profile per service, encoded as
//! pprof and handed to the exporter (Pyroscope, a directory), which sends
//! it on without ever holding sampling back.

use std::{
    collections::BTreeMap,
    io::IsTerminal,
    time::{Instant, SystemTime},
};

use anyhow::Result;
use tracing::info;

use crate::{
    cli::{ContinuousArgs, ServiceFrom},
    export::{Batch, Exporter, ServiceProfile},
    metrics::Metrics,
    model::{FoldedStack, Profile},
    recording::{
        announce, check_sampling, raise_open_file_limit, stop_on_signals, Recording, Stopped,
    },
    write::pprof,
};

/// How long the exporter gets, after SIGTERM, to send what is queued.
const FLUSH_DEADLINE: std::time::Duration = std::time::Duration::from_secs(10);

/// Most bytes of file copies kept copied and indexed between intervals
/// (see `symbolize::prepared`): room for the largest programs a container
/// host samples in every interval (dockerd, a JVM's libjvm); the others
/// are copied again when a function of theirs not named before is
/// sampled, as the functions already named are kept without their copy.
const PREPARED_FILES_BUDGET: u64 = 24 << 20;

/// Runs until SIGINT or SIGTERM (or until every `-p` target exited),
/// exporting a profile per service every interval; the last, partial
/// interval is exported too.
pub fn run(args: &ContinuousArgs) -> Result<()> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false)
        .init();
    check_sampling(&args.sampling)?;
    let exporter = Exporter::start(&args.export)?;
    let metrics = args
        .metrics_addr
        .as_deref()
        .map(Metrics::serve)
        .transpose()?;
    if let Some(metrics) = &metrics {
        metrics.set_export(exporter.probe());
    }
    raise_open_file_limit();
    let stop = stop_on_signals()?;
    let mut recording = Recording::start(&args.sampling)?;
    recording.keep_files_prepared(PREPARED_FILES_BUDGET);
    announce(&args.sampling, None, recording.cpus());
    loop {
        let (since, from) = (Instant::now(), SystemTime::now());
        let stopped = recording.sample_until(&stop, Some(since + args.interval), None)?;
        let cut_started = Instant::now();
        let profiles = recording.cut(since)?;
        let batch = batch(&profiles, from, args.service_from);
        let services = batch.profiles.len();
        exporter.submit(batch);
        let summary = profiles
            .first()
            .map(|profile| profile.summary.clone())
            .unwrap_or_default();
        if let Some(metrics) = &metrics {
            metrics.add_interval(&summary);
            let (java, native_only) = recording.java_counts();
            metrics.set_java(java, native_only);
        }
        info!(
            "interval: {} samples ({} lost; {} exec/exit records lost), {} processes, {services} profiles, named and encoded in {:.0} ms; {}",
            summary.samples,
            summary.lost_ring_full,
            summary.lost_lifecycle_records,
            summary.processes,
            cut_started.elapsed().as_secs_f64() * 1000.0,
            exporter.stats()
        );
        // Naming a big file takes tens of MB (its copy's index) for a
        // moment; glibc keeps what is freed in its arenas (the main heap's
        // and the unwind thread's). Handing it back keeps the daemon's RSS
        // at what it holds between intervals.
        // SAFETY: malloc_trim has no preconditions.
        unsafe { libc::malloc_trim(0) };
        if stopped != Stopped::TimeUp {
            break;
        }
    }
    let stats = exporter.finish(Instant::now() + FLUSH_DEADLINE);
    info!("stopped: {stats}");
    Ok(())
}

/// One pprof per event and service of `profiles`' stacks.
fn batch(profiles: &[Profile], from: SystemTime, service_from: ServiceFrom) -> Batch {
    let mut service_profiles = Vec::new();
    for profile in profiles {
        let mut services: BTreeMap<String, Vec<&FoldedStack>> = BTreeMap::new();
        for stack in &profile.stacks {
            services
                .entry(service_name(stack, service_from))
                .or_default()
                .push(stack);
        }
        service_profiles.extend(
            services
                .into_iter()
                .map(|(service, stacks)| ServiceProfile {
                    labels: service_labels(&stacks),
                    pprof: pprof::encode(profile, stacks.iter().copied()),
                    service,
                    event: profile.event,
                }),
        );
    }
    Batch {
        from,
        until: SystemTime::now(),
        sample_rate_hz: profiles
            .first()
            .map_or(0, |profile| profile.summary.frequency_hz),
        profiles: service_profiles,
    }
}

/// The labels every stack of a service has alike (its container's, its
/// unit's), as the service's labels in the store; per-process labels (pid,
/// comm) stay on the samples inside the pprof.
fn service_labels(stacks: &[&FoldedStack]) -> Vec<(String, String)> {
    let Some((first, rest)) = stacks.split_first() else {
        return Vec::new();
    };
    first
        .labels
        .iter()
        .filter(|(key, _)| !matches!(*key, "pid" | "comm" | "exe" | "tid" | "thread" | "service"))
        .filter(|(key, value)| {
            rest.iter()
                .all(|stack| label(stack, key) == Some(value.as_ref()))
        })
        .map(|(key, value)| ((*key).to_owned(), value.to_string()))
        .collect()
}

fn label<'a>(stack: &'a FoldedStack, key: &str) -> Option<&'a str> {
    stack
        .labels
        .iter()
        .find(|(k, _)| *k == key)
        .map(|(_, value)| value.as_ref())
}

/// The service a stack's process is part of, as `from` says.
fn service_name(stack: &FoldedStack, from: ServiceFrom) -> String {
    let comm = label(stack, "comm").unwrap_or("unknown");
    if from == ServiceFrom::Workload {
        if let (Some(namespace), Some(workload)) =
            (label(stack, "namespace"), label(stack, "workload"))
        {
            return format!("{namespace}/{workload}");
        }
    }
    let named = match from {
        ServiceFrom::Auto => label(stack, "service"),
        ServiceFrom::Container | ServiceFrom::Workload => label(stack, "container_name"),
        ServiceFrom::Unit => label(stack, "systemd_unit"),
        ServiceFrom::Comm => None,
    };
    named.unwrap_or(comm).to_owned()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn stack(labels: &[(&'static str, &str)]) -> FoldedStack {
        FoldedStack {
            frames: vec![Arc::from("p [1]"), Arc::from("main")],
            context_frames: 1,
            samples: 1,
            labels: labels
                .iter()
                .map(|&(key, value)| (key, Arc::from(value)))
                .collect(),
            modules: Box::new([]),
        }
    }

    #[test]
    fn services_are_named_as_asked_and_fall_back_to_the_process_name() {
        let web = stack(&[
            ("pid", "1"),
            ("comm", "nginx"),
            ("service", "web"),
            ("container_name", "web-1"),
        ]);
        let sshd = stack(&[
            ("pid", "2"),
            ("comm", "sshd"),
            ("service", "ssh.service"),
            ("systemd_unit", "ssh.service"),
        ]);
        assert_eq!(service_name(&web, ServiceFrom::Auto), "web");
        assert_eq!(service_name(&web, ServiceFrom::Container), "web-1");
        assert_eq!(service_name(&web, ServiceFrom::Unit), "nginx");
        assert_eq!(service_name(&sshd, ServiceFrom::Unit), "ssh.service");
        assert_eq!(service_name(&sshd, ServiceFrom::Comm), "sshd");
        assert_eq!(service_name(&web, ServiceFrom::Workload), "web-1");
        let pod = stack(&[
            ("comm", "java"),
            ("service", "shop/app"),
            ("container_name", "k8s_app_checkout-7c9d8b6f5d-x2k4q_shop"),
            ("namespace", "shop"),
            ("workload", "checkout"),
        ]);
        assert_eq!(service_name(&pod, ServiceFrom::Workload), "shop/checkout");
        assert_eq!(service_name(&pod, ServiceFrom::Auto), "shop/app");
    }

    #[test]
    fn only_labels_every_stack_shares_label_the_service() {
        let a = stack(&[("pid", "1"), ("container_id", "abc"), ("pod", "x")]);
        let b = stack(&[("pid", "2"), ("container_id", "abc"), ("pod", "y")]);
        assert_eq!(
            service_labels(&[&a, &b]),
            [("container_id".to_owned(), "abc".to_owned())]
        );
        assert!(service_labels(&[]).is_empty());
    }
}
