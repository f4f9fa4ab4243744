//! Hot upgrade end to end on the dev cluster (sidecarset-hotupgrade.yaml):
//! repeated image changes alternate between the `sidecar-1` / `sidecar-2`
//! twins, the old twin goes back to the empty image, and the recorded pod
//! history never shows a moment at which neither twin was ready.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::{ListParams, PostParams};
use serde_json::{Value, json};
use support::{
    Env, History, annotation, container_image, example_path, is_available, pod, status_of, wait_for,
};

const EMPTY: &str = "openkruise/hotupgrade-sample:empty";
const SELECTOR: &str = "app=hotupgrade";
const WORKING: &str = "kruise.io/sidecarset-working-hotupgrade-container";

fn working(pod: &Pod) -> String {
    let map: Value = serde_json::from_str(annotation(pod, WORKING).unwrap()).unwrap();
    map["sidecar"].as_str().unwrap().to_owned()
}

fn other(twin: &str) -> &'static str {
    if twin == "sidecar-1" {
        "sidecar-2"
    } else {
        "sidecar-1"
    }
}

/// Some twin is ready and runs a real (non-empty) image.
fn serving(pod: &Pod) -> bool {
    ["sidecar-1", "sidecar-2"]
        .iter()
        .any(|twin| status_of(pod, twin).is_some_and(|s| s.ready && s.image != EMPTY))
}

async fn settled_on(env: &Env, image: &str, twin: &str) {
    wait_for(
        &format!("{twin} serves {image} in every pod"),
        90,
        || async {
            let pods = env.list(SELECTOR).await;
            pods.len() == 2
                && pods.iter().all(|p| {
                    let idle = other(twin);
                    working(p) == twin
                        && container_image(p, twin) == Some(image)
                        && status_of(p, twin).is_some_and(|s| s.image == image)
                        && container_image(p, idle) == Some(EMPTY)
                        && status_of(p, idle).is_some_and(|s| s.image == EMPTY)
                        && is_available(p)
                })
        },
    )
    .await;
    env.wait_status("hotupgrade-sidecarset", [2, 2, 2, 2], 30)
        .await;
}

#[tokio::test]
async fn hot_upgrades_alternate_between_the_twins_without_a_gap() {
    let env = Env::start().await;
    env.kubectl(&[
        "apply",
        "-f",
        example_path("sidecarset-hotupgrade.yaml").to_str().unwrap(),
    ]);
    env.wait_until_injecting(&[("app", "hotupgrade")]).await;
    let history = History::start(&env.client, SELECTOR).await;
    for name in ["hot-0", "hot-1"] {
        env.pods()
            .create(
                &PostParams::default(),
                &pod(name, &[("app", "hotupgrade")], Some(1)),
            )
            .await
            .unwrap();
    }
    settled_on(&env, "openkruise/hotupgrade-sample:sidecarv1", "sidecar-1").await;
    let start = history.len();

    let mut twin = "sidecar-1";
    for version in ["sidecarv2", "sidecarv3", "sidecarv4"] {
        let image = format!("openkruise/hotupgrade-sample:{version}");
        env.kubectl_json_patch(
            "hotupgrade-sidecarset",
            &json!([{"op": "replace", "path": "/spec/containers/0/image", "value": image}]),
        );
        twin = other(twin);
        settled_on(&env, &image, twin).await;
        for pod in env.list(SELECTOR).await {
            let name = pod.metadata.name.clone().unwrap();
            let version_of =
                |c: &str| annotation(&pod, &format!("version.sidecarset.kruise.io/{c}")).unwrap();
            assert_ne!(version_of(twin), "0", "{name}");
            assert_eq!(version_of(other(twin)), "0", "{name}");
            assert_eq!(
                annotation(&pod, &format!("versionalt.sidecarset.kruise.io/{twin}")),
                Some("0"),
                "{name}"
            );
        }
    }

    // Every recorded state: some twin serves; restart counts only grow;
    // the app container is never restarted.
    let snapshots = history.since(start);
    assert!(snapshots.len() > 10, "too few pod states recorded");
    let mut restarts: BTreeMap<(String, String), i32> = BTreeMap::new();
    for pods in &snapshots {
        for (name, pod) in pods {
            assert!(
                serving(pod),
                "{name}: neither twin was ready: {:?}",
                pod.status
            );
            for container in ["sidecar-1", "sidecar-2", "app"] {
                let count = status_of(pod, container).unwrap().restart_count;
                let last = restarts
                    .entry((name.clone(), container.to_owned()))
                    .or_insert(count);
                assert!(count >= *last, "{name}/{container}: restartCount went down");
                *last = count;
            }
            assert_eq!(status_of(pod, "app").unwrap().restart_count, 0);
        }
    }
    // Each upgrade restarted each twin once (new image, then empty again),
    // except the first twin's initial start.
    for pod in env.list(SELECTOR).await {
        let count = |c: &str| status_of(&pod, c).unwrap().restart_count;
        assert_eq!(count("sidecar-1") + count("sidecar-2"), 6);
    }
    assert_eq!(
        env.printed_columns("hotupgrade-sidecarset"),
        ["2", "2", "2"]
    );

    // Each reset of an old twin is reported on its pod.
    let events: Api<Event> = Api::namespaced(env.client.clone(), "default");
    let resets: Vec<Event> = events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("ResetContainerSucceed"))
        .collect();
    for name in ["hot-0", "hot-1"] {
        assert!(
            resets
                .iter()
                .any(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)),
            "no ResetContainerSucceed event on {name}"
        );
    }
}
