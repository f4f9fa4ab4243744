//! SidecarSet validation, case by case after OpenKruise's
//! `sidecarset_validating_test.go` (TestValidateSidecarSet,
//! TestSidecarSetNameConflict, TestSidecarSetPodMetadataConflict,
//! TestSidecarSetVolumeConflict, TestValidateSidecarSetCanaryAnnotations)
//! and `sidecarset_hotupgrade_test.go` (TestSidecarSetUpdateConflict).
//! Each case states the one field it breaks; the valid base has none.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod validation_common;

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::ControllerRevision;
use kruise_api::{SidecarSet, Strictness, object_from_value};
use kruise_core::sidecarset::patch_whitelist::WHITELIST_KEY;
use kruise_core::sidecarset::validation::{ClusterView, Violation, validate};
use serde_json::{Value, json};

const CASES: &str = include_str!("../../fixtures/sidecarset/validation.yaml");

/// The valid SidecarSet every case changes.
fn base() -> Value {
    validation_common::cases(CASES).0
}

fn set(value: Value) -> SidecarSet {
    serde_json::from_value(value).unwrap()
}

fn with(change: impl FnOnce(&mut Value)) -> SidecarSet {
    let mut value = base();
    change(&mut value);
    set(value)
}

fn fields(violations: &[Violation]) -> Vec<&str> {
    violations.iter().map(|v| v.field.as_str()).collect()
}

/// OpenKruise's configuration with a whitelist that lets every
/// annotation be patched: the shared cases are about the other rules.
fn any_annotation() -> BTreeMap<String, String> {
    [(
        WHITELIST_KEY.to_owned(),
        r#"{"rules": [{"allowedAnnotationKeyExprs": [".*"]}]}"#.to_owned(),
    )]
    .into()
}

fn create(new: &SidecarSet) -> Vec<Violation> {
    let configuration = any_annotation();
    let cluster = ClusterView {
        kruise_configuration: Some(&configuration),
        ..ClusterView::default()
    };
    validate(new, None, cluster)
}

#[test]
fn the_base_is_valid() {
    assert_eq!(create(&set(base())), []);
}

/// A value our types refuse (an unknown enum value) is refused by the
/// parse, naming the field; everything else by [`validate`].
#[test]
fn validate_sidecar_set() {
    let (_, cases) = validation_common::cases(CASES);
    assert!(cases.len() >= 25);
    for validation_common::Case {
        name,
        object,
        refused: field,
    } in cases
    {
        match object_from_value::<SidecarSet>(object, Strictness::Lenient) {
            Err(error) => assert!(
                error.to_string().starts_with(&format!("{field}:")),
                "{name}: {error}"
            ),
            Ok(parsed) => {
                let violations = create(&parsed);
                assert_eq!(
                    fields(&violations),
                    [field.as_str()],
                    "{name}: {violations:?}"
                );
            }
        }
    }
}

#[test]
fn accepted_edge_values() {
    for value in [json!(0), json!("0%"), json!("100%"), json!(2_147_483_647)] {
        let set = with(|s| s["spec"]["updateStrategy"]["partition"] = value.clone());
        assert_eq!(create(&set), [], "partition {value}");
    }
    let not_update = with(|s| {
        s["spec"]["updateStrategy"] = json!({"type": "NotUpdate", "partition": -1});
        s["spec"]["initContainers"] =
            json!([{"name": "init", "image": "i", "restartPolicy": "Always"}]);
    });
    assert_eq!(
        create(&not_update),
        [],
        "NotUpdate skips the rolling checks"
    );
    let by_label = with(|s| {
        s["spec"]["containers"][0]["transferEnv"] = json!([{
            "sourceContainerNameFrom": {"fieldRef": {"fieldPath": "metadata.labels['app.kubernetes.io/name']"}},
            "envName": "X",
        }]);
    });
    assert_eq!(create(&by_label), []);
}

#[test]
fn an_existing_revision_is_accepted() {
    let set =
        with(|s| s["spec"]["injectionStrategy"] = json!({"revision": {"customVersion": "v1"}}));
    let revision: ControllerRevision = serde_json::from_value(json!({
        "metadata": {
            "name": "test-sidecarset-abc", "namespace": "kruise-system",
            "labels": {"kruise.io/sidecarset-name": "test-sidecarset", "apps.kruise.io/sidecarset-custom-version": "v1"},
        },
        "revision": 1,
    }))
    .unwrap();
    let cluster = ClusterView {
        sidecar_sets: &[],
        revisions: &[revision],
        ..ClusterView::default()
    };
    assert_eq!(validate(&set, None, cluster), []);
}

fn other(name: &str, change: impl FnOnce(&mut Value)) -> SidecarSet {
    with(|s| {
        s["metadata"]["name"] = json!(name);
        s["spec"]["containers"][0]["name"] = json!(format!("{name}-sidecar"));
        change(s);
    })
}

fn against(new: &SidecarSet, others: &[SidecarSet]) -> Vec<Violation> {
    let configuration = any_annotation();
    let cluster = ClusterView {
        sidecar_sets: others,
        revisions: &[],
        kruise_configuration: Some(&configuration),
    };
    validate(new, None, cluster)
}

#[test]
fn sidecar_set_name_conflict() {
    let same_container = other("other", |s| {
        s["spec"]["containers"][0]["name"] = json!("test-sidecar");
    });
    assert_eq!(
        fields(&against(
            &set(base()),
            std::slice::from_ref(&same_container)
        )),
        ["spec.containers"]
    );
    // Disjoint selectors, or namespaces selectors that cannot overlap: fine.
    let elsewhere = other("other", |s| {
        s["spec"]["containers"][0]["name"] = json!("test-sidecar");
        s["spec"]["selector"] = json!({"matchLabels": {"app": "redis"}});
    });
    assert_eq!(against(&set(base()), &[elsewhere]), []);
    let mine = with(|s| s["spec"]["namespaceSelector"] = json!({"matchLabels": {"team": "a"}}));
    let theirs = other("other", |s| {
        s["spec"]["containers"][0]["name"] = json!("test-sidecar");
        s["spec"]["namespaceSelector"] = json!({"matchLabels": {"team": "b"}});
    });
    assert_eq!(against(&mine, &[theirs]), []);
    // The stored version of the SidecarSet itself is no conflict.
    assert_eq!(against(&set(base()), &[set(base())]), []);
}

#[test]
fn sidecar_set_volume_conflict() {
    let different = other("other", |s| {
        s["spec"]["volumes"] = json!([{"name": "log", "hostPath": {"path": "/home/work-2"}}]);
    });
    assert_eq!(
        fields(&against(&set(base()), &[different])),
        ["spec.volumes"]
    );
    let equal = other("other", |s| {
        s["spec"]["volumes"] = json!([{"name": "log", "emptyDir": {}}]);
    });
    assert_eq!(against(&set(base()), &[equal]), []);
    let renamed = other("other", |s| {
        s["spec"]["volumes"] = json!([{"name": "volume-3", "emptyDir": {}}]);
    });
    assert_eq!(against(&set(base()), &[renamed]), []);
}

#[test]
fn sidecar_set_pod_metadata_conflict() {
    let patch =
        |policy: &str, key: &str| json!([{"patchPolicy": policy, "annotations": {key: "{}"}}]);
    let cases = [
        ("Overwrite", "MergePatchJson", "key1", "key1", 1),
        ("Retain", "Overwrite", "key1", "key2", 0),
        (
            "MergePatchJson",
            "MergePatchJson",
            "oom-score",
            "oom-score",
            0,
        ),
        ("Retain", "Retain", "key1", "key1", 0),
    ];
    for (mine, theirs, my_key, their_key, want) in cases {
        let new = with(|s| s["spec"]["patchPodMetadata"] = patch(mine, my_key));
        let them = other("other", |s| {
            s["spec"]["patchPodMetadata"] = patch(theirs, their_key);
        });
        let violations = against(&new, &[them]);
        assert_eq!(violations.len(), want, "{mine} vs {theirs}: {violations:?}");
    }
}

fn canary(base_name: &str, strategy: &str) -> SidecarSet {
    with(|s| {
        s["metadata"]["annotations"] = json!({
            "apps.kruise.io/sidecarset-canary": "true",
            "apps.kruise.io/sidecarset-base": base_name,
        });
        s["spec"]["updateStrategy"] = json!({"type": strategy});
    })
}

#[test]
fn validate_sidecar_set_canary_annotations() {
    let base_set = other("base-sidecarset", |_| {});
    let canary_base = with(|s| {
        s["metadata"] = json!({"name": "base1-sidecarset", "annotations": {
            "apps.kruise.io/sidecarset-canary": "true", "apps.kruise.io/sidecarset-base": "other-base",
        }});
        s["spec"]["containers"][0]["name"] = json!("base1-sidecar");
    });
    let others = [base_set, canary_base];
    let cases = [
        (
            "valid base",
            canary("base-sidecarset", "NotUpdate"),
            Vec::<&str>::new(),
        ),
        (
            "base is itself",
            canary("test-sidecarset", "NotUpdate"),
            vec!["metadata.annotations"],
        ),
        (
            "base is a canary",
            canary("base1-sidecarset", "NotUpdate"),
            vec!["metadata.annotations"],
        ),
        (
            "base not found",
            canary("nonexistent-sidecarset", "NotUpdate"),
            vec!["metadata.annotations"],
        ),
        (
            "RollingUpdate",
            canary("base-sidecarset", "RollingUpdate"),
            vec!["spec.updateStrategy.type"],
        ),
    ];
    for (name, new, want) in cases {
        assert_eq!(fields(&against(&new, &others)), want, "{name}");
    }
    // The canary shares its base's container names: no conflict with it.
    let shared = with(|s| {
        s["metadata"]["annotations"] = json!({
            "apps.kruise.io/sidecarset-canary": "true", "apps.kruise.io/sidecarset-base": "base-sidecarset",
        });
        s["spec"]["updateStrategy"] = json!({"type": "NotUpdate"});
    });
    let base_with_same = other("base-sidecarset", |s| {
        s["spec"]["containers"][0]["name"] = json!("test-sidecar");
    });
    assert_eq!(against(&shared, &[base_with_same]), []);

    // The base annotation cannot change.
    let cluster = ClusterView {
        sidecar_sets: &others,
        revisions: &[],
        ..ClusterView::default()
    };
    let old = canary("base-sidecarset", "NotUpdate");
    assert_eq!(validate(&old, Some(&old), cluster), []);
    let moved = canary("base1-sidecarset", "NotUpdate");
    assert!(
        validate(&moved, Some(&old), cluster)
            .iter()
            .any(|v| v.message.contains("is immutable"))
    );
}

#[test]
fn sidecar_set_update_conflict() {
    let hot = |value: &mut Value| {
        value["spec"]["containers"][0]["upgradeStrategy"] = json!({"upgradeType": "HotUpgrade"});
    };
    let old = with(|s| {
        s["spec"]["containers"][0]["upgradeStrategy"] = json!({"upgradeType": "ColdUpgrade"});
    });
    let new = with(hot);
    let violations = validate(&new, Some(&old), ClusterView::default());
    assert_eq!(
        fields(&violations),
        ["spec.containers[0].upgradeStrategy.upgradeType"]
    );
    // Unset before: the first choice is free.
    assert_eq!(
        validate(&new, Some(&set(base())), ClusterView::default()),
        []
    );
    // Containers cannot be added or renamed on update.
    let renamed = with(|s| s["spec"]["containers"][0]["name"] = json!("renamed"));
    assert_eq!(
        fields(&validate(
            &renamed,
            Some(&set(base())),
            ClusterView::default()
        )),
        ["spec.containers[0].name"]
    );
}

/// OpenKruise's TestValidateSidecarSetPatchMetadataWhitelist, and the
/// configurations it cannot use: the SidecarSet (labels `app: sidecar`)
/// patches `key1`.
#[test]
fn patched_annotations_must_be_whitelisted() {
    let patching = with(|s| {
        s["metadata"]["labels"] = json!({"app": "sidecar"});
        s["spec"]["patchPodMetadata"] = json!([{"annotations": {"key1": "value1"}}]);
    });
    let not_found = Some("Required value: SidecarSet patch metadata whitelist not found");
    let not_allowed = Some("Required value: sidecarSet patch metadata annotation is not allowed");
    let key1 = Some("Required value: sidecarSet patch metadata annotation(key1) is not allowed");
    let cases: [(&str, Option<&str>, Option<&str>); 10] = [
        ("no configuration", None, not_found),
        ("configuration without the key", Some(""), not_found),
        (
            "key.* for all",
            Some(r#"{"rules":[{"allowedAnnotationKeyExprs":["key.*"]}]}"#),
            None,
        ),
        (
            "only key2",
            Some(r#"{"rules":[{"allowedAnnotationKeyExprs":["key2"]}]}"#),
            key1,
        ),
        (
            "rule for other SidecarSets",
            Some(
                r#"{"rules":[{"allowedAnnotationKeyExprs":["key.*"],"selector":{"matchLabels":{"app":"other"}}}]}"#,
            ),
            not_allowed,
        ),
        (
            "rule for this SidecarSet",
            Some(
                r#"{"rules":[{"allowedAnnotationKeyExprs":["key.*"],"selector":{"matchLabels":{"app":"sidecar"}}}]}"#,
            ),
            None,
        ),
        // Go's MatchString finds the pattern anywhere in the key.
        (
            "unanchored",
            Some(r#"{"rules":[{"allowedAnnotationKeyExprs":["ey"]}]}"#),
            None,
        ),
        ("no rules", Some("{}"), not_allowed),
        (
            "not JSON",
            Some("{rules"),
            Some("Required value: kruise-configuration"),
        ),
        (
            "bad pattern",
            Some(r#"{"rules":[{"allowedAnnotationKeyExprs":["("]}]}"#),
            Some("Required value: kruise-configuration"),
        ),
    ];
    for (name, whitelist, refused) in cases {
        let configuration: Option<BTreeMap<String, String>> = whitelist.map(|text| {
            if text.is_empty() {
                BTreeMap::from([("other".to_owned(), "x".to_owned())])
            } else {
                BTreeMap::from([(WHITELIST_KEY.to_owned(), text.to_owned())])
            }
        });
        let cluster = ClusterView {
            kruise_configuration: configuration.as_ref(),
            ..ClusterView::default()
        };
        let violations = validate(&patching, None, cluster);
        match refused {
            None => assert_eq!(violations, [], "{name}"),
            Some(start) => {
                assert_eq!(fields(&violations), ["spec.patchPodMetadata"], "{name}");
                assert!(
                    violations[0].message.starts_with(start),
                    "{name}: {violations:?}"
                );
            }
        }
    }
    // A SidecarSet that patches nothing needs no whitelist.
    assert_eq!(validate(&with(|_| {}), None, ClusterView::default()), []);
}
