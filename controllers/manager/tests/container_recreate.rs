//! End to end on the dev cluster's simulated nodes: ContainerRecreateRequest.
//! The webhook fills a request in from its pod, the node agent of the
//! pod's node stops the containers one request at a time, the simulated
//! kubelet starts new instances, and the manager's controller snapshots
//! them, holds the pod not-ready for the grace period, and finishes and
//! deletes requests.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kruise_api::ContainerRecreateRequest;
use kruise_api::containerrecreaterequest::{
    ACTIVE_LABEL, ContainerRecreateRequestPhase as Phase, NODE_NAME_LABEL, POD_UID_LABEL,
    UNREADY_ACQUIRED_KEY,
};
use kruise_core::cloneset::container_status;
use kruise_core::crr::daemon::STOPPING_ANNOTATION;
use kruise_devcluster::wait::{eventually, wait_for, wait_gone};
use kruise_manager::agents::NodeAgents;
use kruise_manager::dev::{DevEnvironment, DevOptions};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};
use support::{completed, examples, kubectl, kubectl_output};

const RECREATE_TIMEOUT: Duration = Duration::from_secs(90);

/// A running pod of two containers with the `KruisePodReady` gate, held
/// open (True) as a workload controller would.
async fn running_pod(client: &Client, name: &str, annotations: Value) -> Pod {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "readinessGates": [{"conditionType": "KruisePodReady"}],
            "containers": [
                {"name": "app", "image": "busybox",
                 "lifecycle": {"preStop": {"exec": {"command": ["sh", "-c", "echo bye"]}}}},
                {"name": "sidecar", "image": "busybox"},
            ],
        },
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    wait_for(&pods, name, "containers running", |p| {
        let ids = ["app", "sidecar"]
            .iter()
            .all(|c| container_status(p, c).is_some_and(|s| s.container_id.is_some() && s.ready));
        ids.then_some(())
    })
    .await;
    let open = json!({"status": {"conditions": [{"type": "KruisePodReady", "status": "True"}]}});
    pods.patch_status(name, &PatchParams::default(), &Patch::Strategic(open))
        .await
        .unwrap();
    wait_for(&pods, name, "Ready", |p| is_ready(p).then(|| p.clone())).await
}

fn is_ready(pod: &Pod) -> bool {
    pod.status
        .iter()
        .flat_map(|s| s.conditions.iter().flatten())
        .any(|c| c.type_ == "Ready" && c.status == "True")
}

/// The pod held not-ready by `request` (its `KruisePodReady` condition
/// names it, and it holds the finalizer that releases the pod) while its
/// containers still run `first_instances`.
fn held_before_any_stop(
    pod: &Pod,
    request: &ContainerRecreateRequest,
    first_instances: &BTreeMap<String, (String, i32)>,
) -> bool {
    let key = format!(
        "\"{}/{}\"",
        request.namespace().unwrap_or_default(),
        request.name_any()
    );
    let held = pod
        .status
        .iter()
        .flat_map(|s| s.conditions.iter().flatten())
        .any(|c| {
            c.type_ == "KruisePodReady"
                && c.status == "False"
                && c.message.as_deref().is_some_and(|m| m.contains(&key))
        });
    let finalized = request
        .metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == UNREADY_ACQUIRED_KEY);
    held && finalized && ids_and_restarts(pod) == *first_instances && !is_ready(pod)
}

fn request(
    name: &str,
    pod: &str,
    containers: &[&str],
    strategy: Value,
    extra: Value,
) -> ContainerRecreateRequest {
    let containers: Vec<Value> = containers.iter().map(|c| json!({"name": c})).collect();
    let mut object = json!({
        "apiVersion": "apps.kruise.io/v1alpha1",
        "kind": "ContainerRecreateRequest",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"podName": pod, "containers": containers},
    });
    object["spec"]["strategy"] = strategy;
    if let Value::Object(extra) = extra {
        for (key, value) in extra {
            object["spec"][key] = value;
        }
    }
    serde_json::from_value(object).unwrap()
}

fn ids_and_restarts(pod: &Pod) -> BTreeMap<String, (String, i32)> {
    pod.status
        .iter()
        .flat_map(|s| s.container_statuses.iter().flatten())
        .map(|s| {
            (
                s.name.clone(),
                (s.container_id.clone().unwrap_or_default(), s.restart_count),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn container_recreate_requests_on_simulated_nodes() {
    let mut env = DevEnvironment::start(DevOptions::default())
        .await
        .expect("the dev environment starts");
    let client = env.client();
    the_users_example_recreates_both_containers(&env).await;
    refusals_at_admission(&env).await;
    three_requests_on_one_pod_complete_in_order(&client).await;
    a_forced_request_notes_its_stop_and_recreates_once(&client).await;
    a_request_whose_pod_is_deleted_completes_with_pod_has_gone(&client).await;
    deadline_and_ttl(&client).await;
    an_agent_restarted_mid_way_finishes_the_request(&mut env).await;
    env.shutdown().await;
}

/// `crr-demo.yaml` as the user wrote it (podName `pod-name`).
async fn the_users_example_recreates_both_containers(env: &DevEnvironment) {
    let client = env.client();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let requests: Api<ContainerRecreateRequest> = Api::namespaced(client.clone(), "default");
    let before = running_pod(&client, "pod-name", json!({})).await;
    let example = examples().join("crr-demo.yaml");
    kubectl(
        env.kubeconfig(),
        &["apply", "-f", example.to_str().unwrap()],
    );

    let admitted = requests.get("crr-demo").await.unwrap();
    let labels = admitted.metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels.get(ACTIVE_LABEL).map(String::as_str), Some("true"));
    assert_eq!(labels.get(POD_UID_LABEL), before.metadata.uid.as_ref());
    let node = before
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap();
    assert_eq!(labels.get(NODE_NAME_LABEL), Some(&node));
    let context = admitted.spec.containers[0].status_context.clone().unwrap();
    assert_eq!(context.container_id, ids_and_restarts(&before)["app"].0);
    assert!(
        admitted.spec.containers[0].pre_stop.is_some(),
        "preStop copied"
    );

    // The pod is held not-ready for the grace period before any stop: its
    // KruisePodReady condition names the request, which holds the
    // finalizer that will release it, and both containers still run the
    // instances they ran (a stopped container alone turns Ready False).
    let first_instances = ids_and_restarts(&before);
    eventually("the pod is held not-ready before any stop", || async {
        let pod = pods.get("pod-name").await.ok()?;
        let request = requests.get("crr-demo").await.ok()?;
        held_before_any_stop(&pod, &request, &first_instances).then_some(())
    })
    .await;
    let table = kubectl(env.kubeconfig(), &["get", "crr", "crr-demo"]);
    assert!(
        table.contains("PHASE") && table.contains("POD") && table.contains("NODE"),
        "{table}"
    );
    assert!(
        table.contains("pod-name") && table.contains(&node),
        "{table}"
    );

    let done = completed(&requests, "crr-demo", RECREATE_TIMEOUT).await;
    let status = done.status.clone().unwrap();
    assert_eq!(status.message, None, "{status:#?}");
    assert!(status.completion_time.is_some());
    for state in &status.container_recreate_states {
        assert_eq!(state.phase, Phase::Succeeded, "{status:#?}");
        assert!(state.is_killed, "{status:#?}");
    }
    let after = pods.get("pod-name").await.unwrap();
    let (old, new) = (ids_and_restarts(&before), ids_and_restarts(&after));
    for container in ["app", "sidecar"] {
        assert_ne!(
            old[container].0, new[container].0,
            "{container}: new instance"
        );
        assert_eq!(
            new[container].1,
            old[container].1 + 1,
            "{container}: one restart"
        );
    }
    assert_eq!(after.metadata.uid, before.metadata.uid);
    assert_eq!(
        after.status.as_ref().and_then(|s| s.pod_ip.clone()),
        before.status.as_ref().and_then(|s| s.pod_ip.clone())
    );
    // minStartedSeconds: 10 — completion comes at least that long after
    // the last new instance started.
    let last_start = ["app", "sidecar"]
        .iter()
        .filter_map(|c| {
            container_status(&after, c)?
                .state
                .clone()?
                .running?
                .started_at
        })
        .map(|t| t.0)
        .max()
        .unwrap();
    let completion = status.completion_time.unwrap().0;
    assert!(
        completion.duration_since(last_start).as_secs() >= 10,
        "{last_start} → {completion}"
    );

    // Afterwards: the pod is released and Ready again, the request lets
    // go of its finalizer and its active label.
    wait_for(&pods, "pod-name", "Ready again", |p| {
        is_ready(p).then_some(())
    })
    .await;
    wait_for(&requests, "crr-demo", "released", |r| {
        let labels = r.metadata.labels.clone().unwrap_or_default();
        let released = !labels.contains_key(ACTIVE_LABEL)
            && r.metadata.finalizers.as_ref().is_none_or(Vec::is_empty);
        released.then_some(())
    })
    .await;
}

async fn refusals_at_admission(env: &DevEnvironment) {
    let client = env.client();
    let requests: Api<ContainerRecreateRequest> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    running_pod(&client, "target", json!({})).await;
    let refused = |request: ContainerRecreateRequest, expected: &'static str| {
        let requests = requests.clone();
        async move {
            let error = requests
                .create(&PostParams::default(), &request)
                .await
                .expect_err(expected);
            assert!(error.to_string().contains(expected), "{expected}: {error}");
        }
    };
    refused(
        request("none", "target", &[], json!({}), json!({})),
        "containers",
    )
    .await;
    refused(
        request("missing", "target", &["app", "nope"], json!({}), json!({})),
        "nope",
    )
    .await;
    let mut preset = request("preset", "target", &["app"], json!({}), json!({}));
    preset.spec.containers[0].status_context = Some(
        kruise_api::containerrecreaterequest::ContainerRecreateRequestContainerContext {
            container_id: "containerd://forged".to_owned(),
            restart_count: 0,
        },
    );
    refused(preset, "statusContext").await;
    refused(
        request(
            "short",
            "target",
            &["app"],
            json!({}),
            json!({"activeDeadlineSeconds": 2}),
        ),
        "activeDeadlineSeconds",
    )
    .await;
    refused(
        request("ghost", "no-such-pod", &["app"], json!({}), json!({})),
        "no-such-pod",
    )
    .await;
    // A pod no node can take stays pending.
    let pending: Pod = serde_json::from_value(json!({
        "metadata": {"name": "unschedulable"},
        "spec": {"nodeSelector": {"no": "such-node"}, "containers": [{"name": "app", "image": "busybox"}]},
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pending).await.unwrap();
    refused(
        request("pending", "unschedulable", &["app"], json!({}), json!({})),
        "ending",
    )
    .await;
    // The spec is immutable once created.
    let long = request(
        "immutable",
        "target",
        &["app"],
        json!({"unreadyGracePeriodSeconds": 300}),
        json!({}),
    );
    requests
        .create(&PostParams::default(), &long)
        .await
        .unwrap();
    let change = kubectl_output(
        env.kubeconfig(),
        &[
            "patch",
            "crr",
            "immutable",
            "--type=merge",
            "-p",
            r#"{"spec":{"podName":"other"}}"#,
        ],
    );
    assert!(!change.status.success(), "a spec change is refused");
    let said = String::from_utf8_lossy(&change.stderr);
    assert!(said.contains("denied"), "{said}");
    requests
        .delete("immutable", &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(
        &requests,
        "immutable",
        "deleted with its finalizer released",
        RECREATE_TIMEOUT,
    )
    .await;
}

async fn three_requests_on_one_pod_complete_in_order(client: &Client) {
    let requests: Api<ContainerRecreateRequest> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let before = running_pod(client, "triple", json!({})).await;
    for name in ["first", "second", "third"] {
        let r = request(name, "triple", &["app"], json!({}), json!({}));
        requests.create(&PostParams::default(), &r).await.unwrap();
    }
    let mut times = Vec::new();
    for name in ["first", "second", "third"] {
        let done = completed(&requests, name, RECREATE_TIMEOUT).await;
        let status = done.status.unwrap();
        assert_eq!(
            status.container_recreate_states[0].phase,
            Phase::Succeeded,
            "{name}"
        );
        times.push(status.completion_time.unwrap().0);
    }
    assert!(
        times.windows(2).all(|w| w[0] <= w[1]),
        "in creation order: {times:?}"
    );
    // All three were made against the same instance of `app`: once the
    // first has recreated it, the others find it already recreated (as in
    // OpenKruise) and complete without stopping it again.
    let after = pods.get("triple").await.unwrap();
    assert_eq!(
        ids_and_restarts(&after)["app"].1,
        ids_and_restarts(&before)["app"].1 + 1,
        "one recreation serves the three requests"
    );
}

/// A forced recreation notes on the request which instance it is about to
/// stop (through the webhook's UPDATE rules; the agent's own account's
/// right to write it is checked in deploy.rs), then stops it once.
async fn a_forced_request_notes_its_stop_and_recreates_once(client: &Client) {
    let requests: Api<ContainerRecreateRequest> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let before = running_pod(client, "forced", json!({})).await;
    let r = request(
        "forced",
        "forced",
        &["app"],
        json!({"forceRecreate": true}),
        json!({}),
    );
    requests.create(&PostParams::default(), &r).await.unwrap();
    let done = completed(&requests, "forced", RECREATE_TIMEOUT).await;
    let states = &done.status.as_ref().unwrap().container_recreate_states;
    assert_eq!(states[0].phase, Phase::Succeeded);
    let (old_id, old_restarts) = ids_and_restarts(&before)["app"].clone();
    let note = done.metadata.annotations.as_ref().unwrap()[STOPPING_ANNOTATION].clone();
    let note: Value = serde_json::from_str(&note).unwrap();
    assert_eq!(note, json!({"name": "app", "containerID": old_id}));
    let after = pods.get("forced").await.unwrap();
    assert_eq!(ids_and_restarts(&after)["app"].1, old_restarts + 1);
}

async fn a_request_whose_pod_is_deleted_completes_with_pod_has_gone(client: &Client) {
    let requests: Api<ContainerRecreateRequest> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    running_pod(client, "doomed", json!({})).await;
    // A long grace keeps the request recreating while the pod goes.
    let r = request(
        "orphan",
        "doomed",
        &["app"],
        json!({"unreadyGracePeriodSeconds": 300}),
        json!({}),
    );
    requests.create(&PostParams::default(), &r).await.unwrap();
    wait_for(&requests, "orphan", "recreating", |r| {
        (r.status.as_ref()?.phase == Phase::Recreating).then_some(())
    })
    .await;
    pods.delete("doomed", &DeleteParams::default())
        .await
        .unwrap();
    let done = completed(&requests, "orphan", RECREATE_TIMEOUT).await;
    assert_eq!(
        done.status.unwrap().message.as_deref(),
        Some("pod has gone")
    );
}

async fn deadline_and_ttl(client: &Client) {
    let requests: Api<ContainerRecreateRequest> = Api::namespaced(client.clone(), "default");
    running_pod(client, "bounded", json!({})).await;
    let late = request(
        "late",
        "bounded",
        &["app"],
        json!({"unreadyGracePeriodSeconds": 300}),
        json!({"activeDeadlineSeconds": 4}),
    );
    requests
        .create(&PostParams::default(), &late)
        .await
        .unwrap();
    let done = completed(&requests, "late", RECREATE_TIMEOUT).await;
    assert_eq!(
        done.status.unwrap().message.as_deref(),
        Some("recreating has exceeded the activeDeadlineSeconds")
    );
    let brief = request(
        "brief",
        "bounded",
        &["app"],
        json!({}),
        json!({"ttlSecondsAfterFinished": 2}),
    );
    requests
        .create(&PostParams::default(), &brief)
        .await
        .unwrap();
    completed(&requests, "brief", RECREATE_TIMEOUT).await;
    wait_gone(
        &requests,
        "brief",
        "deleted after its TTL",
        Duration::from_secs(30),
    )
    .await;
}

async fn an_agent_restarted_mid_way_finishes_the_request(env: &mut DevEnvironment) {
    let client = env.client();
    let requests: Api<ContainerRecreateRequest> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let before = running_pod(&client, "resilient", json!({})).await;
    // Ordered, each new instance ready only after 4 s: the agent is
    // stopped once the first container is recreating.
    let r = request(
        "survivor",
        "resilient",
        &["app", "sidecar"],
        json!({"orderedRecreate": true}),
        json!({}),
    );
    pods.patch(
        "resilient",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {kruise_devcluster::simnode::READY_AFTER_SECONDS: "4"}}})),
    )
    .await
    .unwrap();
    requests.create(&PostParams::default(), &r).await.unwrap();
    wait_for(&requests, "survivor", "the first container killed", |r| {
        let states = &r.status.as_ref()?.container_recreate_states;
        states.first().is_some_and(|s| s.is_killed).then_some(())
    })
    .await;
    env.agents.stop();
    tokio::time::sleep(Duration::from_secs(6)).await;
    let stalled = requests.get("survivor").await.unwrap();
    let stalled = stalled.status.unwrap().container_recreate_states;
    assert!(
        stalled.get(1).is_some_and(|s| !s.is_killed),
        "no agent, no second kill: {stalled:#?}"
    );
    env.agents = NodeAgents::start(&client, &env.nodes.names, None)
        .await
        .unwrap();
    let done = completed(&requests, "survivor", RECREATE_TIMEOUT).await;
    let status = done.status.unwrap();
    assert!(
        status
            .container_recreate_states
            .iter()
            .all(|s| s.phase == Phase::Succeeded),
        "{status:#?}"
    );
    let after = pods.get("resilient").await.unwrap();
    for container in ["app", "sidecar"] {
        assert_eq!(
            ids_and_restarts(&after)[container].1,
            ids_and_restarts(&before)[container].1 + 1,
            "{container} recreated once"
        );
    }
}
