//! Containers starting and stopping during the soak: every few seconds a
//! docker container runs a short burst of work and is removed, so that
//! stoke meets new cgroups and container identities and must evict them.
//!
//! The image and containers come from the end-to-end tests' docker helpers,
//! which panic on failure: here a failure is caught and reported, since a
//! host without docker can still soak stoke under process churn.

use std::{
    any::Any,
    panic::{self, AssertUnwindSafe},
    path::Path,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    thread::{self, JoinHandle},
    time::{Duration, Instant},
};

use stoke_tests::docker::{Container, Engine, Image, Rootfs};

/// Where the workload lives in the image.
const WORKLOAD: &str = "/app/busy_other";

/// Seconds of CPU each container burns: long enough to be running still
/// when `docker inspect` asks for its pid after it printed `ready`.
const WORK_SECONDS: &str = "1.5";

/// How long a container is left before `docker rm -f`: its work is done.
const LIFETIME: Duration = Duration::from_secs(3);

/// The containers run while the churn goes on.
pub struct ContainerChurn {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Churned>,
}

/// What the churn did.
#[derive(Debug, Default)]
pub struct Churned {
    /// Containers started (each then removed).
    pub started: u32,
    /// Containers that failed to start.
    pub failed: u32,
    pub first_failure: Option<String>,
}

/// Imports an image holding `busy_other` (the tests' CPU burner), staged
/// in `dir` (which must not exist); the reason if docker cannot be used.
pub fn image(busy_other: &Path, dir: &Path) -> Result<Image, String> {
    caught(|| {
        let mut rootfs = Rootfs::new(dir);
        rootfs.add_program(busy_other, WORKLOAD);
        Image::import(Engine::Docker, "soak", &rootfs)
    })
}

impl ContainerChurn {
    /// Starts a container of `image` every `period` until stopped; the
    /// image is removed at the end.
    pub fn start(image: Image, period: Duration) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = Arc::clone(&stop);
        let thread = thread::spawn(move || churn(&image, period, &stopping));
        Self { stop, thread }
    }

    /// Stops starting containers, removes the last one, and says what ran.
    pub fn stop(self) -> Churned {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or_else(|payload| Churned {
            failed: 1,
            first_failure: Some(message(payload.as_ref())),
            ..Churned::default()
        })
    }
}

fn churn(image: &Image, period: Duration, stop: &AtomicBool) -> Churned {
    let mut churned = Churned::default();
    while !stop.load(Ordering::Relaxed) {
        let started = Instant::now();
        match caught(|| Container::run("soak", image, &[WORKLOAD, WORK_SECONDS])) {
            Ok(container) => {
                churned.started += 1;
                sleep_until(started + LIFETIME, stop);
                // Dropping it removes it (docker rm -f).
                drop(container);
            }
            Err(failure) => {
                churned.failed += 1;
                churned.first_failure.get_or_insert(failure);
            }
        }
        sleep_until(started + period, stop);
    }
    churned
}

/// Sleeps until `deadline`, or until `stop` is set.
fn sleep_until(deadline: Instant, stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        thread::sleep(left.min(Duration::from_millis(100)));
    }
}

/// Runs `f`, turning a panic of the docker helpers into its message.
fn caught<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    panic::catch_unwind(AssertUnwindSafe(f)).map_err(|payload| message(payload.as_ref()))
}

fn message(payload: &(dyn Any + Send)) -> String {
    let text = payload
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| payload.downcast_ref::<&str>().copied())
        .unwrap_or("a panic without a message");
    // The first line says what failed; the rest is the tool's output.
    text.lines().next().unwrap_or(text).to_owned()
}
