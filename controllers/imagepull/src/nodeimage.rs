//! The NodeImage controller: one round per node name, driven by Node and
//! NodeImage changes alike, reads both from its watches and does what
//! [`kruise_core::imagepull::nodeimage`] says: create or delete the
//! NodeImage, clean its spec, fail the tags its node never answered for.
//!
//! A round reads the API server only to confirm what the watches cannot
//! prove: that a node is gone before its NodeImage is deleted, and that a
//! job the job watch lacks is gone before its tags are dropped (a watch
//! can lag behind a job made a moment ago, whose tags the ImagePullJob
//! controller is already writing), and likewise that a pull secret the
//! mirror watch lacks is gone.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, ObjectReference, Secret};
use k8s_openapi::jiff::Timestamp;
use kruise_api::{ImagePullJob, NodeImage, Stored};
use kruise_controller_runtime::api_error::{
    is_already_exists, is_conflict, is_not_found, unless_raced,
};
use kruise_controller_runtime::backoff::Backoff;
use kruise_controller_runtime::readiness::{self, Listed};
use kruise_controller_runtime::shared::SharedWatch;
use kruise_controller_runtime::status::replace_status;
use kruise_controller_runtime::{metrics, outcome};
use kruise_core::imagepull::nodeimage::{
    Lifecycle, Referents, housekeep, job_owners, lifecycle, watchdog,
};
use kube::api::{DeleteParams, PartialObjectMeta, PostParams, Preconditions};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};

use crate::{Error, Options, failed};

pub const CONTROLLER_NAME: &str = "kruise-nodeimage-controller";
/// Its second cache, the nodes (readiness waits for all three).
pub const NODES_CACHE: &str = "kruise-nodeimage-controller/nodes";
/// Its third, the ImagePullJobs' metadata.
pub const JOBS_CACHE: &str = "kruise-nodeimage-controller/imagepulljobs";
/// Every NodeImage is looked at again this often without an event (the
/// watchdog's deadlines are minutes long).
const RESYNC: Duration = Duration::from_secs(30);
/// The soonest a round follows another for the same node.
const MIN_REQUEUE: Duration = Duration::from_secs(3);
/// How soon a round started before the watches' first lists tries again.
const STORE_WAIT: Duration = Duration::from_secs(1);

type JobMeta = PartialObjectMeta<Stored<ImagePullJob>>;

struct Context {
    client: Client,
    options: Options,
    backoff: Backoff,
    stores: Stores,
}

/// What a round reads: the node controller's own watch, the manager's
/// shared NodeImage watch and a metadata watch of the ImagePullJobs, and
/// whether each has listed.
#[derive(Clone)]
struct Stores {
    nodes: Store<Node>,
    images: Store<Stored<NodeImage>>,
    jobs: Store<JobMeta>,
    /// The Secrets of the agents' namespace, where the pull secrets a
    /// NodeImage names are mirrored.
    mirrors: SharedWatch<Secret>,
    listed: [Listed; 3],
}

impl Stores {
    /// Whether all three hold their first list: before that, an object
    /// missing from one may well exist.
    fn listed(&self) -> bool {
        self.listed.iter().all(Listed::get)
    }

    /// Whether the job watch holds the job `owner` names, with its UID.
    fn has_job(&self, owner: &ObjectReference) -> bool {
        let (Some(namespace), Some(name)) = (&owner.namespace, &owner.name) else {
            return false;
        };
        self.jobs
            .get(&ObjectRef::new(name).within(namespace))
            .is_some_and(|job| job.metadata.uid == owner.uid)
    }

    /// Whether the mirror watch holds the Secret `namespace/name`.
    fn has_mirror(&self, namespace: &str, name: &str) -> bool {
        self.mirrors.is_listed()
            && self
                .mirrors
                .store()
                .get(&ObjectRef::new(name).within(namespace))
                .is_some()
    }
}

/// Runs the controller until the task is dropped; `images` and `mirrors`
/// (the agents' namespace's Secrets) are the manager's shared watches.
pub async fn run(
    client: Client,
    options: Options,
    images: SharedWatch<Stored<NodeImage>>,
    mirrors: SharedWatch<Secret>,
) {
    tracing::info!(controller = CONTROLLER_NAME, "starting");
    let (by_node, nodes_listed) =
        readiness::controller(Api::<Node>::all(client.clone()), watcher::Config::default());
    let by_image = Controller::for_shared_stream(images.subscribe(CONTROLLER_NAME), images.store());
    let (jobs, jobs_writer) = reflector::store();
    let jobs_listed = Listed::default();
    // Metadata only: a round needs a job's name and UID.
    let job_events = watcher(
        Api::<JobMeta>::all(client.clone()),
        watcher::Config::default(),
    )
    .default_backoff();
    let job_watch = readiness::mark_listed(
        reflector::reflector(jobs_writer, job_events),
        jobs_listed.clone(),
    )
    .for_each(|event| async move {
        if let Err(error) = event {
            tracing::warn!(controller = CONTROLLER_NAME, %error, "ImagePullJob watch failed: retrying");
        }
    });
    readiness::global().track(NODES_CACHE, nodes_listed.clone());
    readiness::global().track(CONTROLLER_NAME, images.listed());
    readiness::global().track(JOBS_CACHE, jobs_listed.clone());
    let context = Arc::new(Context {
        stores: Stores {
            nodes: by_node.store(),
            images: by_image.store(),
            jobs,
            mirrors,
            listed: [nodes_listed, images.listed(), jobs_listed],
        },
        backoff: Backoff::default(),
        client,
        options,
    });
    let by_node = by_node
        .run(
            metrics::timed(CONTROLLER_NAME, |node: Arc<Node>, context| async move {
                sync(&node.name_any(), Trigger::Node, context).await
            }),
            on_error,
            context.clone(),
        )
        .for_each(|result| async move { outcome::log(CONTROLLER_NAME, &result) });
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
    futures::join!(by_node, by_image, job_watch);
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
/// NodeImage was looked at twice as often.
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
    if !context.stores.listed() {
        return Ok(Action::requeue(STORE_WAIT));
    }
    let images: Api<NodeImage> = Api::all(context.client.clone());
    let stored = context.stores.images.get(&ObjectRef::new(name));
    let mut node = context
        .stores
        .nodes
        .get(&ObjectRef::new(name))
        .map(|n| Node::clone(&n));
    // An unreadable NodeImage still has its metadata: enough to create
    // or delete by, not to tend.
    let image = stored.as_ref().map(|s| match &s.object {
        Ok(image) => image.clone(),
        Err(_) => NodeImage {
            metadata: s.metadata.clone(),
            ..NodeImage::default()
        },
    });
    let now = Timestamp::now();
    let delay = context.options.creation_delay;
    let mut decision = lifecycle(node.as_ref(), image.as_ref(), delay, now);
    if decision == Lifecycle::Delete {
        // The node watch may lag behind a node made a moment ago.
        node = Api::<Node>::all(context.client.clone())
            .get_opt(name)
            .await
            .map_err(failed("read the node"))?;
        decision = lifecycle(node.as_ref(), image.as_ref(), delay, now);
    }
    match decision {
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
        Lifecycle::Keep => match (node, stored) {
            (Some(node), Some(stored)) => {
                let image = match &stored.object {
                    Ok(image) => image.clone(),
                    Err(reason) => {
                        tracing::warn!(node = name, %reason, "cannot read the NodeImage: skipped");
                        return Ok(Action::await_change());
                    }
                };
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
/// Written from the watch's copy: one it has not caught up with answers a
/// conflict, and the next round tries again.
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

/// The jobs this NodeImage names that exist (by UID) and its pull
/// secrets that exist.
async fn referents(context: &Context, image: &NodeImage) -> Result<Referents, Error> {
    let mut job_uids = BTreeSet::new();
    for owner in job_owners(image) {
        if context.stores.has_job(owner) || job_exists(context, owner).await? {
            job_uids.extend(owner.uid.clone());
        }
    }
    let mut secrets = BTreeSet::new();
    let wanted: BTreeSet<(String, String)> = image
        .spec
        .images
        .values()
        .flat_map(|i| &i.pull_secrets)
        .filter_map(|s| Some((s.namespace.clone()?, s.name.clone()?)))
        .collect();
    for (namespace, name) in wanted {
        if context.stores.has_mirror(&namespace, &name)
            || secret_exists(context, &namespace, &name).await?
        {
            secrets.insert((namespace, name));
        }
    }
    Ok(Referents { job_uids, secrets })
}

/// A fresh read of a pull secret the mirror watch lacks: one mirrored a
/// moment ago, or one outside the agents' namespace.
async fn secret_exists(context: &Context, namespace: &str, name: &str) -> Result<bool, Error> {
    let api: Api<Secret> = Api::namespaced(context.client.clone(), namespace);
    let found = api
        .get_metadata_opt(name)
        .await
        .map_err(failed("read a pull secret"))?;
    Ok(found.is_some())
}

/// A fresh read of the job `owner` names: whether it exists with that UID.
async fn job_exists(context: &Context, owner: &ObjectReference) -> Result<bool, Error> {
    let (Some(namespace), Some(name)) = (&owner.namespace, &owner.name) else {
        return Ok(false);
    };
    let job = Api::<Stored<ImagePullJob>>::namespaced(context.client.clone(), namespace)
        .get_metadata_opt(name)
        .await
        .map_err(failed("read an ImagePullJob"))?;
    Ok(job.is_some_and(|job| job.metadata.uid == owner.uid))
}

/// One round of the NodeImage controller against a fake API server: the
/// NodeImage made for a Ready node (its name and labels), a wait while the
/// node is Ready for less than the creation delay, the NodeImage of a
/// deleted node removed (a fake one kept), and the spec cleaned of tags
/// whose jobs are gone with the node's labels mirrored.
#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use kruise_controller_runtime::testing::{FakeApi, FedWatch};
    use kruise_core::imagepull::secrets::DEFAULT_CONFIG_NAMESPACE;
    use kube::api::ListParams;
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

    /// A store that has listed `objects`.
    fn store_of<K>(objects: Vec<K>) -> Store<K>
    where
        K: reflector::Lookup + Clone + 'static,
        K::DynamicType: Default + Eq + std::hash::Hash + Clone,
    {
        let (store, mut writer) = reflector::store();
        writer.apply_watcher_event(&watcher::Event::Init);
        for object in objects {
            writer.apply_watcher_event(&watcher::Event::InitApply(object));
        }
        writer.apply_watcher_event(&watcher::Event::InitDone);
        store
    }

    fn listed() -> Listed {
        let listed = Listed::default();
        listed.set();
        listed
    }

    /// A context whose watches hold what the API server holds now.
    async fn context(api: &FakeApi, creation_delay: Duration) -> Arc<Context> {
        let client = api.client();
        let all = ListParams::default();
        let nodes = Api::<Node>::all(client.clone()).list(&all).await.unwrap();
        let images = Api::<Stored<NodeImage>>::all(client.clone());
        let jobs = Api::<Stored<ImagePullJob>>::all(client.clone());
        let secrets = Api::<Secret>::namespaced(client.clone(), DEFAULT_CONFIG_NAMESPACE);
        let stores = Stores {
            nodes: store_of(nodes.items),
            images: store_of(images.list(&all).await.unwrap().items),
            jobs: store_of(jobs.list_metadata(&all).await.unwrap().items),
            mirrors: FedWatch::listed(secrets.list(&all).await.unwrap().items)
                .await
                .watch,
            listed: [listed(), listed(), listed()],
        };
        Arc::new(Context {
            client,
            options: Options {
                creation_delay,
                ..Options::default()
            },
            backoff: Backoff::default(),
            stores,
        })
    }

    /// One round for `name` with no creation delay, on watches that hold
    /// what the API server holds.
    async fn round_now(api: &FakeApi, name: &str, trigger: Trigger) -> Action {
        let context = context(api, Duration::ZERO).await;
        sync(name, trigger, context).await.unwrap()
    }

    /// The requests sent since the first `since` (method and path).
    fn requests_after(api: &FakeApi, since: usize) -> Vec<(String, String)> {
        api.seen()[since..]
            .iter()
            .map(|s| (s.method.clone(), s.path.clone()))
            .collect()
    }

    fn job(uid: &str) -> Value {
        json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "ImagePullJob",
               "metadata": {"name": uid, "namespace": "default", "uid": uid},
               "spec": {"image": "nginx:1.25", "completionPolicy": {}}})
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

        let context = context(&api, Duration::from_secs(30)).await;
        let action = sync("node-1", Trigger::Node, context).await.unwrap();

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
        api.insert("imagepulljobs", job("live-job"));
        api.insert(
            "nodeimages",
            json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "NodeImage",
            "metadata": {"name": "node-1", "labels": {"zone": "a"}},
            "spec": {"images": {
                "nginx": {"tags": [job_tag("1.25", "live-job")]},
                "redis": {"tags": [job_tag("7", "gone-job")]},
            }}}),
        );

        let context = context(&api, Duration::ZERO).await;
        let before = api.seen().len();

        let action = sync("node-1", Trigger::NodeImage, context).await.unwrap();

        assert_eq!(action, Action::requeue(Duration::from_secs(1)));
        // The job the watch lacks is read fresh before its tag goes; the
        // live one is not read.
        assert_eq!(
            requests_after(&api, before),
            [
                (
                    "GET".to_owned(),
                    "/apis/apps.kruise.io/v1alpha1/namespaces/default/imagepulljobs/gone-job"
                        .to_owned()
                ),
                ("PUT".to_owned(), format!("{NODE_IMAGES}/node-1")),
            ]
        );
        let image = api.get(&format!("{NODE_IMAGES}/node-1")).unwrap();
        assert_eq!(image["metadata"]["labels"], json!({"zone": "b"}));
        let kept: Vec<&String> = image["spec"]["images"]
            .as_object()
            .unwrap()
            .keys()
            .collect();
        assert_eq!(kept, ["nginx"]);
        assert_eq!(image["spec"]["images"]["nginx"]["tags"][0]["tag"], "1.25");
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

    /// A node and its NodeImage with a live job's tag, all in the watches:
    /// the round reads nothing from the API server.
    #[tokio::test]
    async fn a_settled_node_image_is_looked_at_without_a_request() {
        let api = FakeApi::default();
        api.insert(
            "nodes",
            ready_node("node-1", &json!({"zone": "a"}), Timestamp::UNIX_EPOCH),
        );
        api.insert("imagepulljobs", job("live-job"));
        api.insert(
            "nodeimages",
            json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "NodeImage",
                   "metadata": {"name": "node-1", "labels": {"zone": "a"}},
                   "spec": {"images": {"nginx": {"tags": [job_tag("1.25", "live-job")]}}},
                   "status": {"desired": 1}}),
        );
        let context = context(&api, Duration::ZERO).await;
        let before = api.seen().len();

        let action = sync("node-1", Trigger::NodeImage, context).await.unwrap();

        assert_eq!(action, Action::requeue(RESYNC));
        assert_eq!(requests_after(&api, before), []);
    }

    /// A job made after the job watch's last change (its tag already
    /// written): read fresh, found, and its tag kept.
    #[tokio::test]
    async fn a_job_the_watch_has_not_seen_yet_keeps_its_tag() {
        let api = FakeApi::default();
        api.insert(
            "nodes",
            ready_node("node-1", &json!({}), Timestamp::UNIX_EPOCH),
        );
        api.insert(
            "nodeimages",
            json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "NodeImage",
                   "metadata": {"name": "node-1"},
                   "spec": {"images": {"nginx": {"tags": [job_tag("1.25", "new-job")]}}},
                   "status": {"desired": 1}}),
        );
        let context = context(&api, Duration::ZERO).await;
        api.insert("imagepulljobs", job("new-job"));

        let action = sync("node-1", Trigger::NodeImage, context).await.unwrap();

        assert_eq!(action, Action::requeue(RESYNC));
        assert_eq!(api.writes(), [], "the tag is kept");
        let image = api.get(&format!("{NODE_IMAGES}/node-1")).unwrap();
        assert_eq!(image["spec"]["images"]["nginx"]["tags"][0]["tag"], "1.25");
    }

    /// The pull secrets a NodeImage names: one the mirror watch holds is
    /// kept without a read; one it lacks (mirrored a moment ago) is read
    /// fresh, found and kept; one gone from both is dropped.
    #[tokio::test]
    async fn pull_secrets_come_from_the_mirror_watch_and_are_confirmed_before_they_go() {
        let api = FakeApi::default();
        api.insert(
            "nodes",
            ready_node("node-1", &json!({}), Timestamp::UNIX_EPOCH),
        );
        api.insert("imagepulljobs", job("live-job"));
        let secret = |name: &str| {
            json!({"apiVersion": "v1", "kind": "Secret",
                   "metadata": {"name": name, "namespace": DEFAULT_CONFIG_NAMESPACE}})
        };
        let named = |name: &str| json!({"namespace": DEFAULT_CONFIG_NAMESPACE, "name": name});
        api.insert("secrets", secret("watched"));
        api.insert(
            "nodeimages",
            json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "NodeImage",
                   "metadata": {"name": "node-1"},
                   "spec": {"images": {"nginx": {
                       "tags": [job_tag("1.25", "live-job")],
                       "pullSecrets": [named("watched"), named("new"), named("gone")]}}},
                   "status": {"desired": 1}}),
        );
        let context = context(&api, Duration::ZERO).await;
        api.insert("secrets", secret("new"));
        let before = api.seen().len();

        sync("node-1", Trigger::NodeImage, context).await.unwrap();

        let secrets = format!("/api/v1/namespaces/{DEFAULT_CONFIG_NAMESPACE}/secrets");
        let reads: Vec<_> = requests_after(&api, before)
            .into_iter()
            .filter(|(method, _)| method == "GET")
            .collect();
        assert_eq!(
            reads,
            [
                ("GET".to_owned(), format!("{secrets}/gone")),
                ("GET".to_owned(), format!("{secrets}/new")),
            ]
        );
        let image = api.get(&format!("{NODE_IMAGES}/node-1")).unwrap();
        assert_eq!(
            image["spec"]["images"]["nginx"]["pullSecrets"],
            json!([named("watched"), named("new")])
        );
    }

    /// A node the node watch has not seen yet: read fresh before its
    /// NodeImage would be deleted, found, and the NodeImage kept.
    #[tokio::test]
    async fn a_node_image_is_deleted_only_when_a_fresh_read_misses_its_node() {
        let api = FakeApi::default();
        api.insert(
            "nodeimages",
            json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "NodeImage",
                   "metadata": {"name": "node-1"}, "spec": {}}),
        );
        let context = context(&api, Duration::ZERO).await;
        api.insert(
            "nodes",
            ready_node("node-1", &json!({}), Timestamp::UNIX_EPOCH),
        );
        let before = api.seen().len();

        sync("node-1", Trigger::NodeImage, context).await.unwrap();

        assert_eq!(
            requests_after(&api, before),
            [("GET".to_owned(), "/api/v1/nodes/node-1".to_owned())]
        );
        assert!(api.get(&format!("{NODE_IMAGES}/node-1")).is_some());
    }

    /// Before the watches' first lists, a round decides nothing (a node or
    /// NodeImage missing from an empty store may exist) and asks again soon.
    #[tokio::test]
    async fn a_round_waits_for_the_watches_first_lists() {
        let api = FakeApi::default();
        api.insert(
            "nodes",
            ready_node("node-1", &json!({}), Timestamp::UNIX_EPOCH),
        );
        let filled = context(&api, Duration::ZERO).await;
        let (unlisted, _writer) = reflector::store();
        let context = Arc::new(Context {
            client: api.client(),
            options: filled.options.clone(),
            backoff: Backoff::default(),
            stores: Stores {
                images: unlisted,
                listed: [listed(), Listed::default(), listed()],
                ..filled.stores.clone()
            },
        });
        let before = api.seen().len();

        let action = sync("node-1", Trigger::Node, context).await.unwrap();

        assert_eq!(action, Action::requeue(STORE_WAIT));
        assert_eq!(requests_after(&api, before), []);
    }
}
