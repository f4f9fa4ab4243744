//! `scaleStrategy.podsToDelete` kept to the pods that exist (spec 03 §5,
//! step 8). A name left on the list after its pod has gone would mark
//! the next pod of that name: with PVC reuse that is its replacement,
//! made with the same instance id and so the same name, which would be
//! deleted at once, its claims with it.

use k8s_openapi::api::core::v1::Pod;
use kruise_api::CloneSet;

use super::pod_state::{is_active, name};

/// The list without the names of pods that are no longer active (gone,
/// finished or being deleted); `None` when every name is kept.
pub fn pruned_pods_to_delete(cloneset: &CloneSet, pods: &[Pod]) -> Option<Vec<String>> {
    let listed = &cloneset.spec.scale_strategy.as_ref()?.pods_to_delete;
    let exists = |listed: &String| {
        pods.iter()
            .any(|pod| is_active(pod) && name(pod) == listed.as_str())
    };
    let kept: Vec<String> = listed.iter().filter(|n| exists(n)).cloned().collect();
    (kept.len() != listed.len()).then_some(kept)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use super::*;

    fn cloneset(pods_to_delete: &[&str]) -> CloneSet {
        serde_json::from_value(json!({
            "apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet",
            "metadata": {"name": "demo", "namespace": "default"},
            "spec": {"selector": {"matchLabels": {"app": "demo"}},
                     "template": {"metadata": {"labels": {"app": "demo"}}},
                     "scaleStrategy": {"podsToDelete": pods_to_delete}},
        }))
        .unwrap()
    }

    fn pod(name: &str, phase: &str, deleting: bool) -> Pod {
        let mut pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name}, "status": {"phase": phase},
        }))
        .unwrap();
        if deleting {
            pod.metadata.deletion_timestamp =
                Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                ));
        }
        pod
    }

    #[test]
    fn names_of_pods_that_are_not_active_are_dropped() {
        let pods = [
            pod("running", "Running", false),
            pod("pending", "Pending", false),
            pod("finished", "Succeeded", false),
            pod("failed", "Failed", false),
            pod("terminating", "Running", true),
        ];
        let listed = [
            "running",
            "gone",
            "pending",
            "finished",
            "failed",
            "terminating",
        ];
        assert_eq!(
            pruned_pods_to_delete(&cloneset(&listed), &pods),
            Some(vec!["running".to_owned(), "pending".to_owned()])
        );
        assert_eq!(
            pruned_pods_to_delete(&cloneset(&["running", "pending"]), &pods),
            None,
            "nothing to drop"
        );
        assert_eq!(pruned_pods_to_delete(&cloneset(&[]), &pods), None);
        assert_eq!(
            pruned_pods_to_delete(&cloneset(&["gone"]), &[]),
            Some(Vec::new())
        );
    }
}
