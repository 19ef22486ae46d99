//! Who a process is beyond its pid: the container it runs in (runtime, id,
//! name, image, Kubernetes pod) or the systemd unit of a host service.
//! Read once per process when the registry first sees it, and cached per
//! cgroup: the processes of one container share one [`Identity`].

use std::sync::{Arc, OnceLock};

use super::{
    cgroup::{self, Runtime, MAX_CGROUP_FILE},
    runtime_metadata::{self, ContainerMetadata},
};
use crate::{procfs::read_bounded, rootfs::Root};
use foldhash::HashMap;

/// Most cgroups remembered: beyond it the cache starts again, so that a
/// host creating containers for days keeps bounded memory.
const MAX_CGROUPS: usize = 16 * 1024;

/// This host's name, read once: that of the UTS namespace stoke runs in,
/// which must be the host's (in a container: `--uts host` for docker,
/// `hostNetwork` in Kubernetes, as deploy/ does), or every host is named
/// after its profiler's container.
pub fn host_name() -> Arc<str> {
    static NAME: OnceLock<Arc<str>> = OnceLock::new();
    NAME.get_or_init(|| {
        let mut name = [0u8; 256];
        // SAFETY: gethostname writes at most len bytes into the buffer.
        let ok = unsafe { libc::gethostname(name.as_mut_ptr().cast(), name.len()) } == 0;
        let end = name
            .iter()
            .position(|&byte| byte == 0)
            .unwrap_or(name.len());
        if ok {
            String::from_utf8_lossy(&name[..end]).into()
        } else {
            "unknown".into()
        }
    })
    .clone()
}

/// Where a process runs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Identity {
    /// The container, for a containerized process.
    pub container: Option<Container>,
    /// The systemd unit, for a host service.
    pub unit: Option<Arc<str>>,
}

/// A container a process runs in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Container {
    pub runtime: Runtime,
    /// The runtime's id (for nspawn, the machine name).
    pub id: Arc<str>,
    /// The name its runtime gives it.
    pub name: Option<Arc<str>>,
    /// The image, as it was named when the container was created.
    pub image: Option<Arc<str>>,
    pub pod: Option<Pod>,
}

/// The Kubernetes pod a container belongs to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pod {
    pub name: Arc<str>,
    pub namespace: Arc<str>,
    /// The container's name in the pod.
    pub container: Option<Arc<str>>,
}

impl Container {
    /// The id as `docker ps` shows it: its first 12 digits.
    pub fn short_id(&self) -> &str {
        self.id.get(..12).unwrap_or(&self.id)
    }

    /// What names the container for people: its name, else its short id.
    pub fn display_name(&self) -> &str {
        self.name.as_deref().unwrap_or_else(|| self.short_id())
    }
}

impl Identity {
    /// The service a process of this identity is part of, if it is more
    /// than its own name: the Kubernetes namespace and container, the
    /// container's name, or the systemd unit.
    pub fn service(&self) -> Option<String> {
        match &self.container {
            Some(Container {
                pod: Some(pod),
                name,
                ..
            }) => {
                let container = pod.container.as_deref().or(name.as_deref());
                Some(format!(
                    "{}/{}",
                    pod.namespace,
                    container.unwrap_or(&pod.name)
                ))
            }
            Some(container) => Some(container.display_name().to_owned()),
            None => self.unit.as_deref().map(str::to_owned),
        }
    }

    /// The labels that say where a process runs, as (key, value).
    pub fn labels(&self) -> Vec<(&'static str, Arc<str>)> {
        let mut labels = Vec::new();
        if let Some(container) = &self.container {
            labels.push(("container_runtime", Arc::from(container.runtime.name())));
            labels.push(("container_id", container.id.clone()));
            if let Some(name) = &container.name {
                labels.push(("container_name", name.clone()));
            }
            if let Some(image) = &container.image {
                labels.push(("container_image", image.clone()));
            }
            if let Some(pod) = &container.pod {
                labels.push(("pod", pod.name.clone()));
                labels.push(("workload", Arc::from(workload_of(&pod.name))));
                labels.push(("namespace", pod.namespace.clone()));
                if let Some(name) = &pod.container {
                    labels.push(("pod_container", name.clone()));
                }
            }
        }
        if let Some(unit) = &self.unit {
            labels.push(("systemd_unit", unit.clone()));
        }
        labels
    }
}

/// The alphabet of the random and hashed parts Kubernetes' controllers
/// put in the names they give (`rand.String`, `rand.SafeEncodeString`: no
/// vowels, no digits that look like letters).
const KUBERNETES_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// The workload (Deployment, StatefulSet, DaemonSet, Job, CronJob) a pod
/// belongs to, from the name its controller gave it: `NAME-HASH-XXXXX` for a
/// Deployment's pods, `NAME-XXXXX` for a DaemonSet's or Job's,
/// `NAME-TIME-XXXXX` for a CronJob's, `NAME-N` for a StatefulSet's; any
/// other name is its own. The pod's owner is in the Kubernetes API only,
/// not in what the runtime and kubelet leave on the host, so the name is
/// read as the controllers write it, as the Pyroscope and Parca agents'
/// "workload" does without API access.
pub fn workload_of(pod: &str) -> &str {
    fn strip(name: &str, part: impl Fn(&[u8]) -> bool) -> Option<&str> {
        let (head, tail) = name.rsplit_once('-')?;
        (!head.is_empty() && part(tail.as_bytes())).then_some(head)
    }
    let encoded = |part: &[u8]| part.iter().all(|byte| KUBERNETES_ALPHABET.contains(byte));
    let number = |part: &[u8]| !part.is_empty() && part.iter().all(u8::is_ascii_digit);
    match strip(pod, |part| part.len() == 5 && encoded(part)) {
        // A ReplicaSet's pod-template hash (a 32-bit hash's decimal digits,
        // encoded) or a CronJob's scheduled minute, then the pod's suffix.
        Some(head) => strip(head, |part| (6..=10).contains(&part.len()) && encoded(part))
            .or_else(|| strip(head, number))
            .unwrap_or(head),
        None => strip(pod, number).unwrap_or(pod),
    }
}

/// The identities of the processes seen, by cgroup.
#[derive(Debug, Default)]
pub struct Identities {
    by_cgroup: HashMap<Box<str>, Arc<Identity>>,
    /// The main cgroup path of each membership seen, by the key BPF gives
    /// it, so that the next processes in the same cgroups cost no read of
    /// `/proc`.
    paths: HashMap<u64, Membership>,
    /// The host's root, where runtimes keep their metadata; `None` until
    /// first needed, or if it cannot be opened.
    host: Option<Option<Root>>,
    /// Shared by every process outside any container or unit.
    none: Arc<Identity>,
}

/// A membership's main cgroup path (`None`: the root, or no path that
/// tells anything), as read from `/proc/PID/cgroup`.
#[derive(Debug)]
struct Membership {
    path: Option<Box<str>>,
    /// Whether two processes with this key read the same path. The key
    /// is read when a process is first sampled, its cgroup file later: a
    /// process moved to other cgroups in between (a container's first
    /// process, sampled just before its runtime moves it) would have its
    /// former cgroups' key name its new cgroup. One such read is not
    /// trusted for the processes after it.
    confirmed: bool,
}

impl Identities {
    /// Where process `pid` runs, given the key of its cgroups if the kernel
    /// said; a process gone already runs nowhere.
    pub fn of(&mut self, pid: u32, cgroup_key: Option<u64>) -> Arc<Identity> {
        let seen = cgroup_key.and_then(|key| self.paths.get(&key));
        if let Some(Membership {
            path,
            confirmed: true,
        }) = seen
        {
            match path {
                None => return self.none.clone(),
                Some(path) => {
                    if let Some(identity) = self.by_cgroup.get(path) {
                        return identity.clone();
                    }
                }
            }
        }
        let Ok((text, _)) = read_bounded(format!("/proc/{pid}/cgroup"), MAX_CGROUP_FILE) else {
            return self.none.clone();
        };
        let text = String::from_utf8_lossy(&text);
        let path = cgroup::main_path(&text);
        if let Some(key) = cgroup_key {
            let confirmed = seen.is_some_and(|seen| seen.path.as_deref() == path);
            if self.paths.len() >= MAX_CGROUPS {
                self.paths.clear();
            }
            let path = path.map(Box::from);
            self.paths.insert(key, Membership { path, confirmed });
        }
        let Some(path) = path else {
            return self.none.clone();
        };
        if let Some(identity) = self.by_cgroup.get(path) {
            return identity.clone();
        }
        let identity = Arc::new(self.read(path));
        if self.by_cgroup.len() >= MAX_CGROUPS {
            self.by_cgroup.clear();
        }
        self.by_cgroup.insert(path.into(), identity.clone());
        identity
    }

    /// Forgets the cgroups no registered process is in any more.
    pub fn forget_unused(&mut self) {
        self.by_cgroup
            .retain(|_, identity| Arc::strong_count(identity) > 1);
        let by_cgroup = &self.by_cgroup;
        self.paths.retain(|_, seen| {
            seen.path
                .as_ref()
                .is_none_or(|path| by_cgroup.contains_key(path))
        });
    }

    fn read(&mut self, path: &str) -> Identity {
        let placement = cgroup::placement(path);
        let container = placement.container.map(|(runtime, id)| {
            let host = self.host.get_or_insert_with(|| Root::host().ok());
            let metadata = match host {
                Some(root) => {
                    runtime_metadata::read(root, runtime, &id, placement.pod_uid.as_deref())
                }
                None => ContainerMetadata::default(),
            };
            Container {
                runtime,
                id: id.into(),
                name: metadata.name.map(Arc::from),
                image: metadata.image.map(Arc::from),
                pod: metadata.pod.map(|pod| Pod {
                    name: pod.name.into(),
                    namespace: pod.namespace.into(),
                    container: pod.container.map(Arc::from),
                }),
            }
        });
        Identity {
            container,
            unit: placement.unit.map(Arc::from),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workloads_are_named_as_their_controllers_name_their_pods() {
        for (pod, workload) in [
            ("checkout-7c9d8b6f5d-x2k4q", "checkout"),
            ("checkout-api-5d7b9c4f8-7hzvl", "checkout-api"),
            ("node-exporter-4fz9w", "node-exporter"),
            ("postgres-0", "postgres"),
            ("kafka-broker-12", "kafka-broker"),
            ("backup-28391234-bq7tx", "backup"),
            ("nginx", "nginx"),
            ("my-app", "my-app"),
            ("a-b-c-aeiou", "a-b-c-aeiou"),
            ("-0", "-0"),
        ] {
            assert_eq!(workload_of(pod), workload, "{pod}");
        }
    }

    fn container(name: Option<&str>, pod: Option<Pod>) -> Identity {
        Identity {
            container: Some(Container {
                runtime: Runtime::Docker,
                id: "d80b22a3152aaebba27e0a0a92cc57ab3ca544936ebc2b94b36361b9a0e3cf02".into(),
                name: name.map(Arc::from),
                image: None,
                pod,
            }),
            unit: None,
        }
    }

    #[test]
    fn services_are_named_by_pod_container_or_unit() {
        let pod = Pod {
            name: "api-7d9f-x2x".into(),
            namespace: "prod".into(),
            container: Some("api".into()),
        };
        assert_eq!(
            container(Some("k8s_api"), Some(pod)).service().as_deref(),
            Some("prod/api")
        );
        assert_eq!(
            container(Some("web"), None).service().as_deref(),
            Some("web")
        );
        assert_eq!(
            container(None, None).service().as_deref(),
            Some("d80b22a3152a")
        );
        let unit = Identity {
            container: None,
            unit: Some("ssh.service".into()),
        };
        assert_eq!(unit.service().as_deref(), Some("ssh.service"));
        assert_eq!(Identity::default().service(), None);
    }

    #[test]
    fn this_process_and_a_gone_one_have_identities() {
        let mut identities = Identities::default();
        // Whatever runs this test, reading its identity works, and twice
        // gives the cached one.
        let own = identities.of(std::process::id(), None);
        assert!(Arc::ptr_eq(&own, &identities.of(std::process::id(), None)));
        assert_eq!(*identities.of(u32::MAX, None), Identity::default());
    }

    #[test]
    fn a_membership_read_twice_spares_the_next_processes_reading_theirs() {
        let mut identities = Identities::default();
        let own = identities.of(std::process::id(), Some(7));
        // A gone process has no cgroup file: with the key of cgroups
        // read once, it runs nowhere (that read is not trusted yet)...
        assert_eq!(*identities.of(u32::MAX, Some(7)), Identity::default());
        // ... and once a second process with that key read the same
        // path, it gets that cgroup's identity all the same.
        assert!(Arc::ptr_eq(
            &own,
            &identities.of(std::process::id(), Some(7))
        ));
        assert!(Arc::ptr_eq(&own, &identities.of(u32::MAX, Some(7))));
        assert_eq!(*identities.of(u32::MAX, Some(8)), Identity::default());
    }
}
