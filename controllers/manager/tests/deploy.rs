//! The install (`artifacts/deploy`, Kustomize): its generated part is what
//! the code generates; the whole applies to the dev cluster's real API
//! server; and the manager's service account, with the roles the install
//! grants it (impersonated), can issue the webhook host's certificates,
//! make our webhook configurations and CRDs trust them, sync every
//! controller's caches and run a CloneSet; the node agent's can pull its
//! node's images and report them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::SystemTime;

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::authorization::v1::SelfSubjectAccessReview;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kruise_api::{CloneSet, NodeImage};
use kruise_controller_runtime::readiness;
use kruise_devcluster::wait::{eventually, wait_for};
use kruise_devcluster::{DevCluster, Options};
use kruise_manager::controllers::{Controllers, ImagePullOptions};
use kruise_manager::deploy;
use kruise_manager::webhook::POD_WEBHOOK;
use kruise_manager::webhook_certs::{self, Target};
use kruise_node_agent::sim::SimRuntime;
use kube::api::{DeleteParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client};
use serde_json::json;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn the_generated_manifests_are_fresh() {
    let path = workspace().join("artifacts/deploy/generated.yaml");
    let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        on_disk == deploy::manifests().unwrap(),
        "{} is stale: run `cargo run -p kruise-manager -- deploy-manifests > artifacts/deploy/generated.yaml`",
        path.display()
    );
}

fn kubectl(kubeconfig: &Path, args: &[&str]) -> String {
    let output = Command::new("kubectl")
        .env("KUBECONFIG", kubeconfig)
        .args(args)
        .output()
        .expect("kubectl on PATH");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "kubectl {args:?}: {stderr}");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A client that is `kruise-system`'s service account `name`: the admin
/// impersonating it, so the API server authorizes it by that account's
/// roles alone.
async fn as_service_account(kubeconfig: &Path, name: &str) -> Client {
    let file = Kubeconfig::read_from(kubeconfig).unwrap();
    let mut config = kube::Config::from_custom_kubeconfig(file, &KubeConfigOptions::default())
        .await
        .unwrap();
    config.auth_info.impersonate = Some(format!("system:serviceaccount:kruise-system:{name}"));
    config.auth_info.impersonate_groups = Some(vec![
        "system:serviceaccounts".to_owned(),
        "system:serviceaccounts:kruise-system".to_owned(),
        "system:authenticated".to_owned(),
    ]);
    Client::try_from(config).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_install_applies_and_its_roles_are_enough_for_the_manager_and_the_agent() {
    let mut cluster = DevCluster::start(Options::default()).await.unwrap();
    let admin = cluster.client();
    let kubeconfig = cluster.kubeconfig.clone();
    let deploy_dir = workspace().join("artifacts/deploy");
    let deploy_dir = deploy_dir.to_str().unwrap();
    let applied = kubectl(&kubeconfig, &["apply", "--server-side", "-k", deploy_dir]);
    assert!(
        applied.contains("deployment.apps/kruise-manager serverside-applied"),
        "{applied}"
    );
    let manager = as_service_account(&kubeconfig, "kruise-manager").await;

    certificates_are_issued_and_trusted(&admin, &manager).await;
    unhook(&kubeconfig);
    the_controllers_run(&admin, &manager).await;
    let agent = as_service_account(&kubeconfig, "kruise-node-agent").await;
    the_node_agent_pulls(&admin, agent).await;
    cluster.stop();
}

/// The certificates, as the leading manager issues them.
async fn certificates_are_issued_and_trusted(admin: &Client, manager: &Client) {
    let target = Target {
        namespace: deploy::NAMESPACE.to_owned(),
        service: deploy::HOST_SERVICE.to_owned(),
        secret: webhook_certs::SECRET.to_owned(),
    };
    webhook_certs::renew(manager, &target, SystemTime::now())
        .await
        .unwrap();
    let secret = Api::<Secret>::namespaced(admin.clone(), deploy::NAMESPACE)
        .get(webhook_certs::SECRET)
        .await
        .unwrap();
    let ca = secret.data.unwrap()["ca.crt"].0.clone();
    let ca_bundle = |bytes: &Option<k8s_openapi::ByteString>| bytes.as_ref().map(|b| b.0.clone());
    let pod_webhook = Api::<MutatingWebhookConfiguration>::all(admin.clone())
        .get(POD_WEBHOOK)
        .await
        .unwrap();
    for webhook in pod_webhook.webhooks.unwrap() {
        assert_eq!(
            ca_bundle(&webhook.client_config.ca_bundle),
            Some(ca.clone())
        );
    }
    let crd = Api::<CustomResourceDefinition>::all(admin.clone())
        .get("clonesets.apps.kruise.io")
        .await
        .unwrap();
    let conversion = crd.spec.conversion.unwrap().webhook.unwrap().client_config;
    assert_eq!(ca_bundle(&conversion.unwrap().ca_bundle), Some(ca));
}

/// No host runs here, and the webhooks and the CRDs' conversion (both
/// calling its Service) fail closed: the controllers are tested alone,
/// with the webhooks removed and the CRDs converting by apiVersion only.
fn unhook(kubeconfig: &Path) {
    for name in webhook_certs::CRDS {
        kubectl(
            kubeconfig,
            &[
                "patch",
                "crd",
                name,
                "--type=merge",
                "-p",
                r#"{"spec":{"conversion":{"strategy":"None","webhook":null}}}"#,
            ],
        );
    }
    for configuration in [
        "mutatingwebhookconfiguration/kruise-wasm-pod-webhook",
        "mutatingwebhookconfiguration/kruise-wasm-mutating-webhook",
        "validatingwebhookconfiguration/kruise-wasm-validating-webhook",
    ] {
        kubectl(kubeconfig, &["delete", configuration]);
    }
}

/// Every controller's caches sync with the manager's roles alone (a
/// forbidden list or watch never syncs), and a CloneSet is run.
async fn the_controllers_run(admin: &Client, manager: &Client) {
    readiness::global().clear();
    let mut controllers = Controllers::start(manager, ImagePullOptions::default());
    eventually("every controller's caches are synced", || async {
        let waiting = readiness::global().waiting_for();
        if !waiting.is_empty() {
            eprintln!("waiting for {waiting:?}");
        }
        waiting.is_empty().then_some(())
    })
    .await;
    let clonesets: Api<CloneSet> = Api::namespaced(admin.clone(), "default");
    let cloneset: CloneSet = serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet",
        "metadata": {"name": "rbac-demo"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "rbac-demo"}},
            "template": {"metadata": {"labels": {"app": "rbac-demo"}},
                         "spec": {"containers": [{"name": "app", "image": "busybox"}]}},
        },
    }))
    .unwrap();
    clonesets
        .create(&PostParams::default(), &cloneset)
        .await
        .unwrap();
    wait_for(&clonesets, "rbac-demo", "two pods", |cloneset| {
        cloneset
            .status
            .as_ref()
            .filter(|status| status.replicas == 2)
            .map(|_| ())
    })
    .await;
    clonesets
        .delete("rbac-demo", &DeleteParams::default())
        .await
        .unwrap();
    // Before the agent part: the manager deletes NodeImages of nodes that
    // do not exist, and this one's node does not.
    controllers.stop();
}

/// The node agent's roles: it pulls the tags of its node's NodeImage and
/// reports them (the simulated runtime, with the admin's client, stands in
/// for containerd).
async fn the_node_agent_pulls(admin: &Client, agent: Client) {
    let node = "rbac-node";
    let node_images: Api<NodeImage> = Api::all(admin.clone());
    let node_image: NodeImage = serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "NodeImage",
        "metadata": {"name": node},
        "spec": {"images": {"busybox": {"tags": [{"tag": "1.36"}]}}},
    }))
    .unwrap();
    node_images
        .create(&PostParams::default(), &node_image)
        .await
        .unwrap();
    can_write_recreate_requests(&agent).await;
    let runtime = SimRuntime::new(admin.clone(), node);
    let agent = tokio::spawn(kruise_node_agent::run(agent, node.to_owned(), runtime));
    wait_for(&node_images, node, "its tag pulled", |node_image| {
        node_image
            .status
            .as_ref()
            .filter(|status| status.succeeded == 1)
            .map(|_| ())
    })
    .await;
    agent.abort();
}

/// What the agent writes on a ContainerRecreateRequest: its status, and
/// the note a forced recreation makes before its stop (an annotation), as
/// the API server's authorizer answers for the agent's own account.
async fn can_write_recreate_requests(agent: &Client) {
    let reviews: Api<SelfSubjectAccessReview> = Api::all(agent.clone());
    for subresource in ["", "status"] {
        let review: SelfSubjectAccessReview = serde_json::from_value(json!({
            "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": {
                "group": "apps.kruise.io", "resource": "containerrecreaterequests",
                "subresource": subresource, "verb": "patch", "namespace": "default",
            }},
        }))
        .unwrap();
        let answer = reviews
            .create(&PostParams::default(), &review)
            .await
            .unwrap();
        let allowed = answer.status.is_some_and(|status| status.allowed);
        assert!(allowed, "patch containerrecreaterequests/{subresource}");
    }
}
