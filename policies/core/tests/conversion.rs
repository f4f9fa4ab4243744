//! v1alpha1 ⇄ v1beta1 conversion: OpenKruise's own cases
//! (apis/apps/v1alpha1/conversion_test.go, TestCloneSet_ConvertTo/From and
//! TestSidecarSet_ConvertTo/From; resourcedistribution_conversion_test.go),
//! written as JSON, then round trips of the objects OpenKruise stores.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::needless_pass_by_value
)]

mod openkruise_recorded;

use kruise_core::conversion::convert;
use serde_json::{Value, json};

const ALPHA: &str = "apps.kruise.io/v1alpha1";
const BETA: &str = "apps.kruise.io/v1beta1";

fn cloneset(version: &str, metadata: Value, spec_extra: Value) -> Value {
    let mut spec = json!({
        "replicas": 3,
        "selector": {"matchLabels": {"app": "test"}},
        "template": {"spec": {"containers": [{"name": "nginx", "image": "nginx:latest"}]}},
    });
    for (key, value) in spec_extra.as_object().unwrap() {
        spec[key] = value.clone();
    }
    json!({"apiVersion": version, "kind": "CloneSet", "metadata": metadata, "spec": spec})
}

fn assert_converts(input: &Value, version: &str, expected: &Value) {
    let converted = convert(input, version).unwrap();
    assert_eq!(
        &converted,
        expected,
        "\n{}",
        serde_json::to_string_pretty(&converted).unwrap()
    );
}

// ---- CloneSet, v1alpha1 → v1beta1 ----

#[test]
fn cloneset_label_based_exclude_preparing_delete_becomes_the_spec_field() {
    let labels =
        json!({"app": "test", "apps.kruise.io/cloneset-scaling-exclude-preparing-delete": "true"});
    let metadata = json!({"name": "test-cs-label", "namespace": "default", "labels": labels});
    let alpha = cloneset(
        ALPHA,
        metadata.clone(),
        json!({"scaleStrategy": {"disablePVCReuse": true}}),
    );
    let beta = cloneset(
        BETA,
        metadata,
        json!({
            "scaleStrategy": {"excludePreparingDelete": true},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"podUpdatePolicy": "ReCreate"}},
        }),
    );
    assert_converts(&alpha, BETA, &beta);
}

#[test]
fn cloneset_minimal_fields_enable_pvc_reuse_and_recreate() {
    let metadata = json!({"name": "minimal-cs", "namespace": "default"});
    let alpha = cloneset(ALPHA, metadata.clone(), json!({}));
    let beta = cloneset(
        BETA,
        metadata,
        json!({
            "scaleStrategy": {"enablePVCReuse": true},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"podUpdatePolicy": "ReCreate"}},
        }),
    );
    assert_converts(&alpha, BETA, &beta);
}

#[test]
fn cloneset_alpha_strategy_types_become_pod_update_policies() {
    for (alpha_type, policy) in [
        ("ReCreate", "ReCreate"),
        ("InPlaceOnly", "InPlaceOnly"),
        ("InPlaceIfPossible", "InPlaceIfPossible"),
    ] {
        let metadata = json!({"name": "cs", "namespace": "default"});
        let alpha = cloneset(
            ALPHA,
            metadata.clone(),
            json!({"updateStrategy": {"type": alpha_type}}),
        );
        let beta = cloneset(
            BETA,
            metadata,
            json!({
                "scaleStrategy": {"enablePVCReuse": true},
                "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"podUpdatePolicy": policy}},
            }),
        );
        assert_converts(&alpha, BETA, &beta);
    }
}

#[test]
fn cloneset_all_rolling_fields_move_under_rolling_update() {
    let metadata = json!({"name": "test-cs", "namespace": "default"});
    let rolling = json!({
        "partition": "20%",
        "maxUnavailable": 1,
        "maxSurge": "10%",
        "paused": true,
        "priorityStrategy": {"weightPriority": [{"weight": 50, "matchSelector": {"matchLabels": {"key": "value"}}}]},
        "scatterStrategy": [{"key": "zone", "value": "a"}],
    });
    let mut alpha_strategy = rolling.clone();
    alpha_strategy["type"] = json!("InPlaceIfPossible");
    alpha_strategy["inPlaceUpdateStrategy"] = json!({"gracePeriodSeconds": 10});
    let mut beta_rolling = rolling;
    beta_rolling["podUpdatePolicy"] = json!("InPlaceIfPossible");
    beta_rolling["inPlaceUpdateStrategy"] = json!({"gracePeriodSeconds": 10});
    let alpha = cloneset(
        ALPHA,
        metadata.clone(),
        json!({
            "scaleStrategy": {"podsToDelete": ["pod-1"], "maxUnavailable": 2},
            "updateStrategy": alpha_strategy,
        }),
    );
    let beta = cloneset(
        BETA,
        metadata,
        json!({
            "scaleStrategy": {"podsToDelete": ["pod-1"], "maxUnavailable": 2, "enablePVCReuse": true},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": beta_rolling},
        }),
    );
    assert_converts(&alpha, BETA, &beta);
    assert_converts(&beta, ALPHA, &{
        let mut back = alpha.clone();
        back["spec"]["scaleStrategy"] = json!({"podsToDelete": ["pod-1"], "maxUnavailable": 2});
        back
    });
}

#[test]
fn cloneset_image_predownload_annotations_become_spec_fields() {
    let metadata = json!({"name": "test-cs-with-annotations", "namespace": "default", "annotations": {
        "apps.kruise.io/image-predownload-parallelism": "2",
        "apps.kruise.io/image-predownload-timeout-seconds": "300",
        "apps.kruise.io/image-predownload-min-updated-ready-pods": "5",
    }});
    let alpha = cloneset(
        ALPHA,
        metadata.clone(),
        json!({"updateStrategy": {"type": "InPlaceIfPossible"}}),
    );
    let beta = cloneset(
        BETA,
        metadata,
        json!({
            "scaleStrategy": {"enablePVCReuse": true},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {
                "podUpdatePolicy": "InPlaceIfPossible",
                "inPlaceUpdateStrategy": {
                    "imagePreDownloadParallelism": 2,
                    "imagePreDownloadTimeoutSeconds": 300,
                    "imagePreDownloadMinUpdatedReadyPods": 5,
                },
            }},
        }),
    );
    assert_converts(&alpha, BETA, &beta);
}

#[test]
fn cloneset_an_unknown_type_passes_through_both_ways() {
    // OpenKruise turns it into ReCreate; we keep the typo, so that
    // validation and the controller still see and report it.
    let metadata = json!({"name": "cs", "namespace": "default"});
    let alpha = cloneset(
        ALPHA,
        metadata.clone(),
        json!({
            "scaleStrategy": {}, "updateStrategy": {"type": "InPlaceIfPosible"},
        }),
    );
    let beta = cloneset(
        BETA,
        metadata,
        json!({
            "scaleStrategy": {"enablePVCReuse": true},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"podUpdatePolicy": "InPlaceIfPosible"}},
        }),
    );
    assert_converts(&alpha, BETA, &beta);
    assert_converts(&beta, ALPHA, &alpha);
}

#[test]
fn cloneset_on_delete_has_no_rolling_update() {
    let metadata = json!({"name": "cs", "namespace": "default"});
    let alpha = cloneset(
        ALPHA,
        metadata.clone(),
        json!({"updateStrategy": {"type": "OnDelete", "partition": 2}}),
    );
    let beta = cloneset(
        BETA,
        metadata,
        json!({
            "scaleStrategy": {"enablePVCReuse": true},
            "updateStrategy": {"type": "OnDelete"},
        }),
    );
    assert_converts(&alpha, BETA, &beta);
}

// ---- CloneSet, v1beta1 → v1alpha1 ----

#[test]
fn cloneset_from_beta_exclude_preparing_delete_is_kept_as_the_label() {
    // OpenKruise drops the setting here; we write the label v1alpha1 reads
    // it from, so the v1alpha1 view (our webhooks') keeps it.
    let metadata = json!({"name": "cs", "namespace": "default"});
    let beta = cloneset(
        BETA,
        metadata,
        json!({"scaleStrategy": {"excludePreparingDelete": true}}),
    );
    let labels = json!({"apps.kruise.io/cloneset-scaling-exclude-preparing-delete": "true"});
    let alpha = cloneset(
        ALPHA,
        json!({"name": "cs", "namespace": "default", "labels": labels}),
        json!({
            "scaleStrategy": {"disablePVCReuse": true},
            "updateStrategy": {"type": "ReCreate"},
        }),
    );
    assert_converts(&beta, ALPHA, &alpha);
    assert_eq!(
        convert(&alpha, BETA).unwrap()["spec"]["scaleStrategy"],
        json!({"excludePreparingDelete": true})
    );
}

#[test]
fn cloneset_from_beta_minimal_fields_disable_pvc_reuse() {
    let metadata = json!({"name": "minimal-cs", "namespace": "default"});
    let beta = cloneset(BETA, metadata.clone(), json!({}));
    let alpha = cloneset(
        ALPHA,
        metadata,
        json!({
            "scaleStrategy": {"disablePVCReuse": true},
            "updateStrategy": {"type": "ReCreate"},
        }),
    );
    assert_converts(&beta, ALPHA, &alpha);
}

#[test]
fn cloneset_from_beta_pod_update_policies_become_alpha_types() {
    for (beta_strategy, alpha_type) in [
        (
            json!({"type": "RollingUpdate", "rollingUpdate": {"podUpdatePolicy": "ReCreate"}}),
            "ReCreate",
        ),
        (
            json!({"type": "RollingUpdate", "rollingUpdate": {"podUpdatePolicy": "InPlaceOnly"}}),
            "InPlaceOnly",
        ),
        (
            json!({"type": "RollingUpdate", "rollingUpdate": {"podUpdatePolicy": "InPlaceIfPossible"}}),
            "InPlaceIfPossible",
        ),
        (
            json!({"type": "RollingUpdate", "rollingUpdate": {}}),
            "ReCreate",
        ),
        (json!({"type": "RollingUpdate"}), "ReCreate"),
        (json!({"type": "OnDelete"}), "OnDelete"),
    ] {
        let metadata = json!({"name": "cs", "namespace": "default"});
        let beta = cloneset(
            BETA,
            metadata.clone(),
            json!({
                "scaleStrategy": {"enablePVCReuse": true},
                "updateStrategy": beta_strategy,
            }),
        );
        let alpha = cloneset(
            ALPHA,
            metadata,
            json!({
                "scaleStrategy": {},
                "updateStrategy": {"type": alpha_type},
            }),
        );
        assert_converts(&beta, ALPHA, &alpha);
    }
}

#[test]
fn cloneset_from_beta_image_predownload_fields_become_annotations() {
    let beta = cloneset(
        BETA,
        json!({"name": "cs", "namespace": "default"}),
        json!({
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {
                "podUpdatePolicy": "InPlaceIfPossible",
                "inPlaceUpdateStrategy": {
                    "imagePreDownloadParallelism": 3,
                    "imagePreDownloadTimeoutSeconds": 450,
                    "imagePreDownloadMinUpdatedReadyPods": 10,
                },
            }},
        }),
    );
    let metadata = json!({"name": "cs", "namespace": "default", "annotations": {
        "apps.kruise.io/image-predownload-parallelism": "3",
        "apps.kruise.io/image-predownload-timeout-seconds": "450",
        "apps.kruise.io/image-predownload-min-updated-ready-pods": "10",
    }});
    let alpha = cloneset(
        ALPHA,
        metadata,
        json!({
            "scaleStrategy": {"disablePVCReuse": true},
            "updateStrategy": {"type": "InPlaceIfPossible", "inPlaceUpdateStrategy": {}},
        }),
    );
    assert_converts(&beta, ALPHA, &alpha);
}

#[test]
fn cloneset_from_beta_empty_in_place_strategy_is_kept() {
    // OpenKruise drops it; its own defaulting stores it, so we keep it.
    let beta = cloneset(
        BETA,
        json!({"name": "cs"}),
        json!({
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {
                "podUpdatePolicy": "InPlaceIfPossible", "inPlaceUpdateStrategy": {}}},
        }),
    );
    let converted = convert(&beta, ALPHA).unwrap();
    assert_eq!(
        converted["spec"]["updateStrategy"],
        json!({"type": "InPlaceIfPossible", "inPlaceUpdateStrategy": {}})
    );
}

#[test]
fn cloneset_status_and_unknown_fields_pass_through() {
    let status = json!({
        "observedGeneration": 2, "replicas": 3, "readyReplicas": 3, "availableReplicas": 3,
        "updatedReplicas": 1, "updatedReadyReplicas": 1, "updateRevision": "cs-abc",
        "currentRevision": "cs-def", "collisionCount": 1, "labelSelector": "app=test",
        "conditions": [{"type": "FailedScale", "status": "True", "reason": "r", "message": "m"}],
    });
    let mut alpha = cloneset(
        ALPHA,
        json!({"name": "cs"}),
        json!({
            "minReadySeconds": 5, "revisionHistoryLimit": 4, "lifecycle": {"preDelete": {"finalizersHandler": ["x"]}},
            "futureField": {"kept": true},
            "updateStrategy": {"type": "ReCreate"},
        }),
    );
    alpha["status"] = status.clone();
    let beta = convert(&alpha, BETA).unwrap();
    assert_eq!(beta["status"], status);
    assert_eq!(beta["spec"]["futureField"], json!({"kept": true}));
    // Go writes the scale strategy even when it is empty.
    alpha["spec"]["scaleStrategy"] = json!({});
    assert_eq!(convert(&beta, ALPHA).unwrap(), alpha);
}

// ---- SidecarSet ----

fn sidecarset(version: &str, labels: Value, spec_extra: Value) -> Value {
    let mut spec = json!({
        "selector": {"matchLabels": {"app": "test"}},
        "containers": [{"name": "sidecar", "image": "busybox", "podInjectPolicy": "BeforeAppContainer"}],
    });
    for (key, value) in spec_extra.as_object().unwrap() {
        spec[key] = value.clone();
    }
    let mut metadata = json!({"name": "test-sidecarset"});
    if !labels.is_null() {
        metadata["labels"] = labels;
    }
    json!({"apiVersion": version, "kind": "SidecarSet", "metadata": metadata, "spec": spec})
}

fn name_selector(namespace: &str) -> Value {
    json!({"matchLabels": {"kubernetes.io/metadata.name": namespace}})
}

#[test]
fn sidecarset_namespace_takes_priority_over_a_selector() {
    let alpha = sidecarset(
        ALPHA,
        Value::Null,
        json!({
            "namespace": "test-ns",
            "namespaceSelector": {"matchLabels": {"env": "prod"}},
        }),
    );
    let beta = sidecarset(
        BETA,
        Value::Null,
        json!({"namespaceSelector": name_selector("test-ns")}),
    );
    assert_converts(&alpha, BETA, &beta);
}

#[test]
fn sidecarset_namespace_only_and_selector_only() {
    let alpha = sidecarset(ALPHA, Value::Null, json!({"namespace": "ns-only"}));
    let beta = sidecarset(
        BETA,
        Value::Null,
        json!({"namespaceSelector": name_selector("ns-only")}),
    );
    assert_converts(&alpha, BETA, &beta);

    let selector = json!({"matchExpressions": [{"key": "env", "operator": "In", "values": ["a"]}]});
    let alpha = sidecarset(ALPHA, Value::Null, json!({"namespaceSelector": selector}));
    let beta = sidecarset(BETA, Value::Null, json!({"namespaceSelector": selector}));
    assert_converts(&alpha, BETA, &beta);
    assert_converts(&beta, ALPHA, &alpha);
}

#[test]
fn sidecarset_custom_version_label_becomes_the_spec_field_and_back() {
    let labels = json!({"app": "x", "apps.kruise.io/sidecarset-custom-version": "v2"});
    let alpha = sidecarset(ALPHA, labels, json!({}));
    let beta = sidecarset(BETA, json!({"app": "x"}), json!({"customVersion": "v2"}));
    assert_converts(&alpha, BETA, &beta);
    assert_converts(&beta, ALPHA, &alpha);

    let only_label = sidecarset(
        ALPHA,
        json!({"apps.kruise.io/sidecarset-custom-version": "v1"}),
        json!({}),
    );
    let beta = sidecarset(BETA, Value::Null, json!({"customVersion": "v1"}));
    assert_converts(&only_label, BETA, &beta);
}

#[test]
fn sidecarset_minimal_fields_and_status_pass_through() {
    let mut alpha = sidecarset(
        ALPHA,
        Value::Null,
        json!({
            "updateStrategy": {"type": "RollingUpdate", "maxUnavailable": 1},
            "injectionStrategy": {"paused": true},
            "patchPodMetadata": [{"annotations": {"a": "b"}, "patchPolicy": "Retain"}],
        }),
    );
    alpha["status"] = json!({"observedGeneration": 1, "matchedPods": 3, "updatedPods": 2,
        "readyPods": 3, "updatedReadyPods": 2, "latestRevision": "rev", "collisionCount": 0});
    let mut beta = alpha.clone();
    beta["apiVersion"] = json!(BETA);
    assert_converts(&alpha, BETA, &beta);
    assert_converts(&beta, ALPHA, &alpha);
}

// ---- ResourceDistribution ----

#[test]
fn resourcedistribution_renames_the_selector_and_failed_namespaces() {
    let selector = json!({"matchLabels": {"group": "one"}});
    let alpha = json!({
        "apiVersion": ALPHA, "kind": "ResourceDistribution", "metadata": {"name": "rd"},
        "spec": {
            "resource": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}},
            "targets": {"includedNamespaces": {"list": [{"name": "ns-1"}]}, "namespaceLabelSelector": selector},
        },
        "status": {"desired": 2, "succeeded": 1, "failed": 1, "conditions": [
            {"type": "Synced", "status": "False", "failedNamespace": ["ns-2"]},
        ]},
    });
    let mut beta = alpha.clone();
    beta["apiVersion"] = json!(BETA);
    beta["spec"]["targets"] =
        json!({"includedNamespaces": {"list": [{"name": "ns-1"}]}, "namespaceSelector": selector});
    beta["status"]["conditions"][0] =
        json!({"type": "Synced", "status": "False", "failedNamespaces": ["ns-2"]});
    assert_converts(&alpha, BETA, &beta);
    assert_converts(&beta, ALPHA, &alpha);
}

// ---- ContainerRecreateRequest ----

fn crr(version: &str, annotations: Value, status: Value) -> Value {
    let mut object = json!({
        "apiVersion": version, "kind": "ContainerRecreateRequest",
        "metadata": {"name": "crr", "namespace": "default"},
        "spec": {"podName": "pod-1", "containers": [{"name": "app"}], "strategy": {"failurePolicy": "Fail"}},
        "status": status,
    });
    if !annotations.is_null() {
        object["metadata"]["annotations"] = annotations;
    }
    object
}

#[test]
fn crr_annotations_become_the_snapshot_and_the_grace_condition() {
    let snapshot =
        r#"[{"name":"app","ready":true,"restartCount":2,"containerID":"containerd://abc"}]"#;
    let annotations = json!({
        "crr.apps.kruise.io/sync-container-statuses": snapshot,
        "crr.apps.kruise.io/unready-acquired": "2026-01-02T03:04:05Z",
    });
    let alpha = crr(ALPHA, annotations.clone(), json!({"phase": "Recreating"}));
    let beta = crr(
        BETA,
        annotations,
        json!({
            "phase": "Recreating",
            "containerStatusSnapshot": [{"name": "app", "ready": true, "restartCount": 2, "containerID": "containerd://abc"}],
            "conditions": [{
                "type": "PreRecreateGrace", "status": "True", "lastTransitionTime": "2026-01-02T03:04:05Z",
                "reason": "PreRecreateGrace",
                "message": "Pod has been forced to not-ready for unreadyGracePeriodSeconds drain",
            }],
        }),
    );
    assert_converts(&alpha, BETA, &beta);
    assert_converts(&beta, ALPHA, &alpha);
}

#[test]
fn crr_unreadable_annotations_are_not_promoted() {
    let annotations = json!({
        "crr.apps.kruise.io/sync-container-statuses": "not json",
        "crr.apps.kruise.io/unready-acquired": "yesterday",
    });
    let alpha = crr(ALPHA, annotations.clone(), json!({"phase": "Pending"}));
    assert_converts(
        &alpha,
        BETA,
        &crr(BETA, annotations, json!({"phase": "Pending"})),
    );
}

#[test]
fn crr_beta_status_becomes_annotations_in_utc() {
    let beta = crr(
        BETA,
        Value::Null,
        json!({
            "phase": "Completed",
            "containerStatusSnapshot": [{"name": "app", "ready": false, "restartCount": 0}],
            "conditions": [{"type": "PreRecreateGrace", "status": "True",
                "lastTransitionTime": "2026-01-02T05:04:05+02:00", "reason": "r", "message": "m"}],
        }),
    );
    let alpha = crr(
        ALPHA,
        json!({
            "crr.apps.kruise.io/sync-container-statuses": r#"[{"name":"app","ready":false,"restartCount":0}]"#,
            "crr.apps.kruise.io/unready-acquired": "2026-01-02T03:04:05Z",
        }),
        json!({"phase": "Completed"}),
    );
    assert_converts(&beta, ALPHA, &alpha);
}

// ---- every kind, and what is refused ----

#[test]
fn node_images_and_image_pull_jobs_only_change_version() {
    for kind in ["NodeImage", "ImagePullJob"] {
        let alpha = json!({"apiVersion": ALPHA, "kind": kind, "metadata": {"name": "x"}, "spec": {"image": "nginx"}});
        let mut beta = alpha.clone();
        beta["apiVersion"] = json!(BETA);
        assert_converts(&alpha, BETA, &beta);
        assert_converts(&beta, ALPHA, &alpha);
    }
}

#[test]
fn same_version_is_returned_unchanged() {
    let alpha = cloneset(
        ALPHA,
        json!({"name": "cs"}),
        json!({"updateStrategy": {"type": "Odd"}}),
    );
    assert_eq!(convert(&alpha, ALPHA).unwrap(), alpha);
}

#[test]
fn bad_objects_are_refused_with_the_path() {
    let cases = [
        (json!([1]), BETA, "object: not a JSON object"),
        (
            json!({"apiVersion": ALPHA, "kind": "CloneSet"}),
            "apps/v1",
            "desiredAPIVersion: `apps/v1` is not a version we serve",
        ),
        (
            json!({"apiVersion": "apps.kruise.io/v9", "kind": "CloneSet"}),
            BETA,
            "apiVersion: `apps.kruise.io/v9` is not a version we serve",
        ),
        (
            json!({"apiVersion": ALPHA, "kind": "Deployment"}),
            BETA,
            "kind: `Deployment` is not a kind we convert",
        ),
        (
            json!({"apiVersion": ALPHA, "kind": "CloneSet", "spec": {"scaleStrategy": {"disablePVCReuse": "yes"}}}),
            BETA,
            "spec.scaleStrategy.disablePVCReuse: expected a boolean",
        ),
        (
            json!({"apiVersion": ALPHA, "kind": "CloneSet", "spec": {"updateStrategy": 3}}),
            BETA,
            "spec.updateStrategy: expected an object",
        ),
        (
            json!({"apiVersion": BETA, "kind": "SidecarSet", "spec": {"customVersion": 2}}),
            ALPHA,
            "spec.customVersion: expected a string",
        ),
        (
            json!({"apiVersion": BETA, "kind": "ContainerRecreateRequest", "status": {"containerStatusSnapshot": "x"}}),
            ALPHA,
            "status.containerStatusSnapshot: invalid type: string \"x\", expected a sequence",
        ),
    ];
    for (object, version, message) in cases {
        let error = convert(&object, version).unwrap_err();
        assert_eq!(error.to_string(), message);
    }
}

// ---- round trips of what OpenKruise stores ----

#[test]
fn openkruise_stored_clonesets_round_trip_unchanged() {
    for (name, recorded) in openkruise_recorded::cloneset_revisions() {
        let stored = &recorded["openkruise"]["defaultedCloneSet"];
        let beta = convert(stored, BETA).unwrap();
        assert_eq!(
            beta["spec"]["updateStrategy"]["type"], "RollingUpdate",
            "{name}"
        );
        assert_eq!(&convert(&beta, ALPHA).unwrap(), stored, "{name}");
    }
}

#[test]
fn openkruise_stored_sidecarsets_round_trip_unchanged() {
    let mut checked = 0;
    for (name, case) in openkruise_recorded::webhook_cases() {
        for stored in case["openkruise"]["storedSidecarSets"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let beta = convert(stored, BETA).unwrap();
            let back = convert(&beta, ALPHA).unwrap();
            if stored["spec"].get("namespace").is_some() {
                // v1beta1 only has the selector: the name becomes one.
                assert_eq!(
                    back["spec"]["namespaceSelector"],
                    name_selector(stored["spec"]["namespace"].as_str().unwrap()),
                    "{name}"
                );
            } else {
                assert_eq!(&back, stored, "{name}");
            }
            checked += 1;
        }
    }
    assert!(checked > 100, "only {checked} stored SidecarSets");
}

// ---- every combination of what the CloneSet conversion moves ----

/// v1alpha1 CloneSets with every strategy type, PVC reuse setting, label
/// and pre-download annotation combination, written as OpenKruise stores
/// them (type and scale strategy always present).
fn alpha_clonesets() -> Vec<Value> {
    let mut all = Vec::new();
    for strategy_type in ["ReCreate", "InPlaceIfPossible", "InPlaceOnly", "OnDelete"] {
        for disable in [false, true] {
            for exclude in [false, true] {
                for predownload in [false, true] {
                    for grace in [None, Some(5)] {
                        let mut metadata = json!({"name": "cs", "namespace": "default"});
                        if exclude {
                            metadata["labels"] = json!({"apps.kruise.io/cloneset-scaling-exclude-preparing-delete": "true"});
                        }
                        let mut strategy = json!({"type": strategy_type});
                        if strategy_type != "OnDelete" {
                            strategy["partition"] = json!("50%");
                            strategy["maxSurge"] = json!(1);
                            if predownload || grace.is_some() {
                                strategy["inPlaceUpdateStrategy"] =
                                    grace.map_or(json!({}), |g| json!({"gracePeriodSeconds": g}));
                            }
                        }
                        if predownload && strategy_type != "OnDelete" {
                            metadata["annotations"] = json!({
                                "apps.kruise.io/image-predownload-parallelism": "30%",
                                "apps.kruise.io/image-predownload-timeout-seconds": "60",
                            });
                        }
                        let scale = if disable {
                            json!({"disablePVCReuse": true})
                        } else {
                            json!({})
                        };
                        all.push(cloneset(
                            ALPHA,
                            metadata,
                            json!({"scaleStrategy": scale, "updateStrategy": strategy}),
                        ));
                    }
                }
            }
        }
    }
    all
}

#[test]
fn every_stored_cloneset_combination_round_trips() {
    let all = alpha_clonesets();
    assert_eq!(all.len(), 64);
    for alpha in all {
        let beta = convert(&alpha, BETA).unwrap();
        assert_eq!(convert(&beta, ALPHA).unwrap(), alpha, "{beta:#}");
        // And back again: v1beta1 is stable too.
        assert_eq!(
            convert(&convert(&beta, ALPHA).unwrap(), BETA).unwrap(),
            beta
        );
    }
}
