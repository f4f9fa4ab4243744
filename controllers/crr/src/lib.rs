//! The ContainerRecreateRequest controller of kruise-manager. The node
//! agent recreates the containers; this controller finishes a request
//! whose pod has gone, whose agent never answered or whose deadline
//! passed, keeps the snapshot of the pod's new containers the agent needs
//! to call one recreated, holds the pod not-ready for
//! `unreadyGracePeriodSeconds` (through the `KruisePodReady` readiness
//! gate, with a finalizer so the hold is always released), and deletes a
//! finished request after `ttlSecondsAfterFinished`.
//!
//! Every decision is [`kruise_core::crr::controller::plan`]'s; a round reads
//! the request and its pod fresh and makes the writes the plan asks for,
//! one at a time. Status, finalizer and annotation writes name the
//! resourceVersion they were planned on, so a write racing the node agent's
//! becomes a conflict and a new plan; dropping the `active` label is
//! idempotent, and the TTL delete names the request's UID.
//!
//! Unlike OpenKruise's controller this one does not watch every pod of the
//! cluster: an open request is looked at again every [`RESYNC`] (and every
//! few seconds while it recreates), which bounds how late "pod has gone"
//! is noticed.

mod reconcile;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kruise_api::{ContainerRecreateRequest, Stored};
use kruise_controller_runtime::context::Context;
use kruise_controller_runtime::outcome;
use kruise_controller_runtime::{metrics, readiness};
use kube::runtime::controller::Action;
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};

pub use reconcile::Error;

/// The field manager of every write and the reporting controller of events.
pub const CONTROLLER_NAME: &str = "kruise-crr-controller";

/// How often an open request is looked at again without an event.
pub const RESYNC: Duration = Duration::from_secs(5);

/// Runs the controller until the task is dropped.
pub async fn run(client: Client) {
    let context = Arc::new(Context::new(client.clone(), CONTROLLER_NAME));
    tracing::info!(controller = CONTROLLER_NAME, "starting");
    // Stored<_>: one request our types cannot read must not stop the watch.
    let requests = Api::<Stored<ContainerRecreateRequest>>::all(client);
    let (controller, listed) = readiness::controller(requests, watcher::Config::default());
    readiness::global().track(CONTROLLER_NAME, listed);
    controller
        .run(
            metrics::timed(CONTROLLER_NAME, reconcile::reconcile),
            on_error,
            context,
        )
        .for_each(|result| async move { outcome::log(CONTROLLER_NAME, &result) })
        .await;
    tracing::info!(controller = CONTROLLER_NAME, "stopped");
}

// The signature is kube-runtime's error policy.
#[allow(clippy::needless_pass_by_value)]
fn on_error(
    request: Arc<Stored<ContainerRecreateRequest>>,
    error: &Error,
    context: Arc<Context>,
) -> Action {
    let key = request_key(&request);
    let delay = context.backoff.next(&key);
    tracing::warn!(request = %key, %error, retry_in = ?delay, "ContainerRecreateRequest round failed");
    Action::requeue(delay)
}

fn request_key(request: &Stored<ContainerRecreateRequest>) -> String {
    format!(
        "{}/{}",
        request.namespace().unwrap_or_default(),
        request.name_any()
    )
}
