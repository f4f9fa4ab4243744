//! The CloneSet's own PersistentVolumeClaims (from `volumeClaimTemplates`),
//! as OpenKruise keeps them (pkg/controller/cloneset/sync/cloneset_scale.go):
//! - a pod the controller deletes (scale-in, or a ReCreate update, which
//!   deletes through the same path) takes its claims with it;
//! - a pod that went away otherwise (deleted by hand, evicted) leaves its
//!   claims, and the next pod created takes that instance id again, so it
//!   binds them (PVC reuse);
//! - with `disablePVCReuse`, such left-over claims are deleted instead, and
//!   the next pod gets a new id and new claims.
//!
//! Claims without the CloneSet as controller are never touched; a pod the
//! CloneSet releases takes its claims along.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kruise_api::CloneSet;

use serde_json::{Value, json};

use super::{LABEL_INSTANCE_ID, is_active};
use crate::owner::{is_controlled_by, release_patch};

/// What to do with the claims this round.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClaimPlan {
    /// Claims to delete, by name.
    pub delete: Vec<String>,
    /// Instance ids whose claims wait for a pod: new pods take these first.
    pub reusable_ids: Vec<String>,
}

/// `pods` are the CloneSet's pods as listed (terminating ones included),
/// `deleted` the names of those the round deletes.
pub fn plan_claims(
    cloneset: &CloneSet,
    pods: &[Pod],
    claims: &[PersistentVolumeClaim],
    deleted: &[String],
) -> ClaimPlan {
    let uid = cloneset.metadata.uid.as_deref().unwrap_or_default();
    let id_of = |labels: Option<&std::collections::BTreeMap<String, String>>| {
        labels.and_then(|l| l.get(LABEL_INSTANCE_ID)).cloned()
    };
    let deleted_ids: BTreeSet<String> = pods
        .iter()
        .filter(|pod| {
            pod.metadata
                .name
                .as_ref()
                .is_some_and(|n| deleted.contains(n))
        })
        .filter_map(|pod| id_of(pod.metadata.labels.as_ref()))
        .collect();
    // A terminating pod no longer holds its id (OpenKruise plans with
    // active pods only): its replacement takes the id and the claims back.
    let live_ids: BTreeSet<String> = pods
        .iter()
        .filter(|pod| is_active(pod))
        .filter_map(|pod| id_of(pod.metadata.labels.as_ref()))
        .filter(|id| !deleted_ids.contains(id))
        .collect();
    let reuse = !cloneset
        .spec
        .scale_strategy
        .as_ref()
        .is_some_and(|s| s.disable_pvc_reuse);
    let mut plan = ClaimPlan::default();
    let mut reusable = BTreeSet::new();
    for claim in claims {
        let meta = &claim.metadata;
        if !is_controlled_by(meta, uid) || meta.deletion_timestamp.is_some() {
            continue;
        }
        let (Some(id), Some(name)) = (id_of(meta.labels.as_ref()), meta.name.clone()) else {
            continue;
        };
        if deleted_ids.contains(&id) || (!reuse && !live_ids.contains(&id)) {
            plan.delete.push(name);
        } else if !live_ids.contains(&id) {
            reusable.insert(id);
        }
    }
    plan.reusable_ids = reusable.into_iter().collect();
    plan
}

/// The claims a pod the CloneSet releases (its selector no longer matches
/// it) mounts, each with the merge patch that hands it to the pod: the
/// CloneSet's owner reference replaced by the pod's, on the version read.
/// The released pod keeps its volumes and takes them when it goes; the
/// claims no longer look free to the CloneSet, whose replacement would
/// otherwise take their instance id, and so the released pod's name.
pub fn handed_to_released_pod(
    cloneset_uid: &str,
    pod: &Pod,
    claims: &[PersistentVolumeClaim],
) -> Vec<(String, Value)> {
    let Some(pod_ref) = pod_reference(pod) else {
        return Vec::new();
    };
    // The claims it mounts, whatever its labels now say.
    let mounted: BTreeSet<&str> = pod
        .spec
        .iter()
        .flat_map(|spec| spec.volumes.iter().flatten())
        .filter_map(|v| v.persistent_volume_claim.as_ref())
        .map(|source| source.claim_name.as_str())
        .collect();
    claims
        .iter()
        .filter(|claim| is_controlled_by(&claim.metadata, cloneset_uid))
        .filter(|claim| {
            claim
                .metadata
                .name
                .as_deref()
                .is_some_and(|name| mounted.contains(name))
        })
        .filter_map(|claim| {
            let mut owners = release_patch(&claim.metadata, cloneset_uid);
            let references = owners["metadata"]["ownerReferences"].as_array_mut()?;
            references.push(pod_ref.clone());
            Some((claim.metadata.name.clone()?, owners))
        })
        .collect()
}

fn pod_reference(pod: &Pod) -> Option<Value> {
    Some(json!({
        "apiVersion": "v1", "kind": "Pod",
        "name": pod.metadata.name.as_deref()?, "uid": pod.metadata.uid.as_deref()?,
        "controller": true,
    }))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use super::*;

    const UID: &str = "cs-uid";

    fn cloneset(disable_reuse: bool) -> CloneSet {
        serde_json::from_value(json!({
            "apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet",
            "metadata": {"name": "cs", "namespace": "default", "uid": UID},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "a"}},
                "template": {"metadata": {"labels": {"app": "a"}},
                             "spec": {"containers": [{"name": "c", "image": "i"}]}},
                "scaleStrategy": {"disablePVCReuse": disable_reuse},
            },
        }))
        .unwrap()
    }

    fn pod(id: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": format!("cs-{id}"), "labels": {LABEL_INSTANCE_ID: id}},
        }))
        .unwrap()
    }

    fn claim(id: &str, owner: &str, terminating: bool) -> PersistentVolumeClaim {
        let mut metadata = json!({
            "name": format!("data-cs-{id}"),
            "labels": {LABEL_INSTANCE_ID: id},
            "ownerReferences": [{"apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet",
                                 "name": "cs", "uid": owner, "controller": true}],
        });
        if terminating {
            metadata["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        }
        serde_json::from_value(json!({"metadata": metadata})).unwrap()
    }

    #[test]
    fn a_deleted_pod_takes_its_claims() {
        let pods = [pod("aaaaa"), pod("bbbbb")];
        let claims = [claim("aaaaa", UID, false), claim("bbbbb", UID, false)];
        let plan = plan_claims(&cloneset(false), &pods, &claims, &["cs-bbbbb".to_owned()]);
        assert_eq!(plan.delete, ["data-cs-bbbbb"]);
        assert!(plan.reusable_ids.is_empty());
    }

    #[test]
    fn claims_of_a_vanished_pod_are_reused_or_deleted() {
        let pods = [pod("aaaaa")];
        let claims = [claim("aaaaa", UID, false), claim("ccccc", UID, false)];
        let reused = plan_claims(&cloneset(false), &pods, &claims, &[]);
        assert_eq!(
            reused,
            ClaimPlan {
                delete: vec![],
                reusable_ids: vec!["ccccc".to_owned()]
            }
        );
        let deleted = plan_claims(&cloneset(true), &pods, &claims, &[]);
        assert_eq!(
            deleted,
            ClaimPlan {
                delete: vec!["data-cs-ccccc".to_owned()],
                reusable_ids: vec![]
            }
        );
    }

    #[test]
    fn foreign_and_terminating_claims_are_left_alone() {
        let claims = [
            claim("ddddd", "someone-else", false),
            claim("eeeee", UID, true),
        ];
        for disable in [false, true] {
            let plan = plan_claims(&cloneset(disable), &[], &claims, &[]);
            assert_eq!(plan, ClaimPlan::default());
        }
    }

    #[test]
    fn a_released_pod_takes_its_own_claims_only() {
        let mut released = pod("aaaaa");
        released.metadata.uid = Some("pod-uid".into());
        // Relabelled without its instance id: its volumes still name them.
        released.metadata.labels = None;
        released.spec = Some(
            serde_json::from_value(json!({"containers": [], "volumes": [
                {"name": "data", "persistentVolumeClaim": {"claimName": "data-cs-aaaaa"}},
                {"name": "scratch", "emptyDir": {}}]}))
            .unwrap(),
        );
        let mut claims = vec![
            claim("aaaaa", UID, false),
            claim("bbbbb", UID, false),
            claim("aaaaa", "someone-else", false),
        ];
        claims[0].metadata.resource_version = Some("4".into());
        let handed = handed_to_released_pod(UID, &released, &claims);
        assert_eq!(handed.len(), 1);
        let (name, patch) = &handed[0];
        assert_eq!(name, "data-cs-aaaaa");
        assert_eq!(patch["metadata"]["resourceVersion"], "4");
        assert_eq!(
            patch["metadata"]["ownerReferences"],
            json!([{"apiVersion": "v1", "kind": "Pod", "name": "cs-aaaaa",
                    "uid": "pod-uid", "controller": true}])
        );
        // Handed over, the claims are not the CloneSet's to reuse.
        let mut taken = claims[0].clone();
        taken.metadata.owner_references =
            serde_json::from_value(patch["metadata"]["ownerReferences"].clone()).unwrap();
        assert_eq!(
            plan_claims(&cloneset(false), &[], &[taken], &[]),
            ClaimPlan::default()
        );
    }

    #[test]
    fn a_terminating_pod_frees_its_id_and_claims_for_its_replacement() {
        let mut terminating = pod("ccccc");
        terminating.metadata.deletion_timestamp =
            serde_json::from_value(json!("2026-01-01T00:00:00Z")).unwrap();
        let pods = [pod("aaaaa"), terminating];
        let claims = [claim("aaaaa", UID, false), claim("ccccc", UID, false)];
        let plan = plan_claims(&cloneset(false), &pods, &claims, &[]);
        assert_eq!(plan.reusable_ids, ["ccccc"]);
        assert!(plan.delete.is_empty());
    }
}
