//! The NodeImage controller: one round per node name, driven by Node and
//! NodeImage changes alike, reads both fresh and does what
//! [`kruise_core::imagepull::nodeimage`] says: create or delete the
//! NodeImage, clean its spec, fail the tags its node never answered for.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Secret};
use k8s_openapi::jiff::Timestamp;
use kruise_api::{ImagePullJob, NodeImage, Stored};
use kruise_controller_runtime::api_error::{
    is_already_exists, is_conflict, is_not_found, unless_raced,
};
use kruise_controller_runtime::backoff::Backoff;
use kruise_controller_runtime::status::replace_status;
use kruise_controller_runtime::{metrics, outcome, readiness};
use kruise_core::imagepull::nodeimage::{Lifecycle, Referents, housekeep, lifecycle, watchdog};
use kube::api::{DeleteParams, ListParams, PostParams, Preconditions};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};

use crate::{Error, Options, failed};

pub const CONTROLLER_NAME: &str = "kruise-nodeimage-controller";
/// Its second cache, the nodes (readiness waits for both).
pub const NODES_CACHE: &str = "kruise-nodeimage-controller/nodes";
/// Every NodeImage is looked at again this often without an event (the
/// watchdog's deadlines are minutes long).
const RESYNC: Duration = Duration::from_secs(30);
/// The soonest a round follows another for the same node.
const MIN_REQUEUE: Duration = Duration::from_secs(3);

struct Context {
    client: Client,
    options: Options,
    backoff: Backoff,
}

/// Runs the controller until the task is dropped.
pub async fn run(client: Client, options: Options) {
    let context = Arc::new(Context {
        backoff: Backoff::default(),
        client: client.clone(),
        options,
    });
    tracing::info!(controller = CONTROLLER_NAME, "starting");
    let by_node = Controller::new(Api::<Node>::all(client.clone()), watcher::Config::default());
    readiness::global().track(NODES_CACHE, by_node.store());
    let by_node = by_node
        .run(
            metrics::timed(CONTROLLER_NAME, |node: Arc<Node>, context| async move {
                sync(&node.name_any(), context).await
            }),
            on_error,
            context.clone(),
        )
        .for_each(|result| async move { outcome::log(CONTROLLER_NAME, &result) });
    let by_image = Controller::new(
        Api::<Stored<NodeImage>>::all(client),
        watcher::Config::default(),
    );
    readiness::global().track(CONTROLLER_NAME, by_image.store());
    let by_image = by_image
        .run(
            metrics::timed(
                CONTROLLER_NAME,
                |image: Arc<Stored<NodeImage>>, context| async move {
                    sync(&image.name_any(), context).await
                },
            ),
            on_error,
            context,
        )
        .for_each(|result| async move { outcome::log(CONTROLLER_NAME, &result) });
    futures::join!(by_node, by_image);
}

// The signature is kube-runtime's error policy.
#[allow(clippy::needless_pass_by_value)]
fn on_error<K: ResourceExt>(object: Arc<K>, error: &Error, context: Arc<Context>) -> Action {
    let name = object.name_any();
    let delay = context.backoff.next(&name);
    tracing::warn!(node = %name, %error, retry_in = ?delay, "NodeImage round failed");
    Action::requeue(delay)
}

async fn sync(name: &str, context: Arc<Context>) -> Result<Action, Error> {
    let action = round(name, &context).await?;
    context.backoff.reset(name);
    Ok(action)
}

async fn round(name: &str, context: &Context) -> Result<Action, Error> {
    let nodes: Api<Node> = Api::all(context.client.clone());
    let images: Api<NodeImage> = Api::all(context.client.clone());
    let node = nodes.get_opt(name).await.map_err(failed("read the node"))?;
    let image = images
        .get_opt(name)
        .await
        .map_err(failed("read the NodeImage"))?;
    let now = Timestamp::now();
    match lifecycle(
        node.as_ref(),
        image.as_ref(),
        context.options.creation_delay,
        now,
    ) {
        Lifecycle::Create => {
            let mut created = NodeImage::default();
            created.metadata.name = Some(name.to_owned());
            created.metadata.labels = node.and_then(|n| n.metadata.labels);
            match images.create(&PostParams::default(), &created).await {
                Ok(_) => tracing::info!(node = name, "NodeImage created"),
                Err(error) if is_already_exists(&error) => {}
                Err(error) => return Err(failed("create the NodeImage")(error)),
            }
            Ok(Action::requeue(Duration::from_secs(1)))
        }
        Lifecycle::Delete => {
            let uid = image.and_then(|i| i.metadata.uid);
            let params = DeleteParams {
                preconditions: Some(Preconditions {
                    uid,
                    resource_version: None,
                }),
                ..DeleteParams::default()
            };
            match images.delete(name, &params).await {
                Ok(_) => tracing::info!(node = name, "NodeImage of a deleted node removed"),
                Err(error) if is_not_found(&error) || is_conflict(&error) => {}
                Err(error) => return Err(failed("delete the NodeImage")(error)),
            }
            Ok(Action::await_change())
        }
        Lifecycle::WaitToCreate(after) => Ok(Action::requeue(after)),
        Lifecycle::Keep => match (node, image) {
            (Some(node), Some(image)) => tend(context, &images, &node, image, now).await,
            _ => Ok(Action::await_change()),
        },
    }
}

/// Spec clean-up first (one replace); when the spec is clean, the watchdog.
async fn tend(
    context: &Context,
    images: &Api<NodeImage>,
    node: &Node,
    mut image: NodeImage,
    now: Timestamp,
) -> Result<Action, Error> {
    let referents = referents(context, &image).await?;
    let labels = node.metadata.labels.clone().unwrap_or_default();
    let cleaned = housekeep(&image, &labels, &referents, now);
    if let Some((labels, spec)) = cleaned.update {
        image.metadata.labels = Some(labels);
        image.spec = spec;
        let name = image.name_any();
        let written = images.replace(&name, &PostParams::default(), &image).await;
        unless_raced(written, "clean the NodeImage's spec")?;
        return Ok(Action::requeue(Duration::from_secs(1)));
    }
    let (status, deadline) = watchdog(&image, now);
    if let Some(status) = status {
        image.status = Some(status);
        let written = replace_status(images, &image, CONTROLLER_NAME).await;
        unless_raced(written, "write the NodeImage's status")?;
    }
    let next = [cleaned.requeue, deadline]
        .into_iter()
        .flatten()
        .fold(RESYNC, Duration::min)
        .max(MIN_REQUEUE);
    Ok(Action::requeue(next))
}

/// The jobs that exist (by UID) and the pull secrets of this NodeImage
/// that exist.
async fn referents(context: &Context, image: &NodeImage) -> Result<Referents, Error> {
    let jobs = Api::<Stored<ImagePullJob>>::all(context.client.clone())
        .list_metadata(&ListParams::default())
        .await
        .map_err(failed("list the ImagePullJobs"))?;
    let job_uids = jobs
        .items
        .into_iter()
        .filter_map(|j| j.metadata.uid)
        .collect();
    let mut secrets = BTreeSet::new();
    let wanted: BTreeSet<(String, String)> = image
        .spec
        .images
        .values()
        .flat_map(|i| &i.pull_secrets)
        .filter_map(|s| Some((s.namespace.clone()?, s.name.clone()?)))
        .collect();
    for (namespace, name) in wanted {
        let api: Api<Secret> = Api::namespaced(context.client.clone(), &namespace);
        if api
            .get_metadata_opt(&name)
            .await
            .map_err(failed("read a pull secret"))?
            .is_some()
        {
            secrets.insert((namespace, name));
        }
    }
    Ok(Referents { job_uids, secrets })
}
