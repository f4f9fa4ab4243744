//! OpenKruise's pod webhook order, with the modules: SidecarSet injection
//! first, then launch priority, so injected sidecars take part (spec 06 §2).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod guest;

use guest::Guest;
use kruise_policy_modules::{LAUNCH_PRIORITY, SIDECARSET};
use serde_json::{Value, json};

#[test]
fn an_injected_sidecar_starts_first_in_an_ordered_pod() {
    let sidecarset = json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet",
        "metadata": {"name": "proxy"},
        "spec": {"selector": {"matchLabels": {"app": "web"}},
                 "containers": [{"name": "envoy", "image": "envoy:1.0"}]}
    });
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web-0", "namespace": "default", "labels": {"app": "web"},
                     "annotations": {"apps.kruise.io/container-launch-priority": "Ordered"}},
        "spec": {"containers": [{"name": "main", "image": "web:1"}]}
    });
    let injected = Guest::new(SIDECARSET.wasm)
        .validate_pod_create(&pod, &json!({"sidecarSets": [sidecarset]}));
    let injected_pod = injected["mutated_object"].clone();
    assert_eq!(injected_pod["spec"]["containers"][0]["name"], "envoy");

    let ordered = Guest::new(LAUNCH_PRIORITY.wasm).validate_pod_create(&injected_pod, &json!({}));
    let containers = ordered["mutated_object"]["spec"]["containers"]
        .as_array()
        .unwrap();
    let barrier = |container: &Value| {
        let env = container["env"].as_array().unwrap();
        env.iter()
            .find(|e| e["name"] == "KRUISE_CONTAINER_BARRIER")
            .unwrap()["valueFrom"]["configMapKeyRef"]
            .clone()
    };
    assert_eq!(containers[0]["name"], "envoy");
    assert_eq!(
        barrier(&containers[0]),
        json!({"name": "web-0-barrier", "key": "p_0"})
    );
    assert_eq!(containers[1]["name"], "main");
    assert_eq!(
        barrier(&containers[1]),
        json!({"name": "web-0-barrier", "key": "p_-1"})
    );
}
