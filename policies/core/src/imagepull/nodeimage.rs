//! The NodeImage controller's decisions (OpenKruise's
//! `pkg/controller/nodeimage`): one NodeImage per Ready node, its labels
//! the node's, its spec cleaned of tags nobody wants any more, and a
//! watchdog that fails the tags a node never answered for.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kruise_api::nodeimage::{
    ImagePullPhase, ImageStatus, ImageTagStatus, NodeImage, NodeImageSpec, NodeImageStatus,
    ReferenceObject,
};

use super::job::is_job_reference;

/// A NodeImage with this label is kept when its node is gone (tests and
/// tooling make such "fake" NodeImages).
pub const FAKE_NODE_IMAGE_LABEL: &str = "apps.kruise.io/fake-nodeimage";
/// How long after a node turns Ready its NodeImage is created (OpenKruise's
/// `--nodeimage-creation-delay` default).
pub const DEFAULT_CREATION_DELAY: Duration = Duration::from_secs(30);
/// A tag the node has not reported on this long after it was added fails.
pub const NODE_SILENCE: SignedDuration = SignedDuration::from_mins(10);

pub const MESSAGE_NODE_SILENT: &str = "node has not responded for a long time";
pub const MESSAGE_DEADLINE: &str = "pulling exceeds the activeDeadlineSeconds";

/// What to do about a node's NodeImage as a whole.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lifecycle {
    /// Create an empty NodeImage named after the node.
    Create,
    /// Delete it: the node is gone or going.
    Delete,
    /// The node is not Ready long enough yet: look again after this long.
    WaitToCreate(Duration),
    /// Nothing to create or delete (maybe something to clean up).
    Keep,
}

pub fn lifecycle(
    node: Option<&Node>,
    node_image: Option<&NodeImage>,
    creation_delay: Duration,
    now: Timestamp,
) -> Lifecycle {
    let node = node.filter(|n| n.metadata.deletion_timestamp.is_none());
    match (node, node_image) {
        (None, Some(image)) if !is_fake(image) => Lifecycle::Delete,
        (None, _) | (Some(_), Some(_)) => Lifecycle::Keep,
        (Some(node), None) => match ready_since(node) {
            None => Lifecycle::Keep,
            Some(since) => {
                let delay = SignedDuration::try_from(creation_delay).unwrap_or(SignedDuration::MAX);
                let due = since.saturating_add(delay).unwrap_or(since);
                if now >= due {
                    Lifecycle::Create
                } else {
                    let left = Duration::try_from(due.duration_since(now)).unwrap_or_default();
                    Lifecycle::WaitToCreate(left.max(Duration::from_secs(1)))
                }
            }
        },
    }
}

fn is_fake(node_image: &NodeImage) -> bool {
    node_image
        .metadata
        .labels
        .as_ref()
        .is_some_and(|l| l.contains_key(FAKE_NODE_IMAGE_LABEL))
}

/// When the node's Ready condition last turned True; `None` while not
/// Ready. A Ready node with no transition time counts as Ready long ago.
fn ready_since(node: &Node) -> Option<Timestamp> {
    let ready = node
        .status
        .as_ref()?
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "Ready")?;
    (ready.status == "True").then(|| {
        ready
            .last_transition_time
            .as_ref()
            .map_or(Timestamp::UNIX_EPOCH, |t| t.0)
    })
}

/// What exists of what a NodeImage's spec refers to.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Referents {
    /// The UIDs of the ImagePullJobs that exist.
    pub job_uids: BTreeSet<String>,
    /// The pull secrets that exist, as `(namespace, name)`.
    pub secrets: BTreeSet<(String, String)>,
}

impl Referents {
    fn has_job(&self, owner: &ObjectReference) -> bool {
        owner
            .uid
            .as_ref()
            .is_some_and(|uid| self.job_uids.contains(uid))
    }

    fn has_secret(&self, secret: &ReferenceObject) -> bool {
        let key = (
            secret.namespace.clone().unwrap_or_default(),
            secret.name.clone().unwrap_or_default(),
        );
        self.secrets.contains(&key)
    }
}

/// The ImagePullJobs a NodeImage's tags name as owners, each once (by
/// UID): the jobs whose existence [`housekeep`] asks [`Referents`] about.
/// A reference without a UID names no job that could exist.
pub fn job_owners(node_image: &NodeImage) -> Vec<&ObjectReference> {
    let mut seen = BTreeSet::new();
    node_image
        .spec
        .images
        .values()
        .flat_map(|i| &i.tags)
        .flat_map(|t| &t.owner_references)
        .filter(|o| is_job_reference(o))
        .filter(|o| o.uid.as_deref().is_some_and(|uid| seen.insert(uid)))
        .collect()
}

/// The outcome of cleaning a NodeImage's spec.
#[derive(Clone, Debug, PartialEq)]
pub struct Housekeeping {
    /// The new labels and spec, when they differ from the stored ones.
    pub update: Option<(BTreeMap<String, String>, NodeImageSpec)>,
    /// The soonest TTL expiry still ahead.
    pub requeue: Option<Duration>,
}

/// Mirrors the node's labels, drops tags without `createdAt`, owner
/// references to jobs that are gone (and tags left with no owner), tags
/// whose TTL after completion has passed, secrets that are gone, and
/// images left with no tags.
pub fn housekeep(
    node_image: &NodeImage,
    node_labels: &BTreeMap<String, String>,
    referents: &Referents,
    now: Timestamp,
) -> Housekeeping {
    let mut spec = node_image.spec.clone();
    let mut soonest: Option<Duration> = None;
    for (name, image) in &mut spec.images {
        image.tags.retain_mut(|tag| {
            if tag.created_at.is_none() {
                return false;
            }
            let had_owners = !tag.owner_references.is_empty();
            tag.owner_references
                .retain(|owner| !is_job_reference(owner) || referents.has_job(owner));
            if had_owners && tag.owner_references.is_empty() {
                return false;
            }
            let ttl = tag
                .pull_policy
                .as_ref()
                .and_then(|p| p.ttl_seconds_after_finished);
            let completed =
                completion_time(node_image.status.as_ref(), name, &tag.tag, tag.version);
            match (ttl, completed) {
                (Some(ttl), Some(completed)) => {
                    let expiry =
                        super::later(completed, SignedDuration::from_secs(i64::from(ttl.max(0))));
                    if now >= expiry {
                        return false;
                    }
                    let left = Duration::try_from(expiry.duration_since(now)).unwrap_or_default();
                    soonest = Some(soonest.map_or(left, |s| s.min(left)));
                    true
                }
                _ => true,
            }
        });
        image
            .pull_secrets
            .retain(|secret| referents.has_secret(secret));
    }
    spec.images.retain(|_, image| !image.tags.is_empty());
    let stored_labels = node_image.metadata.labels.clone().unwrap_or_default();
    let update = (spec != node_image.spec || stored_labels != *node_labels)
        .then(|| (node_labels.clone(), spec));
    Housekeeping {
        update,
        requeue: soonest,
    }
}

fn completion_time(
    status: Option<&NodeImageStatus>,
    image: &str,
    tag: &str,
    version: i64,
) -> Option<Timestamp> {
    let tag_status = status?
        .image_statuses
        .get(image)?
        .tags
        .iter()
        .find(|t| t.tag == tag && t.version == version)?;
    tag_status.completion_time.as_ref().map(|t| t.0)
}

/// The status with tags the node never answered for (or that ran past
/// their deadline) failed, entries for tags no longer wanted dropped and
/// the counts redone; `None` when nothing changes. Also the soonest
/// watchdog deadline still ahead.
pub fn watchdog(
    node_image: &NodeImage,
    now: Timestamp,
) -> (Option<NodeImageStatus>, Option<Duration>) {
    let old = node_image.status.clone().unwrap_or_default();
    let mut status = old.clone();
    let mut soonest: Option<Duration> = None;
    let mut note = |deadline: Timestamp| {
        let left = Duration::try_from(deadline.duration_since(now)).unwrap_or_default();
        soonest = Some(soonest.map_or(left, |s| s.min(left)));
    };
    for (name, image) in &node_image.spec.images {
        for tag in &image.tags {
            let Some(created) = tag.created_at.as_ref().map(|t| t.0) else {
                continue;
            };
            let entry = status
                .image_statuses
                .get(name)
                .and_then(|s| {
                    s.tags
                        .iter()
                        .find(|t| t.tag == tag.tag && t.version == tag.version)
                })
                .cloned();
            let done = entry.as_ref().is_some_and(|t| {
                matches!(t.phase, ImagePullPhase::Succeeded | ImagePullPhase::Failed)
            });
            let silent_until = super::later(created, NODE_SILENCE);
            let deadline = tag
                .pull_policy
                .as_ref()
                .and_then(|p| p.active_deadline_seconds)
                .map(|seconds| {
                    super::later(
                        super::later(created, SignedDuration::from_secs(seconds)),
                        NODE_SILENCE,
                    )
                });
            let failure = if entry.is_none() && now >= silent_until {
                Some(MESSAGE_NODE_SILENT)
            } else if !done && deadline.is_some_and(|d| now >= d) {
                Some(MESSAGE_DEADLINE)
            } else {
                if entry.is_none() {
                    note(silent_until);
                }
                if let Some(d) = deadline.filter(|_| !done) {
                    note(d);
                }
                None
            };
            if let Some(message) = failure {
                set_tag_status(
                    &mut status,
                    name,
                    ImageTagStatus {
                        tag: tag.tag.clone(),
                        phase: ImagePullPhase::Failed,
                        version: tag.version,
                        completion_time: Some(Time(now)),
                        message: Some(message.to_owned()),
                        ..entry.unwrap_or_default()
                    },
                );
            }
        }
    }
    let status = recount(&node_image.spec, status);
    ((status != old).then_some(status), soonest)
}

/// Replaces (or adds) the status of one tag, keeping tags sorted.
pub fn set_tag_status(status: &mut NodeImageStatus, image: &str, tag: ImageTagStatus) {
    let tags = &mut status
        .image_statuses
        .entry(image.to_owned())
        .or_insert_with(|| ImageStatus { tags: Vec::new() })
        .tags;
    if let Some(slot) = tags.iter_mut().find(|t| t.tag == tag.tag) {
        *slot = tag;
    } else {
        tags.push(tag);
        crate::ordered::sort_by(tags, |a, b| a.tag.cmp(&b.tag));
    }
}

/// The status with entries for tags the spec no longer lists dropped,
/// and `desired` (tags in the spec) and the per-phase counts redone.
pub fn recount(spec: &NodeImageSpec, mut status: NodeImageStatus) -> NodeImageStatus {
    status.image_statuses.retain(|name, image| {
        let wanted = spec.images.get(name);
        image
            .tags
            .retain(|t| wanted.is_some_and(|w| w.tags.iter().any(|s| s.tag == t.tag)));
        !image.tags.is_empty()
    });
    let phases: Vec<ImagePullPhase> = status
        .image_statuses
        .values()
        .flat_map(|i| i.tags.iter().map(|t| t.phase))
        .collect();
    let count = |phase: ImagePullPhase| {
        i32::try_from(phases.iter().filter(|p| **p == phase).count()).unwrap_or(i32::MAX)
    };
    status.desired = i32::try_from(spec.images.values().map(|i| i.tags.len()).sum::<usize>())
        .unwrap_or(i32::MAX);
    status.waiting = count(ImagePullPhase::Waiting);
    status.pulling = count(ImagePullPhase::Pulling);
    status.succeeded = count(ImagePullPhase::Succeeded);
    status.failed = count(ImagePullPhase::Failed);
    status
}
