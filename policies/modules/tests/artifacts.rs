//! The Kubewarden resources in artifacts/kubewarden are what the modules
//! declare, and fresh.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use kruise_policy_modules::{ALL, SIDECARSET, cluster_admission_policy, kubewarden_yaml};
use serde_json::json;

#[test]
fn kubewarden_policies_are_fresh() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../artifacts/kubewarden");
    for module in ALL {
        let path = dir.join(format!("{}.yaml", module.name));
        let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
        assert_eq!(
            on_disk,
            kubewarden_yaml(module).unwrap(),
            "{} is stale: run `cargo run -p kruise-policy-modules --bin export-policies`",
            path.display()
        );
    }
}

#[test]
fn the_sidecarset_policy_mutates_pod_creates_and_reads_its_resources() {
    let policy = cluster_admission_policy(&SIDECARSET).unwrap();
    assert_eq!(policy["kind"], "ClusterAdmissionPolicy");
    assert_eq!(policy["metadata"]["name"], "kruise-sidecarset");
    let spec = &policy["spec"];
    assert_eq!(spec["mutating"], true);
    assert_eq!(spec["rules"][0]["operations"], json!(["CREATE"]));
    assert_eq!(spec["rules"][0]["resources"], json!(["pods"]));
    assert_eq!(spec["contextAwareResources"][0]["kind"], "SidecarSet");
    assert_eq!(
        spec["module"],
        "registry://ghcr.io/kruise-wasm/policies/sidecarset:v0.1.0"
    );
}
