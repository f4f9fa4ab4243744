//! Request counters read from Prometheus text, the API server's and the
//! manager's, and what changed between two readings.

use std::collections::BTreeMap;

/// A verb and a resource (`pods`, `pods/status`, ...).
pub type RequestKey = (String, String);

/// Sums of one metric by verb and resource; other labels (code, scope,
/// version, ...) are summed over.
pub type Counts = BTreeMap<RequestKey, f64>;

/// Where a metric keeps its verb, resource and subresource.
#[derive(Debug, Clone, Copy)]
pub struct Metric {
    pub name: &'static str,
    /// The API server splits `pods/status` into `resource="pods"` and
    /// `subresource="status"`; our manager writes it whole.
    pub has_subresource: bool,
}

/// Every request the API server served, from every client.
pub const APISERVER_REQUESTS: Metric = Metric {
    name: "apiserver_request_total",
    has_subresource: true,
};
/// The bytes of the API server's answers (reads only: GET and LIST).
pub const APISERVER_RESPONSE_BYTES: Metric = Metric {
    name: "apiserver_response_sizes_sum",
    has_subresource: true,
};
/// The manager's own requests (kruise_controller_runtime::api_requests).
pub const MANAGER_REQUESTS: Metric = Metric {
    name: "kruise_api_requests_total",
    has_subresource: false,
};

/// Reads `metric` from Prometheus' text format. Lines of other metrics,
/// comments and lines it cannot read are passed over.
pub fn read(text: &str, metric: Metric) -> Counts {
    let mut counts = Counts::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(metric.name) else {
            continue;
        };
        let Some((labels, value)) = rest.strip_prefix('{').and_then(|r| r.rsplit_once("} ")) else {
            continue;
        };
        let Ok(value) = value.trim().parse::<f64>() else {
            continue;
        };
        let labels = parse_labels(labels);
        let label = |name: &str| labels.get(name).cloned().unwrap_or_default();
        let mut resource = label("resource");
        let subresource = label("subresource");
        if metric.has_subresource && !subresource.is_empty() {
            resource = format!("{resource}/{subresource}");
        }
        *counts.entry((label("verb"), resource)).or_default() += value;
    }
    counts
}

/// The manager's reconcile rounds so far, by controller.
pub fn rounds(text: &str) -> BTreeMap<String, f64> {
    let mut rounds = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("kruise_reconcile_duration_seconds_count{") else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        if let (Some(controller), Ok(value)) = (
            parse_labels(labels).remove("controller"),
            value.trim().parse::<f64>(),
        ) {
            *rounds.entry(controller).or_default() += value;
        }
    }
    rounds
}

/// `a="x",b="y"` as a map; label values here hold no quotes or commas.
fn parse_labels(text: &str) -> BTreeMap<String, String> {
    text.split("\",")
        .filter_map(|pair| pair.split_once("=\""))
        .map(|(name, value)| (name.to_owned(), value.trim_end_matches('"').to_owned()))
        .collect()
}

/// What grew from `before` to `after`; unchanged keys are left out.
pub fn growth(before: &Counts, after: &Counts) -> Counts {
    after
        .iter()
        .filter_map(|(key, value)| {
            let grown = value - before.get(key).copied().unwrap_or(0.0);
            (grown > 0.0).then(|| (key.clone(), grown))
        })
        .collect()
}

/// The writes among `counts`: creates, updates, patches and deletes.
pub fn writes(counts: &Counts) -> f64 {
    counts
        .iter()
        .filter(|((verb, _), _)| {
            matches!(
                verb.as_str(),
                "POST" | "PUT" | "PATCH" | "DELETE" | "DELETECOLLECTION" | "APPLY" | "UPDATE"
            )
        })
        .map(|(_, value)| value)
        .sum()
}

#[cfg(test)]
#[allow(clippy::float_cmp)] // sums of small whole numbers are exact
mod tests {
    use super::*;

    fn key(verb: &str, resource: &str) -> RequestKey {
        (verb.to_owned(), resource.to_owned())
    }

    const APISERVER: &str = r#"# HELP apiserver_request_total [STABLE] Counter of apiserver requests
# TYPE apiserver_request_total counter
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="namespace",subresource="",verb="LIST",version="v1"} 12
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="cluster",subresource="",verb="LIST",version="v1"} 3
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="status",verb="PATCH",version="v1"} 40
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1"} 5
apiserver_request_total_other{resource="pods",verb="LIST"} 99
apiserver_response_sizes_sum{component="apiserver",group="",resource="pods",scope="namespace",subresource="",verb="LIST",version="v1"} 1.5e+06
"#;

    #[test]
    fn requests_are_summed_by_verb_and_resource_with_subresource() {
        let counts = read(APISERVER, APISERVER_REQUESTS);
        assert_eq!(
            counts,
            Counts::from([
                (key("LIST", "pods"), 15.0),
                (key("PATCH", "pods/status"), 40.0),
                (key("POST", "pods"), 5.0),
            ])
        );
        assert_eq!(writes(&counts), 45.0);
        let bytes = read(APISERVER, APISERVER_RESPONSE_BYTES);
        assert_eq!(bytes, Counts::from([(key("LIST", "pods"), 1.5e6)]));
    }

    #[test]
    fn the_managers_own_counter_names_the_subresource_itself() {
        let text = "kruise_api_requests_total{verb=\"PUT\",resource=\"clonesets/status\"} 7\n\
                    kruise_api_requests_total{verb=\"LIST\",resource=\"pods\"} 2\n\
                    kruise_api_requests_total{verb=\"LIST\",resource=\"pods\"} not-a-number\n";
        assert_eq!(
            read(text, MANAGER_REQUESTS),
            Counts::from([
                (key("PUT", "clonesets/status"), 7.0),
                (key("LIST", "pods"), 2.0)
            ])
        );
    }

    #[test]
    fn rounds_are_read_by_controller() {
        let text = "kruise_reconcile_duration_seconds_sum{controller=\"a\"} 1.5\n\
                    kruise_reconcile_duration_seconds_count{controller=\"a\"} 12\n\
                    kruise_reconcile_duration_seconds_count{controller=\"b\"} 3\n\
                    kruise_reconcile_duration_seconds_bucket{controller=\"a\",le=\"0.001\"} 2\n";
        assert_eq!(
            rounds(text),
            BTreeMap::from([("a".to_owned(), 12.0), ("b".to_owned(), 3.0)])
        );
    }

    #[test]
    fn growth_keeps_what_grew_and_new_keys() {
        let before = Counts::from([(key("LIST", "pods"), 2.0), (key("GET", "nodes"), 1.0)]);
        let after = Counts::from([
            (key("LIST", "pods"), 5.0),
            (key("GET", "nodes"), 1.0),
            (key("POST", "pods"), 4.0),
        ]);
        assert_eq!(
            growth(&before, &after),
            Counts::from([(key("LIST", "pods"), 3.0), (key("POST", "pods"), 4.0)])
        );
    }
}
