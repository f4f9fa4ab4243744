//! ResourceDistribution (spec 07): which namespaces a distribution targets,
//! the copy it writes in each, what one reconcile must create, update or
//! delete, the status to report, and the validation OpenKruise's webhook
//! does. The controller reads the cluster and performs the writes; nothing
//! here talks to the cluster or reads a clock.
//!
//! Entry points: [`target_namespaces`], [`resource_hash`], [`desired_copy`],
//! [`plan`] with [`compute_status`], and [`validate_create`] /
//! [`validate_update`].
//!
//! Behaviour follows OpenKruise v1.9+: `kube-system` and `kube-public` are
//! never targets, and an existing copy is rewritten when its content
//! (everything but `metadata` and `status`) differs from the distributed
//! resource, so a copy edited by hand is restored while a change to only the
//! resource's own labels or annotations reaches new copies only.

mod base64;
mod copy;
mod creatable;
mod embedded;
mod hash;
mod ownership;
mod plan;
mod status;
mod targets;
mod validation;

pub use copy::{desired_copy, is_up_to_date, updated_copy};
pub use embedded::{ResourceIdentity, ResourceKind, read_resource};
pub use hash::{raw_resource_hash, resource_hash};
pub use ownership::{controller_reference, is_controlled_by};
pub use plan::{Action, Existing, Failure, Plan, PlanError, ReconcileInput, plan};
pub use status::{compute_status, needs_status_write};
pub use targets::{
    NamespaceInfo, SYSTEM_NAMESPACES, TargetSet, selects_namespace, target_namespaces,
};
pub use validation::{Violation, validate_create, validate_update};

pub use kruise_api::resourcedistribution::{RESOURCE_FROM_ANNOTATION, RESOURCE_HASH_ANNOTATION};

/// `reason` of a condition no namespace failed.
pub const REASON_SUCCEEDED: &str = "Succeeded";
/// The `NamespaceNotExists` message.
pub const MESSAGE_NAMESPACE_NOT_EXISTS: &str = "namespace not found or is terminating";
/// The `ConflictOccurred` message.
pub const MESSAGE_CONFLICT: &str =
    "conflict with existing resources because of the same namespace, group, version, kind and name";
