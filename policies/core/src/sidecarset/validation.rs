//! What OpenKruise's SidecarSet validating webhook refuses, every violation
//! at once, each naming its field (OpenKruise's
//! `pkg/webhook/sidecarset/validating`).
//!
//! The checks that need the cluster take it as values: the other
//! SidecarSets (name, volume and annotation conflicts; a canary's base),
//! this SidecarSet's ControllerRevisions (`injectionStrategy.revision`) and
//! the `kruise-configuration` ConfigMap (the `patchPodMetadata` whitelist).
//!
//! Each container also passes the pod validation of
//! `container_validation` (ports, probes, resources).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kruise_api::SidecarSet;
use kruise_api::sidecarset::{
    PatchPolicy, SidecarContainer, SidecarSetUpdateStrategy, SidecarSetUpdateStrategyType,
    UpgradeType,
};

use super::matching::{BASE_ANNOTATION, CANARY_ANNOTATION, canary_base};
use super::{patch_whitelist, resources, revision, sidecar_set_name};
use crate::container_validation::check_container;
use crate::names::dns_label_error;
use crate::selector;
pub use crate::validation::Violation;
use crate::validation::{check_priority, check_scatter, positive_int_or_percent_error};

/// Selectors of a SidecarSet, named as OpenKruise's messages do.
fn check_selector(selector: &LabelSelector, field: &str, out: &mut Vec<Violation>) {
    crate::validation::check_selector(selector, field, "sidecarset", out);
}

const NAME_MAX_LENGTH: usize = 63;

/// What the checks read from the cluster.
#[derive(Clone, Copy, Debug, Default)]
pub struct ClusterView<'a> {
    /// Every SidecarSet in the cluster (this one, if stored, is skipped).
    pub sidecar_sets: &'a [SidecarSet],
    /// This SidecarSet's ControllerRevisions.
    pub revisions: &'a [ControllerRevision],
    /// The data of OpenKruise's `kruise-configuration` ConfigMap; `None`
    /// when there is none.
    pub kruise_configuration: Option<&'a BTreeMap<String, String>>,
}

/// The violations of `new`, created (`old` is `None`) or updated from
/// `old`; empty when valid.
pub fn validate(
    new: &SidecarSet,
    old: Option<&SidecarSet>,
    cluster: ClusterView<'_>,
) -> Vec<Violation> {
    let mut out = Vec::new();
    check_name(new, &mut out);
    let spec = &new.spec;
    match &spec.selector {
        None => out.push(Violation::new(
            "spec.selector",
            "Required value: no selector defined for SidecarSet",
        )),
        Some(selector) => check_selector(selector, "spec.selector", &mut out),
    }
    if let Some(namespace_selector) = &spec.namespace_selector {
        check_selector(namespace_selector, "spec.namespaceSelector", &mut out);
    }
    check_injection_revision(new, cluster.revisions, &mut out);
    let strategy = spec.update_strategy.clone().unwrap_or_default();
    check_update_strategy(&strategy, &mut out);
    check_containers(new, &strategy, &mut out);
    check_patch_pod_metadata(new, &mut out);
    out.extend(patch_whitelist::check(new, cluster.kruise_configuration));
    if let Some(old) = old {
        check_update(new, old, &mut out);
    }
    check_canary(new, old, &strategy, cluster.sidecar_sets, &mut out);
    check_conflicts(new, cluster.sidecar_sets, &mut out);
    out
}

fn check_name(set: &SidecarSet, out: &mut Vec<Violation>) {
    let name = sidecar_set_name(set);
    if name.is_empty() {
        out.push(Violation::new(
            "metadata.name",
            "Required value: name is required",
        ));
        return;
    }
    if !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
        out.push(Violation::new(
            "metadata.name",
            format!("Invalid value {name:?}: sidecarset name must consist of alphanumeric characters or '-' (regex '^[a-zA-Z0-9\\-]+$', e.g. 'example-com')"),
        ));
    }
    if name.len() > NAME_MAX_LENGTH {
        out.push(Violation::new(
            "metadata.name",
            format!("Invalid value {name:?}: must be no more than {NAME_MAX_LENGTH} characters"),
        ));
    }
}

fn check_injection_revision(
    set: &SidecarSet,
    revisions: &[ControllerRevision],
    out: &mut Vec<Violation>,
) {
    let wanted = set
        .spec
        .injection_strategy
        .as_ref()
        .and_then(|s| s.revision.as_ref());
    let Some(wanted) = wanted else {
        return;
    };
    let field = "spec.injectionStrategy.revision";
    if wanted.revision_name.is_none() && wanted.custom_version.is_none() {
        out.push(Violation::new(
            field,
            "Invalid value: revisionName and customVersion cannot both be empty",
        ));
    } else if !revision::exists(set, wanted, revisions) {
        out.push(Violation::new(
            field,
            "Invalid value: the ControllerRevision it names does not exist",
        ));
    }
}

fn check_update_strategy(strategy: &SidecarSetUpdateStrategy, out: &mut Vec<Violation>) {
    let rolling = strategy.type_.unwrap_or_default() == SidecarSetUpdateStrategyType::RollingUpdate;
    if !rolling {
        return;
    }
    let field = "spec.updateStrategy";
    let partitioned = match &strategy.partition {
        None | Some(IntOrString::Int(0)) => false,
        Some(_) => true,
    };
    if partitioned && strategy.selector.is_some() {
        out.push(Violation::new(
            field,
            "Invalid value: partition and selector cannot be used together",
        ));
    }
    if let Some(selector) = &strategy.selector {
        check_selector(selector, &format!("{field}.selector"), out);
    }
    for (name, value) in [
        ("partition", &strategy.partition),
        ("maxUnavailable", &strategy.max_unavailable),
    ] {
        if let Some(message) = value.as_ref().and_then(positive_int_or_percent_error) {
            out.push(Violation::new(format!("{field}.{name}"), message));
        }
    }
    check_priority(
        strategy.priority_strategy.as_ref(),
        field,
        "sidecarset",
        out,
    );
    check_scatter(&strategy.scatter_strategy, field, out);
}

fn check_containers(
    set: &SidecarSet,
    strategy: &SidecarSetUpdateStrategy,
    out: &mut Vec<Violation>,
) {
    let spec = &set.spec;
    if spec.init_containers.is_empty() && spec.containers.is_empty() {
        out.push(Violation::new(
            "spec",
            "Required value: no initContainer or container defined for SidecarSet",
        ));
        return;
    }
    let rolling = strategy.type_.unwrap_or_default() == SidecarSetUpdateStrategyType::RollingUpdate;
    let volumes: BTreeSet<&str> = spec.volumes.iter().map(|v| v.name.as_str()).collect();
    check_volume_names(set, out);
    let mut names = BTreeSet::new();
    let all = [
        ("initContainers", &spec.init_containers),
        ("containers", &spec.containers),
    ];
    for (list, containers) in all {
        for (index, sidecar) in containers.iter().enumerate() {
            let field = format!("spec.{list}[{index}]");
            let name = sidecar.name();
            match dns_label_error(name) {
                Some(message) => out.push(Violation::new(format!("{field}.name"), message)),
                None if !names.insert(name) => out.push(Violation::new(
                    format!("{field}.name"),
                    format!("Duplicate value: {name:?}"),
                )),
                None => {}
            }
            if sidecar.container.image.as_deref().is_none_or(str::is_empty) {
                out.push(Violation::new(format!("{field}.image"), "Required value"));
            }
            for (mount_index, mount) in sidecar.container.volume_mounts.iter().flatten().enumerate()
            {
                if !volumes.contains(mount.name.as_str()) {
                    out.push(Violation::new(
                        format!("{field}.volumeMounts[{mount_index}].name"),
                        format!("Not found: {:?} (every volumeMount must name a volume of spec.volumes)", mount.name),
                    ));
                }
            }
            if list == "initContainers" && sidecar.is_native_sidecar() && rolling {
                out.push(Violation::new(
                    field.clone(),
                    "Invalid value: a native sidecar (restartPolicy: Always) cannot be upgraded in place; use updateStrategy.type NotUpdate",
                ));
            }
            resources::check(sidecar, &field, list == "initContainers", out);
            check_container(&sidecar.container, &field, out);
            check_transfer_env(sidecar, &field, out);
        }
    }
}

fn check_volume_names(set: &SidecarSet, out: &mut Vec<Violation>) {
    let mut seen = BTreeSet::new();
    for (index, volume) in set.spec.volumes.iter().enumerate() {
        let field = format!("spec.volumes[{index}].name");
        match dns_label_error(&volume.name) {
            Some(message) => out.push(Violation::new(field, message)),
            None if !seen.insert(volume.name.as_str()) => {
                out.push(Violation::new(
                    field,
                    format!("Duplicate value: {:?}", volume.name),
                ));
            }
            None => {}
        }
    }
}

/// `sourceContainerNameFrom.fieldRef` may name the pod's name, or one of
/// its labels or annotations.
fn check_transfer_env(sidecar: &SidecarContainer, field: &str, out: &mut Vec<Violation>) {
    for (index, transfer) in sidecar.transfer_env.iter().enumerate() {
        let field_ref = transfer
            .source_container_name_from
            .as_ref()
            .and_then(|from| from.field_ref.as_ref());
        let Some(field_ref) = field_ref else {
            continue;
        };
        let path = field_ref.field_path.as_str();
        let keyed = ["metadata.labels['", "metadata.annotations['"]
            .iter()
            .find_map(|prefix| path.strip_prefix(prefix)?.strip_suffix("']"));
        let valid = path == "metadata.name"
            || keyed.is_some_and(|key| selector::validate_label_key(key).is_ok());
        if !valid {
            out.push(Violation::new(
                format!("{field}.transferEnv[{index}].sourceContainerNameFrom.fieldRef.fieldPath"),
                format!("Unsupported value: {path:?}: supported values: \"metadata.name\", \"metadata.labels['<KEY>']\", \"metadata.annotations['<KEY>']\""),
            ));
        }
    }
}

fn check_patch_pod_metadata(set: &SidecarSet, out: &mut Vec<Violation>) {
    let mut keys = BTreeSet::new();
    for (index, patch) in set.spec.patch_pod_metadata.iter().enumerate() {
        let field = format!("spec.patchPodMetadata[{index}]");
        if patch.annotations.is_empty() {
            out.push(Violation::new(
                format!("{field}.annotations"),
                "Required value: annotations cannot be empty",
            ));
        }
        for key in patch.annotations.keys() {
            if let Err(error) = selector::validate_label_key(key) {
                out.push(Violation::new(
                    format!("{field}.annotations"),
                    format!("Invalid value: {key:?}: {error}"),
                ));
            }
            if !keys.insert(key.as_str()) {
                out.push(Violation::new(
                    format!("{field}.annotations"),
                    format!("Duplicate value: annotation {key:?} is patched twice"),
                ));
            }
        }
    }
}

/// A container's upgradeType is fixed once set, and no container may be
/// added (or renamed) on update.
fn check_update(new: &SidecarSet, old: &SidecarSet, out: &mut Vec<Violation>) {
    let old_types: BTreeMap<&str, Option<UpgradeType>> = old
        .spec
        .containers
        .iter()
        .map(|c| {
            (
                c.name(),
                c.upgrade_strategy.as_ref().and_then(|s| s.upgrade_type),
            )
        })
        .collect();
    for (index, container) in new.spec.containers.iter().enumerate() {
        let field = format!("spec.containers[{index}]");
        let Some(old_type) = old_types.get(container.name()) else {
            out.push(Violation::new(
                format!("{field}.name"),
                format!("Forbidden: container {} is not found in the stored SidecarSet; containers cannot be added or renamed", container.name()),
            ));
            continue;
        };
        let new_type = container
            .upgrade_strategy
            .as_ref()
            .and_then(|s| s.upgrade_type)
            .unwrap_or_default();
        if old_type.is_some_and(|old_type| old_type != new_type) {
            out.push(Violation::new(
                format!("{field}.upgradeStrategy.upgradeType"),
                format!(
                    "Forbidden: container {} upgradeType is immutable",
                    container.name()
                ),
            ));
        }
    }
}

/// A canary names an existing, non-canary base other than itself, keeps
/// that base, and is not rolled (its base is).
fn check_canary(
    new: &SidecarSet,
    old: Option<&SidecarSet>,
    strategy: &SidecarSetUpdateStrategy,
    others: &[SidecarSet],
    out: &mut Vec<Violation>,
) {
    let annotations = new.metadata.annotations.clone().unwrap_or_default();
    if annotations
        .get(CANARY_ANNOTATION)
        .is_none_or(|v| v != "true")
    {
        return;
    }
    let base = annotations.get(BASE_ANNOTATION).map_or("", String::as_str);
    let name = sidecar_set_name(new);
    if base.is_empty() {
        out.push(Violation::new(
            "metadata.annotations",
            format!("Required value: a canary SidecarSet names its base in {BASE_ANNOTATION}"),
        ));
    } else if base == name {
        out.push(Violation::new(
            "metadata.annotations",
            "Invalid value: base sidecarSet cannot be itself",
        ));
    } else {
        match others.iter().find(|o| sidecar_set_name(o) == base) {
            None => out.push(Violation::new(
                "metadata.annotations",
                format!("Invalid value: base sidecarSet {base} is not found"),
            )),
            Some(found) if canary_base(found).is_some() => out.push(Violation::new(
                "metadata.annotations",
                "Invalid value: base sidecarSet cannot be canary",
            )),
            Some(_) => {}
        }
    }
    let old_base = old.and_then(|o| {
        o.metadata
            .annotations
            .as_ref()?
            .get(BASE_ANNOTATION)
            .cloned()
    });
    if old.is_some() && old_base.as_deref() != Some(base) {
        out.push(Violation::new(
            "metadata.annotations",
            format!("Forbidden: annotations[{BASE_ANNOTATION}] is immutable"),
        ));
    }
    if strategy.type_.unwrap_or_default() == SidecarSetUpdateStrategyType::RollingUpdate {
        out.push(Violation::new(
            "spec.updateStrategy.type",
            "Invalid value: a canary SidecarSet must use NotUpdate",
        ));
    }
}

/// No other SidecarSet that may select the same pods may inject a
/// container of the same name, a different volume of the same name, or
/// overwrite the same pod annotation.
fn check_conflicts(new: &SidecarSet, others: &[SidecarSet], out: &mut Vec<Violation>) {
    let name = sidecar_set_name(new);
    let base = canary_base(new);
    for other in others {
        let other_name = sidecar_set_name(other);
        if other_name == name || Some(other_name) == base || canary_base(other) == Some(name) {
            continue;
        }
        if !may_select_the_same_pods(new, other) {
            continue;
        }
        for (list, mine, theirs) in [
            (
                "initContainers",
                &new.spec.init_containers,
                &other.spec.init_containers,
            ),
            ("containers", &new.spec.containers, &other.spec.containers),
        ] {
            for container in mine {
                if theirs.iter().any(|t| t.name() == container.name()) {
                    out.push(Violation::new(
                        format!("spec.{list}"),
                        format!(
                            "Invalid value: container {} already exists in SidecarSet {other_name}",
                            container.name()
                        ),
                    ));
                }
            }
        }
        for volume in &new.spec.volumes {
            let clash = other
                .spec
                .volumes
                .iter()
                .any(|v| v.name == volume.name && v != volume);
            if clash {
                out.push(Violation::new(
                    "spec.volumes",
                    format!(
                        "Invalid value: volume {} is in conflict with SidecarSet {other_name}",
                        volume.name
                    ),
                ));
            }
        }
        for key in overwritten_clashes(new, other) {
            out.push(Violation::new(
                "spec.patchPodMetadata",
                format!("Invalid value: annotation {key} is also patched by SidecarSet {other_name}, and one of them overwrites it"),
            ));
        }
    }
}

/// Namespaces overlap (unless both have namespace selectors that cannot)
/// and the pod selectors overlap.
fn may_select_the_same_pods(a: &SidecarSet, b: &SidecarSet) -> bool {
    if let (Some(x), Some(y)) = (&a.spec.namespace_selector, &b.spec.namespace_selector)
        && !selector::overlaps(x, y)
    {
        return false;
    }
    match (&a.spec.selector, &b.spec.selector) {
        (Some(x), Some(y)) => selector::overlaps(x, y),
        _ => false,
    }
}

/// Annotation keys both patch where either side's policy is Overwrite.
fn overwritten_clashes<'a>(a: &'a SidecarSet, b: &SidecarSet) -> Vec<&'a str> {
    let policies = |set: &SidecarSet| -> BTreeMap<String, PatchPolicy> {
        set.spec
            .patch_pod_metadata
            .iter()
            .flat_map(|p| {
                p.annotations
                    .keys()
                    .map(|k| (k.clone(), p.patch_policy.unwrap_or_default()))
            })
            .collect()
    };
    let theirs = policies(b);
    a.spec
        .patch_pod_metadata
        .iter()
        .flat_map(|p| {
            p.annotations
                .keys()
                .map(move |k| (k.as_str(), p.patch_policy.unwrap_or_default()))
        })
        .filter(|(key, mine)| {
            theirs.get(*key).is_some_and(|their| {
                *mine == PatchPolicy::Overwrite || *their == PatchPolicy::Overwrite
            })
        })
        .map(|(key, _)| key)
        .collect()
}
