//! Kubernetes label selectors: matching, emptiness and the text form.
//!
//! A `LabelSelector` is the AND of its `matchLabels` pairs and its
//! `matchExpressions` requirements. Keys and values are checked the way the
//! API server's selector conversion checks them, so a selector that
//! Kubernetes would refuse is an error here too rather than a silent miss.
//!
//! A *missing* selector (`None`) is the caller's business: OpenKruise treats
//! it as matching nothing, while an *empty* one (`{}`) matches everything
//! (see [`is_empty`]).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

/// Why a selector cannot be evaluated.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    #[error(
        "key {key:?}: {operator:?} is not a valid label selector operator (In, NotIn, Exists, DoesNotExist)"
    )]
    UnknownOperator { key: String, operator: String },
    #[error("key {key:?}: operator {operator} needs at least one value")]
    ValuesRequired { key: String, operator: String },
    #[error("key {key:?}: operator {operator} takes no values")]
    ValuesForbidden { key: String, operator: String },
    #[error("invalid label key {key:?}: {reason}")]
    InvalidKey { key: String, reason: &'static str },
    #[error("key {key:?}: invalid label value {value:?}: {reason}")]
    InvalidValue {
        key: String,
        value: String,
        reason: &'static str,
    },
}

/// One requirement, checked; borrowed from the selector.
#[derive(Debug)]
enum Requirement<'a> {
    Equals(&'a str, &'a str),
    In(&'a str, &'a [String]),
    NotIn(&'a str, &'a [String]),
    Exists(&'a str),
    DoesNotExist(&'a str),
}

impl Requirement<'_> {
    fn key(&self) -> &str {
        match self {
            Self::Equals(key, _)
            | Self::In(key, _)
            | Self::NotIn(key, _)
            | Self::Exists(key)
            | Self::DoesNotExist(key) => key,
        }
    }

    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        match self {
            Self::Equals(key, value) => labels.get(*key).is_some_and(|v| v == value),
            Self::In(key, values) => labels.get(*key).is_some_and(|v| values.contains(v)),
            // A pod without the label is "not in" any set.
            Self::NotIn(key, values) => labels.get(*key).is_none_or(|v| !values.contains(v)),
            Self::Exists(key) => labels.contains_key(*key),
            Self::DoesNotExist(key) => !labels.contains_key(*key),
        }
    }

    /// The apimachinery text form of one requirement.
    fn render(&self) -> String {
        let set = |values: &[String]| {
            let mut sorted: Vec<&str> = values.iter().map(String::as_str).collect();
            crate::ordered::sort(&mut sorted);
            sorted.join(",")
        };
        match self {
            Self::Equals(key, value) => format!("{key}={value}"),
            Self::In(key, values) => format!("{key} in ({})", set(values)),
            Self::NotIn(key, values) => format!("{key} notin ({})", set(values)),
            Self::Exists(key) => (*key).to_owned(),
            Self::DoesNotExist(key) => format!("!{key}"),
        }
    }
}

/// Whether `labels` satisfy every part of `selector`.
///
/// An empty selector matches everything. The whole selector is validated
/// first, so an invalid requirement is reported even when an earlier one
/// already fails to match.
pub fn matches(
    selector: &LabelSelector,
    labels: &BTreeMap<String, String>,
) -> Result<bool, SelectorError> {
    let requirements = requirements(selector)?;
    Ok(requirements.iter().all(|r| r.matches(labels)))
}

/// True when the selector has neither `matchLabels` nor `matchExpressions`
/// (it then matches every object).
pub fn is_empty(selector: &LabelSelector) -> bool {
    selector
        .match_labels
        .as_ref()
        .is_none_or(BTreeMap::is_empty)
        && selector
            .match_expressions
            .as_ref()
            .is_none_or(Vec::is_empty)
}

/// The selector's keys, values and operators are valid.
pub fn validate(selector: &LabelSelector) -> Result<(), SelectorError> {
    requirements(selector).map(drop)
}

/// Whether two selectors may select the same object, by OpenKruise's
/// heuristic (`IsSelectorOverlapping` in its `pkg/util/selector.go`): they
/// are disjoint when, in either direction, a key the first constrains to
/// some values (or requires with `Exists`) meets, in the second, another
/// value, an `In` set sharing none of them, a `NotIn` set holding all of
/// them, or `DoesNotExist` — or the second requires with `Exists` a key the
/// first does not constrain. Anything else overlaps, `a=b` and `c=d`
/// included.
pub fn overlaps(a: &LabelSelector, b: &LabelSelector) -> bool {
    !(excludes(a, b) || excludes(b, a))
}

/// What a selector's positive terms allow per key: the values of
/// `matchLabels` and `In`, or any value (`None`) for `Exists`.
fn allowed_values(selector: &LabelSelector) -> BTreeMap<&str, Option<Vec<&str>>> {
    let mut allowed: BTreeMap<&str, Option<Vec<&str>>> = BTreeMap::new();
    for (key, value) in selector.match_labels.iter().flatten() {
        allowed.insert(key, Some(vec![value]));
    }
    for expression in selector.match_expressions.iter().flatten() {
        let key = expression.key.as_str();
        match expression.operator.as_str() {
            "In" => {
                if let Some(values) = allowed.entry(key).or_insert_with(|| Some(Vec::new())) {
                    values.extend(expression.values.iter().flatten().map(String::as_str));
                }
            }
            "Exists" => {
                allowed.insert(key, None);
            }
            _ => {}
        }
    }
    allowed
}

/// `b` asks for something no object `a` selects could have (one direction
/// of [`overlaps`]).
fn excludes(a: &LabelSelector, b: &LabelSelector) -> bool {
    let allowed = allowed_values(a);
    let allows = |key: &str, value: &str| match allowed.get(key) {
        Some(Some(values)) => values.contains(&value),
        _ => true,
    };
    if b.match_labels
        .iter()
        .flatten()
        .any(|(key, value)| !allows(key, value))
    {
        return true;
    }
    b.match_expressions.iter().flatten().any(|expression| {
        let key = expression.key.as_str();
        let values: Vec<&str> = expression
            .values
            .iter()
            .flatten()
            .map(String::as_str)
            .collect();
        match (expression.operator.as_str(), allowed.get(key)) {
            ("In", Some(Some(constrained))) => !constrained.iter().any(|v| values.contains(v)),
            ("NotIn", Some(Some(constrained))) => constrained.iter().all(|v| values.contains(v)),
            ("Exists", None) | ("DoesNotExist", Some(_)) => true,
            _ => false,
        }
    })
}

/// The selector in the text form `kubectl -l` accepts and apimachinery's
/// `LabelSelectorAsSelector(..).String()` prints, e.g.
/// `app=nginx,tier in (a,b)`: requirements sorted by key (`matchLabels`
/// before expressions on the same key), set values sorted, `key` for
/// `Exists`, `!key` for `DoesNotExist`. An empty selector gives `""`.
///
/// The selector is not validated; an unknown operator is skipped.
pub fn to_selector_string(selector: &LabelSelector) -> String {
    let mut parts: Vec<Requirement<'_>> = match_label_requirements(selector).collect();
    parts.extend(
        selector
            .match_expressions
            .iter()
            .flatten()
            .filter_map(|expression| expression_requirement(expression).ok()),
    );
    crate::ordered::sort_by(&mut parts, |a, b| a.key().cmp(b.key()));
    parts
        .iter()
        .map(Requirement::render)
        .collect::<Vec<_>>()
        .join(",")
}

fn requirements(selector: &LabelSelector) -> Result<Vec<Requirement<'_>>, SelectorError> {
    let mut checked = Vec::new();
    for requirement in match_label_requirements(selector) {
        if let Requirement::Equals(key, value) = requirement {
            validate_label_key(key)?;
            validate_value(key, value)?;
        }
        checked.push(requirement);
    }
    for expression in selector.match_expressions.iter().flatten() {
        validate_label_key(&expression.key)?;
        let requirement = expression_requirement(expression)?;
        if let Requirement::In(key, values) | Requirement::NotIn(key, values) = requirement {
            for value in values {
                validate_value(key, value)?;
            }
        }
        checked.push(requirement);
    }
    Ok(checked)
}

fn match_label_requirements(selector: &LabelSelector) -> impl Iterator<Item = Requirement<'_>> {
    selector
        .match_labels
        .iter()
        .flatten()
        .map(|(key, value)| Requirement::Equals(key, value))
}

fn expression_requirement(
    expression: &LabelSelectorRequirement,
) -> Result<Requirement<'_>, SelectorError> {
    let key = expression.key.as_str();
    let values = expression.values.as_deref().unwrap_or_default();
    let operator = expression.operator.as_str();
    let error_values = |required: bool| {
        let (key, operator) = (key.to_owned(), operator.to_owned());
        if required {
            SelectorError::ValuesRequired { key, operator }
        } else {
            SelectorError::ValuesForbidden { key, operator }
        }
    };
    match operator {
        "In" | "NotIn" if values.is_empty() => Err(error_values(true)),
        "Exists" | "DoesNotExist" if !values.is_empty() => Err(error_values(false)),
        "In" => Ok(Requirement::In(key, values)),
        "NotIn" => Ok(Requirement::NotIn(key, values)),
        "Exists" => Ok(Requirement::Exists(key)),
        "DoesNotExist" => Ok(Requirement::DoesNotExist(key)),
        _ => Err(SelectorError::UnknownOperator {
            key: key.to_owned(),
            operator: operator.to_owned(),
        }),
    }
}

/// Whether `key` is a valid qualified name (`[prefix/]name`), the syntax of
/// label and annotation keys.
pub(crate) fn is_qualified_name(key: &str) -> bool {
    validate_label_key(key).is_ok()
}

/// A label key is a qualified name: `[prefix/]name`, the prefix a DNS
/// subdomain of at most 253 characters, the name at most 63 characters.
/// A label (or annotation) key: a qualified name with an optional DNS
/// subdomain prefix.
pub fn validate_label_key(key: &str) -> Result<(), SelectorError> {
    let invalid = |reason| SelectorError::InvalidKey {
        key: key.to_owned(),
        reason,
    };
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix {
        if prefix.is_empty() || prefix.len() > 253 {
            return Err(invalid("the prefix must be 1 to 253 characters"));
        }
        if !is_dns_subdomain(prefix) {
            return Err(invalid("the prefix must be a lowercase DNS subdomain"));
        }
    }
    if name.is_empty() || name.len() > 63 {
        return Err(invalid("the name must be 1 to 63 characters"));
    }
    if !is_label_token(name) {
        return Err(invalid(
            "the name must be alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric",
        ));
    }
    Ok(())
}

/// A label value is empty or a name-like token of at most 63 characters.
fn validate_value(key: &str, value: &str) -> Result<(), SelectorError> {
    let invalid = |reason| SelectorError::InvalidValue {
        key: key.to_owned(),
        value: value.to_owned(),
        reason,
    };
    if value.len() > 63 {
        return Err(invalid("at most 63 characters"));
    }
    if !value.is_empty() && !is_label_token(value) {
        return Err(invalid(
            "alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric",
        ));
    }
    Ok(())
}

fn is_label_token(text: &str) -> bool {
    let bytes = text.as_bytes();
    let inner_ok = |b: &u8| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.');
    match (bytes.first(), bytes.last()) {
        (Some(first), Some(last)) => {
            first.is_ascii_alphanumeric()
                && last.is_ascii_alphanumeric()
                && bytes.iter().all(inner_ok)
        }
        _ => false,
    }
}

/// DNS-1123 subdomain syntax (no length check): labels separated by '.'.
pub(crate) fn is_dns_subdomain(text: &str) -> bool {
    text.split('.').all(is_dns_label)
}

/// DNS-1123 label syntax (no length check): lowercase alphanumerics and '-',
/// starting and ending with an alphanumeric.
pub(crate) fn is_dns_label(label: &str) -> bool {
    let bytes = label.as_bytes();
    let lower_alnum = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    match (bytes.first(), bytes.last()) {
        (Some(first), Some(last)) => {
            lower_alnum(first)
                && lower_alnum(last)
                && bytes.iter().all(|b| lower_alnum(b) || *b == b'-')
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn parse(selector: serde_json::Value) -> LabelSelector {
        serde_json::from_value(selector).unwrap()
    }

    /// OpenKruise's `TestSelectorConflict` truth table, and both directions
    /// of each pair (the answer is symmetric).
    #[test]
    fn overlap_follows_openkruises_heuristic() {
        let cases = [
            (
                serde_json::json!({"matchLabels": {"a": "h"}}),
                serde_json::json!({"matchLabels": {"a": "h"}}),
                true,
            ),
            (
                serde_json::json!({"matchLabels": {"a": "h"}}),
                serde_json::json!({"matchLabels": {"a": "i"}}),
                false,
            ),
            (
                serde_json::json!({"matchLabels": {"a": "h"}}),
                serde_json::json!({"matchLabels": {"b": "i"}}),
                true,
            ),
            (
                serde_json::json!({"matchLabels": {"a": "h", "b": "i", "c": "j"}}),
                serde_json::json!({"matchLabels": {"a": "h", "b": "x", "c": "j"}}),
                false,
            ),
            (
                serde_json::json!({"matchLabels": {"a": "h"}}),
                serde_json::json!({"matchExpressions": [{"key": "a", "operator": "In", "values": ["h", "i", "j"]}]}),
                true,
            ),
            (
                serde_json::json!({"matchLabels": {"a": "h"}}),
                serde_json::json!({"matchExpressions": [{"key": "a", "operator": "In", "values": ["i", "j"]}]}),
                false,
            ),
            (
                serde_json::json!({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["h", "i"]}]}),
                serde_json::json!({"matchLabels": {"a": "h"}}),
                false,
            ),
            (
                serde_json::json!({"matchLabels": {"a": "h"}}),
                serde_json::json!({"matchExpressions": [{"key": "a", "operator": "Exists"}]}),
                true,
            ),
            (
                serde_json::json!({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}),
                serde_json::json!({"matchLabels": {"a": "h"}}),
                false,
            ),
            // Exists on a key the other does not constrain: disjoint, by the heuristic.
            (
                serde_json::json!({"matchLabels": {"b": "x"}}),
                serde_json::json!({"matchExpressions": [{"key": "a", "operator": "Exists"}]}),
                false,
            ),
        ];
        for (index, (a, b, want)) in cases.into_iter().enumerate() {
            let (a, b) = (parse(a), parse(b));
            assert_eq!(overlaps(&a, &b), want, "case {index}");
            assert_eq!(overlaps(&b, &a), want, "case {index}, reversed");
        }
    }

    #[test]
    fn validate_names_the_bad_requirement() {
        assert!(validate(&parse(serde_json::json!({"matchLabels": {"app": "x"}}))).is_ok());
        let bad =
            parse(serde_json::json!({"matchExpressions": [{"key": "a", "operator": "Near"}]}));
        assert!(matches!(
            validate(&bad),
            Err(SelectorError::UnknownOperator { .. })
        ));
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn expression(key: &str, operator: &str, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.to_owned(),
            operator: operator.to_owned(),
            values: if values.is_empty() {
                None
            } else {
                Some(values.iter().map(|v| (*v).to_owned()).collect())
            },
        }
    }

    fn selector(
        match_labels: &[(&str, &str)],
        expressions: Vec<LabelSelectorRequirement>,
    ) -> LabelSelector {
        LabelSelector {
            match_labels: (!match_labels.is_empty()).then(|| labels(match_labels)),
            match_expressions: (!expressions.is_empty()).then_some(expressions),
        }
    }

    #[test]
    fn empty_selector_matches_everything_and_is_empty() {
        let empty = LabelSelector::default();
        assert!(is_empty(&empty));
        assert!(matches(&empty, &labels(&[])).unwrap());
        assert!(matches(&empty, &labels(&[("a", "b")])).unwrap());
        let explicit_empty = LabelSelector {
            match_labels: Some(BTreeMap::new()),
            match_expressions: Some(Vec::new()),
        };
        assert!(is_empty(&explicit_empty));
        assert!(!is_empty(&selector(&[("a", "b")], vec![])));
    }

    #[test]
    fn match_labels_are_anded() {
        let s = selector(&[("app", "web"), ("tier", "front")], vec![]);
        assert!(
            matches(
                &s,
                &labels(&[("app", "web"), ("tier", "front"), ("x", "y")])
            )
            .unwrap()
        );
        assert!(!matches(&s, &labels(&[("app", "web")])).unwrap());
        assert!(!matches(&s, &labels(&[("app", "web"), ("tier", "back")])).unwrap());
    }

    #[test]
    fn each_operator() {
        let pod = labels(&[("app", "web"), ("env", "prod")]);
        let check = |op: &str, key: &str, values: &[&str]| {
            matches(&selector(&[], vec![expression(key, op, values)]), &pod).unwrap()
        };
        assert!(check("In", "app", &["web", "api"]));
        assert!(!check("In", "app", &["api"]));
        assert!(!check("In", "missing", &["web"]));
        assert!(check("NotIn", "app", &["api"]));
        assert!(!check("NotIn", "app", &["web"]));
        assert!(
            check("NotIn", "missing", &["web"]),
            "absent label is not in any set"
        );
        assert!(check("Exists", "env", &[]));
        assert!(!check("Exists", "missing", &[]));
        assert!(check("DoesNotExist", "missing", &[]));
        assert!(!check("DoesNotExist", "env", &[]));
    }

    #[test]
    fn labels_and_expressions_are_anded() {
        let s = selector(
            &[("app", "web")],
            vec![expression("env", "NotIn", &["dev"])],
        );
        assert!(matches(&s, &labels(&[("app", "web"), ("env", "prod")])).unwrap());
        assert!(!matches(&s, &labels(&[("app", "web"), ("env", "dev")])).unwrap());
        assert!(!matches(&s, &labels(&[("app", "api")])).unwrap());
    }

    #[test]
    fn operator_value_rules_are_errors() {
        let pod = labels(&[]);
        let err = |e: LabelSelectorRequirement| matches(&selector(&[], vec![e]), &pod).unwrap_err();
        assert_eq!(
            err(expression("app", "In", &[])),
            SelectorError::ValuesRequired {
                key: "app".into(),
                operator: "In".into()
            }
        );
        assert_eq!(
            err(expression("app", "NotIn", &[])),
            SelectorError::ValuesRequired {
                key: "app".into(),
                operator: "NotIn".into()
            }
        );
        assert_eq!(
            err(expression("app", "Exists", &["x"])),
            SelectorError::ValuesForbidden {
                key: "app".into(),
                operator: "Exists".into()
            }
        );
        assert_eq!(
            err(expression("app", "DoesNotExist", &["x"])),
            SelectorError::ValuesForbidden {
                key: "app".into(),
                operator: "DoesNotExist".into()
            }
        );
        let unknown = err(expression("somekey", "badOp", &[]));
        assert_eq!(
            unknown,
            SelectorError::UnknownOperator {
                key: "somekey".into(),
                operator: "badOp".into()
            }
        );
        assert!(unknown.to_string().contains("badOp"), "{unknown}");
        // Gt/Lt exist for node selectors, not for label selectors.
        assert!(matches!(
            err(expression("n", "Gt", &["1"])),
            SelectorError::UnknownOperator { .. }
        ));
    }

    #[test]
    fn invalid_requirement_is_reported_even_after_a_mismatch() {
        let s = selector(&[("app", "web")], vec![expression("x", "Nope", &[])]);
        assert!(matches(&s, &labels(&[("app", "other")])).is_err());
    }

    #[test]
    fn keys_and_values_are_validated() {
        let pod = labels(&[]);
        let check = |k: &str, v: &str| matches(&selector(&[(k, v)], vec![]), &pod);
        assert!(check("app", "").is_ok(), "empty value is allowed");
        assert!(check("kubernetes.io/metadata.name", "default").is_ok());
        assert!(check("a_b.c-d", "A.b_c-9").is_ok());
        assert!(matches!(
            check("", "x"),
            Err(SelectorError::InvalidKey { .. })
        ));
        assert!(matches!(
            check("has space", "x"),
            Err(SelectorError::InvalidKey { .. })
        ));
        assert!(matches!(
            check("-lead", "x"),
            Err(SelectorError::InvalidKey { .. })
        ));
        assert!(matches!(
            check("Upper.Case/name", "x"),
            Err(SelectorError::InvalidKey { .. })
        ));
        assert!(matches!(
            check("a/b/c", "x"),
            Err(SelectorError::InvalidKey { .. })
        ));
        assert!(matches!(
            check(&"k".repeat(64), "x"),
            Err(SelectorError::InvalidKey { .. })
        ));
        assert!(matches!(
            check("app", "trailing-"),
            Err(SelectorError::InvalidValue { .. })
        ));
        assert!(matches!(
            check("app", &"v".repeat(64)),
            Err(SelectorError::InvalidValue { .. })
        ));
        let bad_in = selector(&[], vec![expression("app", "In", &["ok", "not ok"])]);
        assert!(matches!(
            matches(&bad_in, &pod),
            Err(SelectorError::InvalidValue { .. })
        ));
    }

    #[test]
    fn selector_string_matches_apimachinery_format() {
        let s = selector(
            &[("app", "nginx")],
            vec![
                expression("tier", "In", &["b", "a"]),
                expression("env", "NotIn", &["prod", "dev"]),
                expression("canary", "Exists", &[]),
                expression("legacy", "DoesNotExist", &[]),
            ],
        );
        assert_eq!(
            to_selector_string(&s),
            "app=nginx,canary,env notin (dev,prod),!legacy,tier in (a,b)"
        );
        assert_eq!(to_selector_string(&LabelSelector::default()), "");
        assert_eq!(
            to_selector_string(&selector(&[("b", "2"), ("a", "1")], vec![])),
            "a=1,b=2"
        );
    }

    #[test]
    fn match_labels_come_before_expressions_on_the_same_key() {
        let s = selector(&[("app", "web")], vec![expression("app", "In", &["web"])]);
        assert_eq!(to_selector_string(&s), "app=web,app in (web)");
    }
}
