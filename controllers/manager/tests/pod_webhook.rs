//! End to end on the dev cluster: pods created through the real API server
//! come back injected by our webhook host (SidecarSet injection, then launch
//! priority), with kubectl and with the kube-rs client.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kruise_controller_runtime::testing::condition;
use kruise_devcluster::wait::eventually;
use kruise_manager::dev::{DevEnvironment, DevOptions};
use kube::Api;
use kube::api::{ListParams, PostParams};
use serde_json::{Value, json};
use support::{demo_cloneset_ready, examples, kubectl, kubectl_output};

fn container_names(pod: &Value) -> Vec<&str> {
    pod["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect()
}

/// The host reads SidecarSets from a watch cache: wait until a dry run
/// shows the new one is in it, as a user would see a moment after applying.
async fn wait_until_injecting(pods: &Api<Pod>, pod: &Pod) {
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let created = pods.create(&dry_run, pod).await.unwrap();
        let own = pod.spec.as_ref().map_or(0, |s| s.containers.len());
        if created.spec.unwrap().containers.len() > own {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the SidecarSet never reached the host"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn pods_are_injected_through_the_api_servers_webhook_call() {
    let environment = DevEnvironment::start(DevOptions::default()).await.unwrap();
    let kubeconfig = environment.kubeconfig().to_path_buf();
    let client = environment.client();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");

    let sidecarset = examples().join("sidecarset-scs-demo.yaml");
    kubectl(&kubeconfig, &["apply", "-f", sidecarset.to_str().unwrap()]);
    // Stored as OpenKruise stores it: defaulted and hashed at admission.
    let stored: Value = serde_json::from_str(&kubectl(
        &kubeconfig,
        &["get", "sidecarset", "scs-demo", "-o", "json"],
    ))
    .unwrap();
    assert!(
        stored["metadata"]["annotations"]["kruise.io/sidecarset-hash-without-image"].is_string(),
        "{stored:#}"
    );
    assert_eq!(
        stored["spec"]["containers"][0]["podInjectPolicy"],
        "BeforeAppContainer"
    );
    let test_pod = examples().join("pod-test-pod.yaml");
    let pod: Pod = serde_yaml::from_str(&std::fs::read_to_string(&test_pod).unwrap()).unwrap();
    wait_until_injecting(&pods, &pod).await;

    // kubectl: the user's own YAML, unchanged.
    kubectl(&kubeconfig, &["apply", "-f", test_pod.to_str().unwrap()]);
    let injected: Value = serde_json::from_str(&kubectl(
        &kubeconfig,
        &["get", "pod", "test-pod", "-o", "json"],
    ))
    .unwrap();
    assert_eq!(container_names(&injected), ["sidecar1", "app"]);
    let sidecar = &injected["spec"]["containers"][0];
    assert_eq!(sidecar["image"], "busybox");
    assert!(
        sidecar["env"]
            .as_array()
            .unwrap()
            .contains(&json!({"name": "IS_INJECTED", "value": "true"}))
    );
    assert!(
        sidecar["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["name"] == "log-volume" && m["mountPath"] == "/var/log")
    );
    assert!(
        injected["spec"]["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v["name"] == "log-volume" && v["emptyDir"].is_object())
    );
    let annotations = &injected["metadata"]["annotations"];
    let hashes: Value =
        serde_json::from_str(annotations["kruise.io/sidecarset-hash"].as_str().unwrap()).unwrap();
    assert!(hashes["scs-demo"]["hash"].is_string());
    assert_eq!(
        annotations["kruise.io/sidecarset-injected-list"],
        "scs-demo"
    );

    // kube-rs: the same through the client, and the pod runs on a
    // simulated node with both containers ready.
    let mut second = pod.clone();
    second.metadata.name = Some("test-pod-2".to_owned());
    let created = pods.create(&PostParams::default(), &second).await.unwrap();
    assert_eq!(support::container_names(&created), ["sidecar1", "app"]);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let pod = pods.get("test-pod-2").await.unwrap();
        let statuses = pod
            .status
            .and_then(|s| s.container_statuses)
            .unwrap_or_default();
        if statuses.len() == 2 && statuses.iter().all(|s| s.ready) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the injected pod never became ready"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // A pod no SidecarSet matches passes unchanged.
    let mut other = pod.clone();
    other.metadata.name = Some("unmatched".to_owned());
    other.metadata.labels = Some([("app".to_owned(), "other".to_owned())].into());
    let created = pods.create(&PostParams::default(), &other).await.unwrap();
    assert_eq!(created.spec.unwrap().containers.len(), 1);
    let annotations = created.metadata.annotations.unwrap_or_default();
    assert!(!annotations.contains_key("kruise.io/sidecarset-hash"));

    resource_distributions_are_validated(&kubeconfig);
    sidecars_are_sized_by_their_resources_policy(&kubeconfig, &pods).await;
    pods_to_delete_are_pods_of_the_cloneset(&kubeconfig, &client, &pods).await;
}

/// A second start on the first one's data (`kruise-manager dev --work-dir`
/// twice; in a cluster, every host replica restarting at once). The stored
/// SidecarSet is v1beta1 and the host lists v1alpha1, through the
/// conversion webhook it serves itself: it must serve before its caches
/// fill (it used to wait for them and give up after 30 s). The second
/// start returns once its probe pod has passed the pod webhook, whose
/// SidecarSet policy waits for the cache; a pod then is injected from the
/// stored SidecarSet.
#[tokio::test]
async fn a_restart_serves_the_sidecarsets_stored_before_it() {
    let work_dir = std::env::temp_dir().join(format!("kruise-restart-{}", std::process::id()));
    let options = || DevOptions {
        sim_nodes: 0,
        work_dir: Some(work_dir.clone()),
        run_controllers: false,
        real_node: false,
    };
    let first = DevEnvironment::start(options()).await.unwrap();
    let sidecarset = examples().join("sidecarset-scs-demo.yaml");
    kubectl(
        first.kubeconfig(),
        &["apply", "-f", sidecarset.to_str().unwrap()],
    );
    drop(first);

    let second = DevEnvironment::start(options()).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(second.client(), "default");
    let test_pod = examples().join("pod-test-pod.yaml");
    let pod: Pod = serde_yaml::from_str(&std::fs::read_to_string(&test_pod).unwrap()).unwrap();
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let created = pods.create(&dry_run, &pod).await.unwrap();
    assert_eq!(support::container_names(&created), ["sidecar1", "app"]);
    drop(second);
    std::fs::remove_dir_all(&work_dir).unwrap();
}

/// `podsToDelete` through kubectl and the CloneSet module, which reads the
/// pods from the cluster: a pod that does not exist or that the CloneSet
/// does not own is refused naming the field; one of its own is accepted,
/// and the controller deletes it.
async fn pods_to_delete_are_pods_of_the_cloneset(
    kubeconfig: &Path,
    client: &kube::Client,
    pods: &Api<Pod>,
) {
    demo_cloneset_ready(kubeconfig, client).await;
    workload_pods_are_ready_through_their_gate(pods).await;
    // In v1alpha1: kubectl's own choice is v1beta1 (the newer version),
    // whose validator, as OpenKruise's, looks no pod up.
    let delete = |name: &str| {
        let patch = json!({"spec": {"scaleStrategy": {"podsToDelete": [name]}}}).to_string();
        kubectl_output(
            kubeconfig,
            &[
                "patch",
                "clonesets.v1alpha1.apps.kruise.io",
                "demo",
                "--type",
                "merge",
                "-p",
                &patch,
            ],
        )
    };
    for (name, reason) in [
        (
            "no-such-pod",
            "find pod no-such-pod failed: pods \"no-such-pod\" not found",
        ),
        ("test-pod", "find pod test-pod owner is not this CloneSet"),
    ] {
        let refused = delete(name);
        let message = String::from_utf8_lossy(&refused.stderr);
        assert!(
            !refused.status.success()
                && message.contains(&format!(
                    "spec.scaleStrategy.podsToDelete: Invalid value: \"{name}\": {reason}"
                )),
            "{name}: {message}"
        );
    }
    let selected = pods
        .list(&ListParams::default().labels("app=demo"))
        .await
        .unwrap();
    let victim = selected.items[0].metadata.name.clone().unwrap();
    let accepted = delete(&victim);
    assert!(
        accepted.status.success(),
        "{}",
        String::from_utf8_lossy(&accepted.stderr)
    );
    eventually(&format!("{victim} is deleted"), || async {
        let pod = pods.get_opt(&victim).await.unwrap();
        pod.is_none_or(|p| p.metadata.deletion_timestamp.is_some())
            .then_some(())
    })
    .await;
}

/// The CloneSet's pods got the `KruisePodReady` gate from the pod webhook
/// and the condition True (the CloneSet writes it with its first status
/// write of a new pod): they are Ready (the CloneSet counted them so), and
/// a pod of no workload has no gate.
async fn workload_pods_are_ready_through_their_gate(pods: &Api<Pod>) {
    let selected = pods
        .list(&ListParams::default().labels("app=demo"))
        .await
        .unwrap();
    assert!(!selected.items.is_empty());
    for pod in &selected.items {
        let pod = serde_json::to_value(pod).unwrap();
        assert!(
            pod["spec"]["readinessGates"]
                .as_array()
                .unwrap()
                .contains(&json!({"conditionType": "KruisePodReady"})),
            "{pod:#}"
        );
        assert_eq!(
            condition(&pod, "KruisePodReady")["status"],
            "True",
            "{pod:#}"
        );
        assert_eq!(condition(&pod, "Ready")["status"], "True", "{pod:#}");
    }
    let plain = pods.get("test-pod").await.unwrap();
    let gates = plain.spec.unwrap().readiness_gates.unwrap_or_default();
    assert!(gates.is_empty(), "{gates:?}");
}

/// A SidecarSet with `resourcesPolicy` passes the API server's schema and
/// our validating module; a pod it selects gets the computed resources; a
/// policy with a broken expression is refused naming the field.
async fn sidecars_are_sized_by_their_resources_policy(kubeconfig: &Path, pods: &Api<Pod>) {
    let sized = write_temp(&sidecar_set_with_policy(
        "sized",
        "sized",
        &json!({"targetContainersMode": "sum", "resourcesExpr": {
            "limits": {"cpu": "max(cpu*50%, 50m)"}, "requests": {"memory": "memory*20%"},
        }}),
    ));
    kubectl(kubeconfig, &["apply", "-f", sized.to_str().unwrap()]);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "sized", "labels": {"app": "sized"}},
        "spec": {"containers": [
            {"name": "a", "image": "busybox", "resources": {"limits": {"cpu": "300m"}, "requests": {"memory": "100Mi"}}},
            {"name": "b", "image": "busybox", "resources": {"limits": {"cpu": "500m"}, "requests": {"memory": "400Mi"}}},
        ]},
    }))
    .unwrap();
    wait_until_injecting(pods, &pod).await;
    let created = pods.create(&PostParams::default(), &pod).await.unwrap();
    let spec = created.spec.unwrap();
    let proxy = spec
        .containers
        .iter()
        .find(|c| c.name == "sized-proxy")
        .unwrap();
    let resources = serde_json::to_value(proxy.resources.as_ref().unwrap()).unwrap();
    // (300m + 500m) * 50% = 400m; (100Mi + 400Mi) * 20% = 100Mi; then the
    // API server defaults the cpu request to the limit, as for any container.
    assert_eq!(
        resources,
        json!({"limits": {"cpu": "400m"}, "requests": {"cpu": "400m", "memory": "100Mi"}})
    );

    let broken = write_temp(&sidecar_set_with_policy(
        "sized-broken",
        "other",
        &json!({"targetContainersMode": "max", "resourcesExpr": {"limits": {"cpu": "cpu +"}}}),
    ));
    let refused = kubectl_output(kubeconfig, &["apply", "-f", broken.to_str().unwrap()]);
    assert!(
        !refused.status.success(),
        "a broken expression must be refused"
    );
    let message = String::from_utf8_lossy(&refused.stderr);
    assert!(
        message.contains("spec.containers[0].resourcesPolicy.resourcesExpr.limits.cpu"),
        "{message}"
    );
    for file in [sized, broken] {
        let _ = std::fs::remove_file(file);
    }
}

fn sidecar_set_with_policy(name: &str, app: &str, policy: &Value) -> Value {
    json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet",
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": {"app": app}},
            "containers": [{"name": format!("{name}-proxy"), "image": "busybox", "resourcesPolicy": policy}],
        },
    })
}

/// The object as a JSON file for `kubectl apply -f`.
fn write_temp(object: &Value) -> std::path::PathBuf {
    let name = object["metadata"]["name"].as_str().unwrap();
    let path = std::env::temp_dir().join(format!("{name}-{}.json", std::process::id()));
    std::fs::write(&path, object.to_string()).unwrap();
    path
}

/// The validating module, called by the API server through a real
/// ValidatingWebhookConfiguration: the seed example passes, a distribution
/// of a Pod is refused with the module's message.
fn resource_distributions_are_validated(kubeconfig: &Path) {
    let seed = examples().join("resourcedistribution.yaml");
    kubectl(kubeconfig, &["apply", "-f", seed.to_str().unwrap()]);
    let invalid = std::env::temp_dir().join(format!("rd-invalid-{}.yaml", std::process::id()));
    std::fs::write(
        &invalid,
        "apiVersion: apps.kruise.io/v1alpha1\nkind: ResourceDistribution\nmetadata: {name: not-a-config}\n\
         spec:\n  resource: {apiVersion: v1, kind: Pod, metadata: {name: p}}\n  targets: {allNamespaces: true}\n",
    )
    .unwrap();
    let refused = kubectl_output(kubeconfig, &["apply", "-f", invalid.to_str().unwrap()]);
    let _ = std::fs::remove_file(&invalid);
    assert!(!refused.status.success(), "a Pod must not be distributed");
    let message = String::from_utf8_lossy(&refused.stderr);
    assert!(
        message.contains("denied the request") && message.contains("spec.resource"),
        "{message}"
    );
}
