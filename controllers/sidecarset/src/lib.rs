//! The SidecarSet controller (spec 02): upgrades the sidecars of pods that a
//! SidecarSet injected, in place (image-only changes) or hot (the `-1`/`-2`
//! twins), under the SidecarSet's rolling budget, canary selector, partition
//! and pause, and keeps the SidecarSet's status and ControllerRevisions.
//!
//! Every decision is made by the pure planner in
//! [`kruise_core::sidecarset::update`]; this crate reads the cluster, calls
//! [`plan_revisions`](kruise_core::sidecarset::update::plan_revisions) and
//! [`plan_update`](kruise_core::sidecarset::update::plan_update), and
//! performs what they return:
//!
//! * ControllerRevisions in [`REVISION_NAMESPACE`] (created, bumped,
//!   relabelled, truncated);
//! * the SidecarSet status through the status subresource;
//! * one strategic-merge PATCH per pod carrying the pod's
//!   `resourceVersion` (a 409 conflict means the pod moved: plan again a
//!   second later), then the pod's `SidecarSetUpgradable` condition through
//!   `pods/status`;
//! * events (`NotUpgradablePods` on the SidecarSet, `ResetContainerSucceed`
//!   / `ResetContainerFailed` on hot-upgraded pods).
//!
//! Pods are read from the manager's shared pod watch once it shows this
//! controller's own last pod writes for the SidecarSet (until then the
//! round waits; a store that lags too long is bypassed by a LIST, as is one
//! not listed yet: see `kruise_controller_runtime::expectations`). A round
//! started by a pod event sees at least that event, since the store takes
//! each change before it is handed on. The SidecarSet's ControllerRevisions
//! are read the same way from the shared revision watch. The planner's own
//! expectations are still kept in memory and handed back, as it asks.
//!
//! Differences from OpenKruise's controller:
//! * A pod event that the core schedules with a delay
//!   ([`pod_update_enqueue`](kruise_core::sidecarset::update::pod_update_enqueue)
//!   returning 5 s) is not put off by 5 s: the store already holds the
//!   event, so kubelet's status is never missed. Instead the rounds of one
//!   SidecarSet start at most once a second, whatever starts them (the
//!   `pacing` module): a burst of pod events costs one round, not one
//!   each.
//! * While a rollout is unfinished the SidecarSet is also reconciled every
//!   [`RESYNC_SECONDS`], as a safety net for missed pod events.
//! * The SidecarSet hashes are those the injection webhook uses: the stored
//!   annotations when a SidecarSet webhook stamped them, else computed from
//!   the spec ([`prepare_stored`](kruise_core::sidecarset::prepare_stored)).
//! * A SidecarSet stored without its defaults (written while the
//!   `mutate-defaults` webhook was not there) gets them stored by the
//!   controller, once per user change (see the `defaults` module):
//!   otherwise an image-only patch such as `busybox` → `busybox:1.35.0`
//!   would re-default `imagePullPolicy` and read as a change that is not
//!   image-only.

mod defaults;
mod execute;
mod expectations;
mod pacing;
mod reconcile;
mod triggers;

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::future::BoxFuture;
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kruise_api::{SidecarSet, Stored};
use kruise_controller_runtime::api_error::is_already_exists;
use kruise_controller_runtime::backoff::Backoff;
use kruise_controller_runtime::events::Events;
use kruise_controller_runtime::expectations::WatchReads;
use kruise_controller_runtime::shared::SharedWatches;
use kruise_controller_runtime::{metrics, readiness};
use kruise_core::sidecarset::update::{REVISION_OWNER_LABEL, UpdateError};
use kube::api::{ObjectMeta, PostParams};
use kube::runtime::controller::{Action, Error as ControllerError};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Api, Client};

/// Where the SidecarSets' ControllerRevisions live (Kruise's namespace; the
/// injection webhook reads historical revisions from here too).
pub const REVISION_NAMESPACE: &str = "kruise-system";
/// The field manager of every write and the reporting controller of events.
pub const CONTROLLER_NAME: &str = "kruise-sidecarset-controller";
/// Reconcile an unfinished rollout at least this often.
pub const RESYNC_SECONDS: u64 = 30;

/// A reconcile round that failed; the SidecarSet is retried with backoff.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error(transparent)]
    Plan(#[from] UpdateError),
    #[error("SidecarSet {0}: the revision name keeps colliding with other revisions")]
    RevisionCollision(String),
    #[error("SidecarSet {sidecar_set}: {failed} pod write(s) failed, first: {first}")]
    PodWrites {
        sidecar_set: String,
        failed: usize,
        first: kube::Error,
    },
}

/// Shared state of the controller's reconciles.
pub(crate) struct Context {
    pub client: Client,
    pub events: Events,
    /// Where pods are read, and this controller's pod writes noted (per
    /// SidecarSet name), so a round never plans on a store without them.
    pub pods: WatchReads<Pod>,
    /// The same for the SidecarSets' ControllerRevisions.
    pub revisions: WatchReads<ControllerRevision>,
    /// The namespaces whose labels a `namespaceSelector` matches (this
    /// controller writes none, so the watch is always read once listed).
    pub namespaces: WatchReads<Namespace>,
    /// The planner's own expectations (pods it upgraded, whose new
    /// revision it waits to see).
    pub expectations: expectations::Expectations,
    pub defaulted: defaults::Defaulted,
    pub backoff: Backoff,
    pub pacing: pacing::Pacing,
}

impl Context {
    pub(crate) fn new(
        client: Client,
        pods: WatchReads<Pod>,
        revisions: WatchReads<ControllerRevision>,
        namespaces: WatchReads<Namespace>,
    ) -> Self {
        Self {
            events: Events::new(client.clone(), CONTROLLER_NAME),
            client,
            pods,
            revisions,
            namespaces,
            expectations: expectations::Expectations::default(),
            defaulted: defaults::Defaulted::default(),
            // A SidecarSet retries at least once a minute.
            backoff: Backoff::with_max(Duration::from_mins(1)),
            pacing: pacing::Pacing::default(),
        }
    }
}

/// Runs the SidecarSet controller until the watches end (they do not, short
/// of the process stopping): reconciles every SidecarSet on its own
/// changes, on pod events that concern it (through the core's
/// `sidecar_sets_of_pod` / `pod_update_enqueue`) and on changes of its
/// ControllerRevisions in [`REVISION_NAMESPACE`] (created if missing);
/// pods, revisions and namespaces come from the manager's shared watches.
pub async fn run(client: Client, watches: SharedWatches) {
    if let Err(error) = ensure_revision_namespace(&client).await {
        tracing::warn!(%error, "cannot ensure namespace {REVISION_NAMESPACE}; retrying when a revision is written");
    }
    let pods = WatchReads::from_watch(watches.pods().clone());
    let revisions = WatchReads::from_watch(watches.revisions().clone());
    let namespaces = WatchReads::from_watch(watches.namespaces().clone());
    let context = Arc::new(Context::new(client.clone(), pods, revisions, namespaces));
    // Stored<_>: one SidecarSet our types cannot read must not fail the
    // watch of all the others (reconcile reports and skips it).
    let (controller, listed) = readiness::controller(
        Api::<Stored<SidecarSet>>::all(client),
        watcher::Config::default(),
    );
    readiness::global().track(CONTROLLER_NAME, listed);
    let pod_triggers = triggers::PodTriggers::new(controller.store());
    controller
        .watches_shared_stream(watches.pods().subscribe(CONTROLLER_NAME), move |pod| {
            pod_triggers.triggers(&pod)
        })
        .watches_shared_stream(watches.revisions().subscribe(CONTROLLER_NAME), |revision| {
            revision_owner(&revision)
        })
        .run(paced_reconcile(), error_policy, context.clone())
        .for_each(|result| {
            match result {
                // Failures are already logged by `error_policy`.
                Ok(_) | Err(ControllerError::ReconcilerFailed(..)) => {}
                // A SidecarSet deleted while queued: nothing left to wait for.
                Err(ControllerError::ObjectNotFound(reference)) => {
                    context.expectations.forget(&reference.name);
                    context.pacing.forget(&reference.name);
                }
                Err(error) => tracing::warn!(%error, "SidecarSet controller"),
            }
            futures::future::ready(())
        })
        .await;
}

/// The timed reconcile, started at most once per
/// [`pacing::ROUND_INTERVAL`] for each SidecarSet; a round put off
/// returns at once, asking to be run when the interval is over (and is
/// neither timed nor counted).
fn paced_reconcile()
-> impl Fn(Arc<Stored<SidecarSet>>, Arc<Context>) -> BoxFuture<'static, Result<Action, Error>> {
    let timed = metrics::timed(CONTROLLER_NAME, reconcile::reconcile);
    move |sidecar_set, context| match context.pacing.start(sidecar_set.name(), Instant::now()) {
        Some(wait) => Box::pin(futures::future::ready(Ok(Action::requeue(wait)))),
        None => timed(sidecar_set, context),
    }
}

/// The SidecarSet a revision in [`REVISION_NAMESPACE`] belongs to (the
/// shared watch holds every namespace's revisions).
fn revision_owner(revision: &ControllerRevision) -> Option<ObjectRef<Stored<SidecarSet>>> {
    if revision.metadata.namespace.as_deref() != Some(REVISION_NAMESPACE) {
        return None;
    }
    let owner = revision
        .metadata
        .labels
        .as_ref()?
        .get(REVISION_OWNER_LABEL)?;
    Some(ObjectRef::new(owner))
}

// The signature is the one `Controller::run` calls.
#[allow(clippy::needless_pass_by_value)]
fn error_policy(
    sidecar_set: Arc<Stored<SidecarSet>>,
    error: &Error,
    context: Arc<Context>,
) -> Action {
    let name = sidecar_set.name().to_owned();
    let delay = context.backoff.next(&name);
    tracing::warn!(sidecar_set = %name, %error, retry_in = ?delay, "SidecarSet reconcile failed");
    Action::requeue(delay)
}

/// Creates [`REVISION_NAMESPACE`] unless it exists.
pub(crate) async fn ensure_revision_namespace(client: &Client) -> Result<(), kube::Error> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    if namespaces.get_opt(REVISION_NAMESPACE).await?.is_some() {
        return Ok(());
    }
    let namespace = Namespace {
        metadata: ObjectMeta {
            name: Some(REVISION_NAMESPACE.to_owned()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    match namespaces.create(&PostParams::default(), &namespace).await {
        Ok(_) => Ok(()),
        Err(error) if is_already_exists(&error) => Ok(()),
        Err(error) => Err(error),
    }
}

pub(crate) fn seconds(n: u64) -> Duration {
    Duration::from_secs(n)
}
