//! Container names, images and Kubernetes pods, from what the container
//! runtimes keep on the host.
//!
//! For Kubernetes, the source is the OCI bundle's `config.json` that the
//! CRI runtime (containerd, cri-o) writes for every container before it
//! starts and removes when it ends: its annotations carry the pod's name
//! and namespace and the container's name, as the kubelet gave them. It is
//! a file on the host, so reading it needs no API server, no credentials
//! and no runtime socket, and it is there for exactly as long as the
//! container runs. Where it is missing (a runtime keeping its bundles
//! elsewhere), the kubelet's log directory `/var/log/pods/NS_POD_UID` still
//! names the pod by the UID the cgroup path carries.
//!
//! Every file is read from the host's root, as a regular file, at most
//! [`MAX_METADATA`] bytes; ids are checked to be hexadecimal before they
//! become part of a path.

use std::{collections::HashMap, io::Read, path::Path};

use serde::Deserialize;

use super::cgroup::{is_container_id, Runtime};
use crate::rootfs::Root;

/// Most bytes read of one metadata file: podman's list of every container
/// is the largest, about 1 KB per container.
pub const MAX_METADATA: u64 = 16 * 1024 * 1024;

/// Most entries of `/var/log/pods` looked at.
const MAX_POD_DIRS: usize = 16 * 1024;

/// What a runtime says of one container.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ContainerMetadata {
    pub name: Option<String>,
    pub image: Option<String>,
    pub pod: Option<PodMetadata>,
}

/// The Kubernetes pod a container belongs to.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodMetadata {
    pub name: String,
    pub namespace: String,
    /// The container's name in the pod spec.
    pub container: Option<String>,
}

/// Reads what `runtime` keeps about container `id` under `root` (the
/// host's); `pod_uid` is the pod's UID from the cgroup path, if any.
pub fn read(root: &Root, runtime: Runtime, id: &str, pod_uid: Option<&str>) -> ContainerMetadata {
    let mut metadata = if !is_container_id(id) {
        ContainerMetadata::default()
    } else {
        match runtime {
            Runtime::Docker => docker(root, id),
            Runtime::Containerd => containerd(root, id),
            Runtime::CriO => cri_o(root, id),
            Runtime::Cri => {
                let found = containerd(root, id);
                if found == ContainerMetadata::default() {
                    cri_o(root, id)
                } else {
                    found
                }
            }
            Runtime::Podman => podman(root, id),
            Runtime::Nspawn => ContainerMetadata::default(),
        }
    };
    if metadata.pod.is_none() {
        metadata.pod = pod_uid.and_then(|uid| pod_from_log_dirs(root, uid));
    }
    metadata
}

fn read_json<T: for<'de> Deserialize<'de>>(root: &Root, path: &str) -> Option<T> {
    let file = root.open_file(Path::new(path)).ok()?;
    let mut bytes = Vec::new();
    file.take(MAX_METADATA).read_to_end(&mut bytes).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Docker's `config.v2.json`: the name (with a leading `/`), the image as
/// the user named it, and the labels (cri-dockerd puts the pod's there).
fn docker(root: &Root, id: &str) -> ContainerMetadata {
    #[derive(Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct Config {
        name: Option<String>,
        config: Option<Inner>,
    }
    #[derive(Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct Inner {
        image: Option<String>,
        #[serde(default)]
        labels: Option<HashMap<String, String>>,
    }
    let Some(config) = read_json::<Config>(
        root,
        &format!("/var/lib/docker/containers/{id}/config.v2.json"),
    ) else {
        return ContainerMetadata::default();
    };
    let (image, labels) = match config.config {
        Some(inner) => (inner.image, inner.labels.unwrap_or_default()),
        None => (None, HashMap::new()),
    };
    ContainerMetadata {
        name: config
            .name
            .map(|name| name.trim_start_matches('/').to_owned()),
        image,
        pod: pod_from(
            &labels,
            "io.kubernetes.pod.name",
            "io.kubernetes.pod.namespace",
            "io.kubernetes.container.name",
        ),
    }
}

#[derive(Deserialize)]
struct OciConfig {
    #[serde(default)]
    annotations: Option<HashMap<String, String>>,
}

/// containerd's bundle for a Kubernetes container (namespace `k8s.io`).
fn containerd(root: &Root, id: &str) -> ContainerMetadata {
    let path = format!("/run/containerd/io.containerd.runtime.v2.task/k8s.io/{id}/config.json");
    let Some(annotations) = read_json::<OciConfig>(root, &path).and_then(|c| c.annotations) else {
        return ContainerMetadata::default();
    };
    let pod = pod_from(
        &annotations,
        "io.kubernetes.cri.sandbox-name",
        "io.kubernetes.cri.sandbox-namespace",
        "io.kubernetes.cri.container-name",
    );
    ContainerMetadata {
        name: pod.as_ref().and_then(|pod| pod.container.clone()),
        image: annotations.get("io.kubernetes.cri.image-name").cloned(),
        pod,
    }
}

/// cri-o's bundle, under its run directory or its storage.
fn cri_o(root: &Root, id: &str) -> ContainerMetadata {
    let annotations = [
        "/run/containers/storage/overlay-containers",
        "/var/lib/containers/storage/overlay-containers",
    ]
    .iter()
    .find_map(|dir| {
        read_json::<OciConfig>(root, &format!("{dir}/{id}/userdata/config.json"))
            .and_then(|config| config.annotations)
    });
    let Some(annotations) = annotations else {
        return ContainerMetadata::default();
    };
    let pod = pod_from(
        &annotations,
        "io.kubernetes.pod.name",
        "io.kubernetes.pod.namespace",
        "io.kubernetes.container.name",
    );
    ContainerMetadata {
        name: pod.as_ref().and_then(|pod| pod.container.clone()),
        image: annotations.get("io.kubernetes.cri-o.ImageName").cloned(),
        pod,
    }
}

/// Podman's (rootful) storage lists every container with its names, and
/// every image with its names.
fn podman(root: &Root, id: &str) -> ContainerMetadata {
    #[derive(Deserialize)]
    struct Entry {
        id: String,
        #[serde(default)]
        names: Vec<String>,
        #[serde(default)]
        image: Option<String>,
    }
    let storage = "/var/lib/containers/storage";
    let containers: Vec<Entry> = read_json(
        root,
        &format!("{storage}/overlay-containers/containers.json"),
    )
    .unwrap_or_default();
    let Some(container) = containers.into_iter().find(|entry| entry.id == id) else {
        return ContainerMetadata::default();
    };
    let image = container.image.as_deref().and_then(|image_id| {
        let images: Vec<Entry> =
            read_json(root, &format!("{storage}/overlay-images/images.json")).unwrap_or_default();
        images
            .into_iter()
            .find(|entry| entry.id == image_id)
            .and_then(|entry| entry.names.into_iter().next())
    });
    ContainerMetadata {
        name: container.names.into_iter().next(),
        image,
        pod: None,
    }
}

fn pod_from(
    map: &HashMap<String, String>,
    name: &str,
    namespace: &str,
    container: &str,
) -> Option<PodMetadata> {
    Some(PodMetadata {
        name: map.get(name)?.clone(),
        namespace: map.get(namespace)?.clone(),
        container: map.get(container).cloned(),
    })
}

/// The kubelet logs each pod's containers under `/var/log/pods/NS_NAME_UID`
/// (namespaces and pod names cannot contain `_`).
fn pod_from_log_dirs(root: &Root, uid: &str) -> Option<PodMetadata> {
    let names = root
        .dir_names(Path::new("/var/log/pods"), MAX_POD_DIRS)
        .ok()?;
    let suffix = format!("_{uid}");
    names.iter().find_map(|name| {
        let name = name.strip_suffix(&suffix)?;
        let (namespace, pod) = name.split_once('_')?;
        Some(PodMetadata {
            name: pod.to_owned(),
            namespace: namespace.to_owned(),
            container: None,
        })
    })
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;

    const ID: &str = "d80b22a3152aaebba27e0a0a92cc57ab3ca544936ebc2b94b36361b9a0e3cf02";

    fn write(root: &Path, path: &str, text: &str) {
        let path = root.join(path.trim_start_matches('/'));
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    }

    #[test]
    fn each_runtime_names_its_containers() {
        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            &format!("/var/lib/docker/containers/{ID}/config.v2.json"),
            r#"{"Name":"/web","Config":{"Image":"nginx:1.25","Labels":{}}}"#,
        );
        write(
            dir.path(),
            &format!("/run/containerd/io.containerd.runtime.v2.task/k8s.io/{ID}/config.json"),
            r#"{"ociVersion":"1.0","annotations":{"io.kubernetes.cri.sandbox-name":"api-7d9f-x2x","io.kubernetes.cri.sandbox-namespace":"prod","io.kubernetes.cri.container-name":"api","io.kubernetes.cri.image-name":"registry/api:3"}}"#,
        );
        write(
            dir.path(),
            "/var/lib/containers/storage/overlay-containers/containers.json",
            &format!(r#"[{{"id":"{ID}","names":["db"],"image":"abc"}}]"#),
        );
        write(
            dir.path(),
            "/var/lib/containers/storage/overlay-images/images.json",
            r#"[{"id":"abc","names":["localhost/postgres:16"]}]"#,
        );
        let root = Root::at(dir.path()).unwrap();
        let docker = read(&root, Runtime::Docker, ID, None);
        assert_eq!(docker.name.as_deref(), Some("web"));
        assert_eq!(docker.image.as_deref(), Some("nginx:1.25"));
        assert_eq!(docker.pod, None);
        for runtime in [Runtime::Containerd, Runtime::Cri] {
            let cri = read(&root, runtime, ID, None);
            assert_eq!(cri.name.as_deref(), Some("api"));
            assert_eq!(cri.image.as_deref(), Some("registry/api:3"));
            let pod = cri.pod.unwrap();
            assert_eq!(
                (pod.name.as_str(), pod.namespace.as_str()),
                ("api-7d9f-x2x", "prod")
            );
        }
        let podman = read(&root, Runtime::Podman, ID, None);
        assert_eq!(podman.name.as_deref(), Some("db"));
        assert_eq!(podman.image.as_deref(), Some("localhost/postgres:16"));
    }

    #[test]
    fn pods_without_annotations_are_found_by_their_log_directory() {
        let dir = tempfile::tempdir().unwrap();
        let uid = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0";
        fs::create_dir_all(
            dir.path()
                .join(format!("var/log/pods/kube-system_coredns-5d78_{uid}")),
        )
        .unwrap();
        let root = Root::at(dir.path()).unwrap();
        let found = read(&root, Runtime::CriO, ID, Some(uid));
        let pod = found.pod.unwrap();
        assert_eq!(
            (pod.name.as_str(), pod.namespace.as_str()),
            ("coredns-5d78", "kube-system")
        );
    }

    #[test]
    fn hostile_metadata_names_nothing() {
        let dir = tempfile::tempdir().unwrap();
        // A FIFO where the config should be, a file not JSON, an id that
        // would climb out of the directory.
        let fifo = dir
            .path()
            .join(format!("var/lib/docker/containers/{ID}/config.v2.json"));
        fs::create_dir_all(fifo.parent().unwrap()).unwrap();
        let name = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
        write(
            dir.path(),
            "/var/lib/containers/storage/overlay-containers/containers.json",
            "not json",
        );
        let root = Root::at(dir.path()).unwrap();
        assert_eq!(
            read(&root, Runtime::Docker, ID, None),
            ContainerMetadata::default()
        );
        assert_eq!(
            read(&root, Runtime::Podman, ID, None),
            ContainerMetadata::default()
        );
        assert_eq!(
            read(&root, Runtime::Docker, "../../../../etc", None),
            ContainerMetadata::default()
        );
    }
}
