//! One reconcile: read, plan (kruise-core), write, report.

use std::sync::Arc;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::jiff::Timestamp;
use kruise_api::{ResourceDistribution, Stored};
use kruise_core::resourcedistribution::{
    Action as Write, Failure, PlanError, ReconcileInput, needs_status_write, plan, read_resource,
};
use kube::Resource;
use kube::runtime::controller::Action;

use kruise_controller_runtime::status::StatusWrite;

use crate::cluster::{self, ReadError};
use crate::context::Context;
use crate::events;

/// Why a reconcile is retried with backoff.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    #[error(transparent)]
    Read(#[from] ReadError),
    #[error("cannot plan: {0}")]
    Plan(#[source] PlanError),
    #[error("cannot write the status: {0}")]
    Status(#[source] kube::Error),
    #[error("{count} namespace(s) failed, e.g. {example}")]
    Failures { count: usize, example: String },
}

pub(crate) async fn reconcile(
    stored: Arc<Stored<ResourceDistribution>>,
    context: Arc<Context>,
) -> Result<Action, Error> {
    let name = stored.name().to_owned();
    let distribution = match &stored.object {
        Ok(distribution) => distribution,
        Err(reason) => {
            let message = format!("cannot read this ResourceDistribution: {reason}");
            return Ok(invalid(&context, &stored.object_ref(&()), &name, &message).await);
        }
    };
    if distribution.metadata.deletion_timestamp.is_some() {
        // The garbage collector deletes the copies (controller owner
        // references); there is nothing to do here.
        return Ok(Action::await_change());
    }
    let resource = match read_resource(&distribution.spec.resource) {
        Ok(resource) => resource,
        Err(message) => {
            return Ok(invalid(&context, &distribution.object_ref(&()), &name, &message).await);
        }
    };
    let client = &context.client;
    let namespaces = cluster::namespaces(client).await?;
    let existing = cluster::existing(client, &resource).await?;
    let now = Timestamp::now();
    let plan = match plan(&ReconcileInput {
        distribution,
        namespaces: &namespaces,
        existing: &existing,
        now,
    }) {
        Ok(plan) => plan,
        Err(error @ (PlanError::InvalidResource(_) | PlanError::InvalidSelector(_))) => {
            let reference = distribution.object_ref(&());
            return Ok(invalid(&context, &reference, &name, &error.to_string()).await);
        }
        Err(error) => return Err(Error::Plan(error)),
    };

    let outcomes = cluster::execute(client, &plan.resource, &plan.actions, &existing).await;
    let done: Vec<&Write> = plan
        .actions
        .iter()
        .zip(&outcomes)
        .filter(|(_, failure)| failure.is_none())
        .map(|(action, _)| action)
        .collect();
    events::writes_done(&context, distribution, &plan.resource, &done).await;
    let action_failures: Vec<Failure> = outcomes.into_iter().flatten().collect();
    events::failures(
        &context,
        distribution,
        &action_failures.iter().collect::<Vec<_>>(),
    )
    .await;

    let status = plan.status_after(distribution, &action_failures, now);
    if needs_status_write(distribution, &status) {
        tracing::info!(
            distribution = %name,
            desired = status.desired,
            succeeded = status.succeeded,
            failed = status.failed,
            "writing the status"
        );
        // Conflicts and missing namespaces are reported once, when the
        // status changes, not on every reconcile.
        events::failures(
            &context,
            distribution,
            &plan.failures.iter().collect::<Vec<_>>(),
        )
        .await;
        let written = cluster::write_status(client, distribution, status)
            .await
            .map_err(Error::Status)?;
        if written == StatusWrite::Stale {
            tracing::debug!(distribution = %name, "read a stale distribution; its update comes next");
        }
    }

    if plan.needs_retry(&action_failures) {
        let retried: Vec<&Failure> = plan
            .failures
            .iter()
            .chain(&action_failures)
            .filter(|f| f.needs_retry())
            .collect();
        let example = retried
            .first()
            .map(|f| format!("{} ({:?}): {}", f.namespace, f.condition, f.message))
            .unwrap_or_default();
        return Err(Error::Failures {
            count: retried.len(),
            example,
        });
    }
    context.backoff.reset(&name);
    Ok(Action::await_change())
}

/// The signature kube's `Controller::run` asks for.
#[allow(clippy::needless_pass_by_value)]
pub(crate) fn error_policy(
    distribution: Arc<Stored<ResourceDistribution>>,
    error: &Error,
    context: Arc<Context>,
) -> Action {
    let name = distribution.name();
    let delay = context.backoff.next(name);
    tracing::warn!(distribution = name, %error, retry_in = ?delay, "reconcile failed");
    Action::requeue(delay)
}

/// Logs and reports a distribution that cannot be planned; it waits for a
/// new spec.
async fn invalid(
    context: &Context,
    distribution: &ObjectReference,
    name: &str,
    message: &str,
) -> Action {
    tracing::warn!(
        distribution = name,
        message,
        "cannot distribute; waiting for a new spec"
    );
    events::invalid_spec(context, distribution, message).await;
    context.backoff.reset(name);
    Action::await_change()
}
