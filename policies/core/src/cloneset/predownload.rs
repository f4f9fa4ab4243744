//! Image pre-download for an in-place rollout (OpenKruise's
//! `PreDownloadImageForInPlaceUpdate`): while a CloneSet rolls out a new
//! revision, one ImagePullJob per changed container image pulls the new
//! image on the nodes of the pods not yet updated, so that their in-place
//! update does not wait on the pull. Opt-in per CloneSet with the
//! annotation [`PARALLELISM_ANNOTATION`].

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelectorRequirement, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kruise_api::CloneSet;
use kruise_api::cloneset::CloneSetUpdateStrategyType;
use kruise_api::imagepulljob::{
    CompletionPolicy, CompletionPolicyType, ImagePullJob, ImagePullJobSpec, PullPolicy,
};

use super::{LABEL_REVISION, Revisions};
use crate::owner::controller_reference;

/// Nodes pulling at once (`image-predownload-parallelism`); setting it
/// turns pre-download on.
pub const PARALLELISM_ANNOTATION: &str = "apps.kruise.io/image-predownload-parallelism";
/// Per-attempt timeout of the pulls (default 300 s).
pub const TIMEOUT_ANNOTATION: &str = "apps.kruise.io/image-predownload-timeout-seconds";
/// Updated ready pods needed before the pulls start (default 0).
pub const MIN_UPDATED_READY_ANNOTATION: &str =
    "apps.kruise.io/image-predownload-min-updated-ready-pods";

/// On an update revision whose jobs were made (OpenKruise's label; its
/// presence is what counts): no round makes them again.
pub const CREATED_LABEL: &str = "apps.kruise.io/pre-predownload-created";
/// On an update revision whose pre-download OpenKruise skipped.
pub const IGNORED_LABEL: &str = "apps.kruise.io/image-predownload-ignored";

const DEFAULT_TIMEOUT_SECONDS: i32 = 300;
const BACKOFF_LIMIT: i32 = 1;
const TTL_SECONDS_AFTER_FINISHED: i32 = 600;
/// Small CloneSets gain nothing from pre-pulling.
const MIN_REPLICAS: i32 = 4;

/// What the CloneSet's pre-download jobs should be.
#[derive(Clone, Debug, PartialEq)]
pub enum Predownload {
    /// Not asked for, not worth it, or already done: leave any jobs alone.
    Off,
    /// These jobs should exist: create them, then put [`CREATED_LABEL`] on
    /// the update revision.
    Jobs(Vec<ImagePullJob>),
    /// No rollout is under way and one made jobs (a revision carries
    /// [`CREATED_LABEL`]): delete the CloneSet's jobs, then take the label
    /// off those revisions (a later rollback to one pre-downloads again).
    Done,
}

/// Whether `revision` carries `label` (whatever its value, as OpenKruise
/// reads these marks).
pub fn has_label(revision: &ControllerRevision, label: &str) -> bool {
    revision
        .metadata
        .labels
        .as_ref()
        .is_some_and(|labels| labels.contains_key(label))
}

/// The jobs for the CloneSet's rollout from `revisions.current` to
/// `revisions.update`, one per container whose image changed, named
/// `<update revision>-<container>`, targeting the pods of the CloneSet
/// that are not on the update revision. `stored` are the CloneSet's
/// revisions as stored (whose labels say what was done).
pub fn plan(
    cloneset: &CloneSet,
    revisions: &Revisions,
    stored: &[ControllerRevision],
    updated_ready: i32,
) -> Predownload {
    let annotations = cloneset.metadata.annotations.clone().unwrap_or_default();
    let Some(parallelism) = annotations
        .get(PARALLELISM_ANNOTATION)
        .and_then(|text| text.parse::<i32>().ok())
        .filter(|n| *n > 0)
    else {
        return Predownload::Off;
    };
    if revisions.current == revisions.update {
        // Jobs of any revision: a rollout given up for a rollback leaves
        // its jobs and its mark on a revision no longer the update one.
        return if stored.iter().any(|r| has_label(r, CREATED_LABEL)) {
            Predownload::Done
        } else {
            Predownload::Off
        };
    }
    let update = stored
        .iter()
        .find(|r| r.metadata.name.as_deref() == Some(revisions.update.as_str()));
    if update.is_some_and(|r| has_label(r, CREATED_LABEL) || has_label(r, IGNORED_LABEL)) {
        return Predownload::Off;
    }
    let strategy = cloneset
        .spec
        .update_strategy
        .as_ref()
        .and_then(|s| s.type_)
        .unwrap_or_default();
    let replicas = cloneset.spec.replicas.unwrap_or(1);
    let min_ready = number(&annotations, MIN_UPDATED_READY_ANNOTATION).unwrap_or(0);
    if matches!(
        strategy,
        CloneSetUpdateStrategyType::ReCreate | CloneSetUpdateStrategyType::OnDelete
    ) || replicas < MIN_REPLICAS
        || updated_ready < min_ready
    {
        return Predownload::Off;
    }
    let (Some(current), Some(update)) = (
        revisions.template_of(&revisions.current),
        revisions.template_of(&revisions.update),
    ) else {
        return Predownload::Off;
    };
    let old_images: BTreeMap<&str, Option<&str>> = current
        .spec
        .iter()
        .flat_map(|s| &s.containers)
        .map(|c| (c.name.as_str(), c.image.as_deref()))
        .collect();
    let timeout = number(&annotations, TIMEOUT_ANNOTATION).unwrap_or(DEFAULT_TIMEOUT_SECONDS);
    let jobs = update
        .spec
        .iter()
        .flat_map(|s| &s.containers)
        .filter_map(|container| {
            let image = container.image.as_deref()?;
            (old_images.get(container.name.as_str()) != Some(&Some(image))).then(|| {
                job(
                    cloneset,
                    revisions,
                    &container.name,
                    image,
                    parallelism,
                    timeout,
                )
            })
        })
        .collect();
    Predownload::Jobs(jobs)
}

fn number(annotations: &BTreeMap<String, String>, key: &str) -> Option<i32> {
    annotations.get(key)?.parse().ok()
}

fn job(
    cloneset: &CloneSet,
    revisions: &Revisions,
    container: &str,
    image: &str,
    parallelism: i32,
    timeout: i32,
) -> ImagePullJob {
    let mut pod_selector = cloneset.spec.selector.clone();
    pod_selector
        .match_expressions
        .get_or_insert_with(Vec::new)
        .push(LabelSelectorRequirement {
            key: LABEL_REVISION.to_owned(),
            operator: "NotIn".to_owned(),
            values: Some(vec![revisions.update.clone()]),
        });
    ImagePullJob {
        metadata: ObjectMeta {
            name: Some(format!("{}-{container}", revisions.update)),
            namespace: cloneset.metadata.namespace.clone(),
            owner_references: controller_reference(cloneset).map(|r| vec![r]),
            ..ObjectMeta::default()
        },
        spec: ImagePullJobSpec {
            image: image.to_owned(),
            pod_selector: Some(pod_selector),
            parallelism: Some(IntOrString::Int(parallelism)),
            pull_policy: Some(PullPolicy {
                timeout_seconds: Some(timeout),
                backoff_limit: Some(BACKOFF_LIMIT),
            }),
            completion_policy: CompletionPolicy {
                type_: Some(CompletionPolicyType::Always),
                ttl_seconds_after_finished: Some(TTL_SECONDS_AFTER_FINISHED),
                active_deadline_seconds: None,
            },
            ..ImagePullJobSpec::default()
        },
        status: None,
    }
}
