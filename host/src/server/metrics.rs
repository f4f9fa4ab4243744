//! Prometheus metrics of the policy endpoints, served at `GET /metrics` on
//! the probe listener. policy-server has no Prometheus endpoint (it pushes
//! OpenTelemetry), so the names are ours, in the same spirit as its
//! `kubewarden_policy_evaluations_total` and latency histogram.

use std::time::Duration;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use serde_json::Value;

use crate::admission::TIMEOUT_MESSAGE;

#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)] // label values are lower case on the wire
pub enum Outcome {
    accepted,
    rejected,
    mutated,
    error,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EvaluationLabels {
    policy: String,
    outcome: Outcome,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PolicyLabel {
    policy: String,
}

/// Evaluations take tens to hundreds of microseconds; the default buckets
/// (5 ms and up) would put them all in the first one.
const LATENCY_BUCKETS: [f64; 14] = [
    0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.1, 0.5,
    1.0, 2.5,
];

fn latency_histogram() -> Histogram {
    Histogram::new(LATENCY_BUCKETS)
}

#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    evaluations: Family<EvaluationLabels, Counter>,
    latency: Family<PolicyLabel, Histogram, fn() -> Histogram>,
    errors: Family<PolicyLabel, Counter>,
    timeouts: Family<PolicyLabel, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("kruise_wasm");
        let evaluations = Family::<EvaluationLabels, Counter>::default();
        let latency = Family::<PolicyLabel, Histogram, fn() -> Histogram>::new_with_constructor(
            latency_histogram,
        );
        let errors = Family::<PolicyLabel, Counter>::default();
        let timeouts = Family::<PolicyLabel, Counter>::default();
        registry.register(
            "policy_evaluations",
            "Policy evaluations by outcome",
            evaluations.clone(),
        );
        registry.register(
            "policy_evaluation_latency_seconds",
            "Time spent evaluating a policy, waiting for a worker excluded",
            latency.clone(),
        );
        registry.register(
            "policy_errors",
            "Evaluations that failed (trap, bad output, timeout, memory cap)",
            errors.clone(),
        );
        registry.register(
            "policy_timeouts",
            "Evaluations stopped at their deadline",
            timeouts.clone(),
        );
        Self {
            registry,
            evaluations,
            latency,
            errors,
            timeouts,
        }
    }
}

impl Metrics {
    /// Records one evaluation from the AdmissionResponse it produced.
    pub fn record(&self, policy: &str, response: &Value, elapsed: Duration) {
        let outcome = outcome_of(response);
        let label = PolicyLabel {
            policy: policy.to_owned(),
        };
        self.evaluations
            .get_or_create(&EvaluationLabels {
                policy: policy.to_owned(),
                outcome,
            })
            .inc();
        self.latency
            .get_or_create(&label)
            .observe(elapsed.as_secs_f64());
        if outcome == Outcome::error {
            self.errors.get_or_create(&label).inc();
            if status_message(response) == Some(TIMEOUT_MESSAGE) {
                self.timeouts.get_or_create(&label).inc();
            }
        }
    }

    /// The text exposition format.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        if prometheus_client::encoding::text::encode(&mut text, &self.registry).is_err() {
            // Writing to a String cannot fail; an empty scrape is the
            // least surprising answer if it ever did.
            text.clear();
        }
        text
    }
}

fn status_message(response: &Value) -> Option<&str> {
    response.pointer("/status/message").and_then(Value::as_str)
}

/// A host-side failure is a rejection with code 500 (how policy-server
/// reports it inside the 200); a mutation is an accepted answer with a patch.
pub fn outcome_of(response: &Value) -> Outcome {
    let allowed = response.get("allowed").and_then(Value::as_bool) == Some(true);
    let code = response.pointer("/status/code").and_then(Value::as_u64);
    match (allowed, code) {
        (false, Some(500)) => Outcome::error,
        (false, _) => Outcome::rejected,
        (true, _) if response.get("patch").is_some_and(|p| !p.is_null()) => Outcome::mutated,
        (true, _) => Outcome::accepted,
    }
}

/// The value of one series (`name{labels}`) in a scrape, for checks by
/// exact value.
pub fn sample(scrape: &str, series: &str) -> Option<f64> {
    scrape.lines().find_map(|line| {
        let (name, value) = line.rsplit_once(' ')?;
        (name == series).then(|| value.parse().ok())?
    })
}

/// The evaluations counter's series name for a policy and an outcome.
pub fn evaluation_series(policy: &str, outcome: &str) -> String {
    format!("kruise_wasm_policy_evaluations_total{{policy=\"{policy}\",outcome=\"{outcome}\"}}")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn outcomes_are_read_from_the_response() {
        assert_eq!(outcome_of(&json!({"allowed": true})), Outcome::accepted);
        assert_eq!(
            outcome_of(&json!({"allowed": true, "patch": "W10="})),
            Outcome::mutated
        );
        assert_eq!(
            outcome_of(&json!({"allowed": false, "status": {"code": 400}})),
            Outcome::rejected
        );
        assert_eq!(
            outcome_of(&json!({"allowed": false, "status": {"code": 500}})),
            Outcome::error
        );
    }

    #[test]
    fn a_timeout_counts_as_an_error_and_a_timeout() {
        let metrics = Metrics::default();
        let timeout =
            json!({"allowed": false, "status": {"code": 500, "message": TIMEOUT_MESSAGE}});
        metrics.record("p", &timeout, Duration::from_micros(300));
        metrics.record("p", &json!({"allowed": true}), Duration::from_micros(30));
        let scrape = metrics.encode();
        assert_eq!(sample(&scrape, &evaluation_series("p", "error")), Some(1.0));
        assert_eq!(
            sample(&scrape, &evaluation_series("p", "accepted")),
            Some(1.0)
        );
        assert_eq!(
            sample(&scrape, "kruise_wasm_policy_timeouts_total{policy=\"p\"}"),
            Some(1.0)
        );
        assert_eq!(
            sample(&scrape, "kruise_wasm_policy_errors_total{policy=\"p\"}"),
            Some(1.0)
        );
        assert_eq!(
            sample(
                &scrape,
                "kruise_wasm_policy_evaluation_latency_seconds_bucket{le=\"0.00005\",policy=\"p\"}"
            ),
            Some(1.0)
        );
    }
}
