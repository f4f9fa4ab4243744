//! Pod annotations written by injection: `patchPodMetadata` (§3.3), the
//! per-SidecarSet hash records and injected list (§3.4), and the hot-upgrade
//! bookkeeping (§3.7).

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use kruise_api::SidecarSet;
use kruise_api::sidecarset::PatchPolicy;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::containers::Built;
use super::{InjectionError, sidecar_set_name};

/// On a SidecarSet: its hash. On a pod: JSON map SidecarSet name → record
/// `{updateTimestamp, hash, sidecarSetName, sidecarList, controllerRevision}`.
pub const HASH_ANNOTATION: &str = "kruise.io/sidecarset-hash";
/// Same, with images blanked before hashing.
pub const HASH_WITHOUT_IMAGE_ANNOTATION: &str = "kruise.io/sidecarset-hash-without-image";
/// On a pod: comma-joined sorted names of the SidecarSets injected.
pub const INJECTED_LIST_ANNOTATION: &str = "kruise.io/sidecarset-injected-list";
/// On a pod: JSON map sidecar name → the twin currently working (`name-1`/`name-2`).
pub const WORKING_HOT_UPGRADE_ANNOTATION: &str =
    "kruise.io/sidecarset-working-hotupgrade-container";
/// Env var `IS_INJECTED=true` marks a container as an injected sidecar.
pub const INJECTED_ENV: &str = "IS_INJECTED";

const VERSION_PREFIX: &str = "version.sidecarset.kruise.io/";
const VERSION_ALT_PREFIX: &str = "versionalt.sidecarset.kruise.io/";

/// The pod annotation a hot-upgrade twin's `SIDECARSET_VERSION` reads.
pub(super) fn version_annotation(container: &str) -> String {
    format!("{VERSION_PREFIX}{container}")
}

/// The pod annotation a hot-upgrade twin's `SIDECARSET_VERSION_ALT` reads.
pub(super) fn version_alt_annotation(container: &str) -> String {
    format!("{VERSION_ALT_PREFIX}{container}")
}

/// One SidecarSet's entry in the pod's hash annotations. Field order and
/// `null`s follow OpenKruise's JSON so its controller can read ours.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct HashRecord {
    #[serde(default)]
    pub(crate) update_timestamp: Option<String>,
    #[serde(default)]
    pub(crate) hash: String,
    #[serde(default)]
    pub(crate) sidecar_set_name: String,
    #[serde(default)]
    pub(crate) sidecar_list: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub(crate) controller_revision: String,
}

/// Apply a SidecarSet's `patchPodMetadata` entries to the pod's annotations.
pub(super) fn patch_pod_metadata(
    annotations: &mut BTreeMap<String, String>,
    sidecar_set: &SidecarSet,
) -> Result<(), InjectionError> {
    for patch in &sidecar_set.spec.patch_pod_metadata {
        for (key, value) in &patch.annotations {
            let existing = annotations.get(key);
            let new_value = match (patch.patch_policy.unwrap_or_default(), existing) {
                // Retain looks at the key; MergePatchJson needs a value to merge into.
                (PatchPolicy::Retain, Some(_)) => continue,
                (PatchPolicy::MergePatchJson, Some(old)) if !old.is_empty() => {
                    merge_patch_text(old, value).map_err(|message| {
                        InjectionError::PatchPodMetadata {
                            sidecar_set: sidecar_set_name(sidecar_set).to_owned(),
                            key: key.clone(),
                            message,
                        }
                    })?
                }
                _ => value.clone(),
            };
            annotations.insert(key.clone(), new_value);
        }
    }
    Ok(())
}

/// RFC 7386 JSON merge patch of two JSON texts; the result is compact with
/// sorted keys, as Go's encoder writes it.
fn merge_patch_text(target: &str, patch: &str) -> Result<String, String> {
    let mut document: Value =
        serde_json::from_str(target).map_err(|e| format!("the pod's value is not JSON: {e}"))?;
    let patch: Value =
        serde_json::from_str(patch).map_err(|e| format!("the patch is not JSON: {e}"))?;
    merge_patch(&mut document, &patch);
    Ok(to_json(&sorted_keys(document)))
}

fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch_fields) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(serde_json::Map::new());
    }
    if let Value::Object(fields) = target {
        for (key, value) in patch_fields {
            if value.is_null() {
                fields.remove(key);
            } else {
                merge_patch(fields.entry(key.clone()).or_insert(Value::Null), value);
            }
        }
    }
}

fn sorted_keys(value: Value) -> Value {
    match value {
        Value::Object(fields) => {
            let mut sorted = serde_json::Map::new();
            sorted.extend(crate::ordered::map(
                fields.into_iter().map(|(k, v)| (k, sorted_keys(v))),
            ));
            Value::Object(sorted)
        }
        Value::Array(items) => Value::Array(items.into_iter().map(sorted_keys).collect()),
        other => other,
    }
}

/// The annotations injection writes once containers were emitted: both
/// hash maps, the injected list and, for hot-upgraded sidecars, the version
/// annotations and the working-twin map. `existing` are the pod's
/// annotations after `patchPodMetadata`.
pub(super) fn injected(
    existing: &BTreeMap<String, String>,
    selected: &[Cow<'_, SidecarSet>],
    built: &Built,
    now: &str,
) -> Result<BTreeMap<String, String>, InjectionError> {
    let mut hashes = parse_records(existing, HASH_ANNOTATION)?;
    let mut hashes_without_image = parse_records(existing, HASH_WITHOUT_IMAGE_ANNOTATION)?;
    let mut injected_names: BTreeSet<String> = existing
        .get(INJECTED_LIST_ANNOTATION)
        .map(|list| {
            crate::ordered::set(list.split(',').filter(|n| !n.is_empty()).map(str::to_owned))
        })
        .unwrap_or_default();

    for sidecar_set in selected {
        let name = sidecar_set_name(sidecar_set);
        injected_names.insert(name.to_owned());
        let Some(sidecar_list) = built.sidecar_lists.get(name) else {
            continue;
        };
        let own = |key| {
            sidecar_set
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(key))
                .cloned()
        };
        let record = HashRecord {
            update_timestamp: Some(now.to_owned()),
            hash: own(HASH_ANNOTATION).unwrap_or_default(),
            sidecar_set_name: name.to_owned(),
            sidecar_list: Some(sidecar_list.clone()),
            controller_revision: String::new(),
        };
        let latest_revision = sidecar_set
            .status
            .as_ref()
            .and_then(|s| s.latest_revision.clone());
        hashes_without_image.insert(
            name.to_owned(),
            HashRecord {
                hash: own(HASH_WITHOUT_IMAGE_ANNOTATION).unwrap_or_default(),
                ..record.clone()
            },
        );
        hashes.insert(
            name.to_owned(),
            HashRecord {
                controller_revision: latest_revision.unwrap_or_default(),
                ..record
            },
        );
    }

    let mut written = BTreeMap::from([
        (HASH_ANNOTATION.to_owned(), to_json(&hashes)),
        (
            HASH_WITHOUT_IMAGE_ANNOTATION.to_owned(),
            to_json(&hashes_without_image),
        ),
        (
            INJECTED_LIST_ANNOTATION.to_owned(),
            injected_names.into_iter().collect::<Vec<_>>().join(","),
        ),
    ]);
    if !built.hot_upgraded.is_empty() {
        // An unreadable map is treated as empty, as OpenKruise does.
        let mut working: BTreeMap<String, String> = existing
            .get(WORKING_HOT_UPGRADE_ANNOTATION)
            .and_then(|text| serde_json::from_str(text).ok())
            .unwrap_or_default();
        for sidecar in &built.hot_upgraded {
            let (first, second) = (format!("{sidecar}-1"), format!("{sidecar}-2"));
            // The first twin starts as the working one, the second idles.
            written.insert(version_annotation(&first), "1".to_owned());
            written.insert(version_alt_annotation(&first), "0".to_owned());
            written.insert(version_annotation(&second), "0".to_owned());
            written.insert(version_alt_annotation(&second), "1".to_owned());
            working.insert(sidecar.clone(), first);
        }
        written.insert(WORKING_HOT_UPGRADE_ANNOTATION.to_owned(), to_json(&working));
    }
    Ok(written)
}

/// The pod's hash map, accepting the legacy `{"name":"hash"}` form.
pub(crate) fn parse_records(
    annotations: &BTreeMap<String, String>,
    key: &'static str,
) -> Result<BTreeMap<String, HashRecord>, InjectionError> {
    let Some(text) = annotations.get(key).filter(|t| !t.is_empty()) else {
        return Ok(BTreeMap::new());
    };
    let current = match serde_json::from_str::<Option<BTreeMap<String, HashRecord>>>(text) {
        Ok(records) => return Ok(records.unwrap_or_default()),
        Err(e) => e,
    };
    let legacy: BTreeMap<String, String> =
        serde_json::from_str(text).map_err(|_| InjectionError::InvalidHashAnnotation {
            key,
            message: current.to_string(),
        })?;
    Ok(crate::ordered::map(legacy.into_iter().map(
        |(name, hash)| {
            let record = HashRecord {
                hash,
                sidecar_set_name: name.clone(),
                ..HashRecord::default()
            };
            (name, record)
        },
    )))
}

/// Maps of strings and plain records always serialize.
fn to_json<T: Serialize>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use kruise_api::sidecarset::{SidecarSetPatchPodMetadata, SidecarSetSpec};

    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn with_patches(patches: Vec<(PatchPolicy, &[(&str, &str)])>) -> SidecarSet {
        let spec = SidecarSetSpec {
            patch_pod_metadata: patches
                .into_iter()
                .map(|(policy, annotations)| SidecarSetPatchPodMetadata {
                    annotations: map(annotations),
                    patch_policy: Some(policy),
                })
                .collect(),
            ..Default::default()
        };
        SidecarSet::new("s", spec)
    }

    // Cases of upstream TestPatchPodMetadata (pkg/control/sidecarcontrol/util_test.go).
    #[test]
    fn retain_and_overwrite_on_a_bare_pod() {
        let mut pod = BTreeMap::new();
        let set = with_patches(vec![
            (PatchPolicy::Retain, &[("key1", "value1")]),
            (PatchPolicy::Overwrite, &[("key2", "value2")]),
        ]);
        patch_pod_metadata(&mut pod, &set).unwrap();
        assert_eq!(pod, map(&[("key1", "value1"), ("key2", "value2")]));
    }

    #[test]
    fn retain_keeps_and_overwrite_replaces() {
        let mut pod = map(&[("key1", "old"), ("key2", "old")]);
        let set = with_patches(vec![
            (PatchPolicy::Retain, &[("key1", "value1")]),
            (PatchPolicy::Overwrite, &[("key2", "value2")]),
        ]);
        patch_pod_metadata(&mut pod, &set).unwrap();
        assert_eq!(pod, map(&[("key1", "old"), ("key2", "value2")]));
    }

    #[test]
    fn merge_patch_json_merges_or_sets() {
        let mut pod = map(&[
            ("key1", r#"{"log-agent":1}"#),
            ("key2", r#"{"log-agent":1}"#),
        ]);
        let set = with_patches(vec![(
            PatchPolicy::MergePatchJson,
            &[
                ("key1", r#"{"log-agent":1}"#),
                ("key2", r#"{"envoy":2}"#),
                ("key3", r#"{"probe":5}"#),
            ],
        )]);
        patch_pod_metadata(&mut pod, &set).unwrap();
        assert_eq!(
            pod,
            map(&[
                ("key1", r#"{"log-agent":1}"#),
                ("key2", r#"{"envoy":2,"log-agent":1}"#),
                ("key3", r#"{"probe":5}"#),
            ])
        );
    }

    #[test]
    fn retain_looks_at_the_key_merge_at_the_value() {
        let mut pod = map(&[("retained", ""), ("merged", "")]);
        let set = with_patches(vec![
            (PatchPolicy::Retain, &[("retained", "new")]),
            (PatchPolicy::MergePatchJson, &[("merged", r#"{"a":1}"#)]),
        ]);
        patch_pod_metadata(&mut pod, &set).unwrap();
        assert_eq!(pod, map(&[("retained", ""), ("merged", r#"{"a":1}"#)]));
    }

    #[test]
    fn merge_patch_follows_rfc_7386() {
        // The test cases of RFC 7386 Appendix A.
        let cases = [
            (r#"{"a":"b"}"#, r#"{"a":"c"}"#, r#"{"a":"c"}"#),
            (r#"{"a":"b"}"#, r#"{"b":"c"}"#, r#"{"a":"b","b":"c"}"#),
            (r#"{"a":"b"}"#, r#"{"a":null}"#, r"{}"),
            (r#"{"a":"b","b":"c"}"#, r#"{"a":null}"#, r#"{"b":"c"}"#),
            (r#"{"a":["b"]}"#, r#"{"a":"c"}"#, r#"{"a":"c"}"#),
            (r#"{"a":"c"}"#, r#"{"a":["b"]}"#, r#"{"a":["b"]}"#),
            (
                r#"{"a":{"b":"c"}}"#,
                r#"{"a":{"b":"d","c":null}}"#,
                r#"{"a":{"b":"d"}}"#,
            ),
            (r#"{"a":[{"b":"c"}]}"#, r#"{"a":[1]}"#, r#"{"a":[1]}"#),
            (r#"["a","b"]"#, r#"["c","d"]"#, r#"["c","d"]"#),
            (r#"{"a":"b"}"#, r#"["c"]"#, r#"["c"]"#),
            (r#"{"a":"foo"}"#, "null", "null"),
            (r#"{"a":"foo"}"#, r#""bar""#, r#""bar""#),
            (r#"{"e":null}"#, r#"{"a":1}"#, r#"{"a":1,"e":null}"#),
            (r"[1,2]", r#"{"a":"b","c":null}"#, r#"{"a":"b"}"#),
            (r"{}", r#"{"a":{"bb":{"ccc":null}}}"#, r#"{"a":{"bb":{}}}"#),
        ];
        for (target, patch, expected) in cases {
            assert_eq!(
                merge_patch_text(target, patch).unwrap(),
                expected,
                "{target} + {patch}"
            );
        }
    }

    #[test]
    fn merge_patch_of_non_json_is_an_error_naming_the_key() {
        let mut pod = map(&[("key1", "not json")]);
        let set = with_patches(vec![(
            PatchPolicy::MergePatchJson,
            &[("key1", r#"{"a":1}"#)],
        )]);
        let err = patch_pod_metadata(&mut pod, &set).unwrap_err();
        assert!(err.to_string().contains("key1"), "{err}");
        assert!(err.to_string().contains("SidecarSet s"), "{err}");
    }

    #[test]
    fn legacy_hash_map_is_read_as_records() {
        let pod = map(&[(HASH_ANNOTATION, r#"{"sidecarset-test":"abc"}"#)]);
        let records = parse_records(&pod, HASH_ANNOTATION).unwrap();
        assert_eq!(
            to_json(&records),
            r#"{"sidecarset-test":{"updateTimestamp":null,"hash":"abc","sidecarSetName":"sidecarset-test","sidecarList":null}}"#
        );
    }

    #[test]
    fn records_round_trip_in_openkruise_shape() {
        let text = r#"{"a":{"updateTimestamp":"2024-05-01T10:00:00Z","hash":"h","sidecarSetName":"a","sidecarList":["x","y"],"controllerRevision":"a-1"}}"#;
        let pod = map(&[(HASH_ANNOTATION, text)]);
        assert_eq!(
            to_json(&parse_records(&pod, HASH_ANNOTATION).unwrap()),
            text
        );
    }

    #[test]
    fn unreadable_hash_annotation_is_an_error() {
        let pod = map(&[(HASH_WITHOUT_IMAGE_ANNOTATION, "failed-sidecarset-hash")]);
        let err = parse_records(&pod, HASH_WITHOUT_IMAGE_ANNOTATION).unwrap_err();
        assert!(
            err.to_string().contains(HASH_WITHOUT_IMAGE_ANNOTATION),
            "{err}"
        );
    }
}
