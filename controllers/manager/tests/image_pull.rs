//! End to end on the dev cluster's simulated nodes: NodeImage and
//! ImagePullJob. Each node gets a NodeImage with its labels; the user's
//! job (parallelism lowered to 2, a label selector) never has more than
//! two nodes pulling at any watched moment and ends with the right
//! counts; a Never job picks up a node that joins later; deleting a job
//! takes its tags off the NodeImages.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use kruise_api::{CloneSet, ImagePullJob, NodeImage};
use kruise_core::imagepull::job::{TargetState, classify, job_image};
use kruise_devcluster::wait::{eventually, wait_for};
use kruise_manager::dev::{DevEnvironment, DevOptions};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use support::{examples, kubectl};

const JOB_TIMEOUT: Duration = Duration::from_secs(90);

async fn node_images(client: &Client) -> Vec<NodeImage> {
    Api::<NodeImage>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
}

/// The user's example with parallelism 2 and a label selector instead of
/// node names.
fn users_job() -> ImagePullJob {
    let text = std::fs::read_to_string(examples().join("imagepulljob.yaml")).unwrap();
    let mut job: ImagePullJob = serde_yaml::from_str(&text).unwrap();
    job.spec.parallelism = Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(2));
    job.spec.selector = Some(kruise_api::imagepulljob::ImagePullJobNodeSelector {
        match_labels: [("pool".to_owned(), "web".to_owned())].into(),
        ..Default::default()
    });
    job
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn image_pull_jobs_on_simulated_nodes() {
    let mut env = DevEnvironment::start(DevOptions::default())
        .await
        .expect("the dev environment starts");
    let client = env.client();
    every_node_gets_a_node_image_with_its_labels(&client, &env.nodes.names).await;
    a_bad_job_is_refused_naming_the_field(&client).await;
    let job = parallelism_is_never_exceeded(&client).await;
    the_columns_show_the_counts(&env, &job);
    an_in_place_rollout_pulls_the_new_image_first(&client).await;
    a_never_job_picks_up_a_new_node(&mut env).await;
    env.shutdown().await;
}

async fn every_node_gets_a_node_image_with_its_labels(client: &Client, names: &[String]) {
    let nodes: Api<Node> = Api::all(client.clone());
    for name in names {
        let label = json!({"metadata": {"labels": {"pool": "web"}}});
        nodes
            .patch(name, &PatchParams::default(), &Patch::Merge(label))
            .await
            .unwrap();
    }
    let images: Api<NodeImage> = Api::all(client.clone());
    for name in names {
        wait_for(
            &images,
            name,
            "a NodeImage with the node's labels",
            |image| {
                let labels = image.metadata.labels.clone().unwrap_or_default();
                (labels.get("pool").map(String::as_str) == Some("web")
                    && labels.get("kubernetes.io/hostname") == Some(name))
                .then_some(())
            },
        )
        .await;
    }
}

async fn a_bad_job_is_refused_naming_the_field(client: &Client) {
    let jobs: Api<ImagePullJob> = Api::namespaced(client.clone(), "default");
    let mut bad = users_job();
    bad.metadata.name = Some("half".to_owned());
    bad.spec.parallelism =
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String("50%".to_owned()));
    let error = jobs.create(&PostParams::default(), &bad).await.unwrap_err();
    let message = error.to_string();
    assert!(
        message.contains("spec.parallelism: Invalid value"),
        "{message}"
    );
    assert!(jobs.get_opt("half").await.unwrap().is_none());
}

async fn parallelism_is_never_exceeded(client: &Client) -> ImagePullJob {
    let jobs: Api<ImagePullJob> = Api::namespaced(client.clone(), "default");
    let created = jobs
        .create(&PostParams::default(), &users_job())
        .await
        .unwrap();
    let uid = created.metadata.uid.clone().unwrap();
    let image = job_image(&created).unwrap();
    let started = Instant::now();
    let mut most_active = 0;
    let finished = loop {
        let active = node_images(client)
            .await
            .iter()
            .filter(|n| classify(n, &image, &uid, &[]) == TargetState::Active)
            .count();
        assert!(
            active <= 2,
            "{active} nodes pulling at once with parallelism 2"
        );
        most_active = most_active.max(active);
        let job = jobs.get("job-with-always").await.unwrap();
        if job
            .status
            .as_ref()
            .is_some_and(|s| s.completion_time.is_some())
        {
            break job;
        }
        assert!(
            started.elapsed() < JOB_TIMEOUT,
            "the job did not finish: {:#?}",
            job.status
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        most_active, 2,
        "two nodes pulled side by side at some point"
    );
    let status = finished.status.clone().unwrap();
    assert_eq!(
        (
            status.desired,
            status.active,
            status.succeeded,
            status.failed
        ),
        (3, 0, 3, 0),
        "{status:#?}"
    );
    assert_eq!(status.message.as_deref(), Some("job has completed"));
    // Every NodeImage reports nginx:1.9.1 pulled at the job's version.
    for node in node_images(client).await {
        assert_eq!(classify(&node, &image, &uid, &[]), TargetState::Succeeded);
        let pulled = &node.status.as_ref().unwrap().image_statuses["nginx"].tags[0];
        assert!(
            pulled
                .image_id
                .as_deref()
                .is_some_and(|id| id.starts_with("nginx@sha256:"))
        );
    }
    finished
}

/// The cell under `header` in kubectl's table (empty for a zero count,
/// which OpenKruise's status omits too).
fn cell<'a>(table: &'a str, header: &str) -> &'a str {
    let mut lines = table.lines();
    let head = lines.next().unwrap();
    let row = lines.next().unwrap();
    let start = head
        .find(header)
        .unwrap_or_else(|| panic!("no {header} in {table}"));
    let end = head[start..]
        .find(char::is_whitespace)
        .map_or(row.len(), |w| {
            let after = &head[start + w..];
            start + w + (after.len() - after.trim_start().len())
        });
    row.get(start..end.min(row.len())).unwrap_or("").trim()
}

fn the_columns_show_the_counts(env: &DevEnvironment, job: &ImagePullJob) {
    let name = job.metadata.name.as_deref().unwrap();
    let jobs = kubectl(env.kubeconfig(), &["get", "imagepulljob", name]);
    let cells: Vec<&str> = ["TOTAL", "ACTIVE", "SUCCEED", "FAILED"]
        .iter()
        .map(|h| cell(&jobs, h))
        .collect();
    assert_eq!(cells, ["3", "", "3", ""], "{jobs}");
    // kubectl shows the preferred version, v1beta1, which (as OpenKruise's)
    // has no MESSAGE column; v1alpha1's has.
    assert!(!jobs.contains("MESSAGE"), "{jobs}");
    let alpha = ["get", "imagepulljobs.v1alpha1.apps.kruise.io", name];
    let alpha_jobs = kubectl(env.kubeconfig(), &alpha);
    assert_eq!(
        cell(&alpha_jobs, "MESSAGE"),
        "job has completed",
        "{alpha_jobs}"
    );
    let nodes = kubectl(env.kubeconfig(), &["get", "nodeimage", "sim-node-1"]);
    let cells: Vec<&str> = ["DESIRED", "PULLING", "SUCCEED", "FAILED"]
        .iter()
        .map(|h| cell(&nodes, h))
        .collect();
    assert_eq!(cells, ["1", "", "1", ""], "{nodes}");
}

/// A CloneSet held at its partition gets its new image pulled on the
/// nodes of its pods before any pod is updated; the job goes once the
/// rollout is over.
async fn an_in_place_rollout_pulls_the_new_image_first(client: &Client) {
    let clonesets: Api<CloneSet> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let cloneset: CloneSet = serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1alpha1",
        "kind": "CloneSet",
        "metadata": {"name": "web", "annotations": {"apps.kruise.io/image-predownload-parallelism": "2"}},
        "spec": {
            "replicas": 4,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "app", "image": "nginx:1.24"}]},
            },
            "updateStrategy": {"type": "InPlaceIfPossible", "partition": 4},
        },
    }))
    .unwrap();
    clonesets
        .create(&PostParams::default(), &cloneset)
        .await
        .unwrap();
    wait_for(&clonesets, "web", "4 ready pods", |cs| {
        cs.status
            .as_ref()
            .is_some_and(|s| s.ready_replicas == 4)
            .then_some(())
    })
    .await;
    let image = json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": "nginx:1.25"}]}}}});
    clonesets
        .patch("web", &PatchParams::default(), &Patch::Merge(image))
        .await
        .unwrap();
    let update = wait_for(&clonesets, "web", "a new update revision", |cs| {
        let status = cs.status.as_ref()?;
        (status.update_revision != status.current_revision)
            .then(|| status.update_revision.clone())
            .flatten()
    })
    .await;
    let jobs: Api<ImagePullJob> = Api::namespaced(client.clone(), "default");
    let job_name = format!("{update}-app");
    let job = wait_for(&jobs, &job_name, "the pre-download job completes", |job| {
        job.status
            .as_ref()
            .is_some_and(|s| s.completion_time.is_some())
            .then(|| job.clone())
    })
    .await;
    let on_nodes: std::collections::BTreeSet<String> = pods
        .list(&ListParams::default().labels("app=web"))
        .await
        .unwrap()
        .items
        .iter()
        .filter_map(|p| p.spec.as_ref()?.node_name.clone())
        .collect();
    let status = job.status.unwrap();
    assert_eq!(job.spec.image, "nginx:1.25");
    assert_eq!(
        (status.desired, status.succeeded),
        (
            i32::try_from(on_nodes.len()).unwrap(),
            i32::try_from(on_nodes.len()).unwrap()
        ),
        "pulled on every node of the pods: {on_nodes:?}"
    );
    let updated = pods
        .list(&ListParams::default().labels(&format!("app=web,controller-revision-hash={update}")))
        .await
        .unwrap()
        .items
        .len();
    assert_eq!(updated, 0, "no pod updated before the image is everywhere");
    // Release the partition: the pods update in place, then the job goes.
    let release = json!({"spec": {"updateStrategy": {"partition": 0}}});
    clonesets
        .patch("web", &PatchParams::default(), &Patch::Merge(release))
        .await
        .unwrap();
    wait_for(&clonesets, "web", "every pod updated", |cs| {
        let status = cs.status.as_ref()?;
        (status.updated_ready_replicas == 4 && status.current_revision == status.update_revision)
            .then_some(())
    })
    .await;
    eventually("the pre-download job is gone", || {
        let jobs = jobs.clone();
        let name = job_name.clone();
        async move { jobs.get_opt(&name).await.unwrap().is_none().then_some(()) }
    })
    .await;
    clonesets
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
}

async fn a_never_job_picks_up_a_new_node(env: &mut DevEnvironment) {
    let client = env.client();
    let jobs: Api<ImagePullJob> = Api::namespaced(client.clone(), "default");
    let never: ImagePullJob = serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1alpha1",
        "kind": "ImagePullJob",
        "metadata": {"name": "redis-everywhere", "namespace": "default"},
        "spec": {"image": "redis:7", "parallelism": 4, "completionPolicy": {"type": "Never"}},
    }))
    .unwrap();
    jobs.create(&PostParams::default(), &never).await.unwrap();
    let succeeded = |want: i32| {
        move |job: &ImagePullJob| {
            let status = job.status.as_ref()?;
            (status.desired == want && status.succeeded == want).then_some(())
        }
    };
    wait_for(
        &jobs,
        "redis-everywhere",
        "3 nodes pulled redis",
        succeeded(3),
    )
    .await;
    let added = env.nodes.add(&client).await.unwrap();
    env.agents.add_sim(&client, &added);
    wait_for(
        &jobs,
        "redis-everywhere",
        "the new node pulled redis too",
        succeeded(4),
    )
    .await;
    let job = jobs.get("redis-everywhere").await.unwrap();
    assert_eq!(
        job.status.unwrap().completion_time,
        None,
        "a Never job never completes"
    );

    // Deleting the job takes its tag off every NodeImage.
    jobs.delete("redis-everywhere", &DeleteParams::default())
        .await
        .unwrap();
    eventually("no NodeImage lists redis any more", || {
        let client = client.clone();
        async move {
            let images = node_images(&client).await;
            images
                .iter()
                .all(|n| !n.spec.images.contains_key("redis"))
                .then_some(())
        }
    })
    .await;
    eventually("the job is gone (its finalizer released)", || {
        let jobs = jobs.clone();
        async move {
            jobs.get_opt("redis-everywhere")
                .await
                .unwrap()
                .is_none()
                .then_some(())
        }
    })
    .await;
}
