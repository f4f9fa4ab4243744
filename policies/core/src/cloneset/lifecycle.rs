//! Lifecycle hooks (spec 03 §7): a hook holds a pod in a state while the
//! pod carries the hook's labels or finalizers.

use k8s_openapi::api::core::v1::Pod;
use kruise_api::cloneset::LifecycleHook;

use super::pod_state::label;

fn has_finalizer(pod: &Pod, finalizer: &str) -> bool {
    pod.metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == finalizer)
}

/// Any of the hook's labels (key=value) or finalizers is on the pod.
pub fn is_hooked(hook: Option<&LifecycleHook>, pod: &Pod) -> bool {
    hook.is_some_and(|hook| {
        hook.labels_handler
            .iter()
            .any(|(key, value)| label(pod, key) == Some(value.as_str()))
            || hook
                .finalizers_handler
                .iter()
                .any(|f| has_finalizer(pod, f))
    })
}

/// Every one of the hook's labels and finalizers is on the pod (a missing
/// hook is trivially satisfied).
pub fn is_fully_hooked(hook: Option<&LifecycleHook>, pod: &Pod) -> bool {
    hook.is_none_or(|hook| {
        hook.labels_handler
            .iter()
            .all(|(key, value)| label(pod, key) == Some(value.as_str()))
            && hook
                .finalizers_handler
                .iter()
                .all(|f| has_finalizer(pod, f))
    })
}

/// A hook with nothing to wait on is no hook at all.
pub fn hook_configured(hook: Option<&LifecycleHook>) -> bool {
    hook.is_some_and(|hook| !hook.labels_handler.is_empty() || !hook.finalizers_handler.is_empty())
}
