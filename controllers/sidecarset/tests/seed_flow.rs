//! The seed flow end to end on the dev cluster: scs-demo is injected into
//! test-pod and the three nginx Deployment pods; patching its image to
//! busybox:1.35.0 upgrades every sidecar in place, one pod at a time
//! (maxUnavailable 1), without touching the app containers, and `kubectl
//! get sidecarset` follows. Then a second upgrade survives a controller
//! restart in the middle without exceeding the budget either.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{ControllerRevision, Deployment};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{ListParams, PostParams};
use serde_json::{Value, json};
use support::{
    Env, History, READY_AFTER, annotation, container_image, example, example_path, is_available,
    status_of, wait_for,
};

const SELECTOR: &str = "app=nginx";

/// Most pods unavailable at once among `snapshots`, counting only pods that
/// carry the sidecar.
fn max_unavailable(snapshots: &[BTreeMap<String, Pod>]) -> usize {
    snapshots
        .iter()
        .map(|pods| {
            pods.values()
                .filter(|p| container_image(p, "sidecar1").is_some())
                .filter(|p| !is_available(p))
                .count()
        })
        .max()
        .unwrap_or(0)
}

/// Per pod: the sidecar restart counts over time never go down, the app
/// container never restarts and keeps its containerID.
fn check_containers(snapshots: &[BTreeMap<String, Pod>], app_ids: &BTreeMap<String, String>) {
    let mut restarts: BTreeMap<String, i32> = BTreeMap::new();
    for pods in snapshots {
        for (name, pod) in pods {
            if let Some(sidecar) = status_of(pod, "sidecar1") {
                let last = restarts.entry(name.clone()).or_insert(0);
                assert!(
                    sidecar.restart_count >= *last,
                    "{name}: sidecar1 restartCount went down"
                );
                *last = sidecar.restart_count;
            }
            let app = pod.spec.as_ref().unwrap().containers.last().unwrap();
            if let Some(status) = status_of(pod, &app.name) {
                assert_eq!(
                    status.restart_count, 0,
                    "{name}: the app container restarted"
                );
                if let Some(id) = app_ids.get(name) {
                    assert_eq!(
                        status.container_id.as_ref(),
                        Some(id),
                        "{name}: app replaced"
                    );
                }
            }
        }
    }
}

fn upgrade(env: &Env, history: &History, image: &str) -> usize {
    let start = history.len();
    env.kubectl_json_patch(
        "scs-demo",
        &json!([{"op": "replace", "path": "/spec/containers/0/image", "value": image}]),
    );
    start
}

async fn wait_all_on(env: &Env, image: &str) {
    wait_for(&format!("every sidecar runs {image}"), 120, || async {
        let pods = env.list(SELECTOR).await;
        pods.len() == 4
            && pods.iter().all(|p| {
                container_image(p, "sidecar1") == Some(image)
                    && status_of(p, "sidecar1").is_some_and(|s| s.image == image)
                    && is_available(p)
            })
    })
    .await;
}

#[tokio::test]
#[allow(clippy::too_many_lines)]
async fn seed_flow_upgrades_every_sidecar_in_place_one_at_a_time() {
    let mut env = Env::start().await;

    // scs-demo with kubectl, then test-pod and the nginx Deployment. Their
    // containers take 2 s to turn ready after each (re)start, so an
    // upgrading pod is visibly unavailable for a while.
    env.kubectl(&[
        "apply",
        "-f",
        example_path("sidecarset-scs-demo.yaml").to_str().unwrap(),
    ]);
    env.wait_until_injecting(&[("app", "nginx")]).await;
    let history = History::start(&env.client, SELECTOR).await;

    let mut test_pod: Pod = example("pod-test-pod.yaml");
    test_pod
        .metadata
        .annotations
        .get_or_insert_default()
        .insert(READY_AFTER.to_owned(), "2".to_owned());
    env.pods()
        .create(&PostParams::default(), &test_pod)
        .await
        .unwrap();
    let mut deployment: Deployment = example("deployment-nginx.yaml");
    deployment
        .spec
        .template
        .metadata
        .get_or_insert_default()
        .annotations
        .get_or_insert_default()
        .insert(READY_AFTER.to_owned(), "2".to_owned());
    Api::<Deployment>::namespaced(env.client.clone(), "default")
        .create(&PostParams::default(), &deployment)
        .await
        .unwrap();

    wait_all_on(&env, "busybox").await;
    env.wait_status("scs-demo", [4, 4, 4, 4], 60).await;
    assert_eq!(env.printed_columns("scs-demo"), ["4", "4", "4"]);
    let before = env.list(SELECTOR).await;
    let app_ids: BTreeMap<String, String> = before
        .iter()
        .map(|p| {
            let app = p.spec.as_ref().unwrap().containers.last().unwrap();
            assert_ne!(app.name, "sidecar1");
            let id = status_of(p, &app.name)
                .unwrap()
                .container_id
                .clone()
                .unwrap();
            (p.metadata.name.clone().unwrap(), id)
        })
        .collect();
    let sidecar_restarts: BTreeMap<String, i32> = before
        .iter()
        .map(|p| {
            (
                p.metadata.name.clone().unwrap(),
                status_of(p, "sidecar1").unwrap().restart_count,
            )
        })
        .collect();
    let first_revision = env
        .status("scs-demo")
        .await
        .unwrap()
        .latest_revision
        .unwrap();

    // The upgrade, sampled: the status moves through the counts, pods
    // follow one by one.
    let start = upgrade(&env, &history, "busybox:1.35.0");
    let mut seen_updated: Vec<i32> = Vec::new();
    let mut seen_columns: Vec<Vec<String>> = Vec::new();
    let deadline = Instant::now() + Duration::from_mins(2);
    loop {
        let set = env.sidecar_sets().get("scs-demo").await.unwrap();
        let status = set.status.unwrap();
        assert_eq!(status.matched_pods, 4);
        if status.observed_generation != set.metadata.generation {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        if seen_updated.last() != Some(&status.updated_pods) {
            seen_updated.push(status.updated_pods);
        }
        let columns = env.printed_columns("scs-demo");
        if seen_columns.last() != Some(&columns) {
            seen_columns.push(columns);
        }
        if status.updated_pods == 4 && status.ready_pods == 4 && status.updated_ready_pods == 4 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the rollout did not finish: {seen_updated:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    wait_all_on(&env, "busybox:1.35.0").await;
    assert!(
        seen_updated.windows(2).all(|w| w[0] <= w[1]),
        "updatedPods went down: {seen_updated:?}"
    );
    assert!(
        seen_updated.len() >= 3,
        "updatedPods did not move through intermediate counts: {seen_updated:?}"
    );
    assert!(
        seen_columns.iter().any(|c| c[2] != "4"),
        "READY never dropped while pods restarted their sidecar: {seen_columns:?}"
    );
    assert_eq!(env.printed_columns("scs-demo"), ["4", "4", "4"]);

    let rollout = history.since(start);
    assert_eq!(
        max_unavailable(&rollout),
        1,
        "maxUnavailable 1 not honoured"
    );
    check_containers(&rollout, &app_ids);
    for pod in env.list(SELECTOR).await {
        let name = pod.metadata.name.clone().unwrap();
        let sidecar = status_of(&pod, "sidecar1").unwrap();
        assert_eq!(sidecar.restart_count, sidecar_restarts[&name] + 1, "{name}");
        let app = pod.spec.as_ref().unwrap().containers.last().unwrap();
        assert_eq!(app.image.as_deref(), Some("nginx:1.7.9"));
        // The in-place state recorded the pre-upgrade imageID.
        let state: Value = serde_json::from_str(
            annotation(&pod, "kruise.io/sidecarset-inplace-update-state").unwrap(),
        )
        .unwrap();
        assert!(
            state["scs-demo"]["lastContainerStatuses"]["sidecar1"]["imageID"].is_string(),
            "{name}: {state}"
        );
        let hashes: Value =
            serde_json::from_str(annotation(&pod, "kruise.io/sidecarset-hash").unwrap()).unwrap();
        let status = env.status("scs-demo").await.unwrap();
        assert_eq!(
            hashes["scs-demo"]["controllerRevision"].as_str(),
            status.latest_revision.as_deref()
        );
        assert_eq!(pod.spec.as_ref().unwrap().containers.len(), 2);
    }

    // Two revisions in kruise-system, the latest named in the status.
    let revisions: Api<ControllerRevision> = Api::namespaced(env.client.clone(), "kruise-system");
    let listed = revisions
        .list(&ListParams::default().labels("kruise.io/sidecarset-name=scs-demo"))
        .await
        .unwrap()
        .items;
    let names: Vec<String> = listed
        .iter()
        .map(|r| r.metadata.name.clone().unwrap())
        .collect();
    let latest = env
        .status("scs-demo")
        .await
        .unwrap()
        .latest_revision
        .unwrap();
    assert_eq!(listed.len(), 2, "{names:?}");
    assert!(names.contains(&first_revision) && names.contains(&latest));
    assert_ne!(first_revision, latest);

    // A second upgrade, with the controller restarted in the middle.
    let start = upgrade(&env, &history, "busybox:1.36.0");
    wait_for("the second rollout starts", 60, || async {
        env.status("scs-demo")
            .await
            .is_some_and(|s| s.updated_pods >= 1)
    })
    .await;
    env.restart_controller();
    wait_all_on(&env, "busybox:1.36.0").await;
    env.wait_status("scs-demo", [4, 4, 4, 4], 60).await;
    let rollout = history.since(start);
    assert_eq!(
        max_unavailable(&rollout),
        1,
        "restart exceeded maxUnavailable"
    );
    check_containers(&rollout, &app_ids);
    for pod in env.list(SELECTOR).await {
        let name = pod.metadata.name.clone().unwrap();
        assert_eq!(
            status_of(&pod, "sidecar1").unwrap().restart_count,
            sidecar_restarts[&name] + 2,
            "{name}"
        );
    }
}
