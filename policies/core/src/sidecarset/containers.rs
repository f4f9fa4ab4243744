//! The containers a SidecarSet injects (spec 01 §3.4–§3.7): each sidecar
//! with shared volume mounts and devices, transferred env, `IS_INJECTED`,
//! and hot-upgrade twins; plus the volumes and pull secrets they bring.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{
    Container, EnvVar, EnvVarSource, LocalObjectReference, ObjectFieldSelector, Pod, Volume,
    VolumeDevice, VolumeMount,
};
use kruise_api::SidecarSet;
use kruise_api::sidecarset::{PodInjectPolicy, ShareVolumePolicy, SidecarContainer};

use super::annotations::{INJECTED_ENV, version_alt_annotation, version_annotation};
use super::{InjectionError, resources, sidecar_set_name};
use crate::selector::is_qualified_name;

const VERSION_ENV: &str = "SIDECARSET_VERSION";
const VERSION_ALT_ENV: &str = "SIDECARSET_VERSION_ALT";

/// A container ready to go into the pod.
#[derive(Clone, Debug)]
pub(super) struct Emitted {
    pub container: Container,
    /// `BeforeAppContainer`: goes ahead of the pod's own containers.
    pub before_app: bool,
    /// The SidecarSet it comes from, for conflict messages.
    pub sidecar_set: String,
}

/// Everything the selected SidecarSets inject, in processing order.
#[derive(Debug, Default)]
pub(super) struct Built {
    pub init_containers: Vec<Emitted>,
    pub containers: Vec<Emitted>,
    /// SidecarSet volumes the sidecars mount, possibly repeated.
    pub volumes: Vec<Volume>,
    pub pull_secrets: Vec<LocalObjectReference>,
    /// Logical names of hot-upgraded sidecars (each emitted as `-1`/`-2`).
    pub hot_upgraded: Vec<String>,
    /// For each SidecarSet that emitted a container: its sorted
    /// `sidecarList` (containers, native-sidecar init containers).
    pub sidecar_lists: BTreeMap<String, Vec<String>>,
}

impl Built {
    pub(super) fn emitted_anything(&self) -> bool {
        !self.init_containers.is_empty() || !self.containers.is_empty()
    }
}

/// What the pod's app containers offer to sidecars that share them: every
/// mount and device of containers not marked `IS_INJECTED=true`, and the env
/// vars their `subPathExpr`s reference. Init containers are not a source.
#[derive(Debug, Default)]
struct Shared {
    mounts: Vec<VolumeMount>,
    subpath_envs: Vec<EnvVar>,
    devices: Vec<VolumeDevice>,
}

impl Shared {
    fn of(pod: &Pod) -> Self {
        let mut shared = Self::default();
        let app_containers = pod_containers(pod).iter().filter(|c| !is_injected(c));
        for app in app_containers {
            for mount in app.volume_mounts.iter().flatten() {
                shared.mounts.push(mount.clone());
                for name in subpath_variables(mount.sub_path_expr.as_deref().unwrap_or_default()) {
                    if let Some(env) = app.env.iter().flatten().find(|e| e.name == name) {
                        shared.subpath_envs.push(env.clone());
                    }
                }
            }
            shared
                .devices
                .extend(app.volume_devices.iter().flatten().cloned());
        }
        shared
    }
}

/// Build the injected containers of every selected SidecarSet, in order.
pub(super) fn build(pod: &Pod, selected: &[Cow<'_, SidecarSet>]) -> Result<Built, InjectionError> {
    let shared = Shared::of(pod);
    let injected = injected_names(selected);
    let mut built = Built::default();
    for sidecar_set in selected {
        let sources = Sources {
            pod,
            shared: &shared,
            injected: &injected,
        };
        build_one(sidecar_set, &sources, &mut built)?;
    }
    Ok(built)
}

/// What every sidecar is prepared from: the pod as submitted, what its app
/// containers share, and the names of all containers being injected.
struct Sources<'a> {
    pod: &'a Pod,
    shared: &'a Shared,
    injected: &'a BTreeSet<&'a str>,
}

fn injected_names<'a>(selected: &'a [Cow<'_, SidecarSet>]) -> BTreeSet<&'a str> {
    crate::ordered::set(
        selected
            .iter()
            .flat_map(|s| s.spec.init_containers.iter().chain(&s.spec.containers))
            .map(SidecarContainer::name),
    )
}

fn build_one(
    sidecar_set: &SidecarSet,
    sources: &Sources<'_>,
    built: &mut Built,
) -> Result<(), InjectionError> {
    let name = sidecar_set_name(sidecar_set);
    let spec = &sidecar_set.spec;
    let volumes: BTreeMap<&str, &Volume> =
        crate::ordered::map(spec.volumes.iter().map(|v| (v.name.as_str(), v)));
    let mut sidecar_list = BTreeSet::new();

    for sidecar in &spec.init_containers {
        // Only native sidecars stay running and can be upgraded in place.
        if sidecar.is_native_sidecar() {
            sidecar_list.insert(sidecar.name().to_owned());
        }
        queue_volumes(&sidecar.container, &volumes, &mut built.volumes);
        let hot = sidecar.is_native_sidecar() && sidecar.is_hot_upgrade();
        let container = prepare(sidecar, sources, name)?;
        emit(
            sidecar,
            container,
            hot,
            name,
            &mut built.init_containers,
            &mut built.hot_upgraded,
        );
    }
    built
        .pull_secrets
        .extend(spec.image_pull_secrets.iter().cloned());
    for sidecar in &spec.containers {
        sidecar_list.insert(sidecar.name().to_owned());
        queue_volumes(&sidecar.container, &volumes, &mut built.volumes);
        let container = prepare(sidecar, sources, name)?;
        let hot = sidecar.is_hot_upgrade();
        emit(
            sidecar,
            container,
            hot,
            name,
            &mut built.containers,
            &mut built.hot_upgraded,
        );
    }
    if !spec.init_containers.is_empty() || !spec.containers.is_empty() {
        built
            .sidecar_lists
            .insert(name.to_owned(), sidecar_list.into_iter().collect());
    }
    Ok(())
}

/// The SidecarSet volumes a sidecar mounts or uses as devices; names the
/// SidecarSet does not define are left to the pod (or to validation).
fn queue_volumes(
    container: &Container,
    volumes: &BTreeMap<&str, &Volume>,
    queue: &mut Vec<Volume>,
) {
    let mounts = container
        .volume_mounts
        .iter()
        .flatten()
        .map(|m| m.name.as_str());
    let devices = container
        .volume_devices
        .iter()
        .flatten()
        .map(|d| d.name.as_str());
    for name in mounts.chain(devices) {
        if let Some(volume) = volumes.get(name) {
            queue.push((*volume).clone());
        }
    }
}

fn emit(
    sidecar: &SidecarContainer,
    container: Container,
    hot: bool,
    sidecar_set: &str,
    into: &mut Vec<Emitted>,
    hot_upgraded: &mut Vec<String>,
) {
    let before_app = sidecar.pod_inject_policy == Some(PodInjectPolicy::BeforeAppContainer);
    let wrap = |container| Emitted {
        container,
        before_app,
        sidecar_set: sidecar_set.to_owned(),
    };
    if hot {
        let empty_image = sidecar
            .upgrade_strategy
            .as_ref()
            .and_then(|s| s.hot_upgrade_empty_image.as_deref());
        into.extend(hot_upgrade_twins(container, empty_image).map(wrap));
        hot_upgraded.push(sidecar.name().to_owned());
    } else {
        into.push(wrap(container));
    }
}

/// The sidecar as injected: resources from its `resourcesPolicy`, own
/// mounts then shared ones, own env then `IS_INJECTED=true` then
/// transferred and subPathExpr env, own devices then shared ones.
fn prepare(
    sidecar: &SidecarContainer,
    sources: &Sources<'_>,
    sidecar_set: &str,
) -> Result<Container, InjectionError> {
    let (pod, shared) = (sources.pod, sources.shared);
    let share_mounts = ShareVolumePolicy::is_enabled(sidecar.share_volume_policy.as_ref());
    let share_devices = ShareVolumePolicy::is_enabled(sidecar.share_volume_device_policy.as_ref());
    let mut container = sidecar.container.clone();
    if let Some(policy) = &sidecar.resources_policy {
        let resources = resources::compute(policy, pod, sources.injected).map_err(|message| {
            InjectionError::ResourcesPolicy {
                sidecar_set: sidecar_set.to_owned(),
                container: sidecar.name().to_owned(),
                message,
            }
        })?;
        container.resources = Some(resources);
    }

    let subpath_envs = if share_mounts {
        shared.subpath_envs.as_slice()
    } else {
        &[]
    };
    let transferred = merge_env(transfer_envs(sidecar, pod), subpath_envs);
    if share_mounts {
        let taken = paths(
            container
                .volume_devices
                .iter()
                .flatten()
                .map(|d| &d.device_path),
        );
        container.volume_mounts = append_unseen(
            container.volume_mounts.take(),
            &shared.mounts,
            |m| &m.mount_path,
            taken,
        );
    }
    let mut env = container.env.take().unwrap_or_default();
    if !env.iter().any(|e| e.name == INJECTED_ENV) {
        env.push(EnvVar {
            name: INJECTED_ENV.to_owned(),
            value: Some("true".to_owned()),
            value_from: None,
        });
    }
    container.env = Some(merge_env(env, &transferred));
    if share_devices {
        let taken = paths(
            container
                .volume_mounts
                .iter()
                .flatten()
                .map(|m| &m.mount_path),
        );
        container.volume_devices = append_unseen(
            container.volume_devices.take(),
            &shared.devices,
            |d| &d.device_path,
            taken,
        );
    }
    Ok(container)
}

fn paths<'a>(items: impl Iterator<Item = &'a String>) -> BTreeSet<String> {
    crate::ordered::set(items.cloned())
}

/// Own items first, then shared ones whose path is not taken yet (by an own
/// item, an earlier shared one, or `taken`). `None` stays `None` when
/// nothing is added.
fn append_unseen<T: Clone>(
    own: Option<Vec<T>>,
    shared: &[T],
    path: impl Fn(&T) -> &String,
    mut taken: BTreeSet<String>,
) -> Option<Vec<T>> {
    let had_list = own.is_some();
    let mut items = own.unwrap_or_default();
    taken.extend(items.iter().map(|i| path(i).clone()));
    for item in shared {
        if taken.insert(path(item).clone()) {
            items.push(item.clone());
        }
    }
    (had_list || !items.is_empty()).then_some(items)
}

/// `original` unchanged, then each `additional` var whose name is new.
fn merge_env(mut original: Vec<EnvVar>, additional: &[EnvVar]) -> Vec<EnvVar> {
    let mut names = crate::ordered::set(original.iter().map(|e| e.name.clone()));
    for env in additional {
        if names.insert(env.name.clone()) {
            original.push(env.clone());
        }
    }
    original
}

/// `transferEnv` (§3.6): named env vars copied whole from an app container.
fn transfer_envs(sidecar: &SidecarContainer, pod: &Pod) -> Vec<EnvVar> {
    let mut copied = Vec::new();
    for transfer in &sidecar.transfer_env {
        let names: BTreeSet<&str> = crate::ordered::set(
            transfer
                .env_name
                .iter()
                .filter(|n| !n.is_empty())
                .chain(&transfer.env_names)
                .map(String::as_str),
        );
        let field_ref = transfer
            .source_container_name_from
            .as_ref()
            .and_then(|from| from.field_ref.as_ref());
        let source = match field_ref {
            Some(field_ref) => match container_name_from(&field_ref.field_path, pod) {
                Some(name) => name,
                None => continue,
            },
            None => transfer.source_container_name.clone().unwrap_or_default(),
        };
        let Some(container) = pod_containers(pod).iter().find(|c| c.name == source) else {
            continue;
        };
        for name in names {
            // The last definition wins, as in the kubelet.
            if let Some(env) = container
                .env
                .iter()
                .flatten()
                .rev()
                .find(|e| e.name == name)
            {
                copied.push(env.clone());
            }
        }
    }
    copied
}

/// The container name a `metadata.labels['k']` / `metadata.annotations['k']`
/// field path points at (`""` when the pod lacks it); `None` for any other
/// field path, which skips the transfer entry.
fn container_name_from(field_path: &str, pod: &Pod) -> Option<String> {
    let (base, key) = field_path.strip_suffix("']")?.split_once("['")?;
    let meta = &pod.metadata;
    let values = match base {
        "metadata.labels" if is_qualified_name(key) => meta.labels.as_ref(),
        "metadata.annotations" if is_qualified_name(&key.to_ascii_lowercase()) => {
            meta.annotations.as_ref()
        }
        _ => return None,
    };
    Some(values.and_then(|v| v.get(key)).cloned().unwrap_or_default())
}

/// The `NAME`s of `$(NAME)` references in a `subPathExpr`.
fn subpath_variables(expression: &str) -> Vec<&str> {
    let bytes = expression.as_bytes();
    let first_ok = |b: u8| b.is_ascii_alphabetic() || matches!(b, b'-' | b'.' | b'_');
    let rest_ok = |b: u8| first_ok(b) || b.is_ascii_digit();
    let mut names = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i..].starts_with(b"$(") && bytes.get(i + 2).is_some_and(|b| first_ok(*b)) {
            let start = i + 2;
            let end = start
                + 1
                + bytes[start + 1..]
                    .iter()
                    .take_while(|b| rest_ok(**b))
                    .count();
            if bytes.get(end) == Some(&b')') {
                names.push(&expression[start..end]);
                i = end + 1;
                continue;
            }
        }
        i += 1;
    }
    names
}

/// `name-1` keeps the image and works; `name-2` runs the empty image and
/// idles. Each reads its version from its own pod annotations.
fn hot_upgrade_twins(container: Container, empty_image: Option<&str>) -> [Container; 2] {
    let logical = container.name.clone();
    let mut working = container.clone();
    working.name = format!("{logical}-1");
    let mut idle = container;
    idle.name = format!("{logical}-2");
    idle.image = empty_image.filter(|i| !i.is_empty()).map(str::to_owned);
    [working, idle].map(with_version_envs)
}

/// Append `SIDECARSET_VERSION(_ALT)` read from the twin's annotations; a
/// same-named env the user wrote is dropped, the controller relies on these.
fn with_version_envs(mut container: Container) -> Container {
    let version = version_annotation(&container.name);
    let version_alt = version_alt_annotation(&container.name);
    let env = container.env.get_or_insert_with(Vec::new);
    env.retain(|e| e.name != VERSION_ENV && e.name != VERSION_ALT_ENV);
    env.push(annotation_env(VERSION_ENV, &version));
    env.push(annotation_env(VERSION_ALT_ENV, &version_alt));
    container
}

fn annotation_env(name: &str, annotation: &str) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value: None,
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                api_version: None,
                field_path: format!("metadata.annotations['{annotation}']"),
            }),
            ..Default::default()
        }),
    }
}

fn is_injected(container: &Container) -> bool {
    container
        .env
        .iter()
        .flatten()
        .find(|e| e.name == INJECTED_ENV)
        .is_some_and(|e| e.value.as_deref() == Some("true"))
}

fn pod_containers(pod: &Pod) -> &[Container] {
    pod.spec.as_ref().map_or(&[], |s| s.containers.as_slice())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use k8s_openapi::api::core::v1::PodSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use kruise_api::sidecarset::{SourceContainerNameSource, TransferEnvVar};

    use super::*;

    fn env(name: &str, value: &str) -> EnvVar {
        EnvVar {
            name: name.to_owned(),
            value: Some(value.to_owned()),
            value_from: None,
        }
    }

    fn env_names(envs: &[EnvVar]) -> Vec<&str> {
        envs.iter().map(|e| e.name.as_str()).collect()
    }

    fn pod_with(
        labels: &[(&str, &str)],
        annotations: &[(&str, &str)],
        containers: Vec<Container>,
    ) -> Pod {
        let map = |pairs: &[(&str, &str)]| {
            (!pairs.is_empty()).then(|| {
                pairs
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect()
            })
        };
        Pod {
            metadata: ObjectMeta {
                labels: map(labels),
                annotations: map(annotations),
                ..Default::default()
            },
            spec: Some(PodSpec {
                containers,
                ..Default::default()
            }),
            status: None,
        }
    }

    fn main_with_test_env() -> Container {
        Container {
            name: "main".to_owned(),
            env: Some(vec![env("test-env", "test-value")]),
            ..Default::default()
        }
    }

    fn sidecar_with(transfer: TransferEnvVar) -> SidecarContainer {
        SidecarContainer {
            container: Container {
                name: "cold-sidecar".to_owned(),
                ..Default::default()
            },
            transfer_env: vec![transfer],
            ..Default::default()
        }
    }

    fn from_field(path: &str) -> SourceContainerNameSource {
        SourceContainerNameSource {
            field_ref: Some(ObjectFieldSelector {
                api_version: Some("v1".to_owned()),
                field_path: path.to_owned(),
            }),
        }
    }

    // The three cases of upstream TestGetSidecarTransferEnvs.
    #[test]
    fn transfer_env_by_name_label_and_annotation() {
        let by_name = TransferEnvVar {
            source_container_name: Some("main".to_owned()),
            env_name: Some("test-env".to_owned()),
            ..Default::default()
        };
        let pod = pod_with(&[("app", "nginx")], &[], vec![main_with_test_env()]);
        assert_eq!(
            transfer_envs(&sidecar_with(by_name), &pod),
            vec![env("test-env", "test-value")]
        );

        let by_label = TransferEnvVar {
            source_container_name_from: Some(from_field("metadata.labels['app']")),
            env_name: Some("test-env".to_owned()),
            ..Default::default()
        };
        let pod = pod_with(&[("app", "main")], &[], vec![main_with_test_env()]);
        assert_eq!(
            transfer_envs(&sidecar_with(by_label), &pod),
            vec![env("test-env", "test-value")]
        );

        let by_annotation = TransferEnvVar {
            source_container_name_from: Some(from_field("metadata.annotations['app']")),
            env_name: Some("test-env".to_owned()),
            ..Default::default()
        };
        let pod = pod_with(
            &[("app", "main")],
            &[("app", "main")],
            vec![main_with_test_env()],
        );
        assert_eq!(
            transfer_envs(&sidecar_with(by_annotation), &pod),
            vec![env("test-env", "test-value")]
        );
    }

    #[test]
    fn transfer_env_names_are_deduplicated_and_sorted() {
        let main = Container {
            name: "main".to_owned(),
            env: Some(vec![env("B", "b"), env("A", "a"), env("C", "c")]),
            ..Default::default()
        };
        let transfer = TransferEnvVar {
            source_container_name: Some("main".to_owned()),
            env_name: Some("C".to_owned()),
            env_names: vec![
                "B".to_owned(),
                "C".to_owned(),
                "MISSING".to_owned(),
                "A".to_owned(),
            ],
            ..Default::default()
        };
        let pod = pod_with(&[], &[], vec![main]);
        let copied = transfer_envs(&sidecar_with(transfer), &pod);
        assert_eq!(env_names(&copied), ["A", "B", "C"]);
    }

    #[test]
    fn transfer_env_skips_unsupported_or_missing_sources() {
        let pod = pod_with(&[], &[], vec![main_with_test_env()]);
        for path in ["metadata.name", "metadata.labels['app']", "spec.nodeName"] {
            let transfer = TransferEnvVar {
                source_container_name_from: Some(from_field(path)),
                env_name: Some("test-env".to_owned()),
                ..Default::default()
            };
            assert!(
                transfer_envs(&sidecar_with(transfer), &pod).is_empty(),
                "{path}"
            );
        }
        let wrong_container = TransferEnvVar {
            source_container_name: Some("other".to_owned()),
            env_name: Some("test-env".to_owned()),
            ..Default::default()
        };
        assert!(transfer_envs(&sidecar_with(wrong_container), &pod).is_empty());
    }

    // Upstream TestExtractContainerNameFromFieldPath.
    #[test]
    fn container_name_from_field_paths() {
        let pod = pod_with(
            &[("test-label", "test-pod-label")],
            &[("test-anno", "test-pod-anno")],
            vec![],
        );
        assert_eq!(
            container_name_from("metadata.labels['test-label']", &pod).as_deref(),
            Some("test-pod-label")
        );
        assert_eq!(
            container_name_from("metadata.annotations['test-anno']", &pod).as_deref(),
            Some("test-pod-anno")
        );
        let bare = pod_with(&[], &[], vec![]);
        assert_eq!(
            container_name_from("metadata.labels['test-label']", &bare).as_deref(),
            Some("")
        );
        assert_eq!(container_name_from("metadata.name", &pod), None);
        assert_eq!(
            container_name_from("metadata.labels['bad key']", &pod),
            None
        );
        assert_eq!(container_name_from("['x']", &pod), None);
    }

    #[test]
    fn subpath_variables_follow_the_upstream_pattern() {
        assert_eq!(
            subpath_variables("foo/$(POD_NAME)/$(OD_NAME)/conf"),
            ["POD_NAME", "OD_NAME"]
        );
        assert_eq!(subpath_variables("$(a.b-c_9)"), ["a.b-c_9"]);
        assert!(subpath_variables("foo").is_empty());
        assert!(subpath_variables("").is_empty());
        assert!(subpath_variables("$(9LEADING_DIGIT)").is_empty());
        assert!(subpath_variables("$(UNCLOSED").is_empty());
        assert_eq!(subpath_variables("$($(INNER))"), ["INNER"]);
    }

    #[test]
    fn env_merge_keeps_the_first_definition() {
        let merged = merge_env(
            vec![env("A", "own"), env(INJECTED_ENV, "true")],
            &[env("A", "transferred"), env("B", "1"), env("B", "2")],
        );
        assert_eq!(
            merged,
            vec![env("A", "own"), env(INJECTED_ENV, "true"), env("B", "1")]
        );
    }

    fn mount(name: &str, path: &str) -> VolumeMount {
        VolumeMount {
            name: name.to_owned(),
            mount_path: path.to_owned(),
            ..Default::default()
        }
    }

    fn device(name: &str, path: &str) -> VolumeDevice {
        VolumeDevice {
            name: name.to_owned(),
            device_path: path.to_owned(),
        }
    }

    #[test]
    fn shared_mounts_dedup_by_path_against_own_mounts_and_devices() {
        let own = Some(vec![mount("own", "/a"), mount("own2", "/b")]);
        let shared = [
            mount("x", "/a"),
            mount("y", "/c"),
            mount("z", "/dev/blk"),
            mount("w", "/c"),
        ];
        let taken = BTreeSet::from(["/dev/blk".to_owned()]);
        let merged = append_unseen(own, &shared, |m| &m.mount_path, taken).unwrap();
        let got: Vec<_> = merged
            .iter()
            .map(|m| (m.name.as_str(), m.mount_path.as_str()))
            .collect();
        assert_eq!(got, [("own", "/a"), ("own2", "/b"), ("y", "/c")]);
        assert_eq!(
            append_unseen(None, &[], |m: &VolumeMount| &m.mount_path, BTreeSet::new()),
            None
        );
        assert_eq!(
            append_unseen(
                Some(vec![]),
                &[],
                |m: &VolumeMount| &m.mount_path,
                BTreeSet::new()
            ),
            Some(vec![])
        );
    }

    // In the spirit of upstream TestGetInjectedVolumeDevices / TestPodVolumeDevicesAppend.
    #[test]
    fn shared_devices_come_from_app_containers_only() {
        let app = Container {
            name: "app".to_owned(),
            volume_devices: Some(vec![device("blk", "/dev/xvda"), device("dup", "/dev/own")]),
            volume_mounts: Some(vec![mount("data", "/data")]),
            ..Default::default()
        };
        let earlier_sidecar = Container {
            name: "old-sidecar".to_owned(),
            env: Some(vec![env(INJECTED_ENV, "true")]),
            volume_devices: Some(vec![device("other", "/dev/other")]),
            ..Default::default()
        };
        let pod = pod_with(&[], &[], vec![app, earlier_sidecar]);
        let sidecar = SidecarContainer {
            container: Container {
                name: "s".to_owned(),
                volume_devices: Some(vec![device("own", "/dev/own")]),
                ..Default::default()
            },
            share_volume_device_policy: Some(ShareVolumePolicy {
                type_: Some(kruise_api::sidecarset::ShareVolumePolicyType::Enabled),
            }),
            ..Default::default()
        };
        let prepared = prepare_alone(&sidecar, &pod);
        let devices: Vec<_> = prepared
            .volume_devices
            .unwrap()
            .into_iter()
            .map(|d| d.name)
            .collect();
        assert_eq!(devices, ["own", "blk"]);
        assert_eq!(
            prepared.volume_mounts, None,
            "mount sharing is a separate policy"
        );
    }

    fn prepare_alone(sidecar: &SidecarContainer, pod: &Pod) -> Container {
        let shared = Shared::of(pod);
        let injected = BTreeSet::from([sidecar.name()]);
        let sources = Sources {
            pod,
            shared: &shared,
            injected: &injected,
        };
        prepare(sidecar, &sources, "set").unwrap()
    }

    #[test]
    fn is_injected_is_not_duplicated() {
        let sidecar = SidecarContainer {
            container: Container {
                name: "s".to_owned(),
                env: Some(vec![env(INJECTED_ENV, "true"), env("X", "1")]),
                ..Default::default()
            },
            ..Default::default()
        };
        let pod = pod_with(&[], &[], vec![main_with_test_env()]);
        let prepared = prepare_alone(&sidecar, &pod);
        assert_eq!(
            prepared.env.unwrap(),
            vec![env(INJECTED_ENV, "true"), env("X", "1")]
        );
    }

    #[test]
    fn hot_upgrade_twins_swap_image_and_read_their_own_annotations() {
        let container = Container {
            name: "envoy".to_owned(),
            image: Some("envoy:1.0".to_owned()),
            env: Some(vec![env(INJECTED_ENV, "true")]),
            ..Default::default()
        };
        let [working, idle] = hot_upgrade_twins(container, Some("envoy-empty:1.0"));
        assert_eq!(
            (working.name.as_str(), working.image.as_deref()),
            ("envoy-1", Some("envoy:1.0"))
        );
        assert_eq!(
            (idle.name.as_str(), idle.image.as_deref()),
            ("envoy-2", Some("envoy-empty:1.0"))
        );
        let paths = |c: &Container| -> Vec<(String, String)> {
            c.env
                .iter()
                .flatten()
                .filter_map(|e| {
                    let path = e
                        .value_from
                        .as_ref()?
                        .field_ref
                        .as_ref()?
                        .field_path
                        .clone();
                    Some((e.name.clone(), path))
                })
                .collect()
        };
        assert_eq!(
            paths(&idle),
            [
                (
                    "SIDECARSET_VERSION".to_owned(),
                    "metadata.annotations['version.sidecarset.kruise.io/envoy-2']".to_owned()
                ),
                (
                    "SIDECARSET_VERSION_ALT".to_owned(),
                    "metadata.annotations['versionalt.sidecarset.kruise.io/envoy-2']".to_owned()
                ),
            ]
        );
        assert_eq!(
            env_names(working.env.as_deref().unwrap()),
            [INJECTED_ENV, VERSION_ENV, VERSION_ALT_ENV]
        );
    }
}
