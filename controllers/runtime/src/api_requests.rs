//! The manager's own requests to the API server, counted by verb and
//! resource (`kruise_api_requests_total`). The API server's counters add up
//! every client; these say what the controllers alone cost it, which is
//! what the scale benchmark compares (docs/benchmarks.md).

use kube::client::{Body, ClientBuilder};
use kube::{Client, Config};
use tower::util::MapRequestLayer;

use crate::metrics;

/// What one request did, as the API server's `apiserver_request_total`
/// labels it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RequestKind {
    /// GET, LIST, WATCH, POST, PUT, PATCH or DELETE (DELETECOLLECTION).
    pub verb: String,
    /// `pods`, `pods/status`, `clonesets`, ...; empty for non-resource
    /// paths such as `/version`.
    pub resource: String,
}

/// A client whose every request is counted in this process's metrics.
pub fn counted_client(config: Config) -> Result<Client, kube::Error> {
    let count = MapRequestLayer::new(|request: http::Request<Body>| {
        let uri = request.uri();
        let kind = classify(request.method().as_str(), uri.path(), uri.query());
        metrics::global().count_api_request(&kind);
        request
    });
    Ok(ClientBuilder::try_from(config)?.with_layer(&count).build())
}

/// Reads the verb and resource from a request's method and path:
/// `/api/v1/namespaces/ns/pods/name/status` is `pods/status`, a GET of a
/// collection is a LIST (a WATCH with `watch=true`).
pub fn classify(method: &str, path: &str, query: Option<&str>) -> RequestKind {
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    // After `/api/v1` or `/apis/<group>/<version>`.
    let rest: &[&str] = match segments.as_slice() {
        ["api", _, rest @ ..] | ["apis", _, _, rest @ ..] => rest,
        _ => &[],
    };
    let rest = match rest {
        // A namespace itself (`/api/v1/namespaces/ns`) is a resource too.
        ["namespaces", _, tail @ ..] if !tail.is_empty() => tail,
        other => other,
    };
    let (resource, named) = match rest {
        [] => (String::new(), false),
        [resource] => ((*resource).to_owned(), false),
        [resource, _] => ((*resource).to_owned(), true),
        [resource, _, sub, ..] => (format!("{resource}/{sub}"), true),
    };
    let watch = query.is_some_and(|q| q.split('&').any(|pair| pair == "watch=true"));
    let verb = match (method, named, watch) {
        ("GET", _, true) => "WATCH",
        ("GET", false, false) if !resource.is_empty() => "LIST",
        ("DELETE", false, _) if !resource.is_empty() => "DELETECOLLECTION",
        (other, _, _) => other,
    };
    RequestKind {
        verb: verb.to_owned(),
        resource,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(method: &str, path: &str, query: Option<&str>) -> (String, String) {
        let kind = classify(method, path, query);
        (kind.verb, kind.resource)
    }

    fn pair(verb: &str, resource: &str) -> (String, String) {
        (verb.to_owned(), resource.to_owned())
    }

    #[test]
    fn reads_and_watches_are_told_apart() {
        let pods = "/api/v1/namespaces/default/pods";
        assert_eq!(
            kind("GET", pods, Some("labelSelector=app%3Dx")),
            pair("LIST", "pods")
        );
        assert_eq!(
            kind("GET", pods, Some("watch=true&resourceVersion=5")),
            pair("WATCH", "pods")
        );
        assert_eq!(
            kind(
                "GET",
                "/api/v1/pods",
                Some("allowWatchBookmarks=true&watch=true")
            ),
            pair("WATCH", "pods")
        );
        assert_eq!(kind("GET", &format!("{pods}/a"), None), pair("GET", "pods"));
        assert_eq!(
            kind("GET", &format!("{pods}/a"), Some("watch=truly")),
            pair("GET", "pods")
        );
    }

    #[test]
    fn writes_name_their_subresource_and_group() {
        let sets = "/apis/apps.kruise.io/v1alpha1/namespaces/ns/clonesets";
        assert_eq!(kind("POST", sets, None), pair("POST", "clonesets"));
        assert_eq!(
            kind("PUT", &format!("{sets}/demo/status"), None),
            pair("PUT", "clonesets/status")
        );
        assert_eq!(
            kind("PATCH", "/api/v1/namespaces/ns/pods/p/status", None),
            pair("PATCH", "pods/status")
        );
        assert_eq!(
            kind("DELETE", "/api/v1/namespaces/ns/pods/p", None),
            pair("DELETE", "pods")
        );
        assert_eq!(
            kind("DELETE", "/api/v1/namespaces/ns/pods", None),
            pair("DELETECOLLECTION", "pods")
        );
    }

    #[test]
    fn namespaces_cluster_objects_and_other_paths() {
        assert_eq!(
            kind("GET", "/api/v1/namespaces/kube-system", None),
            pair("GET", "namespaces")
        );
        assert_eq!(
            kind("GET", "/api/v1/namespaces", None),
            pair("LIST", "namespaces")
        );
        assert_eq!(
            kind(
                "PUT",
                "/apis/coordination.k8s.io/v1/namespaces/k/leases/l",
                None
            ),
            pair("PUT", "leases")
        );
        assert_eq!(kind("GET", "/api/v1/nodes", None), pair("LIST", "nodes"));
        assert_eq!(kind("GET", "/version", None), pair("GET", ""));
        assert_eq!(kind("GET", "/apis", None), pair("GET", ""));
    }
}
