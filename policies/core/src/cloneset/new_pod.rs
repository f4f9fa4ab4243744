//! Building the pods (and their claims) a CloneSet creates (spec 03 §3).
//! Randomness comes in as draws, so the result is a pure function.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, PersistentVolumeClaimVolumeSource, Pod, PodReadinessGate,
    PodTemplateSpec, Volume,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use kruise_api::CloneSet;

use super::pod_state::{LifecycleState, short_hash};
use super::{
    CONDITION_IN_PLACE_UPDATE_READY, LABEL_INSTANCE_ID, LABEL_LIFECYCLE_STATE,
    LABEL_POD_TEMPLATE_HASH, LABEL_REVISION,
};
use crate::history::SAFE_ALPHABET;
use crate::owner::controller_reference;

pub const ANNOTATION_LIFECYCLE_TIMESTAMP: &str = "lifecycle.apps.kruise.io/timestamp";
const ID_LENGTH: usize = 5;

/// `count` new instance ids, unique among `taken` and each other; `draw`
/// supplies random numbers.
pub fn new_instance_ids(
    taken: &BTreeSet<String>,
    count: usize,
    draw: &mut impl FnMut() -> u32,
) -> Vec<String> {
    let mut ids = Vec::with_capacity(count);
    let mut seen = taken.clone();
    while ids.len() < count {
        let id: String = (0..ID_LENGTH)
            .map(|_| {
                let index = usize::try_from(draw()).unwrap_or(0) % SAFE_ALPHABET.len();
                char::from(SAFE_ALPHABET[index])
            })
            .collect();
        if seen.insert(id.clone()) {
            ids.push(id);
        }
    }
    ids
}

/// The pod for instance `id` on `revision`, from that revision's template.
pub fn new_pod(
    cloneset: &CloneSet,
    revision: &str,
    template: &PodTemplateSpec,
    id: &str,
    now: Timestamp,
) -> Pod {
    let name = cloneset.metadata.name.clone().unwrap_or_default();
    let template_meta = template.metadata.clone().unwrap_or_default();
    let mut labels = template_meta.labels.unwrap_or_default();
    labels.insert(LABEL_INSTANCE_ID.to_owned(), id.to_owned());
    labels.insert(LABEL_REVISION.to_owned(), revision.to_owned());
    labels.insert(
        LABEL_POD_TEMPLATE_HASH.to_owned(),
        short_hash(revision).to_owned(),
    );
    labels.insert(
        LABEL_LIFECYCLE_STATE.to_owned(),
        LifecycleState::PreparingNormal.as_str().to_owned(),
    );
    let mut annotations = template_meta.annotations.unwrap_or_default();
    annotations.insert(ANNOTATION_LIFECYCLE_TIMESTAMP.to_owned(), now.to_string());

    let mut spec = template.spec.clone().unwrap_or_default();
    spec.readiness_gates
        .get_or_insert_with(Vec::new)
        .push(PodReadinessGate {
            condition_type: CONDITION_IN_PLACE_UPDATE_READY.to_owned(),
        });
    for claim_template in &cloneset.spec.volume_claim_templates {
        let volume_name = claim_template.metadata.name.clone().unwrap_or_default();
        let volumes = spec.volumes.get_or_insert_with(Vec::new);
        volumes.retain(|v| v.name != volume_name);
        volumes.push(Volume {
            name: volume_name.clone(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: claim_name(&volume_name, &name, id),
                read_only: None,
            }),
            ..Volume::default()
        });
    }
    Pod {
        metadata: ObjectMeta {
            name: Some(pod_name(&name, id)),
            namespace: cloneset.metadata.namespace.clone(),
            labels: Some(labels),
            annotations: Some(annotations),
            finalizers: template_meta.finalizers,
            owner_references: controller_reference(cloneset).map(|r| vec![r]),
            ..ObjectMeta::default()
        },
        spec: Some(spec),
        status: None,
    }
}

/// The claims of instance `id`: each volumeClaimTemplate named after it,
/// labelled with the selector's labels and the instance id.
pub fn new_claims(cloneset: &CloneSet, id: &str) -> Vec<PersistentVolumeClaim> {
    let name = cloneset.metadata.name.clone().unwrap_or_default();
    cloneset
        .spec
        .volume_claim_templates
        .iter()
        .map(|template| {
            let mut claim = template.clone();
            let volume = template.metadata.name.clone().unwrap_or_default();
            let mut labels = template.metadata.labels.clone().unwrap_or_default();
            labels.extend(
                cloneset
                    .spec
                    .selector
                    .match_labels
                    .clone()
                    .unwrap_or_default(),
            );
            labels.insert(LABEL_INSTANCE_ID.to_owned(), id.to_owned());
            claim.metadata = ObjectMeta {
                name: Some(claim_name(&volume, &name, id)),
                namespace: cloneset.metadata.namespace.clone(),
                labels: Some(labels),
                annotations: template.metadata.annotations.clone(),
                owner_references: controller_reference(cloneset).map(|r| vec![r]),
                ..ObjectMeta::default()
            };
            claim.status = None;
            claim
        })
        .collect()
}

/// The name of the CloneSet's pod of instance `id`.
pub fn pod_name(cloneset: &str, id: &str) -> String {
    format!("{cloneset}-{id}")
}

fn claim_name(volume: &str, cloneset: &str, id: &str) -> String {
    format!("{volume}-{cloneset}-{id}")
}
