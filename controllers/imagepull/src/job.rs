//! The ImagePullJob controller: one round per job reads it, its targets'
//! NodeImages and the pods of its `podSelector` from the manager's shared
//! watches, mirrors its pull secrets, writes its tag into
//! as many NodeImages as `parallelism` allows, frees the nodes of tags it
//! no longer wants, and writes its status. Decisions are
//! [`kruise_core::imagepull::job`]'s.
//!
//! The NodeImages are read from the watch only once it shows the job's own
//! tag writes (the expectations the CloneSet's pods use): a watch behind
//! them counts fewer nodes pulling than there are, which the status would
//! report and the next tags could exceed `parallelism` by. The job itself
//! and the mirrored pull secrets are read from their watches the same
//! way: the job once its copy holds the round's last write to it, the
//! mirrors once the watch shows every mirror write (mirrors are shared
//! between jobs, so any job's write holds every job's round back).
//!
//! A running job is looked at again every [`RESYNC`] (a Never job every
//! [`NEVER_RESYNC`], to find new nodes), so progress never waits on an
//! event; NodeImage changes wake the jobs they name at once.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Pod, Secret};
use k8s_openapi::jiff::Timestamp;
use kruise_api::imagepulljob::CompletionPolicyType;
use kruise_api::imagepulljob::DELETION_PROTECTION_FINALIZER;
use kruise_api::nodeimage::ReferenceObject;
use kruise_api::{ImagePullJob, NodeImage, Stored};
use kruise_controller_runtime::api_error::{
    is_already_exists, is_conflict, is_not_found, unless_raced,
};
use kruise_controller_runtime::backoff::Backoff;
use kruise_controller_runtime::events::Events;
use kruise_controller_runtime::expectations::{
    Expectations, Freshness, WatchReads, holds_write, list_fresh,
};
use kruise_controller_runtime::random::random_u64;
use kruise_controller_runtime::shared::SharedWatch;
use kruise_controller_runtime::status::{StatusWrite, replace_status};
use kruise_controller_runtime::{metrics, outcome, readiness};
use kruise_core::imagepull::job::{
    self, Finished, completion_type, job_image, plan, release_tags, select_targets,
    sync_node_image, tag_pull_policy,
};
use kruise_core::imagepull::secrets::{self, MirrorWrite};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::json;
use tracing::Instrument;

use crate::{Error, Options, failed};

pub const CONTROLLER_NAME: &str = "kruise-imagepulljob-controller";
/// How often a running job is looked at without an event.
pub const RESYNC: Duration = Duration::from_secs(2);
/// How often a Never job looks for new target nodes.
pub const NEVER_RESYNC: Duration = Duration::from_secs(10);
/// How soon a round whose NodeImage watch lacks the job's last tag writes
/// looks again (their watch events usually start it sooner), or whose
/// mirror watch lacks a mirror write.
const STORE_WAIT: Duration = Duration::from_secs(1);
/// The one owner every job's mirror writes are noted under: a mirror is
/// shared by the jobs naming its source, so a round that read a watch
/// behind another job's write could mirror the same source twice.
const MIRRORS: &str = "pull secret mirrors";

struct Context {
    client: Client,
    options: Options,
    events: Events,
    backoff: Backoff,
    /// Per job (`namespace/name`), the job's own NodeImage writes awaited.
    node_images: WatchReads<Stored<NodeImage>>,
    /// The pods of `podSelector`s (the job writes none: nothing awaited).
    pods: WatchReads<Pod>,
    /// The Secrets of the agents' namespace, the mirrors among them; every
    /// job's mirror writes are awaited under [`MIRRORS`].
    mirrors: WatchReads<Secret>,
    /// Per job, the version the API server answered the round's last
    /// write to the job with (its status or finalizers): the job is read
    /// from its watch once its copy there holds it.
    job_writes: Expectations,
}

impl Context {
    fn new(
        client: Client,
        options: Options,
        node_images: WatchReads<Stored<NodeImage>>,
        pods: WatchReads<Pod>,
        mirrors: WatchReads<Secret>,
    ) -> Self {
        Self {
            events: Events::new(client.clone(), CONTROLLER_NAME),
            backoff: Backoff::default(),
            client,
            options,
            node_images,
            pods,
            mirrors,
            job_writes: Expectations::default(),
        }
    }

    /// Drops the notes kept for a job that is gone.
    fn forget(&self, key: &str) {
        self.node_images.forget(key);
        self.job_writes.forget(key);
    }
}

/// Runs the controller until the task is dropped; `pods`, `node_images`
/// and `mirrors` (the agents' namespace's Secrets) are the manager's
/// shared watches.
pub async fn run(
    client: Client,
    options: Options,
    pods: SharedWatch<Pod>,
    node_images: SharedWatch<Stored<NodeImage>>,
    mirrors: SharedWatch<Secret>,
) {
    let changed_images = node_images.subscribe(CONTROLLER_NAME);
    let context = Arc::new(Context::new(
        client.clone(),
        options,
        WatchReads::from_watch(node_images),
        WatchReads::from_watch(pods),
        WatchReads::from_watch(mirrors),
    ));
    tracing::info!(controller = CONTROLLER_NAME, "starting");
    let jobs = Api::<Stored<ImagePullJob>>::all(client);
    let (controller, listed) = readiness::controller(jobs, watcher::Config::default());
    readiness::global().track(CONTROLLER_NAME, listed);
    controller
        .watches_shared_stream(changed_images, |image| jobs_named_in(&image))
        .run(
            metrics::timed(CONTROLLER_NAME, reconcile),
            on_error,
            context,
        )
        .for_each(|result| async move { outcome::log(CONTROLLER_NAME, &result) })
        .await;
}

/// The jobs a NodeImage's tags name as owners: its status changed, so
/// their progress did.
fn jobs_named_in(image: &Stored<NodeImage>) -> Vec<ObjectRef<Stored<ImagePullJob>>> {
    let Ok(image) = &image.object else {
        return Vec::new();
    };
    image
        .spec
        .images
        .values()
        .flat_map(|i| &i.tags)
        .flat_map(|t| &t.owner_references)
        .filter(|o| job::is_job_reference(o))
        .filter_map(|o| Some(ObjectRef::new(o.name.as_deref()?).within(o.namespace.as_deref()?)))
        .collect()
}

// The signature is kube-runtime's error policy.
#[allow(clippy::needless_pass_by_value)]
fn on_error(job: Arc<Stored<ImagePullJob>>, error: &Error, context: Arc<Context>) -> Action {
    let key = job_key(&job.metadata);
    let delay = context.backoff.next(&key);
    tracing::warn!(job = %key, %error, retry_in = ?delay, "ImagePullJob round failed");
    Action::requeue(delay)
}

fn job_key(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    format!(
        "{}/{}",
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default()
    )
}

async fn reconcile(
    cached: Arc<Stored<ImagePullJob>>,
    context: Arc<Context>,
) -> Result<Action, Error> {
    let key = job_key(&cached.metadata);
    let span = tracing::info_span!("reconcile", controller = CONTROLLER_NAME, job = %key);
    let action = round(&cached, &context).instrument(span).await?;
    context.backoff.reset(&key);
    Ok(action)
}

async fn round(cached: &Stored<ImagePullJob>, context: &Context) -> Result<Action, Error> {
    let Some(stored) = read_job(cached, context).await? else {
        context.forget(&job_key(&cached.metadata));
        return Ok(Action::await_change());
    };
    let job = match stored.object {
        Ok(job) => job,
        Err(reason) => {
            tracing::warn!(job = %job_key(&stored.metadata), %reason, "cannot read the job: skipped");
            return Ok(Action::await_change());
        }
    };
    let now = Timestamp::now();
    if job.metadata.deletion_timestamp.is_some() {
        return Ok(if finalize(context, &job, true).await? {
            Action::await_change()
        } else {
            Action::requeue(STORE_WAIT)
        });
    }
    let finished = job::finished(&job, now);
    // A finished job is finalized once: without its finalizer its mirrors
    // are already gone, and there is nothing to read. A mirror watch
    // behind a mirror write holds it back a moment.
    if finished != Finished::Running
        && job::holds_finalizer(&job)
        && !finalize(context, &job, false).await?
    {
        return Ok(Action::requeue(STORE_WAIT));
    }
    match finished {
        Finished::Delete => {
            delete(context, &job).await?;
            context.forget(&job_key(&job.metadata));
            return Ok(Action::await_change());
        }
        Finished::Keep(after) => {
            return Ok(after.map_or_else(Action::await_change, Action::requeue));
        }
        Finished::Running => {}
    }
    if !job::holds_finalizer(&job) {
        let mut finalizers = job.metadata.finalizers.clone().unwrap_or_default();
        finalizers.push(DELETION_PROTECTION_FINALIZER.to_owned());
        write_finalizers(context, &job, finalizers).await?;
        return Ok(Action::requeue(Duration::from_millis(100)));
    }
    progress(context, &job, now).await
}

/// The job as its watch has it, once that copy holds the round's last
/// write to the job; else read from the API server (None: it is gone).
/// A copy without that write would plan again what the write settled,
/// and its writes would only meet conflicts.
async fn read_job(
    cached: &Stored<ImagePullJob>,
    context: &Context,
) -> Result<Option<Stored<ImagePullJob>>, Error> {
    let version = cached.metadata.resource_version.as_deref();
    let freshness = context.job_writes.freshness(
        &job_key(&cached.metadata),
        Instant::now(),
        |written| holds_write(version, written),
        |_| false,
    );
    if freshness == Freshness::Current {
        return Ok(Some(cached.clone()));
    }
    let namespace = cached.namespace().unwrap_or_default();
    let jobs: Api<Stored<ImagePullJob>> = Api::namespaced(context.client.clone(), &namespace);
    jobs.get_opt(&cached.name_any())
        .await
        .map_err(failed("read the job"))
}

/// Targets, secrets, NodeImage writes and the status of a running job.
async fn progress(context: &Context, job: &ImagePullJob, now: Timestamp) -> Result<Action, Error> {
    let fresh = first_round(job);
    let Some(node_images) = read_node_images(context, job, fresh).await? else {
        return Ok(Action::requeue(STORE_WAIT));
    };
    if let Some(selector) = &job.spec.pod_selector
        && let Err(error) = kruise_core::selector::validate(selector)
    {
        return refuse(context, job, &format!("invalid podSelector: {error}")).await;
    }
    let pods = read_pods(context, job, fresh).await?;
    let pods: Vec<&Pod> = pods.iter().map(AsRef::as_ref).collect();
    let targets: Vec<NodeImage> = match select_targets(job, &node_images, &pods) {
        Ok(indexes) => indexes
            .into_iter()
            .map(|i| node_images[i].clone())
            .collect(),
        Err(error) => return refuse(context, job, &format!("invalid selector: {error}")).await,
    };
    let Some(mirrors) = sync_secrets(context, job).await? else {
        return Ok(Action::requeue(STORE_WAIT));
    };
    let planned = match plan(job, &targets, &mirrors, now) {
        Ok(planned) => planned,
        Err(error) => return refuse(context, job, &error.to_string()).await,
    };
    if planned.status.completion_time.is_none() {
        for &index in &planned.sync {
            add_tag(context, job, &targets[index], &mirrors).await?;
        }
        release_old_tags(context, job, &node_images).await?;
    }
    if job.status.as_ref() != Some(&planned.status) {
        let mut updated = job.clone();
        updated.status = Some(planned.status);
        write_status(context, &updated).await?;
    }
    let resync = if completion_type(job) == CompletionPolicyType::Never {
        NEVER_RESYNC
    } else {
        RESYNC
    };
    Ok(Action::requeue(
        planned.requeue.map_or(resync, |d| d.min(resync)),
    ))
}

/// A spec the controller cannot act on: said once in an event and the
/// job's message, then left until it changes.
async fn refuse(context: &Context, job: &ImagePullJob, message: &str) -> Result<Action, Error> {
    let text = format!("invalid spec: {message}");
    let current = job.status.as_ref().and_then(|s| s.message.as_deref());
    if current != Some(text.as_str()) {
        context
            .events
            .warning(&job.object_ref(&()), "InvalidSpec", "Skip", &text)
            .await;
        let mut updated = job.clone();
        updated.status.get_or_insert_with(Default::default).message = Some(text);
        write_status(context, &updated).await?;
    }
    Ok(Action::await_change())
}

/// Whether the job has had no round yet (no start time). Its first round
/// reads its targets from the API server, not the watches: a node
/// labelled, or a pod made, a moment before the job may not be in them
/// yet, and a job that starts with too few targets can finish without
/// them (one with none completes at once). From then on the watches
/// hold at least the job's own first tag writes, and every change before
/// them.
fn first_round(job: &ImagePullJob) -> bool {
    job.status
        .as_ref()
        .and_then(|s| s.start_time.as_ref())
        .is_none()
}

/// Every NodeImage: listed when `fresh`, else from the watch once it
/// shows the job's own writes (listed while it cannot be trusted); None
/// while it lacks some.
async fn read_node_images(
    context: &Context,
    job: &ImagePullJob,
    fresh: bool,
) -> Result<Option<Vec<NodeImage>>, Error> {
    let api = Api::<Stored<NodeImage>>::all(context.client.clone());
    let params = ListParams::default();
    let read = if fresh {
        list_fresh(&api, &params, |_| true).await.map(Some)
    } else {
        let reads = &context.node_images;
        reads
            .read_or_list(&job_key(&job.metadata), &api, &params, |_| true)
            .await
    }
    .map_err(failed("list the NodeImages"))?;
    // One NodeImage our types cannot read costs that node, not the job.
    Ok(read.map(|images| {
        images
            .iter()
            .filter_map(|s| s.object.clone().ok())
            .collect()
    }))
}

/// The pods of the job's `podSelector` in its namespace (none without
/// one), from the pod watch once it has listed, unless `fresh`.
async fn read_pods(
    context: &Context,
    job: &ImagePullJob,
    fresh: bool,
) -> Result<Vec<Arc<Pod>>, Error> {
    let Some(selector) = &job.spec.pod_selector else {
        return Ok(Vec::new());
    };
    let namespace = job.metadata.namespace.clone().unwrap_or_default();
    let api = Api::<Pod>::namespaced(context.client.clone(), &namespace);
    let params = ListParams::default().labels(&kruise_core::selector::to_selector_string(selector));
    let selected = |pod: &Pod| {
        pod.metadata.namespace.as_deref() == Some(namespace.as_str())
            && kruise_core::selector::matches(selector, pod.labels()).unwrap_or(false)
    };
    let read = if fresh {
        list_fresh(&api, &params, selected).await.map(Some)
    } else {
        let reads = &context.pods;
        reads
            .read_or_list(&job_key(&job.metadata), &api, &params, selected)
            .await
    }
    .map_err(failed("list the pods of the podSelector"))?;
    // Never None: nothing is awaited where nothing was written.
    Ok(read.unwrap_or_default())
}

/// Writes the job's tag into one NodeImage, on a fresh read; a conflict
/// waits for the next round.
async fn add_tag(
    context: &Context,
    job: &ImagePullJob,
    target: &NodeImage,
    mirrors: &[ReferenceObject],
) -> Result<(), Error> {
    let api: Api<NodeImage> = Api::all(context.client.clone());
    let name = target.name_any();
    let Some(mut fresh) = api
        .get_opt(&name)
        .await
        .map_err(failed("read a NodeImage"))?
    else {
        return Ok(());
    };
    let policy = tag_pull_policy(job, random_u64(), context.options.extra_always_ttl);
    let changed = sync_node_image(
        &mut fresh.spec,
        fresh.status.as_ref(),
        job,
        mirrors,
        Timestamp::now(),
        policy,
    )
    .unwrap_or(false);
    if changed && replace_node_image(context, job, &api, &fresh).await? {
        tracing::info!(node = %name, image = %job.spec.image, "tag written");
    }
    Ok(())
}

/// Edits take effect: the job leaves the tags of an image it no longer
/// pulls, which frees nodes of them.
async fn release_old_tags(
    context: &Context,
    job: &ImagePullJob,
    node_images: &[NodeImage],
) -> Result<(), Error> {
    let keep = job_image(job).ok();
    // A conflict is released again on the next round (2 s).
    release_from(context, job, node_images, keep.as_ref()).await?;
    Ok(())
}

/// Takes the job's tags (but those of `keep`) out of `node_images`; false
/// if a write met a conflict (or a NodeImage gone), so some may be left.
async fn release_from(
    context: &Context,
    job: &ImagePullJob,
    node_images: &[NodeImage],
    keep: Option<&kruise_core::imagepull::reference::ImageRef>,
) -> Result<bool, Error> {
    let uid = job.metadata.uid.as_deref().unwrap_or_default();
    let api: Api<NodeImage> = Api::all(context.client.clone());
    let mut all_written = true;
    for image in node_images {
        let mut updated = image.clone();
        if release_tags(&mut updated.spec, uid, keep) {
            all_written &= replace_node_image(context, job, &api, &updated).await?;
        }
    }
    Ok(all_written)
}

/// Writes `image` on the version read, noting the write for the job's
/// reads of the NodeImage watch; false if it lost a race (a conflict, or
/// the NodeImage gone), which the next round plans again from.
async fn replace_node_image(
    context: &Context,
    job: &ImagePullJob,
    api: &Api<NodeImage>,
    image: &NodeImage,
) -> Result<bool, Error> {
    let written = api
        .replace(&image.name_any(), &PostParams::default(), image)
        .await;
    if let Ok(written) = &written {
        let key = job_key(&job.metadata);
        context.node_images.writes_of(&key).wrote(written);
    }
    let ok = written.is_ok();
    unless_raced(written, "write a NodeImage")?;
    Ok(ok)
}

/// Mirrors the job's pull secrets into the agents' namespace and returns
/// the mirrors' references; None while the mirror watch lacks a mirror
/// write.
async fn sync_secrets(
    context: &Context,
    job: &ImagePullJob,
) -> Result<Option<Vec<ReferenceObject>>, Error> {
    let key = job_key(&job.metadata);
    let config_namespace = &context.options.config_namespace;
    if job.spec.pull_secrets.is_empty() {
        // Nothing to mirror; only let go of mirrors an edit left behind.
        let Some(mirrors) = read_mirrors(context).await? else {
            return Ok(None);
        };
        apply(context, secrets::release(&key, &mirrors)).await?;
        return Ok(Some(Vec::new()));
    }
    let namespace = job.metadata.namespace.clone().unwrap_or_default();
    let sources_api: Api<Secret> = Api::namespaced(context.client.clone(), &namespace);
    let mut sources = Vec::new();
    for name in &job.spec.pull_secrets {
        match sources_api
            .get_opt(name)
            .await
            .map_err(failed("read a pull secret"))?
        {
            Some(secret) => sources.push(secret),
            None => {
                tracing::warn!(job = %key, secret = %name, "pull secret not found: pulling without it");
            }
        }
    }
    let Some(mirrors) = read_mirrors(context).await? else {
        return Ok(None);
    };
    let mut suffix = || format!("{:06x}", random_u64() & 0xff_ffff);
    let (writes, refs) =
        secrets::plan_mirrors(&key, &sources, &mirrors, config_namespace, &mut suffix);
    if writes.iter().any(|w| matches!(w, MirrorWrite::Create(_))) {
        ensure_namespace(context, config_namespace).await?;
    }
    apply(context, writes).await?;
    Ok(Some(refs))
}

/// The mirrored pull secrets in the agents' namespace, from the watch once
/// it shows every mirror write (listed while it cannot be trusted); None
/// while it lacks one.
async fn read_mirrors(context: &Context) -> Result<Option<Vec<Secret>>, Error> {
    let is_mirror = |secret: &Secret| {
        secret
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(secrets::SOURCE_KEY_ANNOTATION))
    };
    // Listing a namespace that does not exist yet gives an empty list.
    let read = context
        .mirrors
        .read_or_list(
            MIRRORS,
            &mirrors_api(context),
            &ListParams::default(),
            is_mirror,
        )
        .await
        .map_err(failed("list the mirrored pull secrets"))?;
    Ok(read.map(|mirrors| mirrors.iter().map(|m| m.as_ref().clone()).collect()))
}

fn mirrors_api(context: &Context) -> Api<Secret> {
    Api::namespaced(context.client.clone(), &context.options.config_namespace)
}

/// Sends the mirror writes, noting each for the reads of the mirror watch.
async fn apply(context: &Context, writes: Vec<MirrorWrite>) -> Result<(), Error> {
    let api = mirrors_api(context);
    let noted = context.mirrors.writes_of(MIRRORS);
    for write in writes {
        let result = match &write {
            MirrorWrite::Create(secret) => api
                .create(&PostParams::default(), secret)
                .await
                .map(|created| noted.wrote(&created)),
            MirrorWrite::Replace(secret) => api
                .replace(&secret.name_any(), &PostParams::default(), secret)
                .await
                .map(|replaced| noted.wrote(&replaced)),
            MirrorWrite::Delete(mirror) => {
                // On the version read: a job that took the mirror up since
                // makes this a conflict, and the next round plans again.
                let params = DeleteParams {
                    preconditions: Some(Preconditions {
                        uid: mirror.metadata.uid.clone(),
                        resource_version: mirror.metadata.resource_version.clone(),
                    }),
                    ..DeleteParams::default()
                };
                let uid = mirror.metadata.uid.as_deref();
                api.delete(&mirror.name_any(), &params)
                    .await
                    .map(|answer| noted.deleted(uid, answer.left().as_ref()))
            }
        };
        match result {
            Ok(()) => {}
            // Another job's round wrote the same mirror: planned again next round.
            Err(error) if is_conflict(&error) || is_not_found(&error) => {}
            Err(error) => return Err(failed("write a mirrored pull secret")(error)),
        }
    }
    Ok(())
}

async fn ensure_namespace(context: &Context, name: &str) -> Result<(), Error> {
    let api: Api<Namespace> = Api::all(context.client.clone());
    if api
        .get_metadata_opt(name)
        .await
        .map_err(failed("read the agents' config namespace"))?
        .is_some()
    {
        return Ok(());
    }
    let mut namespace = Namespace::default();
    namespace.metadata.name = Some(name.to_owned());
    match api.create(&PostParams::default(), &namespace).await {
        Ok(_) => Ok(()),
        Err(error) if is_already_exists(&error) => Ok(()),
        Err(error) => Err(failed("create the agents' config namespace")(error)),
    }
}

/// Lets go of the job's mirrors (and, once it is deleted, of its tags),
/// then drops its finalizer; false (the finalizer kept) while the NodeImage
/// watch lacks the job's last tag writes or a release met a conflict.
async fn finalize(context: &Context, job: &ImagePullJob, deleted: bool) -> Result<bool, Error> {
    let node_images = if deleted {
        let Some(node_images) = read_node_images(context, job, false).await? else {
            return Ok(false);
        };
        node_images
    } else {
        Vec::new()
    };
    let key = job_key(&job.metadata);
    let Some(mirrors) = read_mirrors(context).await? else {
        return Ok(false);
    };
    apply(context, secrets::release(&key, &mirrors)).await?;
    // A NodeImage the watch has an older copy of answers a conflict: the
    // finalizer stays until every tag is released.
    if !release_from(context, job, &node_images, None).await? {
        return Ok(false);
    }
    if job::holds_finalizer(job) {
        let mut finalizers = job.metadata.finalizers.clone().unwrap_or_default();
        finalizers.retain(|f| f != DELETION_PROTECTION_FINALIZER);
        write_finalizers(context, job, finalizers).await?;
    }
    if deleted {
        // The job is going: no round of it reads its notes again.
        context.forget(&key);
    }
    Ok(true)
}

async fn write_finalizers(
    context: &Context,
    job: &ImagePullJob,
    finalizers: Vec<String>,
) -> Result<(), Error> {
    let api: Api<ImagePullJob> =
        Api::namespaced(context.client.clone(), &job.namespace().unwrap_or_default());
    let patch = json!({"metadata": {
        "resourceVersion": job.metadata.resource_version,
        "finalizers": finalizers,
    }});
    let written = api
        .patch(
            &job.name_any(),
            &PatchParams::default(),
            &Patch::Merge(patch),
        )
        .await;
    if let Ok(written) = &written {
        let version = written.metadata.resource_version.as_deref();
        context.job_writes.wrote(&job_key(&job.metadata), version);
    }
    unless_raced(written, "write the job's finalizers")
}

/// The whole status, replaced on the version it was planned on (a merge
/// patch could not take `active` back to 0 or empty `failedNodes`).
async fn write_status(context: &Context, job: &ImagePullJob) -> Result<(), Error> {
    let api: Api<ImagePullJob> =
        Api::namespaced(context.client.clone(), &job.namespace().unwrap_or_default());
    let written = replace_status(&api, job, CONTROLLER_NAME).await;
    if let Ok(StatusWrite::Written(version)) = &written {
        let key = job_key(&job.metadata);
        context.job_writes.wrote(&key, version.as_deref());
    }
    unless_raced(written, "write the job's status")
}

async fn delete(context: &Context, job: &ImagePullJob) -> Result<(), Error> {
    let api: Api<ImagePullJob> =
        Api::namespaced(context.client.clone(), &job.namespace().unwrap_or_default());
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: job.metadata.uid.clone(),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    let deleted = api.delete(&job.name_any(), &params).await;
    unless_raced(deleted, "delete the finished job")
}

/// One round of the ImagePullJob controller against a fake API server:
/// the finalizer added before anything else, the job's tag written into
/// at most `parallelism` target NodeImages and counted in its status, a
/// job whose nodes all succeeded completed and deleted after its TTL, and
/// a deleted job's tags released before its finalizer is dropped.
#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use kruise_controller_runtime::testing::{FakeApi, FedWatch, Seen};
    use serde_json::Value;

    use super::*;

    const JOB: &str = "/apis/apps.kruise.io/v1alpha1/namespaces/default/imagepulljobs/pull";
    const NODE_IMAGES: &str = "/apis/apps.kruise.io/v1alpha1/nodeimages";

    /// A context that lists NodeImages, pods and mirrors from the API
    /// server.
    fn context(api: &FakeApi) -> Arc<Context> {
        Arc::new(Context::new(
            api.client(),
            Options::default(),
            WatchReads::api_only(),
            WatchReads::api_only(),
            WatchReads::api_only(),
        ))
    }

    fn insert_job(api: &FakeApi, spec: Value, metadata: Value) {
        let mut job = json!({
            "apiVersion": "apps.kruise.io/v1alpha1", "kind": "ImagePullJob",
            "metadata": {"name": "pull", "namespace": "default", "uid": "job-uid"},
        });
        job["spec"] = spec;
        json_merge(&mut job["metadata"], metadata);
        api.insert("imagepulljobs", job);
    }

    fn json_merge(into: &mut Value, from: Value) {
        if let (Some(into), Value::Object(from)) = (into.as_object_mut(), from) {
            into.extend(from);
        }
    }

    fn insert_node_image(api: &FakeApi, name: &str, spec: Value, status: Value) {
        let mut image = json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "NodeImage",
                               "metadata": {"name": name}});
        image["spec"] = spec;
        image["status"] = status;
        api.insert("nodeimages", image);
    }

    fn owned_tag(tag: &str, uid: &str) -> Value {
        json!({
            "tag": tag,
            "createdAt": Timestamp::now().to_string(),
            "ownerReferences": [{"apiVersion": "apps.kruise.io/v1alpha1",
                                 "kind": "ImagePullJob", "namespace": "default",
                                 "name": "pull", "uid": uid}],
        })
    }

    /// The job as the API server holds it now, as its watch would hand it
    /// to a round.
    fn stored_job(api: &FakeApi) -> Arc<Stored<ImagePullJob>> {
        Arc::new(Stored::<ImagePullJob>::from_value(api.get(JOB).unwrap()).unwrap())
    }

    async fn round_on(api: &FakeApi) -> Action {
        reconcile(stored_job(api), context(api)).await.unwrap()
    }

    fn node_image(api: &FakeApi, name: &str) -> Value {
        api.get(&format!("{NODE_IMAGES}/{name}")).unwrap()
    }

    /// Three empty NodeImages and a job pulling nginx on two nodes at a
    /// time, with `metadata` merged into the job's.
    fn three_nodes_two_at_a_time(metadata: Value) -> FakeApi {
        let api = FakeApi::default();
        for name in ["node-a", "node-b", "node-c"] {
            insert_node_image(&api, name, json!({}), json!({"desired": 0}));
        }
        insert_job(
            &api,
            json!({"image": "nginx:1.25", "parallelism": 2, "completionPolicy": {}}),
            metadata,
        );
        api
    }

    /// The first nginx tag in NodeImage `name`'s spec.
    fn first_nginx_tag(api: &FakeApi, name: &str) -> Value {
        node_image(api, name)["spec"]["images"]["nginx"]["tags"][0]["tag"].clone()
    }

    #[tokio::test]
    async fn a_job_tags_at_most_parallelism_node_images_and_counts_them_in_its_status() {
        let api = three_nodes_two_at_a_time(json!({}));
        let before = api.writes().len();

        // First the finalizer, and nothing else.
        assert_eq!(
            round_on(&api).await,
            Action::requeue(Duration::from_millis(100))
        );
        assert_eq!(
            api.get(JOB).unwrap()["metadata"]["finalizers"],
            json!([DELETION_PROTECTION_FINALIZER])
        );
        let writes: Vec<(String, String)> = api.writes()[before..]
            .iter()
            .map(|w| (w.method.clone(), w.path.clone()))
            .collect();
        assert_eq!(writes, [("PATCH".to_owned(), JOB.to_owned())]);
        assert_eq!(node_image(&api, "node-a")["spec"], json!({}));

        // Then the tag, on the first two nodes by name.
        assert_eq!(round_on(&api).await, Action::requeue(RESYNC));
        for name in ["node-a", "node-b"] {
            let tags = &node_image(&api, name)["spec"]["images"]["nginx"]["tags"];
            assert_eq!(tags.as_array().unwrap().len(), 1, "{name}");
            assert_eq!(tags[0]["tag"], "1.25");
            assert_eq!(tags[0]["ownerReferences"][0]["uid"], "job-uid");
            assert_eq!(tags[0]["ownerReferences"][0]["kind"], "ImagePullJob");
        }
        assert_eq!(node_image(&api, "node-c")["spec"], json!({}));
        let status = &api.get(JOB).unwrap()["status"];
        assert_eq!(status["desired"], 3);
        assert_eq!(status["message"], "job is running, progress 0.0%");

        // Both are now pulling: node-c waits for a free slot.
        round_on(&api).await;
        assert_eq!(node_image(&api, "node-c")["spec"], json!({}));
        let status = &api.get(JOB).unwrap()["status"];
        assert_eq!(
            (&status["desired"], &status["active"]),
            (&json!(3), &json!(2))
        );
    }

    #[tokio::test]
    async fn a_job_whose_nodes_all_succeeded_completes_and_is_deleted_after_its_ttl() {
        let api = FakeApi::default();
        insert_node_image(
            &api,
            "node-a",
            json!({"images": {"nginx": {"tags": [owned_tag("1.25", "job-uid")]}}}),
            json!({"desired": 1, "succeeded": 1, "imageStatuses": {"nginx": {"tags": [
                {"tag": "1.25", "phase": "Succeeded", "version": 0}]}}}),
        );
        insert_job(
            &api,
            json!({"image": "nginx:1.25", "completionPolicy": {"ttlSecondsAfterFinished": 0}}),
            json!({"finalizers": [DELETION_PROTECTION_FINALIZER]}),
        );

        assert_eq!(round_on(&api).await, Action::requeue(RESYNC));
        let status = &api.get(JOB).unwrap()["status"];
        assert_eq!(status["succeeded"], 1);
        assert_eq!(status["desired"], 1);
        assert_eq!(status["message"], "job has completed");
        assert!(status["completionTime"].is_string());
        let before = api.writes().len();

        assert_eq!(round_on(&api).await, Action::await_change());
        assert_eq!(api.get(JOB), None);
        let writes: Vec<(String, Value)> = api.writes()[before..]
            .iter()
            .map(|w| (w.method.clone(), w.body.clone()))
            .collect();
        assert_eq!(writes.len(), 2, "{writes:?}");
        assert_eq!(writes[0].0, "PATCH");
        assert_eq!(writes[0].1["metadata"]["finalizers"], json!([]));
        assert_eq!(writes[1].0, "DELETE");
        assert_eq!(writes[1].1["preconditions"]["uid"], "job-uid");
        // The node keeps the tag: its TTL, not the job, removes it.
        assert_eq!(first_nginx_tag(&api, "node-a"), "1.25");
    }

    #[tokio::test]
    async fn a_deleted_job_releases_its_tags_then_drops_its_finalizer() {
        let api = FakeApi::default();
        insert_node_image(
            &api,
            "node-a",
            json!({"images": {
                "nginx": {"tags": [owned_tag("1.25", "job-uid")]},
                "redis": {"tags": [owned_tag("7", "other-uid")]},
            }}),
            json!({"desired": 2}),
        );
        insert_job(
            &api,
            json!({"image": "nginx:1.25", "completionPolicy": {}}),
            json!({"finalizers": [DELETION_PROTECTION_FINALIZER],
                   "deletionTimestamp": "2024-01-01T00:00:00Z"}),
        );

        assert_eq!(round_on(&api).await, Action::await_change());

        let images = &node_image(&api, "node-a")["spec"]["images"];
        let kept: Vec<&String> = images.as_object().unwrap().keys().collect();
        assert_eq!(kept, ["redis"]);
        assert_eq!(
            images["redis"]["tags"][0]["ownerReferences"][0]["uid"],
            "other-uid"
        );
        assert_eq!(api.get(JOB).unwrap()["metadata"]["finalizers"], json!([]));
    }

    /// A context that reads NodeImages and pods from these watches, and
    /// mirrors from a watch that has listed none.
    async fn watched(
        images: &FedWatch<Stored<NodeImage>>,
        pods: &FedWatch<Pod>,
        api: &FakeApi,
    ) -> Arc<Context> {
        let no_mirrors = FedWatch::<Secret>::listed([]).await;
        watched_with_mirrors(images, pods, &no_mirrors, api)
    }

    /// A NodeImage watch listed with the API's NodeImages, an empty pod
    /// watch, and a context reading both (the watches live while held).
    async fn watched_without_pods(
        api: &FakeApi,
    ) -> (FedWatch<Stored<NodeImage>>, FedWatch<Pod>, Arc<Context>) {
        let images = FedWatch::listed(listed_images(api).await).await;
        let pods = FedWatch::<Pod>::listed([]).await;
        let context = watched(&images, &pods, api).await;
        (images, pods, context)
    }

    async fn listed_images(api: &FakeApi) -> Vec<Stored<NodeImage>> {
        Api::<Stored<NodeImage>>::all(api.client())
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
    }

    /// Method and path of the requests since the first `since`, events
    /// left out.
    fn requests_after(api: &FakeApi, since: usize) -> Vec<String> {
        api.seen()[since..]
            .iter()
            .filter(|s: &&Seen| !s.path.contains("/events"))
            .map(|s| format!("{} {}", s.method, s.path))
            .collect()
    }

    /// The job as after its first round: a start time in its status.
    async fn mark_started(api: &FakeApi) {
        let status = json!({"status": {"startTime": "2026-12-01T00:00:00Z", "desired": 0}});
        Api::<ImagePullJob>::namespaced(api.client(), "default")
            .patch_status("pull", &PatchParams::default(), &Patch::Merge(status))
            .await
            .unwrap();
    }

    /// A job's first round reads its targets from the API server: a node
    /// labelled a moment before the job, which the watch does not show
    /// yet, is one of them (from the watch, the job would have had no
    /// target and completed at once).
    #[tokio::test]
    async fn a_jobs_first_round_reads_its_targets_from_the_api_server() {
        let api = FakeApi::default();
        insert_node_image(&api, "node-a", json!({}), json!({"desired": 0}));
        let (images, _pods, context) = watched_without_pods(&api).await;
        let labelled = json!({"metadata": {"labels": {"pool": "web"}}});
        Api::<NodeImage>::all(api.client())
            .patch("node-a", &PatchParams::default(), &Patch::Merge(labelled))
            .await
            .unwrap();
        insert_job(
            &api,
            json!({"image": "nginx:1.25", "selector": {"matchLabels": {"pool": "web"}},
                   "completionPolicy": {}}),
            json!({"finalizers": [DELETION_PROTECTION_FINALIZER]}),
        );
        let before = api.seen().len();

        reconcile(stored_job(&api), context).await.unwrap();

        let requests = requests_after(&api, before);
        assert!(
            requests.contains(&format!("GET {NODE_IMAGES}")),
            "{requests:?}"
        );
        assert_eq!(first_nginx_tag(&api, "node-a"), "1.25");
        let status = &api.get(JOB).unwrap()["status"];
        assert_eq!(
            (&status["desired"], &status["completionTime"]),
            (&json!(1), &Value::Null)
        );
        drop(images);
    }

    /// NodeImages come from the watch once it shows the job's own tag
    /// writes: no LIST per round after the first, and a round on a watch
    /// without them waits instead of planning from NodeImages that lack
    /// its tags.
    #[tokio::test]
    async fn a_round_reads_node_images_from_the_watch_once_it_shows_its_tags() {
        let api = three_nodes_two_at_a_time(json!({"finalizers": [DELETION_PROTECTION_FINALIZER]}));
        mark_started(&api).await;
        let (images, _pods, context) = watched_without_pods(&api).await;
        let stored = || stored_job(&api);

        let before = api.seen().len();
        assert_eq!(
            reconcile(stored(), context.clone()).await.unwrap(),
            Action::requeue(RESYNC)
        );
        let requests = requests_after(&api, before);
        assert!(
            !requests.contains(&format!("GET {NODE_IMAGES}")),
            "{requests:?}"
        );
        assert!(
            requests.contains(&format!("PUT {NODE_IMAGES}/node-b")),
            "{requests:?}"
        );

        let before = api.seen().len();
        assert_eq!(
            reconcile(stored(), context.clone()).await.unwrap(),
            Action::requeue(STORE_WAIT)
        );
        assert_eq!(
            requests_after(&api, before),
            Vec::<String>::new(),
            "nothing read: the job and the NodeImages from their watches"
        );

        images.apply(listed_images(&api).await).await;
        let before = api.seen().len();
        assert_eq!(
            reconcile(stored(), context).await.unwrap(),
            Action::requeue(RESYNC)
        );
        let requests = requests_after(&api, before);
        assert!(
            !requests.iter().any(|r| r.contains("/nodeimages")),
            "two nodes pulling: no NodeImage read or written: {requests:?}"
        );
        assert_eq!(api.get(JOB).unwrap()["status"]["active"], 2);
        assert_eq!(node_image(&api, "node-c")["spec"], json!({}));
    }

    /// The job comes from its watch once the watch's copy holds the
    /// round's last write to it: a copy from before the status write is
    /// read again from the API server, a later one is not.
    #[tokio::test]
    async fn a_round_reads_the_job_from_its_watch_once_it_holds_the_last_write() {
        let api = three_nodes_two_at_a_time(json!({"finalizers": [DELETION_PROTECTION_FINALIZER]}));
        mark_started(&api).await;
        let (images, _pods, context) = watched_without_pods(&api).await;
        let stored = || stored_job(&api);
        let before_the_status = stored();

        let before = api.seen().len();
        reconcile(before_the_status.clone(), context.clone())
            .await
            .unwrap();
        let requests = requests_after(&api, before);
        assert!(
            requests.contains(&format!("PUT {JOB}/status")),
            "{requests:?}"
        );
        assert!(!requests.contains(&format!("GET {JOB}")), "{requests:?}");
        images.apply(listed_images(&api).await).await;

        let before = api.seen().len();
        reconcile(before_the_status, context.clone()).await.unwrap();
        let requests = requests_after(&api, before);
        assert_eq!(requests[0], format!("GET {JOB}"), "{requests:?}");

        let before = api.seen().len();
        reconcile(stored(), context).await.unwrap();
        assert_eq!(requests_after(&api, before), Vec::<String>::new());
    }

    /// A context whose NodeImages, pods and mirrors come from these
    /// watches.
    fn watched_with_mirrors(
        images: &FedWatch<Stored<NodeImage>>,
        pods: &FedWatch<Pod>,
        mirrors: &FedWatch<Secret>,
        api: &FakeApi,
    ) -> Arc<Context> {
        Arc::new(Context::new(
            api.client(),
            Options::default(),
            WatchReads::from_watch(images.watch.clone()),
            WatchReads::from_watch(pods.watch.clone()),
            WatchReads::from_watch(mirrors.watch.clone()),
        ))
    }

    /// The requests to Secrets since the first `since`.
    fn secret_requests(api: &FakeApi, since: usize) -> Vec<String> {
        requests_after(api, since)
            .into_iter()
            .filter(|r| r.contains("/secrets"))
            .collect()
    }

    async fn listed_mirrors(api: &FakeApi) -> Vec<Secret> {
        Api::<Secret>::namespaced(api.client(), &Options::default().config_namespace)
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
    }

    /// The mirrored pull secrets come from their watch: no LIST, and a
    /// round on a watch that lacks the mirror just made waits rather than
    /// mirroring the source again; once the watch has it, the round goes
    /// on without a write.
    #[tokio::test]
    async fn mirrors_come_from_their_watch_once_it_shows_every_mirror_write() {
        let api = three_nodes_two_at_a_time(json!({"finalizers": [DELETION_PROTECTION_FINALIZER]}));
        let with_secret = json!({"spec": {"pullSecrets": ["creds"]}});
        Api::<ImagePullJob>::namespaced(api.client(), "default")
            .patch("pull", &PatchParams::default(), &Patch::Merge(with_secret))
            .await
            .unwrap();
        api.insert(
            "secrets",
            json!({"apiVersion": "v1", "kind": "Secret",
                   "metadata": {"name": "creds", "namespace": "default"},
                   "data": {".dockerconfigjson": "e30="}}),
        );
        mark_started(&api).await;
        let images = FedWatch::listed(listed_images(&api).await).await;
        let pods = FedWatch::<Pod>::listed([]).await;
        let mirrors = FedWatch::<Secret>::listed([]).await;
        let context = watched_with_mirrors(&images, &pods, &mirrors, &api);
        let stored = || stored_job(&api);
        let mirror_list = "GET /api/v1/namespaces/kruise-daemon-config/secrets".to_owned();

        let before = api.seen().len();
        reconcile(stored(), context.clone()).await.unwrap();
        let requests = secret_requests(&api, before);
        assert!(!requests.contains(&mirror_list), "{requests:?}");
        assert_eq!(listed_mirrors(&api).await.len(), 1, "{requests:?}");

        images.apply(listed_images(&api).await).await;
        let before = api.seen().len();
        assert_eq!(
            reconcile(stored(), context.clone()).await.unwrap(),
            Action::requeue(STORE_WAIT)
        );
        assert_eq!(
            secret_requests(&api, before),
            ["GET /api/v1/namespaces/default/secrets/creds"],
            "the source read, no mirror listed or written"
        );
        assert_eq!(listed_mirrors(&api).await.len(), 1, "not mirrored twice");

        mirrors.apply(listed_mirrors(&api).await).await;
        let before = api.seen().len();
        assert_eq!(
            reconcile(stored(), context).await.unwrap(),
            Action::requeue(RESYNC)
        );
        assert_eq!(
            secret_requests(&api, before),
            ["GET /api/v1/namespaces/default/secrets/creds"],
            "the source read, no mirror listed or written"
        );
    }

    /// The last job releasing a mirror deletes it on the version it read:
    /// a job that took the mirror up since makes the delete a conflict,
    /// and the mirror stays.
    #[tokio::test]
    async fn a_mirror_is_deleted_only_as_it_was_read() {
        let api = FakeApi::default();
        let mirrors_api = mirrors_api(&context(&api));
        let mirror: Secret = serde_json::from_value(api.insert(
            "secrets",
            json!({"apiVersion": "v1", "kind": "Secret",
                   "metadata": {"name": "creds-x", "namespace": "kruise-daemon-config",
                                "annotations": {secrets::SOURCE_KEY_ANNOTATION: "default/creds",
                                                secrets::REFERENCES_ANNOTATION: "default/pull"}}}),
        ))
        .unwrap();
        let context = context(&api);
        let taken_up = json!({"metadata": {"annotations": {
            secrets::REFERENCES_ANNOTATION: "default/other,default/pull"}}});
        mirrors_api
            .patch("creds-x", &PatchParams::default(), &Patch::Merge(taken_up))
            .await
            .unwrap();

        let writes = secrets::release("default/pull", std::slice::from_ref(&mirror));
        apply(&context, writes).await.unwrap();
        assert!(
            api.get("/api/v1/namespaces/kruise-daemon-config/secrets/creds-x")
                .is_some()
        );

        let mut released = mirrors_api.get("creds-x").await.unwrap();
        if let Some(annotations) = released.metadata.annotations.as_mut() {
            annotations.insert(
                secrets::REFERENCES_ANNOTATION.to_owned(),
                "default/pull".to_owned(),
            );
        }
        mirrors_api
            .replace("creds-x", &PostParams::default(), &released)
            .await
            .unwrap();
        let read = mirrors_api.get("creds-x").await.unwrap();
        apply(&context, secrets::release("default/pull", &[read]))
            .await
            .unwrap();
        assert_eq!(
            api.get("/api/v1/namespaces/kruise-daemon-config/secrets/creds-x"),
            None
        );
    }

    /// The pods of a podSelector come from the pod watch: their nodes are
    /// the targets, without a LIST of the pods.
    #[tokio::test]
    async fn the_pods_of_a_pod_selector_come_from_the_pod_watch() {
        let api = FakeApi::default();
        for name in ["node-a", "node-b"] {
            insert_node_image(&api, name, json!({}), json!({"desired": 0}));
        }
        insert_job(
            &api,
            json!({"image": "nginx:1.25", "podSelector": {"matchLabels": {"app": "web"}},
                   "completionPolicy": {}}),
            json!({"finalizers": [DELETION_PROTECTION_FINALIZER]}),
        );
        let pod = |name: &str, namespace: &str, node: &str| -> Pod {
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": namespace, "labels": {"app": "web"}},
                "spec": {"nodeName": node, "containers": []},
                "status": {"phase": "Running"},
            }))
            .unwrap()
        };
        mark_started(&api).await;
        let images = FedWatch::listed(listed_images(&api).await).await;
        let pods = FedWatch::listed([
            pod("web-1", "default", "node-b"),
            pod("web-2", "other", "node-a"),
        ])
        .await;
        let before = api.seen().len();

        reconcile(stored_job(&api), watched(&images, &pods, &api).await)
            .await
            .unwrap();

        let requests = requests_after(&api, before);
        assert!(
            !requests.iter().any(|r| r.contains("/pods")),
            "{requests:?}"
        );
        assert_eq!(
            node_image(&api, "node-a")["spec"],
            json!({}),
            "another namespace's pod"
        );
        assert_eq!(first_nginx_tag(&api, "node-b"), "1.25");
    }

    /// A podSelector the API server would refuse is said in the status,
    /// not read as "no pods".
    #[tokio::test]
    async fn a_pod_selector_that_cannot_select_is_refused() {
        let api = FakeApi::default();
        insert_node_image(&api, "node-a", json!({}), json!({"desired": 0}));
        insert_job(
            &api,
            json!({"image": "nginx:1.25", "completionPolicy": {},
                   "podSelector": {"matchExpressions": [{"key": "app", "operator": "Maybe"}]}}),
            json!({"finalizers": [DELETION_PROTECTION_FINALIZER]}),
        );

        assert_eq!(round_on(&api).await, Action::await_change());

        let message = api.get(JOB).unwrap()["status"]["message"].clone();
        assert!(
            message
                .as_str()
                .unwrap()
                .starts_with("invalid spec: invalid podSelector:"),
            "{message}"
        );
        assert_eq!(node_image(&api, "node-a")["spec"], json!({}));
    }

    /// A deleted job whose release meets a conflict (the watch's copy of
    /// the NodeImage is older than the node agent's last status write)
    /// keeps its finalizer and tries again once the watch has caught up:
    /// no tag is left behind.
    #[tokio::test]
    async fn a_deleted_jobs_release_that_meets_a_conflict_keeps_the_finalizer() {
        let api = FakeApi::default();
        insert_node_image(
            &api,
            "node-a",
            json!({"images": {"nginx": {"tags": [owned_tag("1.25", "job-uid")]}}}),
            json!({"desired": 1}),
        );
        insert_job(
            &api,
            json!({"image": "nginx:1.25", "completionPolicy": {}}),
            json!({"finalizers": [DELETION_PROTECTION_FINALIZER],
                   "deletionTimestamp": "2024-01-01T00:00:00Z"}),
        );
        let (images, _pods, context) = watched_without_pods(&api).await;
        // The agent reports: the API server's copy moves on, the watch's not.
        let status = json!({"status": {"desired": 1, "active": 1}});
        Api::<NodeImage>::all(api.client())
            .patch_status("node-a", &PatchParams::default(), &Patch::Merge(status))
            .await
            .unwrap();
        let stored = || stored_job(&api);

        assert_eq!(
            reconcile(stored(), context.clone()).await.unwrap(),
            Action::requeue(STORE_WAIT)
        );
        assert_eq!(first_nginx_tag(&api, "node-a"), "1.25", "not released yet");
        assert_eq!(
            api.get(JOB).unwrap()["metadata"]["finalizers"],
            json!([DELETION_PROTECTION_FINALIZER])
        );

        images.apply(listed_images(&api).await).await;
        assert_eq!(
            reconcile(stored(), context).await.unwrap(),
            Action::await_change()
        );
        assert_eq!(node_image(&api, "node-a")["spec"], json!({}), "released");
        assert_eq!(api.get(JOB).unwrap()["metadata"]["finalizers"], json!([]));
    }
}
