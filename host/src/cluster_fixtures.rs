//! A cluster read from a file (`--cluster-fixtures`): what the Kubernetes
//! host capabilities answer when there is no cluster, so tests and the
//! offline CLI can run context-aware policies.
//!
//! The file is a YAML list of objects (or a `kind: List` with `items`). An
//! object without `metadata.namespace` is cluster-scoped. Label selectors
//! are equality-based (`k=v`, `k==v`, `k!=v`) plus existence (`k`, `!k`);
//! set-based ones (`in`, `notin`) and field selectors are refused with a
//! message; `field_masks` are ignored (the whole object is returned).

use std::sync::Arc;

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Value, json};

/// The objects of the fixtures file.
#[derive(Debug, Clone, Default)]
pub struct ClusterFixtures {
    objects: Vec<Arc<StoredObject>>,
}

/// An object as the reads serve it: the fields they filter on, and its
/// JSON text, written once. An answer copies the texts of the objects it
/// holds, rather than writing out their documents on every read.
#[derive(Debug)]
pub struct StoredObject {
    api_version: String,
    kind: String,
    name: String,
    /// `None` for a cluster-scoped object.
    namespace: Option<String>,
    labels: Value,
    text: Box<RawValue>,
}

impl StoredObject {
    pub fn new(document: &Value) -> Result<Self, String> {
        let text = serde_json::value::to_raw_value(document).map_err(|e| e.to_string())?;
        let field = |value: &Value| value.as_str().unwrap_or_default().to_owned();
        let metadata = &document["metadata"];
        Ok(Self {
            api_version: field(&document["apiVersion"]),
            kind: field(&document["kind"]),
            name: field(&metadata["name"]),
            namespace: metadata["namespace"].as_str().map(str::to_owned),
            labels: metadata["labels"].clone(),
            text,
        })
    }

    /// Where the API server lists it: by namespace, then name.
    pub fn list_position(&self) -> (Option<&str>, &str) {
        (self.namespace.as_deref(), &self.name)
    }
}

/// The payload of `list_resources_all` / `list_resources_by_namespace`.
#[derive(Debug, Deserialize)]
pub struct ListRequest {
    pub api_version: String,
    pub kind: String,
    #[serde(default)]
    pub namespace: Option<String>,
    #[serde(default)]
    pub label_selector: Option<String>,
    #[serde(default)]
    pub field_selector: Option<String>,
}

#[cfg(test)]
impl ListRequest {
    /// Every object of a kind, in every namespace.
    pub(crate) fn all(api_version: &str, kind: &str) -> Self {
        Self {
            api_version: api_version.to_owned(),
            kind: kind.to_owned(),
            namespace: None,
            label_selector: None,
            field_selector: None,
        }
    }
}

/// The payload of `get_resource`.
#[derive(Debug, Deserialize)]
pub struct GetRequest {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    #[serde(default)]
    pub namespace: Option<String>,
}

impl ClusterFixtures {
    pub fn from_yaml(text: &str) -> Result<Self, String> {
        let document: Value =
            serde_yaml::from_str(text).map_err(|e| format!("not valid YAML: {e}"))?;
        let objects = match document {
            Value::Array(objects) => objects,
            Value::Object(mut list) if list.get("kind") == Some(&json!("List")) => {
                match list.remove("items") {
                    Some(Value::Array(items)) => items,
                    _ => Vec::new(),
                }
            }
            Value::Null => Vec::new(),
            _ => return Err("expected a list of Kubernetes objects".to_owned()),
        };
        for (index, object) in objects.iter().enumerate() {
            if object["apiVersion"].as_str().is_none()
                || object["kind"].as_str().is_none()
                || object["metadata"]["name"].as_str().is_none()
            {
                return Err(format!(
                    "object {index} has no apiVersion, kind or metadata.name"
                ));
            }
        }
        let objects = objects
            .iter()
            .map(|object| StoredObject::new(object).map(Arc::new))
            .collect::<Result<_, _>>()?;
        Ok(Self { objects })
    }
}

impl ClusterReads for ClusterFixtures {
    fn list(&self, request: &ListRequest) -> Result<Vec<u8>, String> {
        list_of(&self.objects, request)
    }

    fn get(&self, request: &GetRequest) -> Result<Vec<u8>, String> {
        get_of(&self.objects, request)
    }
}

/// The Kubernetes reads a cluster answers: from the fixtures file, or from
/// the watch caches of a live cluster.
pub trait ClusterReads: Send + Sync + std::fmt::Debug {
    /// Whether the reads of a kind answer from the cluster's objects yet;
    /// `Err` says why not. A fixed set always does; a watch cache does
    /// once its first list is in, and that may come after the host starts
    /// serving (see `live_cluster`).
    fn cache_filled(&self, _api_version: &str, _kind: &str) -> Result<(), String> {
        Ok(())
    }
    /// Resolves once [`ClusterReads::cache_filled`] of a kind may have
    /// changed: its cache has filled, or its watch has stopped.
    fn until_filled(&self, _api_version: &str, _kind: &str) -> BoxFuture<'static, ()> {
        Box::pin(std::future::ready(()))
    }
    /// A Kubernetes List, as the API server (and policy-server) answers,
    /// in JSON: the host call's answer as it is sent.
    fn list(&self, request: &ListRequest) -> Result<Vec<u8>, String>;
    /// One object, in JSON; the API server's NotFound text when there is
    /// none.
    fn get(&self, request: &GetRequest) -> Result<Vec<u8>, String>;
    /// `kubernetes/can_i`: the `SubjectAccessReviewStatus` for the payload's
    /// `subject_access_review`. Only a live cluster can answer.
    fn can_i(&self, _request: &Value) -> Result<Value, String> {
        Err("cannot serve kubernetes/can_i: this host has no live Kubernetes cluster".to_owned())
    }
}

fn of_kind<'a>(
    objects: &'a [Arc<StoredObject>],
    api_version: &'a str,
    kind: &'a str,
) -> impl Iterator<Item = &'a StoredObject> {
    objects
        .iter()
        .map(AsRef::as_ref)
        .filter(move |o| o.api_version == api_version && o.kind == kind)
}

/// A list answer: the fields of the List the API server sends.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ListAnswer<'a> {
    api_version: &'a str,
    items: Vec<&'a RawValue>,
    kind: &'static str,
    metadata: ListMetadata,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ListMetadata {
    resource_version: &'static str,
}

/// The refusal of a cluster-scoped kind listed in a namespace.
pub fn not_namespaced(request: &ListRequest, namespace: &str) -> String {
    format!(
        "{}/{} is cluster-scoped: it cannot be listed in namespace {namespace}",
        request.api_version, request.kind
    )
}

/// [`ClusterReads::list`] over a set of objects.
pub fn list_of(objects: &[Arc<StoredObject>], request: &ListRequest) -> Result<Vec<u8>, String> {
    if request
        .field_selector
        .as_deref()
        .is_some_and(|s| !s.is_empty())
    {
        return Err("field selectors are not supported by this host".to_owned());
    }
    let selector = Selector::parse(request.label_selector.as_deref().unwrap_or_default())?;
    if let Some(namespace) = &request.namespace
        && of_kind(objects, &request.api_version, &request.kind).any(|o| o.namespace.is_none())
    {
        return Err(not_namespaced(request, namespace));
    }
    let items = of_kind(objects, &request.api_version, &request.kind)
        .filter(|o| {
            request
                .namespace
                .as_ref()
                .is_none_or(|ns| o.namespace.as_ref() == Some(ns))
        })
        .filter(|o| selector.matches(&o.labels))
        .map(|o| o.text.as_ref())
        .collect();
    serde_json::to_vec(&ListAnswer {
        api_version: &request.api_version,
        items,
        kind: "List",
        metadata: ListMetadata {
            resource_version: "",
        },
    })
    .map_err(|e| e.to_string())
}

/// [`ClusterReads::get`] over a set of objects.
pub fn get_of(objects: &[Arc<StoredObject>], request: &GetRequest) -> Result<Vec<u8>, String> {
    of_kind(objects, &request.api_version, &request.kind)
        .find(|o| o.name == request.name && o.namespace == request.namespace)
        .map(|o| o.text.get().as_bytes().to_vec())
        .ok_or_else(|| {
            format!(
                "{} \"{}\" not found",
                request.kind.to_lowercase(),
                request.name
            )
        })
}

/// One requirement of an equality-based selector.
#[derive(Debug, PartialEq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    Exists(String),
    Absent(String),
}

#[derive(Debug, PartialEq)]
struct Selector(Vec<Requirement>);

impl Selector {
    fn parse(text: &str) -> Result<Self, String> {
        let mut requirements = Vec::new();
        for term in text.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            if term.contains('(') || term.contains(' ') {
                return Err(format!(
                    "label selector `{text}`: only equality-based selectors (k=v, k!=v, k, !k) are supported"
                ));
            }
            let owned = |s: &str| s.trim().to_owned();
            let requirement = if let Some((key, value)) = term.split_once("!=") {
                Requirement::NotEquals(owned(key), owned(value))
            } else if let Some((key, value)) =
                term.split_once("==").or_else(|| term.split_once('='))
            {
                Requirement::Equals(owned(key), owned(value))
            } else if let Some(key) = term.strip_prefix('!') {
                Requirement::Absent(owned(key))
            } else {
                Requirement::Exists(owned(term))
            };
            requirements.push(requirement);
        }
        Ok(Self(requirements))
    }

    fn matches(&self, labels: &Value) -> bool {
        let label = |key: &str| labels.get(key).and_then(Value::as_str);
        self.0.iter().all(|requirement| match requirement {
            Requirement::Equals(key, value) => label(key) == Some(value.as_str()),
            Requirement::NotEquals(key, value) => label(key) != Some(value.as_str()),
            Requirement::Exists(key) => label(key).is_some(),
            Requirement::Absent(key) => label(key).is_none(),
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const FIXTURES: &str = r"
- {apiVersion: v1, kind: Namespace, metadata: {name: default, labels: {env: prod}}}
- {apiVersion: v1, kind: Pod, metadata: {name: a, namespace: default, labels: {app: web, tier: fe}}}
- {apiVersion: v1, kind: Pod, metadata: {name: b, namespace: default, labels: {app: db}}}
- {apiVersion: v1, kind: Pod, metadata: {name: c, namespace: other}}
";

    fn names(list: &Value) -> Vec<&str> {
        list["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["metadata"]["name"].as_str().unwrap())
            .collect()
    }

    fn list(namespace: Option<&str>, selector: Option<&str>) -> Result<Value, String> {
        ClusterFixtures::from_yaml(FIXTURES)
            .unwrap()
            .list(&ListRequest {
                namespace: namespace.map(str::to_owned),
                label_selector: selector.map(str::to_owned),
                ..ListRequest::all("v1", "Pod")
            })
            .map(|answer| serde_json::from_slice(&answer).unwrap())
    }

    #[test]
    fn lists_filter_by_namespace_and_labels() {
        let all = list(None, None).unwrap();
        assert_eq!(all["kind"], "List");
        assert_eq!(all["apiVersion"], "v1");
        assert_eq!(all["metadata"], json!({"resourceVersion": ""}));
        assert_eq!(names(&all), ["a", "b", "c"]);
        assert_eq!(names(&list(Some("default"), None).unwrap()), ["a", "b"]);
        assert_eq!(names(&list(None, Some("app=web")).unwrap()), ["a"]);
        assert_eq!(names(&list(None, Some("app==db")).unwrap()), ["b"]);
        assert_eq!(names(&list(None, Some("app!=web")).unwrap()), ["b", "c"]);
        assert_eq!(names(&list(None, Some("app,!tier")).unwrap()), ["b"]);
        assert!(
            list(None, Some("app in (web)"))
                .unwrap_err()
                .contains("only equality-based")
        );
    }

    /// The answer a guest reads, byte for byte: a List with the objects'
    /// texts, in the API server's field order.
    #[test]
    fn a_list_answer_has_the_api_servers_list_format() {
        let fixtures = ClusterFixtures::from_yaml(
            "- {apiVersion: v1, kind: Pod, metadata: {namespace: default, name: a}, spec: {}}",
        )
        .unwrap();
        let answer = fixtures.list(&ListRequest::all("v1", "Pod")).unwrap();
        assert_eq!(
            String::from_utf8(answer).unwrap(),
            r#"{"apiVersion":"v1","items":[{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","namespace":"default"},"spec":{}}],"kind":"List","metadata":{"resourceVersion":""}}"#
        );
    }

    #[test]
    fn gets_find_one_object_or_say_not_found() {
        let fixtures = ClusterFixtures::from_yaml(FIXTURES).unwrap();
        let get = |kind: &str, name: &str, namespace: Option<&str>| {
            fixtures
                .get(&GetRequest {
                    api_version: "v1".to_owned(),
                    kind: kind.to_owned(),
                    name: name.to_owned(),
                    namespace: namespace.map(str::to_owned),
                })
                .map(|answer| serde_json::from_slice::<Value>(&answer).unwrap())
        };
        assert_eq!(
            get("Namespace", "default", None).unwrap()["metadata"]["labels"]["env"],
            "prod"
        );
        assert_eq!(
            get("Pod", "a", Some("default")).unwrap()["metadata"]["name"],
            "a"
        );
        assert_eq!(
            get("Pod", "a", Some("other")).unwrap_err(),
            "pod \"a\" not found"
        );
    }

    #[test]
    fn cluster_scoped_kinds_are_not_listed_by_namespace() {
        let fixtures = ClusterFixtures::from_yaml(FIXTURES).unwrap();
        let error = fixtures
            .list(&ListRequest {
                api_version: "v1".to_owned(),
                kind: "Namespace".to_owned(),
                namespace: Some("default".to_owned()),
                label_selector: None,
                field_selector: None,
            })
            .unwrap_err();
        assert!(error.contains("cluster-scoped"), "{error}");
        assert!(
            ClusterFixtures::from_yaml("- {kind: Pod}")
                .unwrap_err()
                .contains("object 0")
        );
    }
}
