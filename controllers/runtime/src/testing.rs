//! An in-memory API server for controller tests (feature `testing`): a
//! real `kube::Client` talks to it, so a reconcile function runs unchanged
//! and a test checks what it wrote, without Go or the dev cluster.
//!
//! It keeps JSON objects by path and answers as the API server does where
//! our controllers depend on it: get, list (label selectors `k=v`, `k`),
//! create (409 if present; uid and resourceVersion assigned), replace and
//! status replace (409 on a stale resourceVersion), merge patch (409 when
//! the patch names another uid or resourceVersion), strategic merge patch
//! (the same, with the lists our controllers patch merged by their key:
//! containers by name, conditions by type, ...), delete (409 when the
//! preconditions name another uid or resourceVersion). Every request is
//! recorded.
//!
//! Beside it, [`FedWatch`]: a shared watch whose events the test sends.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::{Arc, Mutex, PoisonError};

use futures::StreamExt as _;
use http_body_util::BodyExt as _;
use hyper::{Request, Response};
use kube::client::Body;
use kube::runtime::watcher;
use kube::{Client, Resource};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::shared::SharedWatch;

/// A shared watch the test feeds by hand: listed with some objects, then
/// given changes one at a time, each waited for until the store shows it
/// (the store is updated by a task of its own).
#[derive(Debug)]
pub struct FedWatch<K: Resource<DynamicType = ()> + Clone + Debug + 'static> {
    events: futures::channel::mpsc::UnboundedSender<watcher::Event<K>>,
    pub watch: SharedWatch<K>,
}

impl<K> FedWatch<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    /// A watch whose first list held `objects`.
    pub async fn listed(objects: impl IntoIterator<Item = K>) -> Self {
        let (events, received) = futures::channel::mpsc::unbounded();
        let watch = SharedWatch::from_events(received.map(Ok));
        let fed = Self { events, watch };
        fed.send(watcher::Event::Init);
        for object in objects {
            fed.send(watcher::Event::InitApply(object));
        }
        fed.send(watcher::Event::InitDone);
        fed.wait_until(SharedWatch::is_listed).await;
        fed
    }

    /// Delivers `objects` as added or changed.
    pub async fn apply(&self, objects: impl IntoIterator<Item = K>) {
        for object in objects {
            let uid = object.meta().uid.clone();
            let version = object.meta().resource_version.clone();
            self.send(watcher::Event::Apply(object));
            self.wait_until(|watch| {
                version.as_deref().is_none_or(|v| watch.has_seen(v))
                    && watch.store().state().iter().any(|held| {
                        held.meta().uid == uid && held.meta().resource_version == version
                    })
            })
            .await;
        }
    }

    /// Delivers the deletion of `object`.
    pub async fn delete(&self, object: K) {
        let uid = object.meta().uid.clone();
        self.send(watcher::Event::Delete(object));
        self.wait_until(|watch| {
            !watch
                .store()
                .state()
                .iter()
                .any(|held| held.meta().uid == uid)
        })
        .await;
    }

    fn send(&self, event: watcher::Event<K>) {
        // The receiver lives as long as the watch's task, which `self` holds.
        let _ = self.events.unbounded_send(event);
    }

    async fn wait_until(&self, done: impl Fn(&SharedWatch<K>) -> bool) {
        for _ in 0..10_000 {
            if done(&self.watch) {
                return;
            }
            tokio::task::yield_now().await;
        }
        panic!("the watch's store never showed the change");
    }
}

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
    /// Whether a pod's status write is followed at once by another writer's.
    kubelet_answers: bool,
    objects: BTreeMap<String, Value>,
    version: u64,
    seen: Vec<Seen>,
    /// (method, plural) pairs answered 403, as a quota or RBAC refuses.
    refused: Vec<(String, String)>,
    /// (method, plural) pairs, each answered 409 once.
    conflicts: Vec<(String, String)>,
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
            // One store for both versions of ours, without converting:
            // good for writes of fields both versions spell alike (the
            // CloneSet's podsToDelete, written in v1beta1).
            ["apis", "apps.kruise.io", "v1beta1", rest @ ..] => {
                ("/apis/apps.kruise.io/v1alpha1".to_owned(), rest)
            }
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
                let strategic = request
                    .headers()
                    .get("content-type")
                    .is_some_and(|t| t.as_bytes() == STRATEGIC.as_bytes());
                let body = match request.into_body().collect().await {
                    Ok(collected) => {
                        serde_json::from_slice(&collected.to_bytes()).unwrap_or(Value::Null)
                    }
                    Err(_) => Value::Null,
                };
                let delay = api.lock().delay;
                tokio::time::sleep(delay).await;
                let request = Asked {
                    method: &method,
                    path: uri.path(),
                    query: uri.query(),
                    strategic,
                };
                let (code, answer) = api.answer(&request, body);
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

    /// Answers every `method` on `plural` (or on one subresource of it,
    /// `plural/status`) with 403 Forbidden, as the API server does for a
    /// create a ResourceQuota refuses.
    pub fn refuse(&self, method: &str, plural: &str) {
        self.lock()
            .refused
            .push((method.to_owned(), plural.to_owned()));
    }

    /// Answers the next `method` on `plural` (or `plural/status`) with 409
    /// Conflict, as when another client wrote the object since it was read.
    pub fn conflict_once(&self, method: &str, plural: &str) {
        self.lock()
            .conflicts
            .push((method.to_owned(), plural.to_owned()));
    }

    /// Answers `method` on `plural` again (see [`FakeApi::refuse`]).
    pub fn accept(&self, method: &str, plural: &str) {
        self.lock()
            .refused
            .retain(|(m, p)| !(m == method && p == plural));
    }

    /// Makes every answer take `delay` (an API server that hangs).
    pub fn set_delay(&self, delay: std::time::Duration) {
        self.lock().delay = delay;
    }

    /// Acts as a kubelet that answers every status write to a pod with one
    /// of its own, as a real one does when a readiness gate flips: the
    /// stored pod's resourceVersion moves on right after the writer's answer.
    pub fn set_kubelet_answers(&self, on: bool) {
        self.lock().kubelet_answers = on;
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

    fn answer(&self, asked: &Asked<'_>, body: Value) -> (u16, Value) {
        let Asked {
            method,
            path,
            query,
            strategic,
        } = *asked;
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
        let status_path = target
            .subresource
            .as_ref()
            .map(|sub| format!("{}/{sub}", target.plural));
        let aimed_here = |(m, p): &(String, String)| {
            m == method && (*p == target.plural || Some(p) == status_path.as_ref())
        };
        if state.refused.iter().any(aimed_here) {
            let message = format!("{method} {}: exceeded quota", target.plural);
            return failure(403, "Forbidden", &message);
        }
        if let Some(index) = state.conflicts.iter().position(aimed_here) {
            state.conflicts.remove(index);
            let message = "the object has been modified; please apply your changes to the latest version and try again";
            return failure(409, "Conflict", message);
        }
        match (method, target.name.as_deref()) {
            ("GET", None) => state.list(&target, query),
            ("POST", None) => state.create(&target, body),
            ("GET", Some(name)) => state.objects.get(&target.key(name)).map_or_else(
                || failure(404, "NotFound", name),
                |object| (200, object.clone()),
            ),
            ("PUT", Some(name)) => state.replace(&target.key(name), &target, body),
            ("PATCH", Some(name)) => state.patch(&target.key(name), &target, &body, strategic),
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

    fn patch(
        &mut self,
        key: &str,
        target: &Target,
        patch: &Value,
        strategic: bool,
    ) -> (u16, Value) {
        let Some(mut object) = self.objects.get(key).cloned() else {
            return failure(404, "NotFound", key);
        };
        for field in ["uid", "resourceVersion"] {
            let wanted = &patch["metadata"][field];
            if !wanted.is_null() && *wanted != object["metadata"][field] {
                return failure(409, "Conflict", &format!("{field} precondition failed"));
            }
        }
        let merge = if strategic {
            strategic_merge
        } else {
            json_patch::merge
        };
        if target.subresource.as_deref() == Some("status") {
            merge(&mut object["status"], &patch["status"]);
        } else {
            merge(&mut object, patch);
        }
        object["metadata"]["resourceVersion"] = json!(self.next_version());
        self.objects.insert(key.to_owned(), object.clone());
        if self.kubelet_answers
            && target.plural == "pods"
            && target.subresource.as_deref() == Some("status")
        {
            let mut answered = object.clone();
            answered["metadata"]["resourceVersion"] = json!(self.next_version());
            self.objects.insert(key.to_owned(), answered);
        }
        (200, object)
    }

    fn delete(&mut self, key: &str, options: &Value) -> (u16, Value) {
        let Some(object) = self.objects.get(key) else {
            return failure(404, "NotFound", key);
        };
        for field in ["uid", "resourceVersion"] {
            let wanted = &options["preconditions"][field];
            if !wanted.is_null() && *wanted != object["metadata"][field] {
                return failure(409, "Conflict", &format!("{field} precondition failed"));
            }
        }
        let object = self.objects.remove(key).unwrap_or_default();
        (200, object)
    }
}

const STRATEGIC: &str = "application/strategic-merge-patch+json";

/// What a request asked for, besides its body.
#[derive(Clone, Copy)]
struct Asked<'a> {
    method: &'a str,
    path: &'a str,
    query: Option<&'a str>,
    /// A strategic merge patch (else a JSON merge patch, for a PATCH).
    strategic: bool,
}

/// The lists our controllers patch that the API server merges by a key
/// in a strategic merge patch (the Kubernetes types' `patchMergeKey`).
const MERGE_KEYS: [(&str, &str); 10] = [
    ("containers", "name"),
    ("initContainers", "name"),
    ("ephemeralContainers", "name"),
    ("containerStatuses", "name"),
    ("initContainerStatuses", "name"),
    ("conditions", "type"),
    ("volumes", "name"),
    ("env", "name"),
    ("volumeMounts", "mountPath"),
    ("readinessGates", "conditionType"),
];

/// A JSON merge patch whose lists in [`MERGE_KEYS`] are merged item by
/// item (patched items merged into the one with the same key, new ones
/// appended) instead of replaced.
fn strategic_merge(target: &mut Value, patch: &Value) {
    let (Value::Object(fields), Value::Object(patched)) = (&mut *target, patch) else {
        *target = patch.clone();
        return;
    };
    for (field, value) in patched {
        if value.is_null() {
            fields.remove(field);
            continue;
        }
        let merge_key = MERGE_KEYS
            .iter()
            .find(|(list, _)| list == field)
            .map(|(_, key)| *key);
        if let (Some(key), Some(Value::Array(items)), Value::Array(patched_items)) =
            (merge_key, fields.get_mut(field), value)
        {
            merge_by_key(items, patched_items, key);
            continue;
        }
        if let Some(existing) = fields.get_mut(field)
            && existing.is_object()
            && value.is_object()
        {
            strategic_merge(existing, value);
            continue;
        }
        fields.insert(field.clone(), value.clone());
    }
}

fn merge_by_key(items: &mut Vec<Value>, patched: &[Value], key: &str) {
    for item in patched {
        match items.iter_mut().find(|existing| existing[key] == item[key]) {
            Some(existing) => strategic_merge(existing, item),
            None => items.push(item.clone()),
        }
    }
}

/// A stored pod's containers as `name=image`, in order: what a rollout
/// test compares.
pub fn container_images(pod: &Value) -> Vec<String> {
    pod["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            let text = |key: &str| c[key].as_str().unwrap_or_default().to_owned();
            format!("{}={}", text("name"), text("image"))
        })
        .collect()
}

/// A stored object's status condition of this type (`Null` if none): what
/// readiness tests compare, as `condition(&pod, "Ready")["status"]`.
pub fn condition<'a>(object: &'a Value, type_: &str) -> &'a Value {
    object["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == type_)
        .unwrap_or(&Value::Null)
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
            // The API server's field for a pod's node.
            Some(("spec.nodeName", node)) => object["spec"]["nodeName"].as_str() == Some(node),
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
    async fn a_strategic_patch_merges_containers_and_conditions_by_their_key() {
        use k8s_openapi::api::core::v1::Pod;
        let api = FakeApi::default();
        api.insert(
            "pods",
            json!({"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": "p", "namespace": "default", "labels": {"a": "1"}},
                   "spec": {"containers": [{"name": "app", "image": "app:1", "ports": [{"containerPort": 80}]},
                                           {"name": "side", "image": "side:1"}],
                            "nodeName": "n1"},
                   "status": {"conditions": [{"type": "Ready", "status": "True"},
                                             {"type": "PodScheduled", "status": "True"}]}}),
        );
        let pods: Api<Pod> = Api::default_namespaced(api.client());
        let patch = json!({"metadata": {"labels": {"a": null, "b": "2"}},
                           "spec": {"containers": [{"name": "side", "image": "side:2"},
                                                   {"name": "new", "image": "new:1"}]}});
        pods.patch("p", &PatchParams::default(), &Patch::Strategic(patch))
            .await
            .unwrap();
        let status = json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}});
        pods.patch_status("p", &PatchParams::default(), &Patch::Strategic(status))
            .await
            .unwrap();
        let stored = api.get("/api/v1/namespaces/default/pods/p").unwrap();
        assert_eq!(stored["metadata"]["labels"], json!({"b": "2"}));
        assert_eq!(
            stored["spec"]["containers"],
            json!([{"name": "app", "image": "app:1", "ports": [{"containerPort": 80}]},
                   {"name": "side", "image": "side:2"},
                   {"name": "new", "image": "new:1"}])
        );
        assert_eq!(stored["spec"]["nodeName"], "n1");
        assert_eq!(
            stored["status"]["conditions"],
            json!([{"type": "Ready", "status": "False"}, {"type": "PodScheduled", "status": "True"}])
        );
        // A merge patch still replaces the list, as the API server does.
        let merge = json!({"spec": {"containers": [{"name": "only", "image": "x"}]}});
        pods.patch("p", &PatchParams::default(), &Patch::Merge(merge))
            .await
            .unwrap();
        let stored = api.get("/api/v1/namespaces/default/pods/p").unwrap();
        assert_eq!(
            stored["spec"]["containers"],
            json!([{"name": "only", "image": "x"}])
        );
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

        let preconditions = |uid: Option<String>, resource_version: Option<String>| DeleteParams {
            preconditions: Some(Preconditions {
                uid,
                resource_version,
            }),
            ..DeleteParams::default()
        };
        let other = preconditions(Some("someone-else".into()), None);
        assert!(api.delete("a", &other).await.is_err());
        let stale_version = preconditions(
            patched.metadata.uid.clone(),
            made.metadata.resource_version.clone(),
        );
        assert!(api.delete("a", &stale_version).await.is_err());
        let as_read = preconditions(
            patched.metadata.uid.clone(),
            patched.metadata.resource_version.clone(),
        );
        api.delete("a", &as_read).await.unwrap();
        assert_eq!(fake.get("/api/v1/namespaces/default/configmaps/a"), None);
        let methods: Vec<String> = fake.writes().into_iter().map(|s| s.method).collect();
        assert_eq!(
            methods,
            [
                "POST", "POST", "POST", "PATCH", "PATCH", "PUT", "DELETE", "DELETE", "DELETE"
            ]
        );
    }
}
