//! Where a process runs, told by its cgroup path: the container runtime and
//! container id, the Kubernetes pod, the systemd unit of a host service.
//!
//! Every runtime names the cgroup of a container after the container's id,
//! on cgroup v1 and v2 alike, with systemd's or its own (cgroupfs) naming:
//!
//! | runtime | systemd driver | cgroupfs driver |
//! | --- | --- | --- |
//! | docker | `system.slice/docker-ID.scope` | `docker/ID` |
//! | containerd (CRI) | `kubepods.slice/…-podUID.slice/cri-containerd-ID.scope` | `kubepods/…/podUID/ID` |
//! | cri-o | `kubepods.slice/…-podUID.slice/crio-ID.scope` | `kubepods/…/podUID/ID` |
//! | podman | `machine.slice/libpod-ID.scope` | `libpod_parent/libpod-ID` |
//! | systemd-nspawn | `machine.slice/machine-NAME.scope` | |
//!
//! The path is the process's own business only in so far as a process may
//! move itself into a cgroup it can write to: the result names where the
//! process runs for the profile's labels, never a path stoke opens (ids are
//! checked to be hexadecimal before they are).

/// Container engines told apart by their cgroup names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Runtime {
    Docker,
    Containerd,
    CriO,
    Podman,
    Nspawn,
    /// A Kubernetes container whose cgroup (cgroupfs driver) does not say
    /// which CRI runtime runs it.
    Cri,
}

impl Runtime {
    /// The runtime's name, for labels.
    pub fn name(self) -> &'static str {
        match self {
            Self::Docker => "docker",
            Self::Containerd => "containerd",
            Self::CriO => "cri-o",
            Self::Podman => "podman",
            Self::Nspawn => "systemd-nspawn",
            Self::Cri => "cri",
        }
    }
}

/// What a cgroup path says of where its processes run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Placement {
    /// The container, by runtime and id (a machine name for nspawn).
    pub container: Option<(Runtime, String)>,
    /// The Kubernetes pod's UID, for a pod's container.
    pub pod_uid: Option<String>,
    /// The systemd service a host process runs in.
    pub unit: Option<String>,
}

/// Most bytes of `/proc/PID/cgroup` read: one line per v1 hierarchy (a
/// dozen) of paths of at most a few hundred bytes.
pub const MAX_CGROUP_FILE: u64 = 64 * 1024;

/// The path of the cgroup that says the most, from a `/proc/PID/cgroup`
/// text: the v2 (unified) path, else systemd's v1 hierarchy, else the first
/// v1 hierarchy not at the root.
pub fn main_path(text: &str) -> Option<&str> {
    let mut systemd = None;
    let mut other = None;
    for (id, controllers, path) in entries(text) {
        if path == "/" || path.is_empty() {
            continue;
        }
        if id == "0" && controllers.is_empty() {
            return Some(path);
        }
        if controllers == "name=systemd" {
            systemd = Some(path);
        } else if other.is_none() {
            other = Some(path);
        }
    }
    systemd.or(other)
}

/// The (hierarchy id, controllers, path) of each line of a
/// `/proc/PID/cgroup` text.
pub fn entries(text: &str) -> impl Iterator<Item = (&str, &str, &str)> {
    text.lines().filter_map(|line| {
        let mut fields = line.splitn(3, ':');
        Some((fields.next()?, fields.next()?, fields.next()?))
    })
}

/// Where processes of the cgroup at `path` run.
pub fn placement(path: &str) -> Placement {
    let components: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
    let mut placement = Placement {
        pod_uid: components.iter().find_map(|c| pod_uid(c)),
        ..Placement::default()
    };
    for (index, component) in components.iter().enumerate().rev() {
        let parent = index.checked_sub(1).map(|parent| components[parent]);
        if let Some(container) = container(component, parent, placement.pod_uid.is_some()) {
            placement.container = Some(container);
            return placement;
        }
    }
    placement.unit = components
        .iter()
        .rev()
        .find(|c| c.ends_with(".service"))
        .map(|unit| unescape(unit));
    placement
}

/// The container a cgroup path component names, given its parent's name
/// and whether the path is a Kubernetes pod's.
fn container(component: &str, parent: Option<&str>, in_pod: bool) -> Option<(Runtime, String)> {
    let scoped = |prefix: &str| {
        component
            .strip_prefix(prefix)
            .map(|rest| rest.strip_suffix(".scope").unwrap_or(rest))
            .filter(|id| is_container_id(id))
    };
    for (prefix, runtime) in [
        ("docker-", Runtime::Docker),
        ("cri-containerd-", Runtime::Containerd),
        ("crio-", Runtime::CriO),
        ("libpod-", Runtime::Podman),
    ] {
        if let Some(id) = scoped(prefix) {
            return Some((runtime, id.to_owned()));
        }
    }
    if is_container_id(component) {
        let runtime = match parent {
            Some("docker") => Runtime::Docker,
            _ if in_pod => Runtime::Cri,
            _ => return None,
        };
        return Some((runtime, component.to_owned()));
    }
    let machine = unescape(component.strip_prefix("machine-")?.strip_suffix(".scope")?);
    // Podman registers its containers as machines too, by id.
    (parent == Some("machine.slice") && !machine.starts_with("libpod-"))
        .then_some((Runtime::Nspawn, machine))
}

/// The pod UID of a Kubernetes pod's cgroup component: `pod<UID>`
/// (cgroupfs) or `kubepods-<class>-pod<UID with _ for ->.slice` (systemd).
fn pod_uid(component: &str) -> Option<String> {
    let name = component.strip_suffix(".slice").unwrap_or(component);
    let uid = &name[name.rfind("pod")? + 3..];
    let uid = uid.replace('_', "-");
    let is_uid = uid.len() == 36 && uid.chars().all(|c| c.is_ascii_hexdigit() || c == '-');
    (is_uid && (name.starts_with("pod") || name.starts_with("kubepods"))).then_some(uid)
}

/// Container ids are 64 hexadecimal digits in every runtime here.
pub fn is_container_id(text: &str) -> bool {
    text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit())
}

/// systemd escapes bytes in unit names as `\xNN` (a `-` in a machine name
/// is `\x2d`).
fn unescape(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut rest = name;
    while let Some(at) = rest.find("\\x") {
        out.push_str(&rest[..at]);
        let hex = rest.get(at + 2..at + 4);
        match hex.and_then(|hex| u8::from_str_radix(hex, 16).ok()) {
            Some(byte) if byte.is_ascii() => {
                out.push(char::from(byte));
                rest = &rest[at + 4..];
            }
            _ => {
                out.push_str("\\x");
                rest = &rest[at + 2..];
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "d80b22a3152aaebba27e0a0a92cc57ab3ca544936ebc2b94b36361b9a0e3cf02";
    const POD: &str = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0";

    fn container_of(path: &str) -> Option<(Runtime, String)> {
        placement(path).container
    }

    #[test]
    fn the_unified_path_wins_then_systemds_then_any() {
        let v1 = format!("9:name=systemd:/docker/{ID}\n4:memory:/other\n0::/\n");
        assert_eq!(main_path(&v1), Some(format!("/docker/{ID}").as_str()));
        let v2 = format!("0::/system.slice/docker-{ID}.scope\n");
        assert_eq!(
            main_path(&v2),
            Some(format!("/system.slice/docker-{ID}.scope").as_str())
        );
        assert_eq!(main_path("4:memory:/a\n3:cpu:/b\n0::/\n"), Some("/a"));
        assert_eq!(main_path("0::/\n1:cpu:/\n"), None);
        assert_eq!(main_path("garbage\n\n::\n"), None);
    }

    #[test]
    fn every_runtime_is_told_by_its_cgroup_names() {
        let pod_systemd = POD.replace('-', "_");
        for (path, runtime) in [
            (format!("/docker/{ID}"), Runtime::Docker),
            (format!("/system.slice/docker-{ID}.scope"), Runtime::Docker),
            (
                format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{pod_systemd}.slice/cri-containerd-{ID}.scope"),
                Runtime::Containerd,
            ),
            (
                format!("/kubepods.slice/kubepods-pod{pod_systemd}.slice/crio-{ID}.scope"),
                Runtime::CriO,
            ),
            (format!("/kubepods/besteffort/pod{POD}/{ID}"), Runtime::Cri),
            (format!("/machine.slice/libpod-{ID}.scope/container"), Runtime::Podman),
            (format!("/libpod_parent/libpod-{ID}"), Runtime::Podman),
        ] {
            assert_eq!(container_of(&path), Some((runtime, ID.to_owned())), "{path}");
        }
        assert_eq!(
            container_of("/machine.slice/machine-my\\x2dbox.scope"),
            Some((Runtime::Nspawn, "my-box".to_owned()))
        );
    }

    #[test]
    fn pods_are_told_by_their_uid() {
        let systemd = format!(
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice/cri-containerd-{ID}.scope",
            POD.replace('-', "_")
        );
        assert_eq!(placement(&systemd).pod_uid.as_deref(), Some(POD));
        let cgroupfs = format!("/kubepods/burstable/pod{POD}/{ID}");
        assert_eq!(placement(&cgroupfs).pod_uid.as_deref(), Some(POD));
        assert_eq!(placement(&format!("/docker/{ID}")).pod_uid, None);
    }

    #[test]
    fn host_services_are_told_by_their_unit() {
        let sshd = placement("/system.slice/ssh.service");
        assert_eq!(sshd.unit.as_deref(), Some("ssh.service"));
        assert_eq!(sshd.container, None);
        let user = placement(
            "/user.slice/user-1000.slice/user@1000.service/app.slice/gnome\\x2dshell.service",
        );
        assert_eq!(user.unit.as_deref(), Some("gnome-shell.service"));
        assert_eq!(
            placement("/user.slice/user-1000.slice/session-2.scope").unit,
            None
        );
    }

    #[test]
    fn what_is_no_container_id_names_no_container() {
        for path in [
            "/docker/not-an-id",
            &format!("/docker/{}", &ID[1..]),
            &format!("/system.slice/docker-{ID}x.scope"),
            &format!("/somewhere/{ID}"),
            "/system.slice/crio-conmon-abc.scope",
            "/machine.slice/machine-libpod\\x2dabc.scope",
        ] {
            assert_eq!(container_of(path), None, "{path}");
        }
    }

    #[test]
    fn bad_escapes_stay_as_they_are() {
        assert_eq!(unescape("a\\x2db"), "a-b");
        assert_eq!(unescape("a\\xzz"), "a\\xzz");
        assert_eq!(unescape("end\\x2"), "end\\x2");
        assert_eq!(unescape("\\xff"), "\\xff");
    }
}
