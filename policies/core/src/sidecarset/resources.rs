//! `resourcesPolicy` (OpenKruise v1.9): a sidecar's resources computed, when
//! the pod is created, from the pod's own containers.
//!
//! The targets are the pod's containers (and native-sidecar init
//! containers) whose names match `targetContainersNameRegex`, leaving out
//! every container a selected SidecarSet injects. Their cpu and memory are
//! summed or the largest taken (`targetContainersMode`); a limit exists
//! only if every target has one (one unlimited container makes the total
//! unlimited, and the sidecar then gets no such limit), a missing request
//! counts as 0. Each expression then sees the aggregate as `cpu` or
//! `memory` and gives the sidecar's value; the sidecar's resources are
//! replaced by exactly what the expressions give.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Container, Pod, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as ApiQuantity;
use kruise_api::sidecarset::{
    ResourceExprs, ResourcesPolicy, SidecarContainer, TargetContainersMode,
};

use super::resource_expr::{Value, evaluate, go_int64};
use crate::quantity::Quantity;
use crate::validation::Violation;

const CPU: &str = "cpu";
const MEMORY: &str = "memory";

/// The sidecar's resources under `policy`, for `pod` as it was submitted;
/// `injected` names every container the selected SidecarSets inject.
pub(super) fn compute(
    policy: &ResourcesPolicy,
    pod: &Pod,
    injected: &BTreeSet<&str>,
) -> Result<ResourceRequirements, String> {
    let pattern = name_pattern(policy)?;
    let targets = targets(pod, &pattern, injected);
    if targets.is_empty() {
        return Err(format!(
            "no containers match the regex pattern {:?}",
            pattern_text(policy)
        ));
    }
    let totals = Totals::of(&targets, policy.target_containers_mode)?;
    let expressions = &policy.resources_expr;
    let limits = resource_list(expressions.limits.as_ref(), |resource| {
        totals.limit(resource)
    })?;
    let requests = resource_list(expressions.requests.as_ref(), |resource| {
        Some(totals.request(resource))
    })?;
    Ok(ResourceRequirements {
        limits,
        requests,
        ..ResourceRequirements::default()
    })
}

fn pattern_text(policy: &ResourcesPolicy) -> &str {
    policy
        .target_containers_name_regex
        .as_deref()
        .unwrap_or(".*")
}

/// As Go's `regexp`: RE2 syntax, ASCII `\d \w \s`, unanchored. (Unicode
/// classes such as `\pL`, which Go also knows, are refused; container
/// names are ASCII anyway.)
pub(super) fn name_pattern(policy: &ResourcesPolicy) -> Result<regex_lite::Regex, String> {
    regex_lite::Regex::new(pattern_text(policy)).map_err(|e| format!("invalid regex pattern: {e}"))
}

fn targets<'p>(
    pod: &'p Pod,
    pattern: &regex_lite::Regex,
    injected: &BTreeSet<&str>,
) -> Vec<&'p Container> {
    let Some(spec) = pod.spec.as_ref() else {
        return Vec::new();
    };
    let native_sidecars = spec
        .init_containers
        .iter()
        .flatten()
        .filter(|c| c.restart_policy.as_deref() == Some("Always"));
    native_sidecars
        .chain(&spec.containers)
        .filter(|c| !injected.contains(c.name.as_str()))
        .filter(|c| pattern.is_match(&c.name))
        .collect()
}

/// The targets' cpu and memory, summed or the largest.
#[derive(Default)]
struct Totals {
    limits: BTreeMap<&'static str, Quantity>,
    requests: BTreeMap<&'static str, Quantity>,
}

impl Totals {
    fn of(targets: &[&Container], mode: TargetContainersMode) -> Result<Self, String> {
        let mut totals = Self::default();
        for resource in [CPU, MEMORY] {
            let limits = amounts(targets, resource, |r| r.limits.as_ref())?;
            // One container without a limit makes the whole unlimited.
            if limits.iter().all(Option::is_some) {
                let limit = combine(limits.into_iter().flatten(), mode);
                totals.limits.insert(resource, limit);
            }
            let requests = amounts(targets, resource, |r| r.requests.as_ref())?;
            let request = combine(requests.into_iter().flatten(), mode);
            // A zero total request counts as none (Go's zero Quantity).
            if !request.is_zero() {
                totals.requests.insert(resource, request);
            }
        }
        Ok(totals)
    }

    fn limit(&self, resource: &str) -> Option<Quantity> {
        self.limits.get(resource).copied()
    }

    fn request(&self, resource: &str) -> Quantity {
        self.requests
            .get(resource)
            .copied()
            .unwrap_or(Quantity::ZERO)
    }
}

/// Each target's value of `resource` in the list `pick` chooses.
fn amounts(
    targets: &[&Container],
    resource: &str,
    pick: fn(&ResourceRequirements) -> Option<&BTreeMap<String, ApiQuantity>>,
) -> Result<Vec<Option<Quantity>>, String> {
    targets
        .iter()
        .map(|container| {
            let value = container.resources.as_ref().and_then(pick)?.get(resource)?;
            Some(Quantity::parse(&value.0).map_err(|e| {
                format!(
                    "container {:?}: {resource} {:?}: {e}",
                    container.name, value.0
                )
            }))
        })
        .map(Option::transpose)
        .collect()
}

/// A sum starts from a zero that takes the first value's notation; the
/// largest keeps the first of equal values.
fn combine(values: impl Iterator<Item = Quantity>, mode: TargetContainersMode) -> Quantity {
    match mode {
        TargetContainersMode::Sum => values.fold(Quantity::from_units(0), |sum, q| sum.add(&q)),
        TargetContainersMode::Max => values
            .reduce(|largest, q| if q > largest { q } else { largest })
            .unwrap_or(Quantity::ZERO),
    }
}

/// The cpu and memory entries the expressions give; `aggregate` is `None`
/// for an unlimited total, which leaves that entry out.
fn resource_list(
    expressions: Option<&ResourceExprs>,
    aggregate: impl Fn(&str) -> Option<Quantity>,
) -> Result<Option<BTreeMap<String, ApiQuantity>>, String> {
    let Some(expressions) = expressions else {
        return Ok(None);
    };
    let mut list = BTreeMap::new();
    for (resource, expression) in [(CPU, &expressions.cpu), (MEMORY, &expressions.memory)] {
        let Some(expression) = expression.as_deref().filter(|e| !e.is_empty()) else {
            continue;
        };
        let Some(total) = aggregate(resource) else {
            continue;
        };
        let value = evaluate_resource(expression, total)
            .map_err(|e| format!("{resource} expression {expression:?}: {e}"))?;
        list.insert(resource.to_owned(), ApiQuantity(value.to_string()));
    }
    Ok((!list.is_empty()).then_some(list))
}

/// OpenKruise names the variable `memory` when the expression mentions
/// that word and `cpu` otherwise, whichever resource it computes; a plain
/// number is cores (in thousandths) for `cpu` and bytes for `memory`.
fn evaluate_resource(expression: &str, total: Quantity) -> Result<Quantity, String> {
    let variable = if mentions_word(expression, MEMORY) {
        MEMORY
    } else {
        CPU
    };
    Ok(
        match evaluate(expression, variable, Value::Quantity(total))? {
            Value::Quantity(q) => q,
            Value::Number(n) if variable == CPU => Quantity::from_milli(go_int64(n * 1000.0)),
            Value::Number(n) => Quantity::from_units(go_int64(n)),
        },
    )
}

/// `\bword\b`, word characters being ASCII letters, digits and `_`.
fn mentions_word(text: &str, word: &str) -> bool {
    let is_word = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
    text.match_indices(word).any(|(at, _)| {
        !is_word(text[..at].chars().next_back()) && !is_word(text[at + word.len()..].chars().next())
    })
}

/// What OpenKruise's SidecarSet webhook refuses in a sidecar's
/// `resourcesPolicy` (at `field`, the sidecar's path).
pub(super) fn check(sidecar: &SidecarContainer, field: &str, init: bool, out: &mut Vec<Violation>) {
    let Some(policy) = &sidecar.resources_policy else {
        return;
    };
    let field = format!("{field}.resourcesPolicy");
    if init && !sidecar.is_native_sidecar() {
        out.push(Violation::new(
            field.as_str(),
            "Invalid value: resourcesPolicy is only supported for containers with RestartPolicy Always",
        ));
    }
    let resources = sidecar.container.resources.as_ref();
    let has_any =
        |list: Option<&BTreeMap<String, ApiQuantity>>| list.is_some_and(|l| !l.is_empty());
    if resources.is_some_and(|r| has_any(r.limits.as_ref()) || has_any(r.requests.as_ref())) {
        out.push(Violation::new(
            field,
            "Invalid value: resourcesPolicy and resources cannot be configured together",
        ));
        return;
    }
    match pattern_text(policy) {
        "" => out.push(Violation::new(
            format!("{field}.targetContainersNameRegex"),
            "Required value: invalid empty regex",
        )),
        _ => {
            if let Err(e) = name_pattern(policy) {
                out.push(Violation::new(
                    format!("{field}.targetContainersNameRegex"),
                    format!("Invalid value: {e}"),
                ));
            }
        }
    }
    let expressions = &policy.resources_expr;
    if expressions.limits.is_none() && expressions.requests.is_none() {
        out.push(Violation::new(
            format!("{field}.resourcesExpr"),
            "Invalid value: at least one of limits or requests must be configured",
        ));
        return;
    }
    let lists = [
        ("limits", &expressions.limits),
        ("requests", &expressions.requests),
    ];
    for (list, exprs) in lists {
        let Some(exprs) = exprs else { continue };
        for (resource, expression) in [(CPU, &exprs.cpu), (MEMORY, &exprs.memory)] {
            let Some(expression) = expression.as_deref().filter(|e| !e.is_empty()) else {
                continue;
            };
            if let Err(e) = evaluate(expression, resource, Value::Number(1.0)) {
                out.push(Violation::new(
                    format!("{field}.resourcesExpr.{list}.{resource}"),
                    format!("Invalid value: {expression:?}: invalid expression: {e}"),
                ));
            }
        }
    }
}
