//! The ImagePullJob controller's decisions (OpenKruise's
//! `pkg/controller/imagepulljob`): how far the job got on its target
//! NodeImages, which of them get the job's tag next (never more than
//! `parallelism` nodes pulling at once), what the tag entry says, and when
//! a finished job is deleted.

use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kruise_api::imagepulljob::{CompletionPolicyType, ImagePullJob, ImagePullJobStatus};
use kruise_api::nodeimage::{
    DEFAULT_PULL_BACKOFF_LIMIT, DEFAULT_PULL_TIMEOUT_SECONDS, ImagePullPhase, ImagePullPolicy,
    ImageSpec, ImageTagPullPolicy, ImageTagSpec, NodeImage, NodeImageSpec, NodeImageStatus,
    ReferenceObject,
};

use super::reference::{self, ImageRef};

/// The owner reference a job puts on the tags it wants.
pub const JOB_API_VERSION: &str = "apps.kruise.io/v1alpha1";
pub const JOB_KIND: &str = "ImagePullJob";

pub const MESSAGE_COMPLETED: &str = "job has completed";
pub const MESSAGE_NO_PROGRESS: &str = "job is running, no progress";
pub const MESSAGE_DEADLINE: &str = "job exceeds activeDeadlineSeconds";

/// A Never job's tags expire after a day (± 10 minutes, so that a fleet's
/// re-pulls spread out) and the job adds them again: a periodic re-pull.
const NEVER_TTL_SECONDS: i32 = 86_400;
const NEVER_TTL_SPREAD: u64 = 1_200;
/// A Never job's per-node deadline is at least half an hour.
const NEVER_MIN_DEADLINE_SECONDS: i64 = 1_800;
/// Spread added to an Always job's tag TTL.
const ALWAYS_TTL_SPREAD: u64 = 300;
/// The upper bound of the extra TTL for Always tags (31 days).
pub const MAX_EXTRA_ALWAYS_TTL_SECONDS: i32 = 31 * 86_400;

/// Where one target node stands with the job's tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TargetState {
    /// The NodeImage does not carry the job's tag (owned by the job, with
    /// the job's secrets) yet.
    NotSynced,
    /// Carried, not yet finished (waiting, pulling, or not reported).
    Active,
    Succeeded,
    Failed,
}

/// A spec the controller cannot act on (admission refuses these; a stored
/// one is reported, not retried).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error(transparent)]
    Image(#[from] reference::ReferenceError),
    #[error("spec.parallelism {0:?} must be a whole number of nodes, 0 or more")]
    Parallelism(String),
}

/// The job's image as the NodeImages key it.
pub fn job_image(job: &ImagePullJob) -> Result<ImageRef, SpecError> {
    Ok(reference::parse(&job.spec.image)?)
}

/// `spec.parallelism`: 1 when unset; percentages are not allowed.
pub fn parallelism(job: &ImagePullJob) -> Result<usize, SpecError> {
    let invalid = |text: String| SpecError::Parallelism(text);
    match &job.spec.parallelism {
        None => Ok(1),
        Some(IntOrString::Int(n)) => usize::try_from(*n).map_err(|_| invalid(n.to_string())),
        Some(IntOrString::String(text)) => text.parse::<usize>().map_err(|_| invalid(text.clone())),
    }
}

/// How `node_image` stands with the job's tag. `secrets` are the mirrored
/// secrets the tag's image must list.
pub fn classify(
    node_image: &NodeImage,
    image: &ImageRef,
    job_uid: &str,
    secrets: &[ReferenceObject],
) -> TargetState {
    let Some(spec) = node_image.spec.images.get(&image.name) else {
        return TargetState::NotSynced;
    };
    if !secrets.iter().all(|s| spec.pull_secrets.contains(s)) {
        return TargetState::NotSynced;
    }
    let Some(tag) = spec
        .tags
        .iter()
        .find(|t| t.tag == image.tag && owned_by(t, job_uid))
    else {
        return TargetState::NotSynced;
    };
    let reported = tag_status(node_image.status.as_ref(), &image.name, &image.tag);
    match reported {
        Some((phase, version)) if version == tag.version => match phase {
            ImagePullPhase::Succeeded => TargetState::Succeeded,
            ImagePullPhase::Failed => TargetState::Failed,
            ImagePullPhase::Waiting | ImagePullPhase::Pulling => TargetState::Active,
        },
        _ => TargetState::Active,
    }
}

fn tag_status(
    status: Option<&NodeImageStatus>,
    image: &str,
    tag: &str,
) -> Option<(ImagePullPhase, i64)> {
    status?
        .image_statuses
        .get(image)?
        .tags
        .iter()
        .find(|t| t.tag == tag)
        .map(|t| (t.phase, t.version))
}

fn owned_by(tag: &ImageTagSpec, job_uid: &str) -> bool {
    tag.owner_references
        .iter()
        .any(|owner| is_job_reference(owner) && owner.uid.as_deref() == Some(job_uid))
}

/// An owner reference naming an ImagePullJob (any version).
pub fn is_job_reference(owner: &ObjectReference) -> bool {
    owner.kind.as_deref() == Some(JOB_KIND)
        && owner
            .api_version
            .as_deref()
            .is_some_and(|v| v.split('/').next() == Some("apps.kruise.io"))
}

/// What one round of the controller found and wants.
#[derive(Clone, Debug, PartialEq)]
pub struct JobPlan {
    pub status: ImagePullJobStatus,
    /// Targets (indexes) to write the job's tag into now, in order.
    pub sync: Vec<usize>,
    /// Look again after this long even if nothing changes (the deadline).
    pub requeue: Option<Duration>,
}

/// The job's status over `targets` (in target order) and the NodeImages
/// to sync next: as many not-synced targets as `parallelism` leaves free
/// beside the active ones.
pub fn plan(
    job: &ImagePullJob,
    targets: &[NodeImage],
    secrets: &[ReferenceObject],
    now: Timestamp,
) -> Result<JobPlan, SpecError> {
    let image = job_image(job)?;
    let parallelism = parallelism(job)?;
    let uid = job.metadata.uid.as_deref().unwrap_or_default();
    let per_target: Vec<TargetState> = targets
        .iter()
        .map(|t| classify(t, &image, uid, secrets))
        .collect();
    let count = |wanted: TargetState| per_target.iter().filter(|s| **s == wanted).count();
    let start = job
        .status
        .as_ref()
        .and_then(|s| s.start_time.clone())
        .unwrap_or(Time(now));
    let mut status = ImagePullJobStatus {
        start_time: Some(start.clone()),
        desired: clamp(targets.len()),
        active: clamp(count(TargetState::Active)),
        succeeded: clamp(count(TargetState::Succeeded)),
        failed: clamp(count(TargetState::Failed)),
        ..ImagePullJobStatus::default()
    };
    let is_never = completion_type(job) == CompletionPolicyType::Never;
    let finished = count(TargetState::Succeeded) + count(TargetState::Failed);
    let deadline = (!is_never)
        .then_some(job.spec.completion_policy.active_deadline_seconds)
        .flatten()
        .map(|seconds| super::later(start.0, SignedDuration::from_secs(seconds)));
    if let Some(deadline) = deadline
        && finished < targets.len()
        && now >= deadline
    {
        // Out of time: whatever has not succeeded has failed; no more writes.
        status.completion_time = Some(Time(now));
        status.active = 0;
        status.failed = clamp(targets.len() - count(TargetState::Succeeded));
        status.failed_nodes = node_names(targets, &per_target, |s| s != TargetState::Succeeded);
        status.message = Some(MESSAGE_DEADLINE.to_owned());
        return Ok(JobPlan {
            status,
            sync: Vec::new(),
            requeue: None,
        });
    }
    status.failed_nodes = node_names(targets, &per_target, |s| s == TargetState::Failed);
    if !is_never && finished == targets.len() {
        status.completion_time = Some(Time(now));
        status.message = Some(MESSAGE_COMPLETED.to_owned());
    } else if targets.is_empty() {
        status.message = Some(MESSAGE_NO_PROGRESS.to_owned());
    } else {
        let percent = 100.0 * as_f64(finished) / as_f64(targets.len());
        status.message = Some(format!("job is running, progress {percent:.1}%"));
    }
    let slots = parallelism.saturating_sub(count(TargetState::Active));
    let new_ones = per_target
        .iter()
        .enumerate()
        .filter(|(_, s)| **s == TargetState::NotSynced)
        .map(|(i, _)| i)
        .take(slots);
    let sync: Vec<usize> = new_ones.collect();
    let requeue = deadline.map(|d| {
        let left = d.duration_since(now).max(SignedDuration::from_secs(1));
        Duration::try_from(left).unwrap_or(Duration::from_secs(1))
    });
    Ok(JobPlan {
        status,
        sync,
        requeue,
    })
}

fn node_names(
    targets: &[NodeImage],
    states: &[TargetState],
    keep: impl Fn(TargetState) -> bool,
) -> Vec<String> {
    let mut names: Vec<String> = targets
        .iter()
        .zip(states)
        .filter(|(_, s)| keep(**s))
        .filter_map(|(t, _)| t.metadata.name.clone())
        .collect();
    crate::ordered::sort(&mut names);
    names
}

fn clamp(count: usize) -> i32 {
    i32::try_from(count).unwrap_or(i32::MAX)
}

fn as_f64(count: usize) -> f64 {
    f64::from(u32::try_from(count).unwrap_or(u32::MAX))
}

pub fn completion_type(job: &ImagePullJob) -> CompletionPolicyType {
    job.spec.completion_policy.type_.unwrap_or_default()
}

/// The job's pull settings, defaults filled in, as a tag entry takes them.
struct PolicyFields {
    timeout_seconds: i32,
    backoff_limit: i32,
    image_pull_policy: ImagePullPolicy,
}

fn tag_policy_fields(job: &ImagePullJob) -> PolicyFields {
    let policy = job.spec.pull_policy.clone().unwrap_or_default();
    PolicyFields {
        timeout_seconds: policy
            .timeout_seconds
            .unwrap_or(DEFAULT_PULL_TIMEOUT_SECONDS),
        backoff_limit: policy.backoff_limit.unwrap_or(DEFAULT_PULL_BACKOFF_LIMIT),
        image_pull_policy: job.spec.image_pull_policy.unwrap_or_default(),
    }
}

/// The pull policy of a tag the job adds. `random` spreads the TTLs;
/// `extra_always_ttl` is the operator's extra TTL for Always jobs.
pub fn tag_pull_policy(
    job: &ImagePullJob,
    random: u64,
    extra_always_ttl: i32,
) -> ImageTagPullPolicy {
    let fields = tag_policy_fields(job);
    let completion = &job.spec.completion_policy;
    let spread = |range: u64| i32::try_from(random % range).unwrap_or(0);
    let (ttl, deadline) = match completion_type(job) {
        CompletionPolicyType::Never => (
            NEVER_TTL_SECONDS - 600 + spread(NEVER_TTL_SPREAD),
            Some(NEVER_MIN_DEADLINE_SECONDS.max(i64::from(fields.timeout_seconds))),
        ),
        CompletionPolicyType::Always => {
            let base = completion
                .ttl_seconds_after_finished
                .map(i64::from)
                .or(completion.active_deadline_seconds)
                .unwrap_or_else(|| {
                    i64::from(fields.timeout_seconds) * i64::from(fields.backoff_limit.max(1))
                });
            let extra = extra_always_ttl.clamp(0, MAX_EXTRA_ALWAYS_TTL_SECONDS);
            let total = base
                .saturating_add(i64::from(extra))
                .saturating_add(i64::from(spread(ALWAYS_TTL_SPREAD)));
            (
                i32::try_from(total).unwrap_or(i32::MAX),
                completion.active_deadline_seconds,
            )
        }
    };
    ImageTagPullPolicy {
        timeout_seconds: Some(fields.timeout_seconds),
        backoff_limit: Some(fields.backoff_limit),
        ttl_seconds_after_finished: Some(ttl),
        active_deadline_seconds: deadline,
    }
}

/// The reference a job writes into the tags it owns.
pub fn job_reference(job: &ImagePullJob) -> ObjectReference {
    ObjectReference {
        api_version: Some(JOB_API_VERSION.to_owned()),
        kind: Some(JOB_KIND.to_owned()),
        namespace: job.metadata.namespace.clone(),
        name: job.metadata.name.clone(),
        uid: job.metadata.uid.clone(),
        ..ObjectReference::default()
    }
}

/// Writes the job's tag into a NodeImage's spec; true when it changed.
///
/// - A tag entry already owned by the job only gets missing secrets and
///   the job's current timeout, retries and pull policy.
/// - An entry of the same tag owned by others gets the job as an owner
///   and a new version: a second job on a tag pulls it again everywhere.
/// - Otherwise a new entry, its version one past the last reported one.
pub fn sync_node_image(
    spec: &mut NodeImageSpec,
    status: Option<&NodeImageStatus>,
    job: &ImagePullJob,
    secrets: &[ReferenceObject],
    now: Timestamp,
    policy: ImageTagPullPolicy,
) -> Result<bool, SpecError> {
    let image = job_image(job)?;
    let uid = job.metadata.uid.as_deref().unwrap_or_default();
    let fields = tag_policy_fields(job);
    let before = spec.clone();
    let entry = spec
        .images
        .entry(image.name.clone())
        .or_insert_with(|| ImageSpec {
            tags: Vec::new(),
            ..ImageSpec::default()
        });
    if entry.sandbox_config != job.spec.sandbox_config {
        entry.sandbox_config.clone_from(&job.spec.sandbox_config);
    }
    for secret in secrets {
        if !entry.pull_secrets.contains(secret) {
            entry.pull_secrets.push(secret.clone());
        }
    }
    match entry.tags.iter_mut().find(|t| t.tag == image.tag) {
        // Already listed: left as it is, as OpenKruise does. Rewriting its
        // pull policy would not reach a pull under way (the agent keeps a
        // task's limits), and two jobs on one tag would undo each other's
        // writes for as long as the pull lasts.
        Some(tag) if owned_by(tag, uid) => {}
        Some(tag) => {
            tag.version = tag.version.saturating_add(1);
            tag.owner_references.push(job_reference(job));
            tag.created_at = Some(Time(now));
            tag.image_pull_policy = Some(fields.image_pull_policy);
        }
        None => {
            let reported = tag_status(status, &image.name, &image.tag).map(|(_, v)| v);
            entry.tags.push(ImageTagSpec {
                tag: image.tag.clone(),
                created_at: Some(Time(now)),
                pull_policy: Some(policy),
                owner_references: vec![job_reference(job)],
                version: reported.map_or(0, |v| v.saturating_add(1)),
                image_pull_policy: Some(fields.image_pull_policy),
            });
            crate::ordered::sort_by(&mut entry.tags, |a, b| a.tag.cmp(&b.tag));
        }
    }
    Ok(*spec != before)
}

/// Drops the job from every tag of a NodeImage but `keep` (the job's
/// current image, or none once the job is deleted), and any tag left
/// without owners; true when something changed. Editing a job's image, or
/// deleting the job, so frees the nodes of its old tags.
pub fn release_tags(spec: &mut NodeImageSpec, job_uid: &str, keep: Option<&ImageRef>) -> bool {
    let mut changed = false;
    for (name, image) in &mut spec.images {
        image.tags.retain_mut(|tag| {
            let kept = keep.is_some_and(|k| k.name == *name && k.tag == tag.tag);
            if kept || !owned_by(tag, job_uid) {
                return true;
            }
            changed = true;
            tag.owner_references
                .retain(|o| !(is_job_reference(o) && o.uid.as_deref() == Some(job_uid)));
            !tag.owner_references.is_empty()
        });
    }
    spec.images.retain(|_, image| !image.tags.is_empty());
    changed
}

/// What to do with a job that has finished.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finished {
    /// Not finished (no completion time).
    Running,
    /// Keep it (no TTL), or for this long before deleting it.
    Keep(Option<Duration>),
    /// Its TTL has passed: delete it.
    Delete,
}

/// A finished Always job is deleted `ttlSecondsAfterFinished` after it
/// completed.
pub fn finished(job: &ImagePullJob, now: Timestamp) -> Finished {
    let Some(completed) = job.status.as_ref().and_then(|s| s.completion_time.as_ref()) else {
        return Finished::Running;
    };
    let Some(ttl) = job.spec.completion_policy.ttl_seconds_after_finished else {
        return Finished::Keep(None);
    };
    let expiry = super::later(
        completed.0,
        SignedDuration::from_secs(i64::from(ttl.max(0))),
    );
    if now >= expiry {
        Finished::Delete
    } else {
        let left = expiry.duration_since(now);
        Finished::Keep(Some(
            Duration::try_from(left).unwrap_or(Duration::from_secs(1)),
        ))
    }
}

/// Whether the job carries its finalizer: added before any pull secret is
/// mirrored, dropped once the mirrors are let go.
pub fn holds_finalizer(job: &ImagePullJob) -> bool {
    job.metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == kruise_api::imagepulljob::DELETION_PROTECTION_FINALIZER)
}

/// The job's target NodeImages (indexes into `node_images`), in the
/// order they get the tag:
/// - `podSelector`: the nodes of the matching pods (`pods` is the job's
///   namespace) that are scheduled and not finished, by pod name;
/// - no selector: every NodeImage;
/// - `selector.names`: those NodeImages, in the order named;
/// - else the NodeImages whose labels (the node's) match.
///
/// Names without a NodeImage are skipped; others in name order.
pub fn select_targets(
    job: &ImagePullJob,
    node_images: &[NodeImage],
    pods: &[&k8s_openapi::api::core::v1::Pod],
) -> Result<Vec<usize>, crate::selector::SelectorError> {
    let mut by_name: Vec<(usize, &str)> = node_images
        .iter()
        .enumerate()
        .filter_map(|(i, n)| n.metadata.name.as_deref().map(|name| (i, name)))
        .collect();
    crate::ordered::sort_by_key(&mut by_name, |(_, name)| *name);
    let index_of = |wanted: &str| by_name.iter().find(|(_, n)| *n == wanted).map(|(i, _)| *i);
    if let Some(pod_selector) = &job.spec.pod_selector {
        let mut matching = Vec::new();
        for &pod in pods {
            let labels = pod.metadata.labels.clone().unwrap_or_default();
            if crate::selector::matches(pod_selector, &labels)? && is_placed_and_running(pod) {
                matching.push(pod);
            }
        }
        crate::ordered::sort_by_key(&mut matching, |p| p.metadata.name.clone());
        let mut targets = Vec::new();
        for pod in matching {
            let node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
            if let Some(index) = node.and_then(index_of)
                && !targets.contains(&index)
            {
                targets.push(index);
            }
        }
        return Ok(targets);
    }
    let Some(selector) = &job.spec.selector else {
        return Ok(by_name.iter().map(|(i, _)| *i).collect());
    };
    if let Some(names) = &selector.names {
        let mut targets = Vec::new();
        for index in names.iter().filter_map(|n| index_of(n)) {
            if !targets.contains(&index) {
                targets.push(index);
            }
        }
        return Ok(targets);
    }
    let label_selector = selector.label_selector();
    let mut targets = Vec::new();
    for (index, _) in &by_name {
        let labels = node_images[*index]
            .metadata
            .labels
            .clone()
            .unwrap_or_default();
        if crate::selector::matches(&label_selector, &labels)? {
            targets.push(*index);
        }
    }
    Ok(targets)
}

fn is_placed_and_running(pod: &k8s_openapi::api::core::v1::Pod) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    pod.metadata.deletion_timestamp.is_none()
        && !matches!(phase, Some("Succeeded" | "Failed"))
        && pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .is_some_and(|n| !n.is_empty())
}
