//! What the validating policies report: one violation per problem, each
//! naming its field, as Kubernetes' own field errors do; and the checks
//! several kinds share.

use std::collections::BTreeSet;
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kruise_api::common::{UpdatePriorityStrategy, UpdateScatterTerm};

use crate::selector;

/// One reason an object is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The field, as a path: `spec.targets.includedNamespaces.list[0].name`.
    pub field: String,
    pub message: String,
}

impl Violation {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// Valid and not empty (an empty selector would select everything);
/// `kind` names the object in the message, as OpenKruise's does.
pub(crate) fn check_selector(
    selector: &LabelSelector,
    field: &str,
    kind: &str,
    out: &mut Vec<Violation>,
) {
    if let Err(error) = selector::validate(selector) {
        out.push(Violation::new(field, format!("Invalid value: {error}")));
    }
    if selector::is_empty(selector) {
        out.push(Violation::new(
            field,
            format!("Invalid value: empty selector is not valid for {kind}"),
        ));
    }
}

/// Kubernetes' `ValidatePositiveIntOrPercent`: an integer >= 0, or digits
/// followed by `%`.
pub(crate) fn positive_int_or_percent_error(value: &IntOrString) -> Option<String> {
    match value {
        IntOrString::Int(n) if *n < 0 => Some(format!(
            "Invalid value: {n}: must be greater than or equal to 0"
        )),
        IntOrString::Int(_) => None,
        IntOrString::String(text) => {
            let digits = text.strip_suffix('%').unwrap_or_default();
            let valid = !digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit());
            (!valid).then(|| {
                format!("Invalid value: {text:?}: must be an integer or percentage (e.g '5%')")
            })
        }
    }
}

/// `priorityStrategy` (shared by CloneSet and SidecarSet): weight or order
/// terms, not both; weights in [0, 100] with valid selectors; order keys
/// not empty.
pub(crate) fn check_priority(
    priority: Option<&UpdatePriorityStrategy>,
    field: &str,
    kind: &str,
    out: &mut Vec<Violation>,
) {
    let Some(priority) = priority else {
        return;
    };
    let field = format!("{field}.priorityStrategy");
    if !priority.weight_priority.is_empty() && !priority.order_priority.is_empty() {
        out.push(Violation::new(
            &field,
            "Invalid value: only one of weightPriority and orderPriority can be used",
        ));
    }
    for (index, term) in priority.weight_priority.iter().enumerate() {
        let term_field = format!("{field}.weightPriority[{index}]");
        if !(0..=100).contains(&term.weight) {
            out.push(Violation::new(
                format!("{term_field}.weight"),
                format!("Invalid value: {}: weight must be in [0, 100]", term.weight),
            ));
        }
        check_selector(
            &term.match_selector,
            &format!("{term_field}.matchSelector"),
            kind,
            out,
        );
    }
    for (index, term) in priority.order_priority.iter().enumerate() {
        if term.ordered_key.is_empty() {
            out.push(Violation::new(
                format!("{field}.orderPriority[{index}].orderedKey"),
                "Required value: orderedKey cannot be empty",
            ));
        }
    }
}

/// `scatterStrategy`: no empty key or value, no term twice.
pub(crate) fn check_scatter(terms: &[UpdateScatterTerm], field: &str, out: &mut Vec<Violation>) {
    let mut seen = BTreeSet::new();
    for (index, term) in terms.iter().enumerate() {
        let term_field = format!("{field}.scatterStrategy[{index}]");
        if term.key.is_empty() || term.value.is_empty() {
            out.push(Violation::new(
                term_field,
                "Required value: key and value cannot be empty",
            ));
        } else if !seen.insert((&term.key, &term.value)) {
            out.push(Violation::new(
                term_field,
                format!("Duplicate value: {}={}", term.key, term.value),
            ));
        }
    }
}
