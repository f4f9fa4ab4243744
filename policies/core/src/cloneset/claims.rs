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

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kruise_api::CloneSet;

use serde_json::{Value, json};

use super::new_pod::pod_name;
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
/// `deleted` the names of those the round deletes, `held_elsewhere` the
/// instance ids of pods outside its selection that bear a claim's name
/// (see [`holder_names`]): their claims are in use.
pub fn plan_claims(
    cloneset: &CloneSet,
    pods: &[Pod],
    claims: &[PersistentVolumeClaim],
    deleted: &[String],
    held_elsewhere: &BTreeSet<String>,
) -> ClaimPlan {
    let uid = cloneset.metadata.uid.as_deref().unwrap_or_default();
    let deleted_ids: BTreeSet<&str> = pods
        .iter()
        .filter(|pod| {
            pod.metadata
                .name
                .as_ref()
                .is_some_and(|n| deleted.contains(n))
        })
        .filter_map(|pod| instance_id(pod.metadata.labels.as_ref()))
        .collect();
    let mut live_ids = live_ids(pods, &deleted_ids);
    live_ids.extend(held_elsewhere.iter().map(String::as_str));
    let reuse = !cloneset
        .spec
        .scale_strategy
        .as_ref()
        .is_some_and(|s| s.disable_pvc_reuse);
    let mut plan = ClaimPlan::default();
    let mut reusable = BTreeSet::new();
    for (id, name) in own_claims(uid, claims) {
        if deleted_ids.contains(id) || (!reuse && !live_ids.contains(id)) {
            plan.delete.push(name.to_owned());
        } else if !live_ids.contains(id) {
            reusable.insert(id.to_owned());
        }
    }
    plan.reusable_ids = reusable.into_iter().collect();
    plan
}

/// The names of the pods that may still hold the CloneSet's claims that no
/// active pod of `pods` (its pods as listed) has: `<cloneset>-<id>`, as
/// every pod it makes is named, but for the names of listed pods. A pod by
/// such a name outside its selection (a user relabelled it, or took it from
/// the CloneSet) may still mount them, and its name is taken: the
/// controller looks for these pods, and gives the ids of those it finds
/// ([`held_id`]) to [`plan_claims`].
pub fn holder_names(
    cloneset: &CloneSet,
    pods: &[Pod],
    claims: &[PersistentVolumeClaim],
) -> BTreeSet<String> {
    let uid = cloneset.metadata.uid.as_deref().unwrap_or_default();
    let cloneset_name = cloneset.metadata.name.as_deref().unwrap_or_default();
    let live_ids = live_ids(pods, &BTreeSet::new());
    let listed: BTreeSet<&str> = pods
        .iter()
        .filter_map(|pod| pod.metadata.name.as_deref())
        .collect();
    own_claims(uid, claims)
        .map(|(id, _)| id)
        .filter(|id| !live_ids.contains(id))
        .map(|id| pod_name(cloneset_name, id))
        .filter(|name| !listed.contains(name.as_str()))
        .collect()
}

/// The instance id a pod's name gives (`<cloneset>-<id>`), whatever its
/// labels say now.
pub fn held_id<'a>(cloneset: &CloneSet, pod_name: &'a str) -> Option<&'a str> {
    let cloneset_name = cloneset.metadata.name.as_deref()?;
    pod_name
        .strip_prefix(cloneset_name)?
        .strip_prefix('-')
        .filter(|id| !id.is_empty())
}

/// The instance ids active pods hold, but for `deleted_ids`. A terminating
/// pod no longer holds its id (OpenKruise plans with active pods only):
/// its replacement takes the id and the claims back.
fn live_ids<'a>(pods: &'a [Pod], deleted_ids: &BTreeSet<&str>) -> BTreeSet<&'a str> {
    pods.iter()
        .filter(|pod| is_active(pod))
        .filter_map(|pod| instance_id(pod.metadata.labels.as_ref()))
        .filter(|id| !deleted_ids.contains(id))
        .collect()
}

/// (instance id, name) of the claims the CloneSet with `uid` controls and
/// that are not going away.
fn own_claims<'a>(
    uid: &'a str,
    claims: &'a [PersistentVolumeClaim],
) -> impl Iterator<Item = (&'a str, &'a str)> {
    claims.iter().filter_map(move |claim| {
        let meta = &claim.metadata;
        if !is_controlled_by(meta, uid) || meta.deletion_timestamp.is_some() {
            return None;
        }
        Some((instance_id(meta.labels.as_ref())?, meta.name.as_deref()?))
    })
}

fn instance_id(labels: Option<&BTreeMap<String, String>>) -> Option<&str> {
    labels?.get(LABEL_INSTANCE_ID).map(String::as_str)
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

    fn terminating(mut pod: Pod) -> Pod {
        pod.metadata.deletion_timestamp =
            serde_json::from_value(json!("2026-01-01T00:00:00Z")).unwrap();
        pod
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
        let plan = plan_claims(
            &cloneset(false),
            &pods,
            &claims,
            &["cs-bbbbb".to_owned()],
            &BTreeSet::new(),
        );
        assert_eq!(plan.delete, ["data-cs-bbbbb"]);
        assert!(plan.reusable_ids.is_empty());
    }

    #[test]
    fn claims_of_a_vanished_pod_are_reused_or_deleted() {
        let pods = [pod("aaaaa")];
        let claims = [claim("aaaaa", UID, false), claim("ccccc", UID, false)];
        let reused = plan_claims(&cloneset(false), &pods, &claims, &[], &BTreeSet::new());
        assert_eq!(
            reused,
            ClaimPlan {
                delete: vec![],
                reusable_ids: vec!["ccccc".to_owned()]
            }
        );
        let deleted = plan_claims(&cloneset(true), &pods, &claims, &[], &BTreeSet::new());
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
            let plan = plan_claims(&cloneset(disable), &[], &claims, &[], &BTreeSet::new());
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
            plan_claims(&cloneset(false), &[], &[taken], &[], &BTreeSet::new()),
            ClaimPlan::default()
        );
    }

    #[test]
    fn the_pods_that_may_hold_free_claims_are_named_after_their_ids() {
        let pods = [pod("aaaaa"), terminating(pod("bbbbb"))];
        let claims = [
            claim("aaaaa", UID, false),
            claim("bbbbb", UID, false),
            claim("ccccc", UID, false),
            claim("ddddd", "someone-else", false),
            claim("eeeee", UID, true),
        ];
        // A listed pod's name is its own: cs-bbbbb is not looked for.
        assert_eq!(
            holder_names(&cloneset(false), &pods, &claims),
            BTreeSet::from(["cs-ccccc".to_owned()])
        );
    }

    #[test]
    fn claims_a_pod_outside_the_selection_holds_stay() {
        // cs-ccccc was relabelled out of the selection (its instance-id
        // label too): found by its name, its claims are in use.
        assert_eq!(held_id(&cloneset(false), "cs-ccccc"), Some("ccccc"));
        assert_eq!(held_id(&cloneset(false), "other-ccccc"), None);
        assert_eq!(held_id(&cloneset(false), "cs-"), None);
        let held = BTreeSet::from(["ccccc".to_owned()]);
        let claims = [claim("aaaaa", UID, false), claim("ccccc", UID, false)];
        for disable in [false, true] {
            let plan = plan_claims(&cloneset(disable), &[pod("aaaaa")], &claims, &[], &held);
            assert_eq!(plan, ClaimPlan::default());
        }
    }

    #[test]
    fn a_terminating_pod_frees_its_id_and_claims_for_its_replacement() {
        let pods = [pod("aaaaa"), terminating(pod("ccccc"))];
        let claims = [claim("aaaaa", UID, false), claim("ccccc", UID, false)];
        let plan = plan_claims(&cloneset(false), &pods, &claims, &[], &BTreeSet::new());
        assert_eq!(plan.reusable_ids, ["ccccc"]);
        assert!(plan.delete.is_empty());
    }
}
