//! Every example a user wrote parses into its type, serialises back without
//! losing or adding a field, and defaulting only adds.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kruise_api::containerrecreaterequest::ContainerRecreateRequest;
use kruise_api::imagepulljob::ImagePullJob;
use kruise_api::nodeimage::NodeImage;
use kruise_api::resourcedistribution::ResourceDistribution;
use kruise_api::{CloneSet, KruiseObject, SidecarSet, Strictness, from_yaml, parse_object};
use serde_json::Value;

fn examples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/examples")
}

fn examples() -> Vec<(String, String)> {
    let mut files: Vec<_> = std::fs::read_dir(examples_dir())
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "yaml"))
        .map(|path| {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read_to_string(&path).unwrap())
        })
        .collect();
    files.sort();
    files
}

/// Parse strictly, check the round trip and that defaults only add.
fn check_kind<K: KruiseObject>(name: &str, text: &str) {
    let original: Value = serde_yaml::from_str(text).unwrap();
    let parsed: K =
        parse_object(text, Strictness::Strict).unwrap_or_else(|e| panic!("{name}: {e}"));
    let round_trip = serde_json::to_value(&parsed).unwrap();
    assert_eq!(
        round_trip, original,
        "{name}: the round trip changed the object"
    );

    let mut defaulted = parsed.clone();
    defaulted.set_defaults();
    let defaulted_value = serde_json::to_value(&defaulted).unwrap();
    assert_only_adds(&original, &defaulted_value, name, "");
    let mut twice = defaulted.clone();
    twice.set_defaults();
    assert_eq!(twice, defaulted, "{name}: defaulting is not idempotent");
}

fn check_plain<T: serde::de::DeserializeOwned + serde::Serialize>(name: &str, text: &str) {
    let original: Value = serde_yaml::from_str(text).unwrap();
    let parsed: T = from_yaml(text, Strictness::Strict).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(
        serde_json::to_value(&parsed).unwrap(),
        original,
        "{name}: round trip"
    );
}

/// Every leaf the user wrote is still there with the same value.
fn assert_only_adds(original: &Value, defaulted: &Value, name: &str, path: &str) {
    match (original, defaulted) {
        (Value::Object(before), Value::Object(after)) => {
            for (key, value) in before {
                let child = after
                    .get(key)
                    .unwrap_or_else(|| panic!("{name}: defaulting dropped {path}.{key}"));
                assert_only_adds(value, child, name, &format!("{path}.{key}"));
            }
        }
        (Value::Array(before), Value::Array(after)) => {
            assert_eq!(
                before.len(),
                after.len(),
                "{name}: defaulting resized {path}"
            );
            for (i, (b, a)) in before.iter().zip(after).enumerate() {
                assert_only_adds(b, a, name, &format!("{path}[{i}]"));
            }
        }
        _ => assert_eq!(original, defaulted, "{name}: defaulting changed {path}"),
    }
}

#[test]
fn every_example_round_trips() {
    let examples = examples();
    assert!(
        examples.len() >= 18,
        "expected the user's examples in {:?}",
        examples_dir()
    );
    for (name, text) in &examples {
        let kind: Value = serde_yaml::from_str(text).unwrap();
        match kind["kind"].as_str().unwrap() {
            "CloneSet" => check_kind::<CloneSet>(name, text),
            "SidecarSet" => check_kind::<SidecarSet>(name, text),
            "ContainerRecreateRequest" => check_kind::<ContainerRecreateRequest>(name, text),
            "NodeImage" => check_kind::<NodeImage>(name, text),
            "ImagePullJob" => check_kind::<ImagePullJob>(name, text),
            "ResourceDistribution" => check_kind::<ResourceDistribution>(name, text),
            "Pod" => check_plain::<Pod>(name, text),
            "Deployment" => check_plain::<Deployment>(name, text),
            other => panic!("{name}: no type for kind {other}"),
        }
    }
}

#[test]
fn cloneset_examples_keep_openkruise_defaults() {
    let text =
        std::fs::read_to_string(examples_dir().join("cloneset-surge-partition.yaml")).unwrap();
    let mut cloneset: CloneSet = parse_object(&text, Strictness::Strict).unwrap();
    cloneset.set_defaults();
    let strategy = cloneset.spec.update_strategy.unwrap();
    let json = serde_json::to_value(&strategy).unwrap();
    // Written by the user.
    assert_eq!(json["maxSurge"], "20%");
    assert_eq!(json["maxUnavailable"], 0);
    assert_eq!(json["partition"], 3);
    assert_eq!(json["type"], "ReCreate");
    assert_eq!(cloneset.spec.revision_history_limit, Some(10));
}

/// The in-place strategy is defaulted for the in-place types only, as
/// OpenKruise's defaulting does; OnDelete (what v1beta1's `type: OnDelete`
/// converts to) reads and gets none.
#[test]
fn only_in_place_types_get_an_in_place_strategy() {
    for (type_, in_place) in [
        ("ReCreate", false),
        ("InPlaceIfPossible", true),
        ("InPlaceOnly", true),
        ("OnDelete", false),
    ] {
        let text = format!(
            "apiVersion: apps.kruise.io/v1alpha1\nkind: CloneSet\nmetadata: {{name: demo}}\nspec:\n  selector: {{matchLabels: {{app: demo}}}}\n  template: {{metadata: {{labels: {{app: demo}}}}}}\n  updateStrategy: {{type: {type_}}}\n"
        );
        let mut cloneset: CloneSet = parse_object(&text, Strictness::Strict).unwrap();
        cloneset.set_defaults();
        let strategy = cloneset.spec.update_strategy.unwrap();
        assert_eq!(
            strategy.in_place_update_strategy.is_some(),
            in_place,
            "{type_}"
        );
    }
}

#[test]
fn sidecarset_defaults_are_openkruises() {
    let text = std::fs::read_to_string(examples_dir().join("sidecarset-scs-demo.yaml")).unwrap();
    let mut sidecarset: SidecarSet = parse_object(&text, Strictness::Strict).unwrap();
    sidecarset.set_defaults();
    let json = serde_json::to_value(&sidecarset).unwrap();
    let strategy = &json["spec"]["updateStrategy"];
    assert_eq!(strategy["type"], "RollingUpdate");
    assert_eq!(strategy["partition"], 0);
    let sidecar = &json["spec"]["containers"][0];
    assert_eq!(sidecar["podInjectPolicy"], "BeforeAppContainer");
    assert_eq!(sidecar["shareVolumePolicy"]["type"], "disabled");
    assert_eq!(sidecar["upgradeStrategy"]["upgradeType"], "ColdUpgrade");
    assert_eq!(sidecar["terminationMessagePath"], "/dev/termination-log");
    assert_eq!(sidecar["terminationMessagePolicy"], "File");
    assert_eq!(json["spec"]["revisionHistoryLimit"], 10);
}

#[test]
fn init_sidecars_default_to_after_app_container() {
    let mut sidecarset: SidecarSet = parse_object(
        "kind: SidecarSet\nmetadata: {name: s}\nspec:\n  selector: {matchLabels: {a: b}}\n  initContainers: [{name: i, image: busybox}]\n  patchPodMetadata: [{annotations: {k: v}}]\n",
        Strictness::Strict,
    )
    .unwrap();
    sidecarset.set_defaults();
    let json = serde_json::to_value(&sidecarset).unwrap();
    assert_eq!(
        json["spec"]["initContainers"][0]["podInjectPolicy"],
        "AfterAppContainer"
    );
    assert_eq!(
        json["spec"]["initContainers"][0]["imagePullPolicy"],
        "Always"
    );
    assert_eq!(json["spec"]["patchPodMetadata"][0]["patchPolicy"], "Retain");
    assert_eq!(json["spec"]["updateStrategy"]["maxUnavailable"], 1);
}
