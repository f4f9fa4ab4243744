//! Prometheus metrics of the controllers, one registry per process:
//! reconcile duration (a histogram, whose count is the reconciles) and
//! failed reconciles, labelled by controller, the depth of each
//! controller's queue on the shared watches, and the requests the process
//! sent to the API server by verb and resource. The manager serves them at
//! `/metrics`.

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use futures::FutureExt;
use futures::future::BoxFuture;
use kube::Resource;
use kube::runtime::controller::Action;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::api_requests::RequestKind;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerLabel {
    controller: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabel {
    verb: String,
    resource: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueueLabel {
    kind: String,
    controller: String,
}

/// A reconcile takes milliseconds to seconds (a preStop hook, a stop):
/// 1 ms to about 33 s.
fn duration_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    durations: Family<ControllerLabel, Histogram, fn() -> Histogram>,
    failures: Family<ControllerLabel, Counter>,
    watch_queues: Family<QueueLabel, Gauge>,
    api_requests: Family<RequestLabel, Counter>,
}

impl Metrics {
    fn new() -> Self {
        let mut registry = Registry::with_prefix("kruise");
        let durations =
            Family::<ControllerLabel, Histogram, fn() -> Histogram>::new_with_constructor(
                duration_histogram,
            );
        let failures = Family::<ControllerLabel, Counter>::default();
        let watch_queues = Family::<QueueLabel, Gauge>::default();
        let api_requests = Family::<RequestLabel, Counter>::default();
        registry.register(
            "reconcile_duration_seconds",
            "Time one reconcile took, by controller",
            durations.clone(),
        );
        registry.register(
            "reconcile_failures",
            "Reconciles that ended in an error (retried with backoff), by controller",
            failures.clone(),
        );
        // kube-runtime's scheduler does not expose its own queue; this is
        // the queue in front of it, where a slow controller's work piles up.
        registry.register(
            "watch_queue_depth",
            "Changed objects a shared watch holds for a controller that has not taken them yet, by kind and controller",
            watch_queues.clone(),
        );
        registry.register(
            "api_requests",
            "Requests this process sent to the API server, by verb and resource",
            api_requests.clone(),
        );
        Self {
            registry,
            durations,
            failures,
            watch_queues,
            api_requests,
        }
    }

    pub fn record(&self, controller: &str, took: Duration, succeeded: bool) {
        let label = ControllerLabel {
            controller: controller.to_owned(),
        };
        self.durations
            .get_or_create(&label)
            .observe(took.as_secs_f64());
        if !succeeded {
            self.failures.get_or_create(&label).inc();
        }
    }

    pub fn count_api_request(&self, kind: &RequestKind) {
        self.api_requests
            .get_or_create(&RequestLabel {
                verb: kind.verb.clone(),
                resource: kind.resource.clone(),
            })
            .inc();
    }

    /// The gauge of `controller`'s queue on the shared watch of `kind`.
    pub fn watch_queue(&self, kind: &str, controller: &str) -> Gauge {
        self.watch_queues
            .get_or_create(&QueueLabel {
                kind: kind.to_owned(),
                controller: controller.to_owned(),
            })
            .clone()
    }

    /// The text exposition format.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        // Writing to a String cannot fail.
        let _ = encode(&mut text, &self.registry);
        text
    }
}

static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);

/// This process's controller metrics.
pub fn global() -> &'static Metrics {
    &METRICS
}

/// How long an object whose round panicked waits for its next one (watch
/// events of it start one sooner).
pub const AFTER_PANIC: Duration = Duration::from_mins(1);

/// Wraps a controller's reconcile function so each call is timed and
/// counted under `controller` (pass the result to `Controller::run`).
///
/// A round that panics costs only its object: the panic is logged with the
/// object's name, counted as a failure, and the object comes back after
/// [`AFTER_PANIC`], while the controller goes on with the others. (Locks
/// shared between rounds are taken whatever a panic left them in, so a
/// panic cannot wedge the next round.)
pub fn timed<K, C, E, Fut>(
    controller: &'static str,
    reconcile: impl Fn(Arc<K>, Arc<C>) -> Fut,
) -> impl Fn(Arc<K>, Arc<C>) -> BoxFuture<'static, Result<Action, E>>
where
    K: Resource,
    Fut: Future<Output = Result<Action, E>> + Send + 'static,
{
    move |object, context| {
        let key = format!(
            "{}/{}",
            object.meta().namespace.as_deref().unwrap_or_default(),
            object.meta().name.as_deref().unwrap_or_default()
        );
        let work = AssertUnwindSafe(reconcile(object, context)).catch_unwind();
        Box::pin(async move {
            let started = Instant::now();
            let (result, succeeded) = match work.await {
                Ok(result) => {
                    let succeeded = result.is_ok();
                    (result, succeeded)
                }
                Err(panic) => {
                    tracing::error!(
                        controller,
                        object = %key,
                        panic = panic_message(panic.as_ref()),
                        retry_in = ?AFTER_PANIC,
                        "round panicked; the object waits, the others go on"
                    );
                    (Ok(Action::requeue(AFTER_PANIC)), false)
                }
            };
            global().record(controller, started.elapsed(), succeeded);
            result
        })
    }
}

fn panic_message(panic: &(dyn Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}

#[cfg(test)]
mod tests {
    use super::*;

    use k8s_openapi::api::core::v1::ConfigMap;

    /// A round over a ConfigMap named by a number: even ones succeed, odd
    /// ones fail, and 13 panics.
    async fn halve(object: Arc<ConfigMap>, _context: Arc<()>) -> Result<Action, String> {
        let n: u32 = object
            .metadata
            .name
            .as_deref()
            .unwrap_or("0")
            .parse()
            .unwrap_or(0);
        assert!(n != 13, "unlucky {n}");
        if n.is_multiple_of(2) {
            Ok(Action::await_change())
        } else {
            Err(format!("{n} is odd"))
        }
    }

    fn numbered(n: u32) -> Arc<ConfigMap> {
        let mut object = ConfigMap::default();
        object.metadata.name = Some(n.to_string());
        Arc::new(object)
    }

    #[tokio::test]
    async fn every_reconcile_is_timed_and_failures_counted() {
        let reconcile = timed("test-halver", halve);
        assert_eq!(
            reconcile(numbered(4), Arc::new(())).await,
            Ok(Action::await_change())
        );
        assert!(reconcile(numbered(3), Arc::new(())).await.is_err());
        assert!(reconcile(numbered(5), Arc::new(())).await.is_err());
        let text = global().encode();
        assert!(
            text.contains("kruise_reconcile_duration_seconds_count{controller=\"test-halver\"} 3"),
            "{text}"
        );
        assert!(
            text.contains("kruise_reconcile_failures_total{controller=\"test-halver\"} 2"),
            "{text}"
        );
    }

    /// A panicking round costs its object a minute's wait, counted as a
    /// failure; the next round of another object runs as ever.
    #[tokio::test]
    async fn a_round_that_panics_costs_only_its_object() {
        let reconcile = timed("test-unlucky", halve);
        assert_eq!(
            reconcile(numbered(13), Arc::new(())).await,
            Ok(Action::requeue(AFTER_PANIC))
        );
        assert_eq!(
            reconcile(numbered(2), Arc::new(())).await,
            Ok(Action::await_change())
        );
        let text = global().encode();
        assert!(
            text.contains("kruise_reconcile_duration_seconds_count{controller=\"test-unlucky\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("kruise_reconcile_failures_total{controller=\"test-unlucky\"} 1"),
            "{text}"
        );
        assert_eq!(panic_message(&"text"), "text");
        assert_eq!(panic_message(&String::from("owned")), "owned");
        assert_eq!(panic_message(&7_u8), "(no message)");
    }

    #[test]
    fn api_requests_are_counted_by_verb_and_resource() {
        let list = crate::api_requests::classify("GET", "/api/v1/namespaces/t/testpods", None);
        global().count_api_request(&list);
        global().count_api_request(&list);
        let text = global().encode();
        assert!(
            text.contains("kruise_api_requests_total{verb=\"LIST\",resource=\"testpods\"} 2"),
            "{text}"
        );
    }
}
