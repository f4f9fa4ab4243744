//! The node agent's image puller decisions (kruise-daemon's
//! `imagepuller`): which tags of its NodeImage still need a pull, how each
//! attempt is limited and spaced, and how the workers' reports fold into
//! the NodeImage's status.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kruise_api::nodeimage::{
    DEFAULT_PULL_BACKOFF_LIMIT, DEFAULT_PULL_TIMEOUT_SECONDS, ImagePullPhase, ImagePullPolicy,
    ImageTagStatus, NodeImage, NodeImageStatus, ReferenceObject, SandboxConfig,
};

use super::nodeimage::{recount, set_tag_status};
use super::reference::pullable;

/// The longest pause between two attempts.
const MAX_RETRY_DELAY: Duration = Duration::from_secs(30);

/// One tag to pull, at one version of its spec.
#[derive(Clone, Debug, PartialEq)]
pub struct PullTask {
    /// The NodeImage's image key (the familiar name).
    pub image: String,
    pub tag: String,
    pub version: i64,
    pub limits: Limits,
    pub image_pull_policy: ImagePullPolicy,
    pub secrets: Vec<ReferenceObject>,
    pub sandbox_config: Option<SandboxConfig>,
}

impl PullTask {
    /// The reference handed to the runtime.
    pub fn reference(&self) -> String {
        pullable(&self.image, &self.tag)
    }

    /// The worker key: a new version is a new task.
    pub fn key(&self) -> (String, String) {
        (self.image.clone(), self.tag.clone())
    }
}

/// How long and how often one task may try.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Each attempt's timeout.
    pub timeout: Duration,
    /// Attempts in all: the first and `backoffLimit` retries.
    pub attempts: u32,
    /// The whole task's deadline from its start.
    pub deadline: Option<Duration>,
}

/// The tags whose status at their current version is not finished yet.
pub fn tasks(node_image: &NodeImage) -> Vec<PullTask> {
    let status = node_image.status.as_ref();
    let mut tasks = Vec::new();
    for (name, image) in &node_image.spec.images {
        for tag in &image.tags {
            let done = status
                .and_then(|s| s.image_statuses.get(name))
                .and_then(|s| s.tags.iter().find(|t| t.tag == tag.tag))
                .is_some_and(|t| t.version == tag.version && is_finished(t.phase));
            if done {
                continue;
            }
            let policy = tag.pull_policy.clone().unwrap_or_default();
            tasks.push(PullTask {
                image: name.clone(),
                tag: tag.tag.clone(),
                version: tag.version,
                limits: Limits {
                    timeout: seconds(
                        policy
                            .timeout_seconds
                            .unwrap_or(DEFAULT_PULL_TIMEOUT_SECONDS),
                    ),
                    attempts: attempts(policy.backoff_limit),
                    deadline: policy
                        .active_deadline_seconds
                        .map(|s| Duration::from_secs(s.max(0).unsigned_abs())),
                },
                image_pull_policy: tag.image_pull_policy.unwrap_or_default(),
                secrets: image.pull_secrets.clone(),
                sandbox_config: image.sandbox_config.clone(),
            });
        }
    }
    tasks
}

fn is_finished(phase: ImagePullPhase) -> bool {
    matches!(phase, ImagePullPhase::Succeeded | ImagePullPhase::Failed)
}

fn seconds(value: i32) -> Duration {
    Duration::from_secs(u64::from(value.max(1).unsigned_abs()))
}

/// `backoffLimit` retries after the first try; a negative limit is the
/// default 3.
pub fn attempts(backoff_limit: Option<i32>) -> u32 {
    let limit = backoff_limit
        .filter(|l| *l >= 0)
        .unwrap_or(DEFAULT_PULL_BACKOFF_LIMIT);
    limit.unsigned_abs().saturating_add(1)
}

/// The pause after failed attempt `attempt` (0-based): 1 s, 2 s, 4 s, …,
/// at most 30 s.
pub fn retry_delay(attempt: u32) -> Duration {
    let seconds = 1u64.checked_shl(attempt).unwrap_or(u64::MAX);
    Duration::from_secs(seconds).min(MAX_RETRY_DELAY)
}

/// The next attempt's timeout, cut to what is left of the deadline;
/// `None` once the deadline has passed.
pub fn attempt_timeout(limits: &Limits, elapsed: Duration) -> Option<Duration> {
    match limits.deadline {
        None => Some(limits.timeout),
        Some(deadline) => {
            let left = deadline.checked_sub(elapsed).filter(|l| !l.is_zero())?;
            Some(limits.timeout.min(left))
        }
    }
}

/// A worker's report: the status of its tag at its version.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    pub image: String,
    pub status: ImageTagStatus,
}

impl Report {
    pub fn waiting(task: &PullTask) -> Self {
        Self::new(task, ImagePullPhase::Waiting)
    }

    pub fn pulling(task: &PullTask, now: Timestamp) -> Self {
        let mut report = Self::new(task, ImagePullPhase::Pulling);
        report.status.start_time = Some(Time(now));
        report
    }

    /// The pulling report finished: succeeded with the image's ID.
    #[must_use]
    pub fn succeeded(mut self, image_id: &str, now: Timestamp) -> Self {
        self.status.phase = ImagePullPhase::Succeeded;
        self.status.progress = 100;
        self.status.image_id = Some(format!("{}@{}", self.image, image_id));
        self.status.completion_time = Some(Time(now));
        self.status.message = None;
        self
    }

    /// The pulling report finished: failed, saying why.
    #[must_use]
    pub fn failed(mut self, message: &str, now: Timestamp) -> Self {
        self.status.phase = ImagePullPhase::Failed;
        self.status.completion_time = Some(Time(now));
        self.status.message = Some(message.to_owned());
        self
    }

    fn new(task: &PullTask, phase: ImagePullPhase) -> Self {
        Self {
            image: task.image.clone(),
            status: ImageTagStatus {
                tag: task.tag.clone(),
                phase,
                version: task.version,
                ..ImageTagStatus::default()
            },
        }
    }
}

/// The NodeImage's status with the workers' reports folded in; `None`
/// when it would not change. A report for another version than the
/// spec's is stale and ignored, and a finished status is never taken
/// back to Waiting or Pulling (the manager's watchdog may have failed it).
pub fn merge(node_image: &NodeImage, reports: &[Report]) -> Option<NodeImageStatus> {
    let old = node_image.status.clone().unwrap_or_default();
    let mut status = old.clone();
    for report in reports {
        let current = node_image
            .spec
            .images
            .get(&report.image)
            .and_then(|i| i.tags.iter().find(|t| t.tag == report.status.tag))
            .is_some_and(|t| t.version == report.status.version);
        let stored_finished = status
            .image_statuses
            .get(&report.image)
            .and_then(|i| i.tags.iter().find(|t| t.tag == report.status.tag))
            .is_some_and(|t| t.version == report.status.version && is_finished(t.phase));
        let regresses = stored_finished && !is_finished(report.status.phase);
        if current && !regresses {
            set_tag_status(&mut status, &report.image, report.status.clone());
        }
    }
    let status = recount(&node_image.spec, status);
    (status != old).then_some(status)
}
