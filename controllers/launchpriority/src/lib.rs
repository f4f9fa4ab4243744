//! The container launch-priority barrier controller. The pod webhook
//! gates each container of an ordered pod on a key of the ConfigMap
//! `<pod>-barrier` (`p_<priority>`); kubelet cannot create a container
//! until its key exists. This controller creates that ConfigMap (owned by
//! the pod, so it is garbage-collected with it) and adds the keys one
//! priority level at a time, highest first, each only once every container
//! of the higher levels is Ready; after the last level it marks the pod
//! `apps.kruise.io/container-launch-priority-completed: "true"` and never
//! looks at it again.
//!
//! Every decision is [`kruise_core::launch_priority::plan_barrier`]'s; this
//! crate reads the pod and the ConfigMap fresh from the API server and
//! performs the one write the plan asks for. Each write is idempotent and
//! carries the uid of the object it was planned on, so a pod or ConfigMap
//! replaced meanwhile turns it into a conflict and a new plan, never a key
//! released for the wrong pod.
//!
//! Differences from OpenKruise's controller:
//! * a ConfigMap left by an earlier pod of the same name (not yet
//!   garbage-collected) is deleted and made anew, instead of its keys
//!   releasing the new pod's containers all at once;
//! * a pod still waiting is looked at again every [`RESYNC`], so a
//!   ConfigMap deleted by hand is made again without any pod event;
//! * a Normal `PriorityReleased` event on the pod for each level released.

mod reconcile;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kruise_controller_runtime::context::Context;
use kruise_controller_runtime::outcome;
use kruise_controller_runtime::shared::SharedWatches;
use kruise_controller_runtime::{metrics, readiness};
use kube::runtime::controller::{Action, Controller};
use kube::{Client, ResourceExt};

pub use reconcile::Error;

/// The field manager of every write and the reporting controller of events.
pub const CONTROLLER_NAME: &str = "kruise-launchpriority-controller";

/// How often a pod that is still waiting for its barrier is looked at
/// again without an event (pod status changes trigger it at once).
pub const RESYNC: Duration = Duration::from_secs(15);

/// Runs the controller on the manager's shared pod watch until the task is
/// dropped. Errors are logged and retried with backoff; nothing here
/// panics.
pub async fn run(client: Client, watches: SharedWatches) {
    let context = Arc::new(Context::new(client, CONTROLLER_NAME));
    tracing::info!(controller = CONTROLLER_NAME, "starting");
    let pods = watches.pods();
    let controller = Controller::for_shared_stream(pods.subscribe(CONTROLLER_NAME), pods.store());
    readiness::global().track(CONTROLLER_NAME, pods.listed());
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
fn on_error(pod: Arc<Pod>, error: &Error, context: Arc<Context>) -> Action {
    let key = pod_key(&pod);
    let delay = context.backoff.next(&key);
    tracing::warn!(pod = %key, %error, retry_in = ?delay, "launch barrier round failed");
    Action::requeue(delay)
}

fn pod_key(pod: &Pod) -> String {
    format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any())
}
