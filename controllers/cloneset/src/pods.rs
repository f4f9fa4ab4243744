//! Where a round reads its CloneSet's pods. From the manager's shared pod
//! watch, at no cost to the API server, once that store holds every write
//! the CloneSet's earlier rounds made (see
//! [`kruise_controller_runtime::expectations`]); from the API server, a
//! consistent LIST, while the store has not been listed yet or has lagged
//! too long. Until the store catches up the round waits: the watch events
//! of the writes it waits for start the next one.

use k8s_openapi::api::core::v1::Pod;
use kruise_api::CloneSet;
use kruise_controller_runtime::context::Context;
use kruise_controller_runtime::expectations::WatchReads;
use kruise_core::owner::is_controlled_by;
use kruise_core::selector::{matches, to_selector_string, validate};
use kube::api::ListParams;
use kube::{Api, ResourceExt};

use super::reconcile::ReconcileError;

/// The CloneSet controller's context: the shared one, and where its pods
/// are read (per CloneSet, `namespace/name`).
pub struct CloneSetContext {
    pub shared: Context,
    pub pods: WatchReads<Pod>,
}

/// The pods of a round, or none yet: the store lacks some of this
/// CloneSet's writes.
pub enum PodRead {
    Pods(Vec<Pod>),
    Wait,
}

/// The pods `cloneset` (with `uid`) controls; `key` is its
/// `namespace/name`.
pub async fn read(
    context: &CloneSetContext,
    cloneset: &CloneSet,
    namespace: &str,
    uid: &str,
    key: &str,
) -> Result<PodRead, ReconcileError> {
    let selector = &cloneset.spec.selector;
    // A selector the API server would refuse must not read as "no pods":
    // the plan would create them all.
    validate(selector).map_err(|e| ReconcileError::Selector(e.to_string()))?;
    let api = Api::<Pod>::namespaced(context.shared.client.clone(), namespace);
    let params = ListParams::default().labels(&to_selector_string(selector));
    let owned = |pod: &Pod| {
        pod.namespace().as_deref() == Some(namespace)
            && is_controlled_by(&pod.metadata, uid)
            && matches(selector, pod.labels()).unwrap_or(false)
    };
    let read = context
        .pods
        .read_or_list(key, &api, &params, owned)
        .await
        .map_err(ReconcileError::api("list pods"))?;
    Ok(match read {
        Some(pods) => PodRead::Pods(pods.iter().map(|pod| Pod::clone(pod)).collect()),
        None => PodRead::Wait,
    })
}
