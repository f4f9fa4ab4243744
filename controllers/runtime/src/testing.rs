//! An in-memory API server for controller tests (feature `testing`): a
//! real `kube::Client` talks to it, so a reconcile function runs unchanged
//! and a test checks what it wrote, without Go or the dev cluster.
//!
//! It keeps JSON objects by path and answers as the API server does where
//! our controllers depend on it: get, list (label selectors `k=v`, `k`),
//! create (409 if present; uid and resourceVersion assigned), replace and
//! status replace (409 on a stale resourceVersion), merge patch (409 when
//! the patch names another uid or resourceVersion), delete (409 when the
//! preconditions name another uid). Every request is recorded.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use http_body_util::BodyExt as _;
use hyper::{Request, Response};
use kube::Client;
use kube::client::Body;
use serde_json::{Value, json};

/// One request as the fake API server saw it.
#[derive(Clone, Debug, PartialEq)]
pub struct Seen {
    pub method: String,
    /// The path, without the query.
    pub path: String,
    pub body: Value,
}

#[derive(Clone, Debug, Default)]
pub struct FakeApi {
    state: Arc<Mutex<State>>,
}

#[derive(Debug, Default)]
struct State {
    down: bool,
    /// How long each answer takes.
    delay: std::time::Duration,
    objects: BTreeMap<String, Value>,
    version: u64,
    seen: Vec<Seen>,
}

/// Where an object lives: `/api/v1` or `/apis/<group>/<version>`, its
/// namespace, plural and name, and a subresource.
#[derive(Debug, PartialEq, Eq)]
struct Target {
    prefix: String,
    namespace: Option<String>,
    plural: String,
    name: Option<String>,
    subresource: Option<String>,
}

impl Target {
    fn parse(path: &str) -> Option<Self> {
        let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
        let (prefix, rest) = match segments.as_slice() {
            ["api", version, rest @ ..] => (format!("/api/{version}"), rest),
            ["apis", group, version, rest @ ..] => (format!("/apis/{group}/{version}"), rest),
            _ => return None,
        };
        let owned = |s: &&str| (*s).to_owned();
        let (namespace, rest) = match rest {
            ["namespaces", namespace, rest @ ..] if !rest.is_empty() => {
                (Some((*namespace).to_owned()), rest)
            }
            _ => (None, rest),
        };
        let (plural, name, subresource) = match rest {
            [plural] => (plural, None, None),
            [plural, name] => (plural, Some(owned(name)), None),
            [plural, name, sub] => (plural, Some(owned(name)), Some(owned(sub))),
            _ => return None,
        };
        Some(Self {
            prefix,
            namespace,
            plural: (*plural).to_owned(),
            name,
            subresource,
        })
    }

    fn key(&self, name: &str) -> String {
        match &self.namespace {
            Some(ns) => format!("{}/namespaces/{ns}/{}/{name}", self.prefix, self.plural),
            None => format!("{}/{}/{name}", self.prefix, self.plural),
        }
    }

    /// Whether the object stored under `key` is in this collection (all
    /// namespaces when none is named).
    fn holds(&self, key: &str) -> bool {
        let Some(target) = Self::parse(key) else {
            return false;
        };
        target.prefix == self.prefix
            && target.plural == self.plural
            && (self.namespace.is_none() || target.namespace == self.namespace)
    }
}

impl FakeApi {
    /// A client of this server (default namespace `default`).
    pub fn client(&self) -> Client {
        let api = self.clone();
        let service = tower::service_fn(move |request: Request<Body>| {
            let api = api.clone();
            async move {
                let method = request.method().to_string();
                let uri = request.uri().clone();
                let body = match request.into_body().collect().await {
                    Ok(collected) => {
                        serde_json::from_slice(&collected.to_bytes()).unwrap_or(Value::Null)
                    }
                    Err(_) => Value::Null,
                };
                let delay = api.lock().delay;
                tokio::time::sleep(delay).await;
                let (code, answer) = api.answer(&method, uri.path(), uri.query(), body);
                Response::builder()
                    .status(code)
                    .header("content-type", "application/json")
                    .body(Body::from(answer.to_string().into_bytes()))
            }
        });
        Client::new(service, "default")
    }

    /// Stores `object` as if created (uid and resourceVersion assigned if
    /// missing); its path from its apiVersion, kind's `plural` and names.
    pub fn insert(&self, plural: &str, object: Value) -> Value {
        let path = collection_path(&object, plural);
        let target = Target::parse(&path);
        let (code, stored) = match target {
            Some(target) => self.lock().create(&target, object),
            None => failure(404, "NotFound", &path),
        };
        assert_eq!(code, 201, "insert {path}: {stored}");
        stored
    }

    pub fn set_down(&self, down: bool) {
        self.lock().down = down;
    }

    /// Makes every answer take `delay` (an API server that hangs).
    pub fn set_delay(&self, delay: std::time::Duration) {
        self.lock().delay = delay;
    }

    pub fn get(&self, path: &str) -> Option<Value> {
        self.lock().objects.get(path).cloned()
    }

    /// The requests so far, reads included.
    pub fn seen(&self) -> Vec<Seen> {
        self.lock().seen.clone()
    }

    /// The writes so far (every request but GET).
    pub fn writes(&self) -> Vec<Seen> {
        self.seen()
            .into_iter()
            .filter(|s| s.method != "GET")
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn answer(&self, method: &str, path: &str, query: Option<&str>, body: Value) -> (u16, Value) {
        let mut state = self.lock();
        state.seen.push(Seen {
            method: method.to_owned(),
            path: path.to_owned(),
            body: body.clone(),
        });
        if state.down {
            return failure(500, "InternalError", "the API server is down");
        }
        let Some(target) = Target::parse(path) else {
            return failure(404, "NotFound", &format!("no such path {path}"));
        };
        match (method, target.name.as_deref()) {
            ("GET", None) => state.list(&target, query),
            ("POST", None) => state.create(&target, body),
            ("GET", Some(name)) => state.objects.get(&target.key(name)).map_or_else(
                || failure(404, "NotFound", name),
                |object| (200, object.clone()),
            ),
            ("PUT", Some(name)) => state.replace(&target.key(name), &target, body),
            ("PATCH", Some(name)) => state.patch(&target.key(name), &target, &body),
            ("DELETE", Some(name)) => state.delete(&target.key(name), &body),
            _ => failure(405, "MethodNotAllowed", method),
        }
    }
}

impl State {
    fn next_version(&mut self) -> String {
        self.version += 1;
        self.version.to_string()
    }

    fn list(&self, target: &Target, query: Option<&str>) -> (u16, Value) {
        let parameter = |name: &str| {
            query
                .into_iter()
                .flat_map(|q| q.split('&'))
                .find_map(|pair| pair.strip_prefix(name))
                .map(percent_decode)
                .unwrap_or_default()
        };
        let (labels, fields) = (parameter("labelSelector="), parameter("fieldSelector="));
        let items: Vec<Value> = self
            .objects
            .iter()
            .filter(|(key, object)| {
                target.holds(key)
                    && matches_labels(object, &labels)
                    && matches_fields(object, &fields)
            })
            .map(|(_, object)| object.clone())
            .collect();
        let list =
            json!({"metadata": {"resourceVersion": self.version.to_string()}, "items": items});
        (200, list)
    }

    fn create(&mut self, target: &Target, mut object: Value) -> (u16, Value) {
        let Some(name) = object["metadata"]["name"].as_str().map(str::to_owned) else {
            return failure(422, "Invalid", "metadata.name is required");
        };
        let key = target.key(&name);
        if self.objects.contains_key(&key) {
            return failure(409, "AlreadyExists", &name);
        }
        let version = self.next_version();
        let metadata = &mut object["metadata"];
        if metadata["uid"].is_null() {
            metadata["uid"] = json!(format!("uid-{version}"));
        }
        metadata["resourceVersion"] = json!(version);
        if let Some(namespace) = &target.namespace {
            metadata["namespace"] = json!(namespace);
        }
        self.objects.insert(key, object.clone());
        (201, object)
    }

    fn replace(&mut self, key: &str, target: &Target, sent: Value) -> (u16, Value) {
        let Some(stored) = self.objects.get(key).cloned() else {
            return failure(404, "NotFound", key);
        };
        if sent["metadata"]["resourceVersion"] != stored["metadata"]["resourceVersion"] {
            return failure(409, "Conflict", "the object has been modified");
        }
        let mut next = if target.subresource.as_deref() == Some("status") {
            let mut next = stored;
            next["status"] = sent["status"].clone();
            next
        } else {
            let mut next = sent;
            next["metadata"]["uid"] = stored["metadata"]["uid"].clone();
            next
        };
        next["metadata"]["resourceVersion"] = json!(self.next_version());
        self.objects.insert(key.to_owned(), next.clone());
        (200, next)
    }

    fn patch(&mut self, key: &str, target: &Target, patch: &Value) -> (u16, Value) {
        let Some(mut object) = self.objects.get(key).cloned() else {
            return failure(404, "NotFound", key);
        };
        for field in ["uid", "resourceVersion"] {
            let wanted = &patch["metadata"][field];
            if !wanted.is_null() && *wanted != object["metadata"][field] {
                return failure(409, "Conflict", &format!("{field} precondition failed"));
            }
        }
        if target.subresource.as_deref() == Some("status") {
            json_patch::merge(&mut object["status"], &patch["status"]);
        } else {
            json_patch::merge(&mut object, patch);
        }
        object["metadata"]["resourceVersion"] = json!(self.next_version());
        self.objects.insert(key.to_owned(), object.clone());
        (200, object)
    }

    fn delete(&mut self, key: &str, options: &Value) -> (u16, Value) {
        let Some(object) = self.objects.get(key) else {
            return failure(404, "NotFound", key);
        };
        let wanted = &options["preconditions"]["uid"];
        if !wanted.is_null() && *wanted != object["metadata"]["uid"] {
            return failure(409, "Conflict", "uid precondition failed");
        }
        let object = self.objects.remove(key).unwrap_or_default();
        (200, object)
    }
}

/// The collection an object belongs to, from its apiVersion and namespace.
fn collection_path(object: &Value, plural: &str) -> String {
    let api_version = object["apiVersion"].as_str().unwrap_or("v1");
    let prefix = if api_version.contains('/') {
        format!("/apis/{api_version}")
    } else {
        format!("/api/{api_version}")
    };
    match object["metadata"]["namespace"].as_str() {
        Some(ns) => format!("{prefix}/namespaces/{ns}/{plural}"),
        None => format!("{prefix}/{plural}"),
    }
}

/// Equality (`k=v`) and existence (`k`) terms, comma-separated.
fn matches_labels(object: &Value, selector: &str) -> bool {
    let labels = &object["metadata"]["labels"];
    selector
        .split(',')
        .filter(|term| !term.is_empty())
        .all(|term| match term.split_once('=') {
            Some((key, value)) => labels[key].as_str() == Some(value),
            None => !labels[term].is_null(),
        })
}

/// `metadata.name=…` and `metadata.namespace=…` terms, comma-separated.
fn matches_fields(object: &Value, selector: &str) -> bool {
    selector
        .split(',')
        .filter(|term| !term.is_empty())
        .all(|term| match term.split_once('=') {
            Some(("metadata.name", name)) => object["metadata"]["name"].as_str() == Some(name),
            Some(("metadata.namespace", namespace)) => {
                object["metadata"]["namespace"].as_str() == Some(namespace)
            }
            _ => false,
        })
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (b'+', _) => {
                out.push(b' ');
                i += 1;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn failure(code: u16, reason: &str, message: &str) -> (u16, Value) {
    let status = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                        "message": message, "reason": reason, "code": code});
    (code, status)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::Api;
    use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};

    use super::*;

    fn config_map(name: &str, labels: &Value) -> ConfigMap {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "default", "labels": labels},
        }))
        .unwrap()
    }

    #[test]
    fn paths_are_read_as_the_api_server_lays_them_out() {
        let pods = Target::parse("/api/v1/namespaces/ns/pods").unwrap();
        assert_eq!((pods.namespace.as_deref(), pods.name), (Some("ns"), None));
        let status =
            Target::parse("/apis/apps.kruise.io/v1alpha1/namespaces/ns/clonesets/c/status")
                .unwrap();
        assert_eq!(status.prefix, "/apis/apps.kruise.io/v1alpha1");
        assert_eq!(status.subresource.as_deref(), Some("status"));
        let namespace = Target::parse("/api/v1/namespaces/ns").unwrap();
        assert_eq!(
            (namespace.plural.as_str(), namespace.name.as_deref()),
            ("namespaces", Some("ns"))
        );
        let all = Target::parse("/api/v1/pods").unwrap();
        assert!(all.holds("/api/v1/namespaces/a/pods/p"));
        assert!(!all.holds("/api/v1/namespaces/a/configmaps/p"));
        assert_eq!(Target::parse("/healthz"), None);
        assert_eq!(percent_decode("app%3Dx%2Cy"), "app=x,y");
    }

    #[tokio::test]
    async fn writes_are_checked_as_the_api_server_checks_them() {
        let fake = FakeApi::default();
        let api: Api<ConfigMap> = Api::namespaced(fake.client(), "default");
        let made = api
            .create(
                &PostParams::default(),
                &config_map("a", &json!({"app": "x"})),
            )
            .await
            .unwrap();
        api.create(&PostParams::default(), &config_map("b", &json!({})))
            .await
            .unwrap();
        let again = api
            .create(&PostParams::default(), &config_map("a", &json!({})))
            .await;
        assert!(matches!(again, Err(kube::Error::Api(ref e)) if e.code == 409));
        let listed = api
            .list(&ListParams::default().labels("app=x"))
            .await
            .unwrap();
        assert_eq!(listed.items.len(), 1);

        let stale = json!({"metadata": {"uid": "someone-else"}, "data": {"k": "v"}});
        let refused = api
            .patch("a", &PatchParams::default(), &Patch::Merge(&stale))
            .await;
        assert!(matches!(refused, Err(kube::Error::Api(ref e)) if e.code == 409));
        let fresh = json!({"metadata": {"uid": made.metadata.uid}, "data": {"k": "v"}});
        let patched = api
            .patch("a", &PatchParams::default(), &Patch::Merge(&fresh))
            .await
            .unwrap();
        assert_eq!(patched.data.unwrap()["k"], "v");

        // The create's resourceVersion is stale after the patch.
        let replaced = api.replace("a", &PostParams::default(), &made).await;
        assert!(matches!(replaced, Err(kube::Error::Api(ref e)) if e.code == 409));

        let other = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some("someone-else".into()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        assert!(api.delete("a", &other).await.is_err());
        api.delete("a", &DeleteParams::default()).await.unwrap();
        assert_eq!(fake.get("/api/v1/namespaces/default/configmaps/a"), None);
        let methods: Vec<String> = fake.writes().into_iter().map(|s| s.method).collect();
        assert_eq!(
            methods,
            [
                "POST", "POST", "POST", "PATCH", "PATCH", "PUT", "DELETE", "DELETE"
            ]
        );
    }
}
