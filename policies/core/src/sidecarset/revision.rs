//! Which revision of a SidecarSet a new pod gets (spec 01 §4).
//!
//! `injectionStrategy.revision` can pin new pods to a historical revision,
//! stored by the SidecarSet controller as a ControllerRevision whose data
//! holds `spec.{volumes,containers,initContainers,imagePullSecrets,patchPodMetadata}`.

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kruise_api::sidecarset::{RevisionPolicy, SidecarSetInjectRevision, SidecarSetStatus};
use kruise_api::{KruiseObject, ParseError, SidecarSet, Strictness};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::annotations::{HASH_ANNOTATION, HASH_WITHOUT_IMAGE_ANNOTATION};
use super::hash::sidecarset_hashes;
use super::update::CUSTOM_VERSION_LABEL;
use super::{InjectionContext, InjectionError, sidecar_set_name};
use crate::selector;

const OWNER_LABEL: &str = "kruise.io/sidecarset-name";

/// The SidecarSet as this pod should receive it: the current one, or the
/// historical revision `injectionStrategy.revision` selects.
pub(super) fn suitable<'a>(
    current: &'a SidecarSet,
    pod: &Pod,
    ctx: &InjectionContext<'_>,
) -> Result<Cow<'a, SidecarSet>, InjectionError> {
    let Some(wanted) = current
        .spec
        .injection_strategy
        .as_ref()
        .and_then(|s| s.revision.as_ref())
        .filter(|r| r.revision_name.is_some() || r.custom_version.is_some())
    else {
        return Ok(Cow::Borrowed(current));
    };
    let historical = Cow::Owned(restore(current, find(current, wanted, ctx.revisions)?)?);
    let strategy = current.spec.update_strategy.clone().unwrap_or_default();
    if strategy.paused || wanted.policy != Some(RevisionPolicy::Partial) {
        return Ok(historical);
    }
    // Partial: pods outside the update selector keep the old revision; the
    // rest get it with the partition's probability.
    if let Some(update_selector) = &strategy.selector {
        let empty = BTreeMap::new();
        let labels = pod.metadata.labels.as_ref().unwrap_or(&empty);
        let in_canary = selector::matches(update_selector, labels).map_err(|source| {
            InjectionError::InvalidUpdateSelector {
                sidecar_set: sidecar_set_name(current).to_owned(),
                source,
            }
        })?;
        if !in_canary {
            return Ok(historical);
        }
    }
    let Some(IntOrString::String(partition)) = &strategy.partition else {
        return Ok(Cow::Borrowed(current));
    };
    let share = parse_percentage(partition).ok_or_else(|| InjectionError::InvalidPartition {
        sidecar_set: sidecar_set_name(current).to_owned(),
        partition: partition.clone(),
    })?;
    let draw = ctx
        .random_draw
        .ok_or_else(|| InjectionError::RandomDrawRequired {
            sidecar_set: sidecar_set_name(current).to_owned(),
        })?;
    Ok(if draw < share {
        historical
    } else {
        Cow::Borrowed(current)
    })
}

/// `"20%"` → 0.2; fractions like `"12.5%"` are allowed.
fn parse_percentage(text: &str) -> Option<f64> {
    let number = crate::decimal::parse_f64(text.strip_suffix('%')?.trim())?;
    number.is_finite().then_some(number / 100.0)
}

/// Whether `wanted` names a revision among `revisions`.
pub(super) fn exists(
    sidecar_set: &SidecarSet,
    wanted: &SidecarSetInjectRevision,
    revisions: &[ControllerRevision],
) -> bool {
    find(sidecar_set, wanted, revisions).is_ok()
}

/// By `revisionName`, else the highest-numbered revision carrying the
/// SidecarSet's name and `customVersion` labels.
fn find<'a>(
    sidecar_set: &SidecarSet,
    wanted: &SidecarSetInjectRevision,
    revisions: &'a [ControllerRevision],
) -> Result<&'a ControllerRevision, InjectionError> {
    let name = sidecar_set_name(sidecar_set);
    let found = if let Some(revision_name) = &wanted.revision_name {
        revisions
            .iter()
            .find(|r| r.metadata.name.as_ref() == Some(revision_name))
    } else {
        let custom_version = wanted.custom_version.as_deref().unwrap_or_default();
        let has_label = |r: &ControllerRevision, key: &str, value: &str| {
            r.metadata
                .labels
                .as_ref()
                .and_then(|labels| labels.get(key))
                .is_some_and(|v| v == value)
        };
        revisions
            .iter()
            .filter(|r| {
                has_label(r, OWNER_LABEL, name)
                    && has_label(r, CUSTOM_VERSION_LABEL, custom_version)
            })
            .max_by_key(|r| r.revision.unwrap_or_default())
    };
    found.ok_or_else(|| InjectionError::RevisionNotFound {
        sidecar_set: name.to_owned(),
        wanted: match (&wanted.revision_name, &wanted.custom_version) {
            (Some(revision_name), _) => format!("revisionName {revision_name:?}"),
            (None, custom_version) => {
                format!(
                    "customVersion {:?}",
                    custom_version.as_deref().unwrap_or_default()
                )
            }
        },
    })
}

/// The current SidecarSet with the revision's injected fields, defaults,
/// hashes (the revision's, else recomputed) and `status.latestRevision`.
fn restore(
    current: &SidecarSet,
    revision: &ControllerRevision,
) -> Result<SidecarSet, InjectionError> {
    let revision_name = revision.metadata.name.clone().unwrap_or_default();
    let invalid = |message: String| InjectionError::InvalidRevision {
        sidecar_set: sidecar_set_name(current).to_owned(),
        revision: revision_name.clone(),
        message,
    };
    let spec = revision
        .data
        .0
        .get("spec")
        .and_then(Value::as_object)
        .ok_or_else(|| invalid("data.spec is missing or not an object".to_owned()))?;
    // `$patch: replace` means fields the revision leaves out are empty;
    // without it they keep the current value.
    let replace = spec.get("$patch").and_then(Value::as_str) == Some("replace");

    let mut restored = current.clone();
    let target = &mut restored.spec;
    restore_field(spec, "containers", replace, &mut target.containers).map_err(&invalid)?;
    restore_field(spec, "initContainers", replace, &mut target.init_containers)
        .map_err(&invalid)?;
    restore_field(spec, "volumes", replace, &mut target.volumes).map_err(&invalid)?;
    restore_field(
        spec,
        "imagePullSecrets",
        replace,
        &mut target.image_pull_secrets,
    )
    .map_err(&invalid)?;
    restore_field(
        spec,
        "patchPodMetadata",
        replace,
        &mut target.patch_pod_metadata,
    )
    .map_err(&invalid)?;
    restored.set_defaults();

    let (hash, without_image) = sidecarset_hashes(&restored.spec);
    let from_revision = |key: &str| {
        revision
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(key))
            .filter(|v| !v.is_empty())
            .cloned()
    };
    let annotations = restored
        .metadata
        .annotations
        .get_or_insert_with(BTreeMap::new);
    annotations.insert(
        HASH_ANNOTATION.to_owned(),
        from_revision(HASH_ANNOTATION).unwrap_or(hash),
    );
    annotations.insert(
        HASH_WITHOUT_IMAGE_ANNOTATION.to_owned(),
        from_revision(HASH_WITHOUT_IMAGE_ANNOTATION).unwrap_or(without_image),
    );
    restored
        .status
        .get_or_insert_with(SidecarSetStatus::default)
        .latest_revision = Some(revision_name);
    Ok(restored)
}

fn restore_field<T: DeserializeOwned + Default>(
    spec: &Map<String, Value>,
    key: &str,
    replace: bool,
    target: &mut T,
) -> Result<(), String> {
    match spec.get(key) {
        Some(value) => {
            // Read as every other object is, so that each type is compiled
            // with one deserializer (wasm size).
            *target =
                kruise_api::from_value(value.clone(), Strictness::Lenient).map_err(
                    |e| match e {
                        ParseError::Field { path, message } if path == "." => {
                            format!("data.spec.{key}: {message}")
                        }
                        ParseError::Field { path, message } if path.starts_with('[') => {
                            format!("data.spec.{key}{path}: {message}")
                        }
                        ParseError::Field { path, message } => {
                            format!("data.spec.{key}.{path}: {message}")
                        }
                        e => format!("data.spec.{key}: {e}"),
                    },
                )?;
        }
        None if replace => *target = T::default(),
        None => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use k8s_openapi::api::core::v1::Container;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
    use kruise_api::sidecarset::{SidecarContainer, SidecarSetInjectionStrategy, SidecarSetSpec};

    use super::super::hash::stamp_hashes;
    use super::*;

    fn spec_with_image(image: &str) -> SidecarSetSpec {
        SidecarSetSpec {
            containers: vec![SidecarContainer {
                container: Container {
                    name: "a".to_owned(),
                    image: Some(image.to_owned()),
                    ..Default::default()
                },
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    #[test]
    fn hashes_are_recomputed_when_the_revision_has_none() {
        let mut current = SidecarSet::new("s", spec_with_image("a:2"));
        current.spec.injection_strategy = Some(SidecarSetInjectionStrategy {
            paused: false,
            revision: Some(SidecarSetInjectRevision {
                custom_version: Some("v1".to_owned()),
                ..Default::default()
            }),
        });
        current.set_defaults();
        stamp_hashes(&mut current);
        let revision = ControllerRevision {
            metadata: ObjectMeta {
                name: Some("s-1".to_owned()),
                labels: Some(BTreeMap::from([
                    (OWNER_LABEL.to_owned(), "s".to_owned()),
                    (CUSTOM_VERSION_LABEL.to_owned(), "v1".to_owned()),
                ])),
                ..Default::default()
            },
            // Not defaulted: restoring applies the defaults.
            data: RawExtension(serde_json::json!({
                "spec": {"$patch": "replace", "containers": [{"name": "a", "image": "a:1"}]}
            })),
            revision: Some(1),
        };
        let ctx = InjectionContext {
            revisions: std::slice::from_ref(&revision),
            ..Default::default()
        };
        let restored = suitable(&current, &Pod::default(), &ctx)
            .unwrap()
            .into_owned();

        assert_eq!(
            restored.spec.containers[0].container.image.as_deref(),
            Some("a:1")
        );
        assert_eq!(
            restored.status.unwrap().latest_revision.as_deref(),
            Some("s-1")
        );
        let hash_of =
            |s: &SidecarSet, key: &str| s.metadata.annotations.as_ref().unwrap()[key].clone();
        let mut historical = SidecarSet::new("s", spec_with_image("a:1"));
        historical.set_defaults();
        stamp_hashes(&mut historical);
        let restored_annotations = restored.metadata.annotations.unwrap();
        assert_eq!(
            restored_annotations[HASH_ANNOTATION],
            hash_of(&historical, HASH_ANNOTATION)
        );
        assert_ne!(
            restored_annotations[HASH_ANNOTATION],
            hash_of(&current, HASH_ANNOTATION)
        );
        // Only the image differs from the current spec.
        assert_eq!(
            restored_annotations[HASH_WITHOUT_IMAGE_ANNOTATION],
            hash_of(&current, HASH_WITHOUT_IMAGE_ANNOTATION)
        );
    }

    #[test]
    fn percentages() {
        assert_eq!(parse_percentage("100%"), Some(1.0));
        assert_eq!(parse_percentage("0%"), Some(0.0));
        assert_eq!(parse_percentage("12.5%"), Some(0.125));
        assert_eq!(parse_percentage("abc%"), None);
        assert_eq!(parse_percentage("50"), None);
    }
}
