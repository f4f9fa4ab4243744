//! Both versions our CRDs serve, on the dev cluster. As with OpenKruise
//! v1.9, the API server stores v1beta1 and serves v1alpha1 too, converting
//! through the webhook host's `/convert`; our webhooks and controllers read
//! v1alpha1. A user's v1beta1 YAML works unchanged, and the two views of
//! one object say the same thing (each is what kruise-core's conversion
//! makes of the other).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::Path;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kruise_api::CloneSet;
use kruise_core::conversion::convert;
use kruise_devcluster::wait::wait_for;
use kruise_manager::dev::{DevEnvironment, DevOptions};
use kube::api::PostParams;
use kube::{Api, Client};
use serde_json::{Value, json};
use support::{apply_text, container_names, kubectl};

const ALPHA: &str = "apps.kruise.io/v1alpha1";
const BETA: &str = "apps.kruise.io/v1beta1";

#[tokio::test]
async fn v1beta1_objects_work_and_both_views_agree() {
    let environment = DevEnvironment::start(DevOptions::default()).await.unwrap();
    let (kubeconfig, client) = (environment.kubeconfig(), environment.client());

    a_v1beta1_sidecarset_injects(kubeconfig, &client).await;
    a_v1beta1_cloneset_rolls_out_and_keeps_its_fields(kubeconfig, &client).await;
    each_cloneset_is_judged_by_its_versions_validator(kubeconfig);
    an_on_delete_cloneset_deletes_the_pod_it_is_told_to(kubeconfig, &client).await;
    a_v1alpha1_distribution_reads_as_v1beta1(kubeconfig);
    everything_is_stored_as_v1beta1(&client).await;
}

/// Both views of one object, each checked against the other's conversion.
fn views(kubeconfig: &Path, resource: &str, name: &str, namespace: Option<&str>) -> (Value, Value) {
    let get = |version: &str| -> Value {
        let resource = format!("{resource}.{version}.apps.kruise.io");
        let mut args = vec!["get", resource.as_str(), name, "-o", "json"];
        if let Some(namespace) = namespace {
            args.extend(["-n", namespace]);
        }
        serde_json::from_str(&kubectl(kubeconfig, &args)).unwrap()
    };
    let (alpha, beta) = (get("v1alpha1"), get("v1beta1"));
    assert_eq!(
        alpha["metadata"]["resourceVersion"],
        beta["metadata"]["resourceVersion"]
    );
    assert_eq!(
        convert(&alpha, BETA).unwrap(),
        beta,
        "v1alpha1 → v1beta1 of {name}"
    );
    assert_eq!(
        convert(&beta, ALPHA).unwrap(),
        alpha,
        "v1beta1 → v1alpha1 of {name}"
    );
    (alpha, beta)
}

fn apply(kubeconfig: &Path, object: &Value) {
    let applied = apply_text(kubeconfig, &object.to_string());
    assert!(
        applied.status.success(),
        "{}",
        String::from_utf8_lossy(&applied.stderr)
    );
}

async fn a_v1beta1_sidecarset_injects(kubeconfig: &Path, client: &Client) {
    let sidecar_set = json!({
        "apiVersion": BETA, "kind": "SidecarSet", "metadata": {"name": "beta-sidecars"},
        "spec": {
            "selector": {"matchLabels": {"app": "beta"}},
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "default"}},
            "customVersion": "v7",
            "containers": [{"name": "beta-sidecar", "image": "busybox:1.36", "command": ["sleep", "3600"]}],
        },
    });
    apply(kubeconfig, &sidecar_set);
    let (alpha, beta) = views(kubeconfig, "sidecarsets", "beta-sidecars", None);
    assert_eq!(
        alpha["metadata"]["labels"]["apps.kruise.io/sidecarset-custom-version"],
        "v7"
    );
    assert_eq!(beta["spec"]["customVersion"], "v7");
    // Our v1alpha1 defaulting reached the v1beta1 object.
    assert_eq!(
        beta["spec"]["containers"][0]["podInjectPolicy"],
        "BeforeAppContainer"
    );
    assert!(beta["metadata"]["annotations"]["kruise.io/sidecarset-hash"].is_string());

    // Our v1alpha1 validation refuses a bad v1beta1 SidecarSet.
    let mut typo = sidecar_set.clone();
    typo["metadata"]["name"] = json!("beta-typo");
    typo["spec"]["updateStrategy"] = json!({"type": "RollingUpdat"});
    let refused = apply_text(kubeconfig, &typo.to_string());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && stderr.contains("spec.updateStrategy.type"),
        "{stderr}"
    );

    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "beta-pod", "labels": {"app": "beta"}},
        "spec": {"containers": [{"name": "app", "image": "nginx:1.25"}]},
    }))
    .unwrap();
    let created = pods.create(&PostParams::default(), &pod).await.unwrap();
    assert_eq!(container_names(&created), ["beta-sidecar", "app"]);
}

async fn a_v1beta1_cloneset_rolls_out_and_keeps_its_fields(kubeconfig: &Path, client: &Client) {
    let clone_set = json!({
        "apiVersion": BETA, "kind": "CloneSet",
        "metadata": {"name": "beta-clone", "namespace": "default"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "beta-clone"}},
            "template": {
                "metadata": {"labels": {"app": "beta-clone"}},
                "spec": {"containers": [{"name": "main", "image": "nginx:1.25"}]},
            },
            "scaleStrategy": {"excludePreparingDelete": true, "enablePVCReuse": true},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {
                "podUpdatePolicy": "InPlaceIfPossible", "partition": 1, "maxUnavailable": 1,
            }},
        },
    });
    apply(kubeconfig, &clone_set);
    let clone_sets: Api<CloneSet> = Api::namespaced(client.clone(), "default");
    wait_for(&clone_sets, "beta-clone", "2 ready replicas", |c| {
        c.status
            .as_ref()
            .filter(|s| s.ready_replicas == 2)
            .map(drop)
    })
    .await;
    // After our defaulting and our controller's status writes, all in
    // v1alpha1, the user's v1beta1 fields are still there.
    let (alpha, beta) = views(kubeconfig, "clonesets", "beta-clone", Some("default"));
    let strategy = &alpha["spec"]["updateStrategy"];
    assert_eq!(strategy["type"], "InPlaceIfPossible");
    assert_eq!(strategy["partition"], 1);
    assert_eq!(
        alpha["metadata"]["labels"]["apps.kruise.io/cloneset-scaling-exclude-preparing-delete"],
        "true"
    );
    assert_eq!(
        beta["spec"]["scaleStrategy"]["excludePreparingDelete"],
        true
    );
    assert_eq!(beta["spec"]["scaleStrategy"]["enablePVCReuse"], true);
    let rolling = &beta["spec"]["updateStrategy"]["rollingUpdate"];
    assert_eq!(rolling["podUpdatePolicy"], "InPlaceIfPossible");
    assert_eq!(rolling["partition"], 1);
    assert_eq!(beta["status"]["readyReplicas"], 2);
}

/// A CloneSet `name` of one nginx container in `version`, with the
/// fields of `spec` set.
fn plain_cloneset(version: &str, name: &str, spec: &Value) -> Value {
    let mut object = json!({
        "apiVersion": version, "kind": "CloneSet",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "main", "image": "nginx:1.25"}]},
            },
        },
    });
    for (field, value) in spec.as_object().into_iter().flatten() {
        object["spec"][field] = value.clone();
    }
    object
}

/// As OpenKruise's webhook judges each version with its own validator,
/// ours does, though it is handed every CloneSet as v1alpha1: the API
/// server names the request's version (`requestKind`). OnDelete only in
/// v1beta1; a progress deadline under minReadySeconds refused in v1alpha1
/// only.
fn each_cloneset_is_judged_by_its_versions_validator(kubeconfig: &Path) {
    let cloneset = |version: &str, name: &str, spec: Value| {
        let mut spec = spec;
        spec["replicas"] = json!(0);
        apply_text(
            kubeconfig,
            &plain_cloneset(version, name, &spec).to_string(),
        )
    };
    let cases = [
        (
            "on-delete",
            json!({"updateStrategy": {"type": "OnDelete"}}),
            "spec.updateStrategy.type",
        ),
        (
            "deadline",
            json!({"minReadySeconds": 30, "progressDeadlineSeconds": 10}),
            "spec.progressDeadlineSeconds",
        ),
    ];
    for (name, spec, field) in cases {
        let refused = cloneset(ALPHA, &format!("alpha-{name}"), spec.clone());
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(
            !refused.status.success() && stderr.contains(field),
            "{stderr}"
        );
        let accepted = cloneset(BETA, &format!("beta-{name}"), spec);
        assert!(accepted.status.success(), "{accepted:?}");
    }
}

/// An OnDelete CloneSet (v1beta1 only) deletes a pod listed in
/// `podsToDelete`, makes it again and takes the name off the list: the
/// controller's own write of the list must pass the webhooks, which judge
/// it by the rules of the version it is written in. (Five pods: OnDelete's
/// budget of unavailable pods is 20 % rounded down, none of one pod.)
async fn an_on_delete_cloneset_deletes_the_pod_it_is_told_to(kubeconfig: &Path, client: &Client) {
    let name = "beta-prune";
    let spec = json!({"replicas": 5, "updateStrategy": {"type": "OnDelete"}});
    apply(kubeconfig, &plain_cloneset(BETA, name, &spec));
    let clone_sets: Api<CloneSet> = Api::namespaced(client.clone(), "default");
    let ready = |c: &CloneSet| c.status.as_ref().is_some_and(|s| s.ready_replicas == 5);
    wait_for(&clone_sets, name, "5 ready replicas", |c| {
        ready(c).then_some(())
    })
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let listed = kube::api::ListParams::default().labels(&format!("app={name}"));
    let first = pods.list(&listed).await.unwrap().items[0]
        .metadata
        .name
        .clone()
        .unwrap();
    let delete = json!({"spec": {"scaleStrategy": {"podsToDelete": [first]}}});
    kubectl(
        kubeconfig,
        &[
            "patch",
            "clonesets.v1beta1.apps.kruise.io",
            name,
            "-n",
            "default",
            "--type",
            "merge",
            "-p",
            &delete.to_string(),
        ],
    );
    wait_for(
        &clone_sets,
        name,
        "the listed pod replaced and pruned",
        |c| {
            let listed = c
                .spec
                .scale_strategy
                .as_ref()
                .map(|s| s.pods_to_delete.len());
            (listed.unwrap_or(0) == 0 && ready(c)).then_some(())
        },
    )
    .await;
    // The listed pod goes (it may still be terminating when pruned) and
    // another takes its place.
    for _ in 0..120 {
        let now = pods.list(&listed).await.unwrap().items;
        let names: Vec<&str> = now
            .iter()
            .filter_map(|p| p.metadata.name.as_deref())
            .collect();
        if names.len() == 5 && !names.contains(&first.as_str()) {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    panic!("{first} was not replaced");
}

fn a_v1alpha1_distribution_reads_as_v1beta1(kubeconfig: &Path) {
    let distribution = json!({
        "apiVersion": ALPHA, "kind": "ResourceDistribution", "metadata": {"name": "alpha-rd"},
        "spec": {
            "resource": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "shared"},
                         "data": {"k": "v"}},
            "targets": {"namespaceLabelSelector": {"matchLabels": {"team": "none"}}},
        },
    });
    apply(kubeconfig, &distribution);
    let (_, beta) = views(kubeconfig, "resourcedistributions", "alpha-rd", None);
    assert_eq!(
        beta["spec"]["targets"]["namespaceSelector"],
        json!({"matchLabels": {"team": "none"}})
    );
}

async fn everything_is_stored_as_v1beta1(client: &Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for name in ["sidecarsets", "clonesets", "resourcedistributions"] {
        let crd = crds.get(&format!("{name}.apps.kruise.io")).await.unwrap();
        let stored = crd
            .status
            .and_then(|s| s.stored_versions)
            .unwrap_or_default();
        assert_eq!(stored, ["v1beta1"], "{name}");
    }
}
