//! One reconcile of a distribution (spec 07 §3): the writes to make, and
//! what is already known to fail.

use std::collections::BTreeMap;

use k8s_openapi::jiff::Timestamp;
use kruise_api::ResourceDistribution;
use kruise_api::resourcedistribution::{
    ResourceDistributionConditionType as ConditionType, ResourceDistributionStatus,
};
use serde_json::Value;

use super::copy::{build_copy, is_up_to_date, updated_copy};
use super::embedded::{ResourceIdentity, identify};
use super::hash::resource_hash;
use super::ownership::is_controlled_by;
use super::status::compute_status;
use super::targets::{NamespaceInfo, TargetSet, target_namespaces};
use super::{MESSAGE_CONFLICT, MESSAGE_NAMESPACE_NOT_EXISTS};
use crate::selector::SelectorError;

/// Why no plan can be made. None is fixed by retrying: the first two need
/// a new spec, the last two mean the object was not read from the API
/// server.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// `spec.resource` is not a distributable Secret or ConfigMap. OpenKruise
    /// gives up without retrying: only a new spec can fix it.
    #[error("cannot distribute the resource: {0}")]
    InvalidResource(String),
    #[error("spec.targets.namespaceLabelSelector: {0}")]
    InvalidSelector(#[from] SelectorError),
    #[error("the ResourceDistribution has no metadata.name")]
    Unnamed,
    #[error("the ResourceDistribution has no metadata.uid")]
    NoUid,
}

/// What the controller read in one namespace under the resource's kind and
/// name. A namespace absent from [`ReconcileInput::existing`] has no such
/// object (the GET said NotFound).
#[derive(Clone, Debug, PartialEq)]
pub enum Existing {
    /// The object as read (JSON).
    Found(Value),
    /// The GET failed with something other than NotFound: the error text.
    ReadFailed(String),
}

/// Everything one reconcile looks at.
#[derive(Clone, Copy, Debug)]
pub struct ReconcileInput<'a> {
    pub distribution: &'a ResourceDistribution,
    /// Every namespace of the cluster.
    pub namespaces: &'a [NamespaceInfo],
    /// The object of the resource's kind and name, per namespace name.
    pub existing: &'a BTreeMap<String, Existing>,
    pub now: Timestamp,
}

/// A write for the controller.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Create this copy (no object of that name there yet).
    Create { namespace: String, object: Value },
    /// Replace the copy this distribution controls (its content differs).
    Update { namespace: String, object: Value },
    /// Delete the copy this distribution controls: the namespace is no
    /// longer a target. NotFound counts as done.
    Delete { namespace: String },
}

impl Action {
    pub fn namespace(&self) -> &str {
        match self {
            Self::Create { namespace, .. }
            | Self::Update { namespace, .. }
            | Self::Delete { namespace } => namespace,
        }
    }

    /// The condition type a failure of this write is reported under.
    pub fn failure_condition(&self) -> ConditionType {
        match self {
            Self::Create { .. } => ConditionType::CreateResourceFailed,
            Self::Update { .. } => ConditionType::UpdateResourceFailed,
            Self::Delete { .. } => ConditionType::DeleteResourceFailed,
        }
    }

    /// This write failed with `message` (the API error text).
    pub fn failed(&self, message: impl Into<String>) -> Failure {
        Failure {
            namespace: self.namespace().to_owned(),
            condition: self.failure_condition(),
            message: message.into(),
        }
    }
}

/// A namespace that hit one of the six conditions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    pub namespace: String,
    pub condition: ConditionType,
    pub message: String,
}

impl Failure {
    /// Get, create, update and delete failures make the controller retry
    /// with backoff; conflicts and missing namespaces wait for an event.
    pub fn needs_retry(&self) -> bool {
        !matches!(
            self.condition,
            ConditionType::ConflictOccurred | ConditionType::NamespaceNotExists
        )
    }
}

/// The outcome of planning one reconcile.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// What is distributed: the kind and name to GET, create and delete.
    pub resource: ResourceIdentity,
    /// The `hashcode` annotation of every copy.
    pub hash: String,
    pub targets: TargetSet,
    /// The writes, in namespace order: creates and updates for targets,
    /// deletes for namespaces that left the targets.
    pub actions: Vec<Action>,
    /// Targets whose copy is already up to date: nothing to write.
    pub up_to_date: Vec<String>,
    /// Failures known without writing: missing or terminating target
    /// namespaces, conflicts with objects this distribution does not
    /// control (left untouched), failed reads.
    pub failures: Vec<Failure>,
    /// The status if every action succeeds; after running the actions use
    /// [`Plan::status_after`] with the failures.
    pub status: ResourceDistributionStatus,
}

impl Plan {
    /// The status once the actions ran, `action_failures` being the ones
    /// that failed (see [`Action::failed`]).
    pub fn status_after(
        &self,
        distribution: &ResourceDistribution,
        action_failures: &[Failure],
        now: Timestamp,
    ) -> ResourceDistributionStatus {
        compute_status(distribution, self, action_failures, now)
    }

    /// Whether the reconcile should be retried with backoff.
    pub fn needs_retry(&self, action_failures: &[Failure]) -> bool {
        self.failures
            .iter()
            .chain(action_failures)
            .any(Failure::needs_retry)
    }

    /// The write planned in `namespace`, if any.
    pub fn action_for(&self, namespace: &str) -> Option<&Action> {
        self.actions.iter().find(|a| a.namespace() == namespace)
    }
}

/// Plan one reconcile: create the copy where a target has none, update a
/// copy this distribution controls whose content differs, delete copies it
/// controls in namespaces that are no longer targets, and never touch an
/// object it does not control (a conflict when it stands in a target).
pub fn plan(input: &ReconcileInput<'_>) -> Result<Plan, PlanError> {
    let distribution = input.distribution;
    let resource = &distribution.spec.resource;
    let identity = identify(resource).map_err(|v| PlanError::InvalidResource(v.to_string()))?;
    let hash = resource_hash(resource);
    let targets = target_namespaces(&distribution.spec.targets, input.namespaces)?;
    let namespaces: BTreeMap<&str, &NamespaceInfo> = input
        .namespaces
        .iter()
        .map(|ns| (ns.name.as_str(), ns))
        .collect();
    let mut plan = Plan {
        resource: identity,
        hash,
        targets: TargetSet::default(),
        actions: Vec::new(),
        up_to_date: Vec::new(),
        failures: Vec::new(),
        status: ResourceDistributionStatus::default(),
    };
    let fail = |namespace: &str, condition, message: &str| Failure {
        namespace: namespace.to_owned(),
        condition,
        message: message.to_owned(),
    };
    for namespace in &targets.matched {
        let present = namespaces
            .get(namespace.as_str())
            .is_some_and(|ns| !ns.terminating);
        if !present {
            plan.failures.push(fail(
                namespace,
                ConditionType::NamespaceNotExists,
                MESSAGE_NAMESPACE_NOT_EXISTS,
            ));
            continue;
        }
        let desired = build_copy(distribution, namespace, &plan.hash)?;
        match input.existing.get(namespace) {
            None => plan.actions.push(Action::Create {
                namespace: namespace.clone(),
                object: desired,
            }),
            Some(Existing::ReadFailed(error)) => {
                plan.failures
                    .push(fail(namespace, ConditionType::GetResourceFailed, error));
            }
            Some(Existing::Found(existing)) if !is_controlled_by(existing, distribution) => {
                plan.failures.push(fail(
                    namespace,
                    ConditionType::ConflictOccurred,
                    MESSAGE_CONFLICT,
                ));
            }
            Some(Existing::Found(existing)) if is_up_to_date(existing, &desired) => {
                plan.up_to_date.push(namespace.clone());
            }
            Some(Existing::Found(existing)) => plan.actions.push(Action::Update {
                namespace: namespace.clone(),
                object: updated_copy(&desired, existing, distribution),
            }),
        }
    }
    for namespace in &targets.unmatched {
        if namespaces
            .get(namespace.as_str())
            .is_none_or(|ns| ns.terminating)
        {
            continue;
        }
        match input.existing.get(namespace) {
            Some(Existing::ReadFailed(error)) => {
                plan.failures
                    .push(fail(namespace, ConditionType::GetResourceFailed, error));
            }
            Some(Existing::Found(existing)) if is_controlled_by(existing, distribution) => {
                plan.actions.push(Action::Delete {
                    namespace: namespace.clone(),
                });
            }
            _ => {}
        }
    }
    crate::ordered::sort_by(&mut plan.actions, |a, b| a.namespace().cmp(b.namespace()));
    crate::ordered::sort_by(&mut plan.failures, |a, b| a.namespace.cmp(&b.namespace));
    plan.targets = targets;
    plan.status = compute_status(distribution, &plan, &[], input.now);
    Ok(plan)
}
