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
                sync(&node.name_any(), Trigger::Node, context).await
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
                    sync(&image.name_any(), Trigger::NodeImage, context).await
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

/// Which of the two controllers runs a round. Both run the same round for
/// a node's name, but only the NodeImage's keeps an existing NodeImage's
/// timers (spec clean-up, watchdog, resync): with both keeping them, every
/// NodeImage was looked at twice as often, three reads each time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Trigger {
    Node,
    NodeImage,
}

async fn sync(name: &str, trigger: Trigger, context: Arc<Context>) -> Result<Action, Error> {
    let action = round(name, trigger, &context).await?;
    context.backoff.reset(name);
    Ok(action)
}

async fn round(name: &str, trigger: Trigger, context: &Context) -> Result<Action, Error> {
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
            (Some(node), Some(image)) => {
                let action = tend(context, &images, &node, image, now).await?;
                Ok(match trigger {
                    Trigger::NodeImage => action,
                    Trigger::Node => Action::await_change(),
                })
            }
            // A NodeImage kept without its node (a fake one): looked at
            // again on the resync, in case a node of its name appears
            // (whose rounds leave the timers to this controller).
            (None, Some(_)) if trigger == Trigger::NodeImage => Ok(Action::requeue(RESYNC)),
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

/// One round of the NodeImage controller against a fake API server: the
/// NodeImage made for a Ready node (its name and labels), a wait while the
/// node is Ready for less than the creation delay, the NodeImage of a
/// deleted node removed (a fake one kept), and the spec cleaned of tags
/// whose jobs are gone with the node's labels mirrored.
#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use kruise_controller_runtime::testing::FakeApi;
    use serde_json::{Value, json};

    use super::*;

    const NODE_IMAGES: &str = "/apis/apps.kruise.io/v1alpha1/nodeimages";

    fn ready_node(name: &str, labels: &Value, since: Timestamp) -> Value {
        json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": labels},
            "status": {"conditions": [{"type": "Ready", "status": "True",
                                        "lastTransitionTime": since.to_string()}]},
        })
    }

    fn context(api: &FakeApi, creation_delay: Duration) -> Arc<Context> {
        Arc::new(Context {
            client: api.client(),
            options: Options {
                creation_delay,
                ..Options::default()
            },
            backoff: Backoff::default(),
        })
    }

    /// One round for `name` with no creation delay.
    async fn round_now(api: &FakeApi, name: &str, trigger: Trigger) -> Action {
        sync(name, trigger, context(api, Duration::ZERO))
            .await
            .unwrap()
    }

    fn job_tag(tag: &str, job_uid: &str) -> Value {
        json!({
            "tag": tag,
            "createdAt": Timestamp::now().to_string(),
            "ownerReferences": [{"apiVersion": "apps.kruise.io/v1alpha1",
                                 "kind": "ImagePullJob", "namespace": "default",
                                 "name": job_uid, "uid": job_uid}],
        })
    }

    #[tokio::test]
    async fn a_ready_node_gets_a_node_image_named_and_labelled_after_it() {
        let api = FakeApi::default();
        let labels = json!({"kubernetes.io/hostname": "node-1", "zone": "a"});
        api.insert(
            "nodes",
            ready_node("node-1", &labels, Timestamp::UNIX_EPOCH),
        );
        let before = api.writes().len();

        let action = round_now(&api, "node-1", Trigger::Node).await;

        assert_eq!(action, Action::requeue(Duration::from_secs(1)));
        let image = api.get(&format!("{NODE_IMAGES}/node-1")).unwrap();
        assert_eq!(image["metadata"]["name"], "node-1");
        assert_eq!(image["metadata"]["labels"], labels);
        let writes: Vec<(String, String)> = api.writes()[before..]
            .iter()
            .map(|w| (w.method.clone(), w.path.clone()))
            .collect();
        assert_eq!(writes, [("POST".to_owned(), NODE_IMAGES.to_owned())]);
    }

    #[tokio::test]
    async fn a_node_ready_for_less_than_the_creation_delay_gets_no_node_image_yet() {
        let api = FakeApi::default();
        api.insert("nodes", ready_node("node-1", &json!({}), Timestamp::now()));
        let before = api.writes().len();

        let action = sync(
            "node-1",
            Trigger::Node,
            context(&api, Duration::from_secs(30)),
        )
        .await
        .unwrap();

        assert_ne!(action, Action::await_change());
        assert_ne!(action, Action::requeue(Duration::from_secs(1)));
        assert_eq!(api.get(&format!("{NODE_IMAGES}/node-1")), None);
        assert_eq!(api.writes().len(), before);
    }

    #[tokio::test]
    async fn the_node_image_of_a_deleted_node_is_deleted_unless_it_is_fake() {
        let api = FakeApi::default();
        let gone = api.insert(
            "nodeimages",
            json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "NodeImage",
                   "metadata": {"name": "node-gone"}, "spec": {}}),
        );
        api.insert(
            "nodeimages",
            json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "NodeImage",
                   "metadata": {"name": "node-fake",
                                "labels": {"apps.kruise.io/fake-nodeimage": "true"}},
                   "spec": {}}),
        );
        let before = api.writes().len();

        let action = round_now(&api, "node-gone", Trigger::NodeImage).await;
        assert_eq!(action, Action::await_change());
        assert_eq!(api.get(&format!("{NODE_IMAGES}/node-gone")), None);
        let deleted = api.writes().pop().unwrap();
        assert_eq!(deleted.method, "DELETE");
        assert_eq!(
            deleted.body["preconditions"]["uid"],
            gone["metadata"]["uid"]
        );

        let action = round_now(&api, "node-fake", Trigger::NodeImage).await;
        assert_eq!(action, Action::requeue(RESYNC), "kept, and looked at again");
        assert!(api.get(&format!("{NODE_IMAGES}/node-fake")).is_some());
        assert_eq!(api.writes().len(), before + 1, "only node-gone's delete");
    }

    #[tokio::test]
    async fn tags_of_jobs_that_are_gone_are_dropped_and_the_nodes_labels_mirrored() {
        let api = FakeApi::default();
        api.insert(
            "nodes",
            ready_node("node-1", &json!({"zone": "b"}), Timestamp::UNIX_EPOCH),
        );
        api.insert(
            "imagepulljobs",
            json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "ImagePullJob",
                   "metadata": {"name": "live-job", "namespace": "default", "uid": "live-job"},
                   "spec": {"image": "nginx:1.25", "completionPolicy": {}}}),
        );
        api.insert(
            "nodeimages",
            json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "NodeImage",
            "metadata": {"name": "node-1", "labels": {"zone": "a"}},
            "spec": {"images": {
                "nginx": {"tags": [job_tag("1.25", "live-job")]},
                "redis": {"tags": [job_tag("7", "gone-job")]},
            }}}),
        );

        let action = round_now(&api, "node-1", Trigger::NodeImage).await;

        assert_eq!(action, Action::requeue(Duration::from_secs(1)));
        let image = api.get(&format!("{NODE_IMAGES}/node-1")).unwrap();
        assert_eq!(image["metadata"]["labels"], json!({"zone": "b"}));
        let kept: Vec<&String> = image["spec"]["images"]
            .as_object()
            .unwrap()
            .keys()
            .collect();
        assert_eq!(kept, ["nginx"]);
        assert_eq!(image["spec"]["images"]["nginx"]["tags"][0]["tag"], "1.25");
        let methods: Vec<String> = api.writes().into_iter().map(|w| w.method).collect();
        // One replace of the NodeImage.
        assert_eq!(methods, ["PUT"]);
    }

    /// A NodeImage that needs nothing is looked at again on its own
    /// controller's timer only: a round the node started waits for the
    /// next change.
    #[tokio::test]
    async fn only_the_node_images_own_rounds_keep_its_timer() {
        let api = FakeApi::default();
        api.insert(
            "nodes",
            ready_node("node-1", &json!({"zone": "a"}), Timestamp::UNIX_EPOCH),
        );
        api.insert(
            "nodeimages",
            json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "NodeImage",
                   "metadata": {"name": "node-1", "labels": {"zone": "a"}}, "spec": {}}),
        );

        let by_image = round_now(&api, "node-1", Trigger::NodeImage).await;
        let by_node = round_now(&api, "node-1", Trigger::Node).await;

        assert_eq!(by_image, Action::requeue(RESYNC));
        assert_eq!(by_node, Action::await_change());
        assert_eq!(api.writes(), [], "nothing to clean, nothing to fail");
    }
}
