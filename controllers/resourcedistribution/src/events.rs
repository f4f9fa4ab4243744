//! Kubernetes events on the distribution. Publishing is best effort: a
//! failure is logged and never fails the reconcile.

use k8s_openapi::api::core::v1::ObjectReference;
use kruise_api::ResourceDistribution;
use kruise_api::resourcedistribution::ResourceDistributionConditionType as ConditionType;
use kruise_controller_runtime::context::Context;
use kruise_controller_runtime::events::truncate;
use kruise_core::resourcedistribution::{Action, Failure, ResourceIdentity};
use kube::Resource;

use crate::cluster::verb;

/// Namespaces named in one event note; the rest are counted.
const NAMESPACES_SHOWN: usize = 10;
/// The most characters of an error message put in a note (notes are
/// limited to 1 kB).
const MESSAGE_CHARS: usize = 600;

/// One Normal event per kind of write that succeeded, naming the
/// namespaces.
pub(crate) async fn writes_done(
    context: &Context,
    distribution: &ResourceDistribution,
    resource: &ResourceIdentity,
    done: &[&Action],
) {
    for (action_verb, reason, past) in [
        ("create", "ResourceCreated", "created"),
        ("update", "ResourceUpdated", "updated"),
        ("delete", "ResourceDeleted", "deleted"),
    ] {
        let namespaces: Vec<&str> = done
            .iter()
            .filter(|action| verb(action) == action_verb)
            .map(|action| action.namespace())
            .collect();
        if namespaces.is_empty() {
            continue;
        }
        let note = format!(
            "{past} {} {} in {}",
            resource.kind.as_str(),
            resource.name,
            list(&namespaces)
        );
        context
            .events
            .normal(
                &distribution.object_ref(&()),
                reason,
                capitalized(action_verb),
                &note,
            )
            .await;
    }
}

/// One Warning event per condition type among `failures`, with its
/// namespaces and the last message.
pub(crate) async fn failures(
    context: &Context,
    distribution: &ResourceDistribution,
    failures: &[&Failure],
) {
    for condition in ConditionType::ALL {
        let hits: Vec<&&Failure> = failures
            .iter()
            .filter(|f| f.condition == condition)
            .collect();
        let Some(last) = hits.last() else {
            continue;
        };
        let namespaces: Vec<&str> = hits.iter().map(|f| f.namespace.as_str()).collect();
        let note = format!(
            "{}: {}",
            list(&namespaces),
            truncate(&last.message, MESSAGE_CHARS)
        );
        let reason = format!("{condition:?}");
        context
            .events
            .warning(&distribution.object_ref(&()), &reason, "Distribute", &note)
            .await;
    }
}

/// The distribution cannot be read or planned: only a new spec helps.
pub(crate) async fn invalid_spec(context: &Context, distribution: &ObjectReference, message: &str) {
    context
        .events
        .warning(
            distribution,
            "InvalidSpec",
            "Distribute",
            &truncate(message, MESSAGE_CHARS),
        )
        .await;
}

fn capitalized(verb: &str) -> &'static str {
    match verb {
        "create" => "Create",
        "update" => "Update",
        _ => "Delete",
    }
}

/// `a, b, c` or `a, b, ... and 5 more`.
fn list(namespaces: &[&str]) -> String {
    let shown = namespaces
        .iter()
        .take(NAMESPACES_SHOWN)
        .copied()
        .collect::<Vec<_>>()
        .join(", ");
    match namespaces.len().saturating_sub(NAMESPACES_SHOWN) {
        0 => shown,
        more => format!("{shown} and {more} more"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_lists_are_counted() {
        assert_eq!(list(&["a", "b"]), "a, b");
        let many: Vec<String> = (1..=12).map(|i| format!("ns-{i}")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        assert_eq!(
            list(&many),
            "ns-1, ns-2, ns-3, ns-4, ns-5, ns-6, ns-7, ns-8, ns-9, ns-10 and 2 more"
        );
    }
}
