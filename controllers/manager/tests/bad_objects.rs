//! End to end on the dev cluster: one bad object costs one refusal, never
//! the cluster. A SidecarSet with a typo is refused at the door; stored
//! anyway (with our kinds' webhooks gone, as before they existed), it
//! leaves pod creation and the other SidecarSets' upgrades working, and
//! says why it is skipped. A CloneSet nobody can read likewise costs only
//! itself.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::Path;

use k8s_openapi::api::core::v1::Pod;
use kruise_core::cloneset::{container_status, has_ready_condition};
use kruise_devcluster::wait::{eventually, wait_for};
use kruise_manager::dev::{DevEnvironment, DevOptions};
use kruise_manager::webhook::{CR_MUTATING_WEBHOOK, CR_WEBHOOK};
use kube::Api;
use kube::api::PostParams;
use support::{apply_text, demo_cloneset_ready, examples, kubectl, kubectl_output};

const TYPO: &str = "\
apiVersion: apps.kruise.io/v1alpha1
kind: SidecarSet
metadata:
  name: typo
spec:
  selector:
    matchLabels:
      app: nothing
  updateStrategy:
    type: RollingUpdat
  containers:
  - name: typo-sidecar
    image: busybox
";

/// A CloneSet with a typo the CRD's schema lets through (the strategy type
/// is a free string there, as in OpenKruise's CRD).
const CLONESET_TYPO: &str = "\
apiVersion: apps.kruise.io/v1alpha1
kind: CloneSet
metadata:
  name: typo-clone
spec:
  replicas: 2
  selector:
    matchLabels:
      app: typo-clone
  template:
    metadata:
      labels:
        app: typo-clone
    spec:
      containers:
      - name: main
        image: nginx
  updateStrategy:
    type: InPlaceIfPosible
";

/// The webhooks refuse both typos, naming the field; with our kinds'
/// webhooks removed (as before they existed) the API server's schema alone
/// takes it.
fn apply_typo(kubeconfig: &Path) -> std::process::Output {
    apply_text(kubeconfig, TYPO)
}

async fn refuse_then_store_typo(kubeconfig: &Path) {
    let refused = apply_typo(kubeconfig);
    let message = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "the typo was accepted");
    assert!(
        message.contains("denied the request")
            && message.contains("spec.updateStrategy.type: unknown variant `RollingUpdat`"),
        "{message}"
    );
    let refused = apply_text(kubeconfig, CLONESET_TYPO);
    let message = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success()
            && message.contains("spec.updateStrategy.type: unknown variant `InPlaceIfPosible`"),
        "{message}"
    );
    kubectl(
        kubeconfig,
        &["delete", "validatingwebhookconfiguration", CR_WEBHOOK],
    );
    // The defaulting module refuses what it cannot read as well.
    kubectl(
        kubeconfig,
        &[
            "delete",
            "mutatingwebhookconfiguration",
            CR_MUTATING_WEBHOOK,
        ],
    );
    eventually("the API server drops the webhooks", || async {
        apply_typo(kubeconfig).status.success().then_some(())
    })
    .await;
}

#[tokio::test]
async fn an_unreadable_sidecarset_costs_only_itself() {
    let environment = DevEnvironment::start(DevOptions::default()).await.unwrap();
    let kubeconfig = environment.kubeconfig().to_path_buf();
    let client = environment.client();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");

    refuse_then_store_typo(&kubeconfig).await;
    let good = examples().join("sidecarset-scs-demo.yaml");
    kubectl(&kubeconfig, &["apply", "-f", good.to_str().unwrap()]);
    let probe: Pod = serde_yaml::from_str(
        &std::fs::read_to_string(examples().join("pod-test-pod.yaml")).unwrap(),
    )
    .unwrap();
    eventually("the good SidecarSet reaches the host", || async {
        let dry_run = PostParams {
            dry_run: true,
            ..PostParams::default()
        };
        let pod = pods.create(&dry_run, &probe).await.ok()?;
        (pod.spec?.containers.len() == 2).then_some(())
    })
    .await;

    // The pod is created with the good SidecarSet's sidecar; kubectl shows
    // the warning that names the bad one and its field.
    let test_pod = examples().join("pod-test-pod.yaml");
    let created = kubectl_output(&kubeconfig, &["apply", "-f", test_pod.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&created.stderr);
    assert!(created.status.success(), "{stderr}");
    assert!(
        stderr
            .contains("SidecarSet typo: spec.updateStrategy.type: unknown variant `RollingUpdat`"),
        "{stderr}"
    );
    let ready = wait_for(&pods, "test-pod", "Ready with sidecar1", |p| {
        has_ready_condition(p).then(|| p.clone())
    })
    .await;
    let names: Vec<&str> = ready
        .spec
        .as_ref()
        .unwrap()
        .containers
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(names, ["sidecar1", "app"]);

    // The SidecarSet controller still upgrades the good SidecarSet in place.
    kubectl(
        &kubeconfig,
        &[
            "patch",
            "sidecarset",
            "scs-demo",
            "--type",
            "json",
            "-p",
            r#"[{"op": "replace", "path": "/spec/containers/0/image", "value": "busybox:1.35.0"}]"#,
        ],
    );
    wait_for(&pods, "test-pod", "sidecar1 upgraded in place", |p| {
        let sidecar = container_status(p, "sidecar1")?;
        (sidecar.image == "busybox:1.35.0" && sidecar.ready).then_some(())
    })
    .await;

    // The bad one says why it does nothing.
    let events = invalid_spec_events(&kubeconfig, "typo").await;
    assert!(events.contains("RollingUpdat"), "{events}");

    // Likewise a CloneSet nobody can read: skipped and reported, while
    // the user's CloneSet is scaled as usual.
    let stored = apply_text(&kubeconfig, CLONESET_TYPO);
    assert!(
        stored.status.success(),
        "{}",
        String::from_utf8_lossy(&stored.stderr)
    );
    demo_cloneset_ready(&kubeconfig, &client).await;
    let events = invalid_spec_events(&kubeconfig, "typo-clone").await;
    assert!(events.contains("InPlaceIfPosible"), "{events}");
}

/// The events on `name` once an InvalidSpec one is among them (JSON).
async fn invalid_spec_events(kubeconfig: &Path, name: &str) -> String {
    let selector = format!("involvedObject.name={name}");
    eventually(&format!("an InvalidSpec event on {name}"), || async {
        let out = kubectl(
            kubeconfig,
            &[
                "get",
                "events",
                "-A",
                "--field-selector",
                &selector,
                "-o",
                "json",
            ],
        );
        out.contains("InvalidSpec").then_some(out)
    })
    .await
}
