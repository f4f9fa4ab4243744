//! Kubewarden policy: OpenKruise's SidecarSet injection. On Pod CREATE the
//! matching SidecarSets are injected (kruise-core does the work); every
//! other request is accepted unchanged.

mod settings;

/// The cluster reads (Kubewarden host calls), shared with the SidecarSet
/// validating policy.
pub use kruise_policy_support::cluster;

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::Pod;
use kruise_api::SidecarSet;
use kruise_core::sidecarset::{InjectionContext, inject};
use kruise_policy_support::cluster::read_sidecar_sets;
use kruise_policy_support::{
    Answer, Outcome, PodAdmission, pod_to_create, read_pod_request, read_settings,
};
use serde_json::value::RawValue;

pub use cluster::{Cluster, ListedSidecarSets, NoCluster};
pub use settings::{Settings, prepare};

/// What the decision needs from outside: the time, a random draw (for the
/// `Partial` revision policy) and the cluster.
#[derive(Clone, Copy, Debug)]
pub struct Environment<'a, C: Cluster> {
    /// RFC 3339, written as the hash records' `updateTimestamp`.
    pub now: &'a str,
    /// In `[0, 1)`; `None` when the platform gave none, which only a
    /// `Partial` revision policy needs (it then refuses the pod, saying so).
    pub random_draw: Option<f64>,
    pub cluster: &'a C,
}

/// What a module instance keeps between calls: the last settings it read,
/// and the last list of the cluster's SidecarSets. Kubewarden sends the
/// settings with every request, and the guest lists the SidecarSets for
/// every pod; our host gives every request a fresh instance, but starts it
/// from a snapshot taken after `validate_settings` (or, reading the
/// cluster, after [`Instance::read_cluster`]), so with it SidecarSets are
/// read and prepared once per policy or per change of the list, not once
/// per pod.
#[derive(Debug, Default)]
pub struct Instance {
    kept: Option<ReadSettings>,
    listed: Option<ReadListing>,
}

/// The cluster's SidecarSets as read from one `List` answer, prepared.
/// The answer's text is the key: a request whose list answer is that text
/// uses them as they are. Any change (a SidecarSet's status included)
/// changes the text, so what is kept is never staler than the answer.
#[derive(Debug)]
struct ReadListing {
    answer: Vec<u8>,
    sidecar_sets: Vec<SidecarSet>,
    /// Why each SidecarSet that could not be read was left out.
    unreadable: Vec<String>,
}

impl ReadListing {
    fn read(answer: Vec<u8>) -> Result<Self, String> {
        let listed = read_sidecar_sets(&answer)?;
        Ok(Self {
            sidecar_sets: listed.readable.into_iter().map(prepare).collect(),
            unreadable: listed.unreadable,
            answer,
        })
    }
}

/// The SidecarSets of `answer`: the kept ones when it is the same text,
/// else read anew and kept. An answer that is no List is refused and
/// leaves the kept ones as they were.
fn listing_of<'a>(
    kept: &'a mut Option<ReadListing>,
    answer: &[u8],
) -> Result<&'a ReadListing, String> {
    kept_or_read(
        kept,
        |listing| listing.answer == answer,
        || ReadListing::read(answer.to_vec()),
    )
}

/// What `kept` holds when `same` says it came from the same text, else
/// what `read` reads, kept in its place; a failed read keeps the old.
fn kept_or_read<T>(
    kept: &mut Option<T>,
    same: impl FnOnce(&T) -> bool,
    read: impl FnOnce() -> Result<T, String>,
) -> Result<&T, String> {
    match kept.take() {
        Some(old) if same(&old) => Ok(kept.insert(old)),
        old => match read() {
            Ok(fresh) => Ok(kept.insert(fresh)),
            Err(message) => {
                *kept = old;
                Err(message)
            }
        },
    }
}

/// Settings as read from one JSON text, with their inline SidecarSets read
/// strictly, defaulted and hashed. Both hosts send the same settings as
/// the same text with every request, so the text is the key: a request
/// with that text uses them without reading anything again.
#[derive(Debug)]
struct ReadSettings {
    text: String,
    settings: Settings,
    inline: Option<Result<Vec<SidecarSet>, String>>,
}

impl ReadSettings {
    fn read(text: &str) -> Result<Self, String> {
        let settings = read_settings::<Settings>(text.as_bytes())?;
        Ok(Self {
            text: text.to_owned(),
            inline: settings.inline_sidecar_sets(),
            settings,
        })
    }

    fn inline(&self) -> Option<Result<&[SidecarSet], &str>> {
        let read = self.inline.as_ref()?;
        Some(read.as_deref().map_err(String::as_str))
    }
}

impl Instance {
    /// The `validate` waPC operation: payload in, Kubewarden response out.
    pub fn respond<C: Cluster>(
        &mut self,
        payload: &[u8],
        environment: &Environment<'_, C>,
    ) -> Result<Vec<u8>, String> {
        let answer = match read_pod_request::<&RawValue>(payload) {
            Ok(request) => match keep_settings(&mut self.kept, request.settings.get()) {
                Ok(read) => evaluate_prepared(
                    &request.request,
                    &read.settings,
                    read.inline(),
                    &mut self.listed,
                    environment,
                ),
                Err(e) => {
                    Outcome::bad_request(format!("cannot read the validation request: {e}")).into()
                }
            },
            Err(message) => Outcome::bad_request(message).into(),
        };
        answer.into_payload().map_err(|e| e.to_string())
    }

    /// The `validate_settings` waPC operation. The settings it reads are
    /// kept: a host that snapshots the instance after this call (ours
    /// does, `io.kruise-wasm/snapshot-after-validate-settings`) starts
    /// every evaluation with them read and their SidecarSets prepared.
    pub fn validate_settings(&mut self, payload: &[u8]) -> Result<Vec<u8>, String> {
        let verdict = std::str::from_utf8(payload)
            .map_err(|e| format!("invalid settings: {e}"))
            .and_then(|text| keep_settings(&mut self.kept, text))
            .and_then(|read| read.settings.validate(read.inline()));
        let response = match verdict {
            Ok(()) => serde_json::json!({ "valid": true, "message": null }),
            Err(message) => serde_json::json!({ "valid": false, "message": message }),
        };
        serde_json::to_vec(&response).map_err(|e| e.to_string())
    }

    /// The [`READ_CLUSTER`](kruise_policy_support::READ_CLUSTER)
    /// operation: `validate_settings`, then, when the settings give no
    /// SidecarSets, the cluster's listed and kept as a pod's request would
    /// list them. A host that snapshots the instance after it starts every
    /// evaluation with them prepared, for as long as the list answers the
    /// same text. A failed list keeps nothing: each request lists again.
    pub fn read_cluster<C: Cluster>(
        &mut self,
        payload: &[u8],
        cluster: &C,
    ) -> Result<Vec<u8>, String> {
        let verdict = self.validate_settings(payload)?;
        let reads_cluster = self.kept.as_ref().is_some_and(|read| read.inline.is_none());
        if reads_cluster && let Ok(answer) = cluster.sidecar_sets_answer() {
            let _ = listing_of(&mut self.listed, &answer);
        }
        Ok(verdict)
    }
}

/// The settings of `text`: the kept ones when the text is the same, else
/// read anew and kept. Text that cannot be read is refused and leaves the
/// kept settings as they were.
fn keep_settings<'a>(
    kept: &'a mut Option<ReadSettings>,
    text: &str,
) -> Result<&'a ReadSettings, String> {
    kept_or_read(kept, |read| read.text == text, || ReadSettings::read(text))
}

/// The decision for one admission request under `settings`, read afresh
/// (a module instance keeps what it read: [`Instance::respond`]). A
/// SidecarSet of the cluster that cannot be read is left out, and named
/// in a warning.
pub fn evaluate<C: Cluster>(
    request: &PodAdmission<'_>,
    settings: &Settings,
    environment: &Environment<'_, C>,
) -> Answer {
    let inline = settings.inline_sidecar_sets();
    let inline = inline
        .as_ref()
        .map(|read| read.as_deref().map_err(String::as_str));
    evaluate_prepared(request, settings, inline, &mut None, environment)
}

fn evaluate_prepared<C: Cluster>(
    request: &PodAdmission<'_>,
    settings: &Settings,
    inline: Option<Result<&[SidecarSet], &str>>,
    listed: &mut Option<ReadListing>,
    environment: &Environment<'_, C>,
) -> Answer {
    let pod = match pod_to_create(request) {
        Ok(Some(pod)) => pod,
        Ok(None) => return Outcome::Accept.into(),
        Err(message) => return Outcome::bad_request(message).into(),
    };
    let namespace = pod
        .metadata
        .namespace
        .clone()
        .filter(|n| !n.is_empty())
        .or_else(|| Some(request.namespace.clone()).filter(|n| !n.is_empty()))
        .unwrap_or_else(|| "default".to_owned());
    let state = match ClusterState::read(settings, inline, listed, &namespace, environment.cluster)
    {
        Ok(state) => state,
        Err(message) => {
            return Outcome::Reject { message, code: 500 }.into();
        }
    };
    let warnings = state
        .unreadable
        .iter()
        .map(|message| format!("{message}; this SidecarSet is not injected until it is fixed"))
        .collect();
    Answer {
        outcome: inject_pod(&pod, request, &state, environment),
        warnings,
    }
}

fn inject_pod<C: Cluster>(
    pod: &Pod,
    request: &PodAdmission<'_>,
    state: &ClusterState<'_>,
    environment: &Environment<'_, C>,
) -> Outcome {
    let context = InjectionContext {
        sidecar_sets: state.sidecar_sets,
        namespace_labels: state.namespace_labels.as_ref(),
        request_namespace: Some(&request.namespace)
            .filter(|n| !n.is_empty())
            .map(String::as_str),
        now: environment.now,
        revisions: &state.revisions,
        random_draw: environment.random_draw,
    };
    match inject(pod, &context) {
        Ok(injection) if injection.sidecar_sets.is_empty() => Outcome::Accept,
        Ok(injection) => Outcome::MutatePod(Box::new(injection.pod)),
        Err(e) => Outcome::bad_request(e.to_string()),
    }
}

/// What injection reads: from the settings, or from the cluster.
struct ClusterState<'a> {
    sidecar_sets: &'a [SidecarSet],
    /// Why each SidecarSet of the cluster that could not be read was left out.
    unreadable: &'a [String],
    namespace_labels: Option<BTreeMap<String, String>>,
    revisions: Vec<ControllerRevision>,
}

impl<'a> ClusterState<'a> {
    /// The inline SidecarSets if any, else the cluster's, through the
    /// instance's `listed`.
    fn read<C: Cluster>(
        settings: &Settings,
        inline: Option<Result<&'a [SidecarSet], &str>>,
        listed: &'a mut Option<ReadListing>,
        namespace: &str,
        cluster: &C,
    ) -> Result<Self, String> {
        if let Some(inline) = inline {
            return Ok(Self {
                sidecar_sets: inline.map_err(str::to_owned)?,
                namespace_labels: settings
                    .namespace_labels
                    .as_ref()
                    .and_then(|labels| labels.get(namespace))
                    .cloned(),
                revisions: Vec::new(),
                unreadable: &[],
            });
        }
        let listed = listing_of(listed, &cluster.sidecar_sets_answer()?)?;
        let sidecar_sets = &listed.sidecar_sets;
        let needs_namespace = sidecar_sets
            .iter()
            .any(|s| s.spec.namespace_selector.is_some());
        let namespace_labels = if needs_namespace {
            Some(cluster.namespace_labels(namespace)?)
        } else {
            None
        };
        let mut revisions = Vec::new();
        for sidecar_set in sidecar_sets {
            let wants_revision = sidecar_set
                .spec
                .injection_strategy
                .as_ref()
                .is_some_and(|s| s.revision.is_some());
            if let (true, Some(name)) = (wants_revision, &sidecar_set.metadata.name) {
                revisions.extend(cluster.sidecar_set_revisions(name)?);
            }
        }
        Ok(Self {
            sidecar_sets,
            unreadable: &listed.unreadable,
            namespace_labels,
            revisions,
        })
    }
}

#[cfg(target_arch = "wasm32")]
mod guest {
    use std::cell::RefCell;

    use crate::cluster::HOST_CLUSTER;
    use crate::{Environment, Instance};

    thread_local! {
        /// A waPC module instance serves its requests one at a time.
        static INSTANCE: RefCell<Instance> = RefCell::default();
    }

    kruise_policy_support::export_policy!(
        validate: validate,
        validate_settings: validate_settings,
        read_cluster: read_cluster,
    );

    fn validate_settings(payload: &[u8]) -> Result<Vec<u8>, String> {
        INSTANCE.with_borrow_mut(|instance| instance.validate_settings(payload))
    }

    fn read_cluster(payload: &[u8]) -> Result<Vec<u8>, String> {
        INSTANCE.with_borrow_mut(|instance| instance.read_cluster(payload, &HOST_CLUSTER))
    }

    fn validate(payload: &[u8]) -> Result<Vec<u8>, String> {
        let now = kruise_policy_support::clock::now_rfc3339();
        let environment = Environment {
            now: &now,
            random_draw: kruise_policy_support::random::random_unit(),
            cluster: &HOST_CLUSTER,
        };
        INSTANCE.with_borrow_mut(|instance| instance.respond(payload, &environment))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::collections::BTreeMap;

    use k8s_openapi::api::apps::v1::ControllerRevision;
    use serde_json::json;

    use super::Instance;

    const SIDECAR_SET: &str = r#"{"sidecarSets": [{"apiVersion": "apps.kruise.io/v1alpha1",
        "kind": "SidecarSet", "metadata": {"name": "s"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}}]}"#;

    /// A request whose settings have the text `validate_settings` saw uses
    /// the settings read then, and answers as a fresh instance would;
    /// other settings are read anew, a typo in them refused without
    /// losing the settings kept.
    #[test]
    fn requests_reuse_the_settings_read_from_the_same_text() {
        let environment = crate::Environment {
            now: "2026-12-04T00:00:00Z",
            random_draw: Some(0.5),
            cluster: &crate::NoCluster,
        };
        let payload = |settings: &str| {
            format!(
                r#"{{"request": {{"uid": "u", "operation": "CREATE",
                    "kind": {{"group": "", "version": "v1", "kind": "Pod"}},
                    "object": {{"apiVersion": "v1", "kind": "Pod",
                                "metadata": {{"name": "p", "labels": {{"app": "a"}}}},
                                "spec": {{"containers": [{{"name": "main", "image": "x"}}]}}}}}},
                    "settings": {settings}}}"#
            )
        };
        let selecting = SIDECAR_SET.replace(
            r#""spec": {"#,
            r#""spec": {"selector": {"matchLabels": {"app": "a"}}, "#,
        );
        let answer = |instance: &mut Instance, settings: &str| {
            let answer = instance
                .respond(payload(settings).as_bytes(), &environment)
                .unwrap();
            serde_json::from_slice::<serde_json::Value>(&answer).unwrap()
        };
        let mut instance = Instance::default();
        instance.validate_settings(selecting.as_bytes()).unwrap();
        let reused = answer(&mut instance, &selecting);
        assert_eq!(instance.kept.as_ref().unwrap().text, selecting);
        assert_eq!(reused, answer(&mut Instance::default(), &selecting));
        assert!(reused["mutated_object"].is_object(), "{reused}");

        let typo = selecting.replace("sidecarSets", "sidecarSetz");
        let typo_answer = answer(&mut instance, &typo);
        assert_eq!(typo_answer["accepted"], false);
        let message = typo_answer["message"].as_str().unwrap();
        assert!(message.contains("sidecarSetz"), "{message}");
        assert_eq!(instance.kept.as_ref().unwrap().text, selecting);
        assert_eq!(answer(&mut instance, &selecting), reused);
    }

    /// A cluster whose SidecarSet list answer the test sets.
    struct Listing(std::cell::RefCell<Vec<u8>>);

    impl crate::Cluster for Listing {
        fn sidecar_sets_answer(&self) -> Result<Vec<u8>, String> {
            Ok(self.0.borrow().clone())
        }
        fn namespace_labels(&self, namespace: &str) -> Result<BTreeMap<String, String>, String> {
            Err(format!("unexpected read of namespace {namespace}"))
        }
        fn sidecar_set_revisions(&self, _: &str) -> Result<Vec<ControllerRevision>, String> {
            Ok(Vec::new())
        }
    }

    fn list_of_one(image: &str) -> Vec<u8> {
        let sidecar_set = json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet",
            "metadata": {"name": "s", "uid": "u1", "generation": 1},
            "spec": {"selector": {"matchLabels": {"app": "a"}},
                     "containers": [{"name": "c", "image": image}]}});
        serde_json::to_vec(&json!({"apiVersion": "apps.kruise.io/v1alpha1",
            "kind": "SidecarSetList", "items": [sidecar_set]}))
        .unwrap()
    }

    /// `read_cluster` keeps the listed SidecarSets prepared; a request
    /// whose list answer is the same text uses them without reading them
    /// again and answers as a fresh instance would; a changed answer is
    /// read anew; an answer that is no List is refused, keeping them.
    #[test]
    fn listed_sidecarsets_are_kept_while_the_list_answers_the_same_text() {
        let cluster = Listing(list_of_one("busybox:1").into());
        let environment = crate::Environment {
            now: "2026-12-04T00:00:00Z",
            random_draw: Some(0.5),
            cluster: &cluster,
        };
        let payload = br#"{"request": {"uid": "u", "operation": "CREATE",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "object": {"apiVersion": "v1", "kind": "Pod",
                       "metadata": {"name": "p", "labels": {"app": "a"}},
                       "spec": {"containers": [{"name": "main", "image": "x"}]}}},
            "settings": {}}"#;
        let answer = |instance: &mut Instance| {
            let answer = instance.respond(payload, &environment).unwrap();
            serde_json::from_slice::<serde_json::Value>(&answer).unwrap()
        };
        let sidecar_image = |answer: &serde_json::Value| {
            answer["mutated_object"]["spec"]["containers"][0]["image"].clone()
        };
        let kept = |instance: &Instance| {
            let listed = instance.listed.as_ref().unwrap();
            (listed.answer.clone(), listed.sidecar_sets.as_ptr())
        };

        let mut instance = Instance::default();
        let verdict = instance.read_cluster(b"{}", &cluster).unwrap();
        assert_eq!(
            serde_json::from_slice::<serde_json::Value>(&verdict).unwrap(),
            json!({"valid": true, "message": null})
        );
        let read = kept(&instance);
        assert_eq!(read.0, list_of_one("busybox:1"));
        let reused = answer(&mut instance);
        assert_eq!(kept(&instance), read, "read again");
        assert_eq!(reused, answer(&mut Instance::default()));
        assert_eq!(sidecar_image(&reused), "busybox:1", "{reused}");

        *cluster.0.borrow_mut() = list_of_one("busybox:2");
        let changed = answer(&mut instance);
        assert_eq!(sidecar_image(&changed), "busybox:2", "{changed}");
        assert_eq!(kept(&instance).0, list_of_one("busybox:2"));

        *cluster.0.borrow_mut() = b"{}".to_vec();
        let not_a_list = answer(&mut instance);
        let message = not_a_list["message"].as_str().unwrap();
        assert!(message.contains("not a Kubernetes List"), "{not_a_list}");
        assert_eq!(kept(&instance).0, list_of_one("busybox:2"));
    }

    /// With inline SidecarSets, `read_cluster` reads no cluster.
    #[test]
    fn read_cluster_with_inline_sidecarsets_lists_nothing() {
        let mut instance = Instance::default();
        instance
            .read_cluster(SIDECAR_SET.as_bytes(), &crate::NoCluster)
            .unwrap();
        assert!(instance.kept.is_some());
        assert!(instance.listed.is_none());
    }

    /// What a host snapshots after `validate_settings` must hold the
    /// prepared SidecarSets, or the snapshot saves nothing.
    #[test]
    fn validate_settings_keeps_the_prepared_sidecarsets() {
        let mut instance = Instance::default();
        let verdict = instance.validate_settings(SIDECAR_SET.as_bytes()).unwrap();
        let verdict: serde_json::Value = serde_json::from_slice(&verdict).unwrap();
        assert_eq!(verdict, json!({"valid": true, "message": null}));
        let kept = instance.kept.as_ref().unwrap();
        let prepared = kept.inline.as_ref().unwrap().as_ref().unwrap();
        assert_eq!(prepared[0].metadata.name.as_deref(), Some("s"));
        assert!(
            prepared[0]
                .metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key("kruise.io/sidecarset-hash")),
            "not prepared: {prepared:?}"
        );
    }
}
