//! Update strategies end to end on the dev cluster: the canary selector
//! (sidecarset-canary.yaml), partition, paused, `NotUpdate`, a change that
//! is not image-only (pods left alone, reported not upgradable), and an
//! upgrade whose new sidecar does not start (maxUnavailable holds the rest),
//! and `patchPodMetadata` re-applied on upgrade.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::events::v1::Event;
use kruise_api::SidecarSet;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use support::{Env, condition, container_image, example, is_available, pod, status_of, wait_for};

fn sidecar_set(name: &str, app: &str, container: &str, strategy: &Value) -> SidecarSet {
    serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1alpha1",
        "kind": "SidecarSet",
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": {"app": app}},
            "updateStrategy": strategy,
            "containers": [{"name": container, "image": "busybox", "command": ["sleep", "999d"]}],
        },
    }))
    .unwrap()
}

async fn create_pods(env: &Env, names: &[&str], labels: &[(&str, &str)], container: &str) {
    for name in names {
        env.pods()
            .create(&PostParams::default(), &pod(name, labels, None))
            .await
            .unwrap();
    }
    let selector = format!("app={}", labels[0].1);
    wait_for("the pods run with their sidecar", 60, || async {
        let pods: Vec<_> = env
            .list(&selector)
            .await
            .into_iter()
            .filter(|p| names.contains(&p.metadata.name.as_deref().unwrap_or_default()))
            .collect();
        pods.len() == names.len()
            && pods
                .iter()
                .all(|p| container_image(p, container).is_some() && is_available(p))
    })
    .await;
}

/// Pod name → the sidecar image its spec names.
async fn images(env: &Env, app: &str, container: &str) -> Vec<(String, String)> {
    let mut images: Vec<(String, String)> = env
        .list(&format!("app={app}"))
        .await
        .iter()
        .map(|p| {
            (
                p.metadata.name.clone().unwrap(),
                container_image(p, container).unwrap().to_owned(),
            )
        })
        .collect();
    images.sort();
    images
}

async fn wait_images(env: &Env, app: &str, container: &str, want: &[(&str, &str)]) {
    let want: Vec<(String, String)> = want
        .iter()
        .map(|(p, i)| ((*p).to_owned(), (*i).to_owned()))
        .collect();
    wait_for(&format!("{app} pods run {want:?}"), 60, || async {
        let pods = env.list(&format!("app={app}")).await;
        images(env, app, container).await == want
            && pods.iter().all(|p| {
                is_available(p)
                    && status_of(p, container).map(|s| s.image.as_str())
                        == container_image(p, container)
            })
    })
    .await;
}

fn set_image(env: &Env, name: &str, image: &str) {
    env.kubectl_json_patch(
        name,
        &json!([{"op": "replace", "path": "/spec/containers/0/image", "value": image}]),
    );
}

async fn canary(env: &Env) {
    // sidecarset-canary.yaml, first on the old image.
    let mut set: SidecarSet = example("sidecarset-canary.yaml");
    set.spec.containers[0].container.image = Some("busybox".to_owned());
    env.create_sidecar_set(&set, &[("app", "nginx")]).await;
    create_pods(
        env,
        &["canary-a"],
        &[("app", "nginx"), ("canary.release", "true")],
        "sidecar1",
    )
    .await;
    create_pods(
        env,
        &["canary-b", "canary-c"],
        &[("app", "nginx")],
        "sidecar1",
    )
    .await;
    env.wait_status("test-sidecarset", [3, 3, 3, 3], 30).await;

    set_image(env, "test-sidecarset", "busybox:1.35.0");
    wait_images(
        env,
        "nginx",
        "sidecar1",
        &[
            ("canary-a", "busybox:1.35.0"),
            ("canary-b", "busybox"),
            ("canary-c", "busybox"),
        ],
    )
    .await;
    env.wait_status("test-sidecarset", [3, 1, 3, 1], 30).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        images(env, "nginx", "sidecar1").await[1..],
        [
            ("canary-b".to_owned(), "busybox".to_owned()),
            ("canary-c".to_owned(), "busybox".to_owned())
        ]
    );
    assert_eq!(env.printed_columns("test-sidecarset"), ["3", "1", "3"]);

    // Joining the canary upgrades the pod.
    env.pods()
        .patch(
            "canary-b",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"canary.release": "true"}}})),
        )
        .await
        .unwrap();
    wait_images(
        env,
        "nginx",
        "sidecar1",
        &[
            ("canary-a", "busybox:1.35.0"),
            ("canary-b", "busybox:1.35.0"),
            ("canary-c", "busybox"),
        ],
    )
    .await;
    env.wait_status("test-sidecarset", [3, 2, 3, 2], 30).await;
}

async fn partition(env: &Env) {
    let set = sidecar_set(
        "partition-demo",
        "part",
        "part-sidecar",
        &json!({"partition": 1, "maxUnavailable": 3}),
    );
    env.create_sidecar_set(&set, &[("app", "part")]).await;
    create_pods(
        env,
        &["part-0", "part-1", "part-2"],
        &[("app", "part")],
        "part-sidecar",
    )
    .await;
    env.wait_status("partition-demo", [3, 3, 3, 3], 30).await;

    set_image(env, "partition-demo", "busybox:1.35.0");
    env.wait_status("partition-demo", [3, 2, 3, 2], 60).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let upgraded = images(env, "part", "part-sidecar")
        .await
        .iter()
        .filter(|(_, image)| image == "busybox:1.35.0")
        .count();
    assert_eq!(upgraded, 2, "partition 1 keeps one pod on the old image");
    assert_eq!(env.printed_columns("partition-demo"), ["3", "2", "3"]);

    env.patch_sidecar_set(
        "partition-demo",
        json!({"spec": {"updateStrategy": {"partition": 0}}}),
    )
    .await;
    wait_images(
        env,
        "part",
        "part-sidecar",
        &[
            ("part-0", "busybox:1.35.0"),
            ("part-1", "busybox:1.35.0"),
            ("part-2", "busybox:1.35.0"),
        ],
    )
    .await;
    env.wait_status("partition-demo", [3, 3, 3, 3], 30).await;
}

async fn paused(env: &Env) {
    let set = sidecar_set(
        "paused-demo",
        "paused",
        "paused-sidecar",
        &json!({"paused": true}),
    );
    env.create_sidecar_set(&set, &[("app", "paused")]).await;
    create_pods(
        env,
        &["paused-0", "paused-1"],
        &[("app", "paused")],
        "paused-sidecar",
    )
    .await;
    env.wait_status("paused-demo", [2, 2, 2, 2], 30).await;

    set_image(env, "paused-demo", "busybox:1.35.0");
    env.wait_status("paused-demo", [2, 0, 2, 0], 30).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        images(env, "paused", "paused-sidecar").await,
        [
            ("paused-0".to_owned(), "busybox".to_owned()),
            ("paused-1".to_owned(), "busybox".to_owned())
        ]
    );

    env.patch_sidecar_set(
        "paused-demo",
        json!({"spec": {"updateStrategy": {"paused": false}}}),
    )
    .await;
    wait_images(
        env,
        "paused",
        "paused-sidecar",
        &[
            ("paused-0", "busybox:1.35.0"),
            ("paused-1", "busybox:1.35.0"),
        ],
    )
    .await;
    env.wait_status("paused-demo", [2, 2, 2, 2], 30).await;
}

async fn not_image_only(env: &Env) {
    let set = sidecar_set(
        "immutable-demo",
        "immutable",
        "immutable-sidecar",
        &json!({"maxUnavailable": 2}),
    );
    env.create_sidecar_set(&set, &[("app", "immutable")]).await;
    create_pods(
        env,
        &["immutable-0", "immutable-1"],
        &[("app", "immutable")],
        "immutable-sidecar",
    )
    .await;
    env.wait_status("immutable-demo", [2, 2, 2, 2], 30).await;
    let before = env.list("app=immutable").await;

    // New image and a new env var: not an in-place change.
    env.kubectl_json_patch(
        "immutable-demo",
        &json!([
            {"op": "replace", "path": "/spec/containers/0/image", "value": "busybox:1.35.0"},
            {"op": "add", "path": "/spec/containers/0/env", "value": [{"name": "MODE", "value": "new"}]},
        ]),
    );
    wait_for("the pods are reported not upgradable", 60, || async {
        env.list("app=immutable").await.iter().all(|p| {
            condition(p, "SidecarSetUpgradable").is_some_and(|c| {
                c.status == "False"
                    && c.reason.as_deref() == Some("UpdateImmutableField")
                    && serde_json::from_str::<Value>(c.message.as_deref().unwrap_or("{}")).unwrap()
                        == json!({"immutable-demo": false})
            })
        })
    })
    .await;
    env.wait_status("immutable-demo", [2, 0, 2, 0], 30).await;
    let events: Api<Event> = Api::namespaced(env.client.clone(), "default");
    wait_for(
        "a NotUpgradablePods event on the SidecarSet",
        30,
        || async {
            events
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .iter()
                .any(|e| {
                    e.reason.as_deref() == Some("NotUpgradablePods")
                        && e.regarding.as_ref().and_then(|r| r.name.as_deref())
                            == Some("immutable-demo")
                })
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    for (old, new) in before.iter().zip(env.list("app=immutable").await) {
        assert_eq!(old.metadata.name, new.metadata.name);
        assert_eq!(
            old.spec.as_ref().unwrap().containers,
            new.spec.as_ref().unwrap().containers,
            "the pod's containers were changed"
        );
        assert_eq!(
            status_of(old, "immutable-sidecar").unwrap().restart_count,
            status_of(&new, "immutable-sidecar").unwrap().restart_count
        );
    }
}

async fn not_update(env: &Env) {
    let set = sidecar_set(
        "inject-only",
        "injectonly",
        "inject-only-sidecar",
        &json!({"type": "NotUpdate"}),
    );
    env.create_sidecar_set(&set, &[("app", "injectonly")]).await;
    create_pods(
        env,
        &["inject-only-0"],
        &[("app", "injectonly")],
        "inject-only-sidecar",
    )
    .await;
    env.wait_status("inject-only", [1, 1, 1, 1], 30).await;
    set_image(env, "inject-only", "busybox:1.35.0");
    env.wait_status("inject-only", [1, 0, 1, 0], 30).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        images(env, "injectonly", "inject-only-sidecar").await,
        [("inject-only-0".to_owned(), "busybox".to_owned())]
    );
}

/// OpenKruise's "failed image, and only update one pod": the upgraded
/// sidecar cannot start (its ConfigMap key is gone, so the simulated kubelet
/// keeps it waiting), and maxUnavailable 1 holds the rest back until it
/// recovers.
async fn failed_upgrade_blocks_the_rollout(env: &Env) {
    let config_maps: Api<ConfigMap> = Api::namespaced(env.client.clone(), "default");
    let config_map: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "sidecar-config", "namespace": "default"},
        "data": {"mode": "on"},
    }))
    .unwrap();
    config_maps
        .create(&PostParams::default(), &config_map)
        .await
        .unwrap();
    let mut set = sidecar_set("blocked-demo", "blocked", "blocked-sidecar", &json!({}));
    set.spec.containers[0].container.env = Some(vec![
        serde_json::from_value(json!({
            "name": "MODE",
            "valueFrom": {"configMapKeyRef": {"name": "sidecar-config", "key": "mode"}},
        }))
        .unwrap(),
    ]);
    env.create_sidecar_set(&set, &[("app", "blocked")]).await;
    create_pods(
        env,
        &["blocked-0", "blocked-1", "blocked-2"],
        &[("app", "blocked")],
        "blocked-sidecar",
    )
    .await;
    env.wait_status("blocked-demo", [3, 3, 3, 3], 30).await;

    config_maps
        .delete("sidecar-config", &kube::api::DeleteParams::default())
        .await
        .unwrap();
    set_image(env, "blocked-demo", "busybox:1.35.0");
    env.wait_status("blocked-demo", [3, 1, 2, 0], 30).await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let upgraded: Vec<String> = images(env, "blocked", "blocked-sidecar")
        .await
        .into_iter()
        .filter(|(_, image)| image == "busybox:1.35.0")
        .map(|(pod, _)| pod)
        .collect();
    assert_eq!(
        upgraded.len(),
        1,
        "maxUnavailable 1 let more through: {upgraded:?}"
    );
    let status = env.status("blocked-demo").await.unwrap();
    assert_eq!(status.updated_pods, 1);
    let stuck = env.pods().get(&upgraded[0]).await.unwrap();
    assert!(!status_of(&stuck, "blocked-sidecar").unwrap().ready);

    // The sidecar recovers, the rollout goes on.
    config_maps
        .create(&PostParams::default(), &config_map)
        .await
        .unwrap();
    wait_images(
        env,
        "blocked",
        "blocked-sidecar",
        &[
            ("blocked-0", "busybox:1.35.0"),
            ("blocked-1", "busybox:1.35.0"),
            ("blocked-2", "busybox:1.35.0"),
        ],
    )
    .await;
    env.wait_status("blocked-demo", [3, 3, 3, 3], 30).await;
}

/// Writes OpenKruise's whitelist of patchable annotation keys and waits
/// until the webhook host has it (it reads ConfigMaps from a watch cache).
async fn allow_patched_annotations(env: &Env, pattern: &str) {
    let whitelist = json!({"rules": [{"allowedAnnotationKeyExprs": [pattern]}]});
    let config_map: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "kruise-configuration", "namespace": "kruise-system"},
        "data": {"SidecarSet_PatchPodMetadata_WhiteList": whitelist.to_string()},
    }))
    .unwrap();
    let config_maps: Api<ConfigMap> = Api::namespaced(env.client.clone(), "kruise-system");
    config_maps
        .create(&PostParams::default(), &config_map)
        .await
        .unwrap();
    let mut probe = sidecar_set("whitelist-probe", "probe", "probe-sidecar", &json!({}));
    probe.spec.patch_pod_metadata =
        vec![serde_json::from_value(json!({"annotations": {"example.com/probe": "x"}})).unwrap()];
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    wait_for("the whitelist reaches the webhook host", 30, || async {
        env.sidecar_sets().create(&dry_run, &probe).await.is_ok()
    })
    .await;
}

/// `patchPodMetadata` needs the key in OpenKruise's whitelist (the
/// `kruise-configuration` ConfigMap), and is applied again when a pod is
/// upgraded.
async fn patch_pod_metadata(env: &Env) {
    const KEY: &str = "example.com/sidecar-version";
    let mut set = sidecar_set("metadata-demo", "meta", "meta-sidecar", &json!({}));
    set.spec.patch_pod_metadata = vec![
        serde_json::from_value(json!({"annotations": {KEY: "v1"}, "patchPolicy": "Overwrite"}))
            .unwrap(),
    ];
    let refused = env
        .sidecar_sets()
        .create(&PostParams::default(), &set)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains(
            "spec.patchPodMetadata: Required value: SidecarSet patch metadata whitelist not found"
        ),
        "{refused}"
    );
    allow_patched_annotations(env, r"^example\.com/").await;
    env.create_sidecar_set(&set, &[("app", "meta")]).await;
    create_pods(env, &["meta-0"], &[("app", "meta")], "meta-sidecar").await;
    let injected = env.pods().get("meta-0").await.unwrap();
    assert_eq!(support::annotation(&injected, KEY), Some("v1"));

    env.kubectl_json_patch(
        "metadata-demo",
        &json!([
            {"op": "replace", "path": "/spec/containers/0/image", "value": "busybox:1.35.0"},
            {"op": "replace", "path": "/spec/patchPodMetadata/0/annotations/example.com~1sidecar-version", "value": "v2"},
        ]),
    );
    wait_images(env, "meta", "meta-sidecar", &[("meta-0", "busybox:1.35.0")]).await;
    let upgraded = env.pods().get("meta-0").await.unwrap();
    assert_eq!(support::annotation(&upgraded, KEY), Some("v2"));
}

#[tokio::test]
async fn canary_partition_paused_and_other_strategies() {
    let env = Env::start().await;
    canary(&env).await;
    partition(&env).await;
    paused(&env).await;
    not_update(&env).await;
    not_image_only(&env).await;
    failed_upgrade_blocks_the_rollout(&env).await;
    patch_pod_metadata(&env).await;
}
