//! The CloneSet controller: a thin kube-rs shell around
//! [`kruise_core::cloneset`]. Each round reads the CloneSet's pods from the
//! manager's shared pod watch once it shows the CloneSet's own last writes
//! (so a lagging watch can never make it create or delete twice; see
//! `reads.rs`) and its revisions from the shared revision watch the same
//! way, asks the pure planner what to do, performs exactly those writes,
//! and records status.

mod execute;
mod predownload;
mod reads;
mod reconcile;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kruise_api::{CloneSet, Stored};
use kruise_controller_runtime::context::Context;
use kruise_controller_runtime::shared::SharedWatches;
use kruise_controller_runtime::{metrics, readiness};
use kube::runtime::controller::Action;
use kube::runtime::watcher;
use kube::{Api, Client};

use kruise_controller_runtime::expectations::WatchReads;
use reads::CloneSetContext;
pub use reconcile::ReconcileError;

/// The name the controller writes and reports events under.
pub const CONTROLLER_NAME: &str = "kruise-cloneset-controller";

/// Runs the controller until the process ends; its pod, revision and
/// claim triggers come from the manager's shared watches.
pub async fn run(client: Client, watches: SharedWatches) {
    let context = Arc::new(CloneSetContext {
        shared: Context::new(client.clone(), CONTROLLER_NAME),
        pods: WatchReads::from_watch(watches.pods().clone()),
        revisions: WatchReads::from_watch(watches.revisions().clone()),
        claims: WatchReads::from_watch(watches.claims().clone()),
    });
    // Stored<_>: one CloneSet our types cannot read must not fail the watch
    // of all the others (reconcile reports and skips it).
    let (controller, listed) = readiness::controller(
        Api::<Stored<CloneSet>>::all(client),
        watcher::Config::default(),
    );
    readiness::global().track(CONTROLLER_NAME, listed);
    controller
        .owns_shared_stream(watches.pods().subscribe(CONTROLLER_NAME))
        .owns_shared_stream(watches.revisions().subscribe(CONTROLLER_NAME))
        .owns_shared_stream(watches.claims().subscribe(CONTROLLER_NAME))
        .run(
            metrics::timed(CONTROLLER_NAME, reconcile::reconcile),
            on_error,
            context,
        )
        .for_each(|result| async move {
            if let Err(error) = result {
                tracing::debug!(%error, "cloneset reconcile");
            }
        })
        .await;
}

// The signature is kube-runtime's error policy.
#[allow(clippy::needless_pass_by_value)]
fn on_error(
    cloneset: Arc<Stored<CloneSet>>,
    error: &ReconcileError,
    context: Arc<CloneSetContext>,
) -> Action {
    let name = cloneset.name();
    if error.is_conflict() {
        tracing::debug!(cloneset = name, %error, "write conflict; planning again");
        return Action::requeue(Duration::from_millis(100));
    }
    let delay = context.shared.backoff.next(&reconcile::key(&*cloneset));
    tracing::warn!(cloneset = name, %error, retry_in = ?delay, "reconcile failed");
    Action::requeue(delay)
}
