//! The CloneSet controller: a thin kube-rs shell around
//! [`kruise_core::cloneset`]. Each round reads the CloneSet's pods and
//! revisions fresh from the API server (a consistent read, so a lagging
//! watch cache can never make it create or delete twice), asks the pure
//! planner what to do, performs exactly those writes, and records status.

mod execute;
mod predownload;
mod reconcile;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::Pod;
use kruise_api::{CloneSet, Stored};
use kruise_controller_runtime::events::Events;
use kruise_controller_runtime::{metrics, readiness};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Api, Client};

pub use reconcile::ReconcileError;

/// The name the controller writes and reports events under.
pub const CONTROLLER_NAME: &str = "kruise-cloneset-controller";

struct Context {
    client: Client,
    events: Events,
}

/// Runs the controller until the process ends.
pub async fn run(client: Client) {
    let context = Arc::new(Context {
        events: Events::new(client.clone(), CONTROLLER_NAME),
        client: client.clone(),
    });
    // Stored<_>: one CloneSet our types cannot read must not fail the watch
    // of all the others (reconcile reports and skips it).
    let controller = Controller::new(
        Api::<Stored<CloneSet>>::all(client.clone()),
        watcher::Config::default(),
    );
    readiness::global().track(CONTROLLER_NAME, controller.store());
    controller
        .owns(Api::<Pod>::all(client.clone()), watcher::Config::default())
        .owns(
            Api::<ControllerRevision>::all(client),
            watcher::Config::default(),
        )
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
    _context: Arc<Context>,
) -> Action {
    let name = cloneset.name();
    if error.is_conflict() {
        tracing::debug!(cloneset = name, %error, "write conflict; planning again");
        return Action::requeue(Duration::from_millis(100));
    }
    tracing::warn!(cloneset = name, %error, "reconcile failed");
    Action::requeue(Duration::from_secs(2))
}
