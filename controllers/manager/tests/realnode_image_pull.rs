//! End to end on a real node (kubelet on Debian's containerd, a local
//! registry): an ImagePullJob makes an image the node lacks appear in
//! containerd's image store, checked through CRI, and a missing tag fails
//! after its retries with the registry's answer.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;
use kruise_api::{ImagePullJob, NodeImage};
use kruise_devcluster::realnode::{AuthRegistry, RealNode};
use kruise_devcluster::wait::{eventually, wait_for};
use kruise_node_agent::cri::CriRuntime;
use kruise_node_agent::runtime::ContainerRuntime;
use kube::api::PostParams;
use kube::{Api, Client};
use serde_json::json;
use support::real_node_environment;

const JOB_TIMEOUT: Duration = Duration::from_mins(2);

async fn create_job(client: &Client, name: &str, image: &str, node: &str) {
    create_job_with_secrets(client, name, image, node, &[]).await;
}

async fn create_job_with_secrets(
    client: &Client,
    name: &str,
    image: &str,
    node: &str,
    secrets: &[&str],
) {
    let job: ImagePullJob = serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1alpha1",
        "kind": "ImagePullJob",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "image": image,
            "selector": {"names": [node]},
            "pullPolicy": {"timeoutSeconds": 60, "backoffLimit": 1},
            "completionPolicy": {"type": "Always"},
            "pullSecrets": secrets,
        },
    }))
    .unwrap();
    Api::<ImagePullJob>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &job)
        .await
        .unwrap();
}

async fn finished(client: &Client, name: &str) -> ImagePullJob {
    let jobs: Api<ImagePullJob> = Api::namespaced(client.clone(), "default");
    let started = Instant::now();
    loop {
        let job = jobs.get(name).await.unwrap();
        if job
            .status
            .as_ref()
            .is_some_and(|s| s.completion_time.is_some())
        {
            return job;
        }
        assert!(
            started.elapsed() < JOB_TIMEOUT,
            "{name} did not finish: {:#?}",
            job.status
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_pull_job_pulls_through_cri_on_the_real_node() {
    let Some((mut environment, node)) = real_node_environment().await else {
        return;
    };
    let client = environment.client();
    let cri = CriRuntime::connect(Some(&node.containerd_socket))
        .await
        .unwrap();
    let wanted = node.images.v2.clone();
    assert_eq!(
        cri.image_id(&wanted).await.unwrap(),
        None,
        "a fresh node does not have {wanted} yet"
    );
    let images: Api<NodeImage> = Api::all(client.clone());
    wait_for(&images, &node.name, "the real node's NodeImage", |_| {
        Some(())
    })
    .await;

    create_job(&client, "pull-v2", &wanted, &node.name).await;
    let job = finished(&client, "pull-v2").await;
    let status = job.status.unwrap();
    assert_eq!(
        (status.desired, status.succeeded, status.failed),
        (1, 1, 0),
        "{status:#?}"
    );
    let id = cri.image_id(&wanted).await.unwrap();
    assert!(
        id.as_deref().is_some_and(|id| id.starts_with("sha256:")),
        "{id:?}"
    );
    let reported = images.get(&node.name).await.unwrap();
    let tag = &reported.status.unwrap().image_statuses
        [&format!("{}/kruise-devcluster/test", node.registry)]
        .tags[0];
    assert_eq!(
        tag.image_id,
        Some(format!(
            "{}/kruise-devcluster/test@{}",
            node.registry,
            id.unwrap()
        ))
    );

    // A tag the registry lacks: two attempts (backoffLimit 1), then failed
    // with the runtime's answer.
    let missing = format!("{}/kruise-devcluster/test:no-such-tag", node.registry);
    let started = Instant::now();
    create_job(&client, "pull-missing", &missing, &node.name).await;
    let job = finished(&client, "pull-missing").await;
    let status = job.status.unwrap();
    assert_eq!(
        (status.desired, status.succeeded, status.failed),
        (1, 0, 1),
        "{status:#?}"
    );
    assert_eq!(status.failed_nodes, std::slice::from_ref(&node.name));
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "a retry after a pause"
    );
    let reported = images.get(&node.name).await.unwrap();
    let failed = reported.status.unwrap().image_statuses
        [&format!("{}/kruise-devcluster/test", node.registry)]
        .tags
        .iter()
        .find(|t| t.tag == "no-such-tag")
        .cloned()
        .unwrap();
    let message = failed.message.unwrap_or_default();
    assert!(message.contains("not found"), "{message}");
    assert_eq!(cri.image_id(&missing).await.unwrap(), None);

    let mut node = node;
    with_credentials(&client, &cri, &mut node).await;
    environment.agents.stop();
    let left = node.stop().await;
    assert!(left.is_empty(), "the real node left {left:?}");
    environment.shutdown().await;
}

/// An image behind basic auth: refused without the job's secret, pulled
/// with it (the mirror in kruise-daemon-config carries the credentials to
/// the agent, and goes once the job is done).
async fn with_credentials(client: &Client, cri: &CriRuntime, node: &mut RealNode) {
    let registry = node.start_auth_registry().await.unwrap();
    create_job(client, "private-anonymous", &registry.image, &node.name).await;
    let status = finished(client, "private-anonymous").await.status.unwrap();
    assert_eq!((status.succeeded, status.failed), (0, 1), "{status:#?}");
    let message = tag_message(client, node, &registry).await;
    assert!(message.contains("401 Unauthorized"), "{message}");
    assert_eq!(cri.image_id(&registry.image).await.unwrap(), None);

    let config = json!({"auths": {registry.address.clone(): {
        "username": registry.username, "password": registry.password,
    }}});
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "registry-creds", "namespace": "default"},
        "type": "kubernetes.io/dockerconfigjson",
        "stringData": {".dockerconfigjson": config.to_string()},
    }))
    .unwrap();
    Api::<Secret>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    create_job_with_secrets(
        client,
        "private",
        &registry.image,
        &node.name,
        &["registry-creds"],
    )
    .await;
    let status = finished(client, "private").await.status.unwrap();
    assert_eq!((status.succeeded, status.failed), (1, 0), "{status:#?}");
    let id = cri.image_id(&registry.image).await.unwrap();
    assert!(id.is_some(), "{} is in containerd's store", registry.image);
    let mirrors: Api<Secret> = Api::namespaced(client.clone(), "kruise-daemon-config");
    eventually("the finished job let go of its mirrored secret", || {
        let mirrors = mirrors.clone();
        async move {
            let listed = mirrors.list(&kube::api::ListParams::default()).await.ok()?;
            listed.items.is_empty().then_some(())
        }
    })
    .await;
}

async fn tag_message(client: &Client, node: &RealNode, registry: &AuthRegistry) -> String {
    let images: Api<NodeImage> = Api::all(client.clone());
    let status = images.get(&node.name).await.unwrap().status.unwrap();
    let name = format!("{}/private/test", registry.address);
    status.image_statuses[&name].tags[0]
        .message
        .clone()
        .unwrap_or_default()
}
