//! A policy ready to evaluate: its compiled module, settings, limits,
//! enforcement and host calls; and loading every policy of a policies.yml,
//! refusing to start on the first bad one.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use crate::admission::{
    AdmissionRequest, AdmissionResponse, Enforcement, Settings, SettingsText,
    raw_validation_payload, settings_from_value, validation_payload,
};
use crate::capabilities::{ContextAwareResource, Grants, PolicyHost};
use crate::cluster_fixtures::ClusterReads;
use crate::cluster_snapshot::{ClusterSnapshot, Observation};
use crate::metadata::Metadata;
use crate::policies_file::{self, PolicyEntry};
use crate::runtime::{CompiledModule, Digest, HostCalls, Limits, LoadError, Runtime, block_on};

pub struct Policy {
    pub id: String,
    /// Replaced when a new cluster snapshot is taken; an evaluation keeps
    /// the module it started with.
    module: RwLock<Arc<CompiledModule>>,
    settings: SettingsText,
    pub enforcement: Enforcement,
    limits: Limits,
    host: Arc<dyn HostCalls>,
    /// For a policy granted kinds to read: the reads and those kinds,
    /// whose caches must have filled before the guest runs.
    cluster: Option<(Arc<dyn ClusterReads>, Vec<ContextAwareResource>)>,
    /// For a module that asks for one and a policy that reads the cluster.
    cluster_snapshot: Option<ClusterSnapshot>,
}

/// How long the server lets a request wait for the host's watch caches to
/// fill. They fill within a few seconds of start-up; a cluster that cannot
/// be listed for longer gets each such request refused with the reason.
/// Half the API server's default webhook timeout (10 s): what is left is
/// for a slot and the evaluation, though a chain whose policies each take
/// their whole timeout can still exceed it.
pub const CLUSTER_FILL_WAIT: Duration = Duration::from_secs(5);

impl std::fmt::Debug for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Policy")
            .field("id", &self.id)
            .field("module", &self.module())
            .field("enforcement", &self.enforcement)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

/// What a policy answers to `validate_settings`.
#[derive(Debug, Deserialize)]
struct SettingsValidationResponse {
    valid: bool,
    #[serde(default)]
    message: Option<String>,
}

impl Policy {
    pub fn new(
        id: &str,
        module: Arc<CompiledModule>,
        settings: &Settings,
        enforcement: Enforcement,
        limits: Limits,
        host: Arc<dyn HostCalls>,
    ) -> Self {
        Self {
            id: id.to_owned(),
            module: RwLock::new(module),
            settings: SettingsText::new(settings),
            enforcement,
            limits,
            host,
            cluster: None,
            cluster_snapshot: None,
        }
    }

    /// The module evaluations start from now.
    fn module(&self) -> Arc<CompiledModule> {
        Arc::clone(&self.module.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// The digest of that module: the loaded module's, or that of the
    /// snapshot which replaced it (a snapshot is a module of its own).
    pub fn module_digest(&self) -> Digest {
        *self.module().digest()
    }

    /// Evaluations start from a snapshot taken after the module (`wasm`,
    /// compiled by `runtime`) read the cluster
    /// ([`crate::metadata::SNAPSHOT_AFTER_READ_CLUSTER`]), once
    /// [`Policy::take_cluster_snapshot`] has taken it; the server keeps it
    /// fresh ([`crate::cluster_snapshot::keep_fresh`]). Only for a policy
    /// that reads the cluster.
    #[must_use]
    pub fn with_cluster_snapshot(mut self, runtime: &Runtime, wasm: &[u8]) -> Self {
        if self.cluster.is_some() {
            self.cluster_snapshot = Some(ClusterSnapshot::new(runtime, wasm));
        }
        self
    }

    pub fn takes_cluster_snapshots(&self) -> bool {
        self.cluster_snapshot.is_some()
    }

    /// Takes the cluster snapshot (again): blocks while the module is run
    /// and compiled, seconds of CPU. Refused while the caches it reads
    /// have not filled. Evaluations under way finish on the module they
    /// started with.
    pub fn take_cluster_snapshot(&self) -> Result<(), String> {
        let Some(snapshot) = &self.cluster_snapshot else {
            return Err(format!("policy {} takes no cluster snapshot", self.id));
        };
        self.cluster_filled()?;
        let module = snapshot.take(self.settings.as_bytes(), self.limits, &self.host)?;
        *self.module.write().unwrap_or_else(PoisonError::into_inner) = module;
        Ok(())
    }

    /// How fresh the cluster snapshot is, and whether the caches it reads
    /// have filled; `None` for a policy without one.
    pub fn observe_cluster_snapshot(&self) -> Option<(Observation, bool)> {
        let snapshot = self.cluster_snapshot.as_ref()?;
        Some((snapshot.observe(&*self.host), self.cluster_filled().is_ok()))
    }

    /// This policy reads `kinds` of `cluster`, through caches that may
    /// fill after the server starts: its guest runs only once they have
    /// (else the request is refused with the reason), rather than see an
    /// empty cluster or a failed read.
    #[must_use]
    pub fn with_cluster_reads(
        mut self,
        cluster: Arc<dyn ClusterReads>,
        kinds: Vec<ContextAwareResource>,
    ) -> Self {
        self.cluster = Some((cluster, kinds)).filter(|(_, kinds)| !kinds.is_empty());
        self
    }

    /// Waits, until `deadline` at most, for the caches this policy reads.
    /// The server waits here before it gives the request an evaluation
    /// slot, so a wait holds no slot and no thread; the evaluation itself
    /// only checks. Panics outside a tokio runtime when a cache has not
    /// filled (the deadline is a tokio timer).
    pub async fn wait_for_cluster(&self, deadline: tokio::time::Instant) {
        let Some((cluster, kinds)) = &self.cluster else {
            return;
        };
        for kind in kinds {
            if cluster.cache_filled(&kind.api_version, &kind.kind).is_err() {
                let filling = cluster.until_filled(&kind.api_version, &kind.kind);
                if tokio::time::timeout_at(deadline, filling).await.is_err() {
                    return;
                }
            }
        }
    }

    /// Whether the caches this policy reads have filled; `Err` says why not.
    fn cluster_filled(&self) -> Result<(), String> {
        let Some((cluster, kinds)) = &self.cluster else {
            return Ok(());
        };
        kinds
            .iter()
            .try_for_each(|kind| cluster.cache_filled(&kind.api_version, &kind.kind))
    }

    /// `Err` carries the policy's explanation. A guest failure counts as
    /// invalid settings, with the failure as the explanation.
    pub async fn validate_settings(&self) -> Result<(), String> {
        let answer = self
            .module()
            .call(
                "validate_settings",
                self.settings.as_bytes(),
                self.limits,
                Arc::clone(&self.host),
            )
            .await
            .map_err(|e| e.to_string())?;
        let verdict: SettingsValidationResponse = serde_json::from_slice(&answer)
            .map_err(|e| format!("Cannot deserialize settings validation response: {e}"))?;
        if verdict.valid {
            Ok(())
        } else {
            Err(verdict.message.unwrap_or_default())
        }
    }

    /// The policy's own verdict, without enforcement (policy-server's
    /// `/audit`).
    pub async fn audit(&self, request: &AdmissionRequest) -> AdmissionResponse {
        if let Err(reason) = self.cluster_filled() {
            return AdmissionResponse::internal_server_error(&request.uid, &reason);
        }
        let payload = validation_payload(request, &self.settings);
        let answer = self
            .module()
            .call("validate", &payload, self.limits, Arc::clone(&self.host))
            .await;
        AdmissionResponse::from_guest(&request.uid, request.object.as_ref(), answer)
    }

    /// The verdict as enforced (policy-server's `/validate`).
    pub async fn validate(&self, request: &AdmissionRequest) -> AdmissionResponse {
        self.enforcement.apply(self.audit(request).await)
    }

    /// A raw policy on arbitrary JSON: a mutation is diffed against the
    /// whole request, and the uid is the request's own, if any.
    pub async fn validate_raw(&self, request: &Value) -> AdmissionResponse {
        let payload = raw_validation_payload(request, &self.settings);
        let uid = request
            .get("uid")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if let Err(reason) = self.cluster_filled() {
            return self
                .enforcement
                .apply(AdmissionResponse::internal_server_error(uid, &reason));
        }
        let answer = self
            .module()
            .call("validate", &payload, self.limits, Arc::clone(&self.host))
            .await;
        self.enforcement
            .apply(AdmissionResponse::from_guest(uid, Some(request), answer))
    }
}

/// Why the server cannot start; each names the policy at fault.
#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    #[error("cannot read policies file {path}: {message}")]
    Read { path: String, message: String },
    #[error(transparent)]
    File(#[from] policies_file::PoliciesFileError),
    #[error("policy `{id}`: {message}")]
    Policy { id: String, message: String },
}

/// Loads, compiles and checks every policy of a policies.yml: a module
/// that is missing, not annotated, not compilable, or whose settings it
/// rejects stops start-up. Blocks the calling thread while the settings
/// are checked.
pub fn load_policies(
    runtime: &Runtime,
    policies_yml: &Path,
    default_timeout: Option<Duration>,
) -> Result<BTreeMap<String, Policy>, StartupError> {
    load_policies_with_cluster(runtime, policies_yml, default_timeout, None)
}

/// [`load_policies`], the Kubernetes reads answered from `cluster`.
pub fn load_policies_with_cluster(
    runtime: &Runtime,
    policies_yml: &Path,
    default_timeout: Option<Duration>,
    cluster: Option<&Arc<dyn ClusterReads>>,
) -> Result<BTreeMap<String, Policy>, StartupError> {
    let text = std::fs::read_to_string(policies_yml).map_err(|e| StartupError::Read {
        path: policies_yml.display().to_string(),
        message: e.to_string(),
    })?;
    let dir = policies_yml.parent().unwrap_or(Path::new("."));
    let mut policies = BTreeMap::new();
    for (id, entry) in policies_file::parse(&text)? {
        let policy = load_policy(runtime, &id, entry, dir, default_timeout, cluster.cloned())?;
        block_on(policy.validate_settings()).map_err(|message| StartupError::Policy {
            id: id.clone(),
            message: format!("settings are not valid: {message}"),
        })?;
        policies.insert(id, policy);
    }
    Ok(policies)
}

fn load_policy(
    runtime: &Runtime,
    id: &str,
    entry: PolicyEntry,
    dir: &Path,
    default_timeout: Option<Duration>,
    cluster: Option<Arc<dyn ClusterReads>>,
) -> Result<Policy, StartupError> {
    let fail = |message: String| StartupError::Policy {
        id: id.to_owned(),
        message,
    };
    let path = policies_file::module_path(id, &entry.module, dir)?;
    let wasm = std::fs::read(&path)
        .map_err(|e| fail(format!("cannot read module {}: {e}", path.display())))?;
    let metadata = Metadata::of(&wasm)
        .and_then(|metadata| metadata.check_servable().map(|()| metadata))
        .map_err(|message| fail(format!("module {}: {message}", path.display())))?;
    let settings = settings_from_value(entry.settings).map_err(fail)?;
    let timeout = entry
        .timeout_eval_seconds
        .map(Duration::from_secs)
        .or(default_timeout);
    let module = load_module(
        runtime,
        id,
        &wasm,
        &metadata,
        &settings,
        runtime.limits(timeout),
    )
    .map_err(|e| fail(format!("module {}: {e}", path.display())))?;
    let reads = cluster
        .clone()
        .map(|cluster| (cluster, entry.context_aware_resources.clone()));
    let host = PolicyHost {
        policy_id: id.to_owned(),
        grants: Grants {
            host_capabilities: entry.host_capabilities,
            context_aware_resources: entry.context_aware_resources,
        },
        cluster,
    };
    let enforcement = Enforcement {
        policy_id: id.to_owned(),
        mode: entry.policy_mode,
        allowed_to_mutate: entry.allowed_to_mutate.unwrap_or(false),
        custom_message: entry.message,
    };
    let policy = Policy::new(
        id,
        module,
        &settings,
        enforcement,
        runtime.limits(timeout),
        Arc::new(host),
    );
    let policy = match reads {
        Some((cluster, kinds)) => policy.with_cluster_reads(cluster, kinds),
        None => policy,
    };
    Ok(if metadata.snapshot_after_read_cluster() {
        policy.with_cluster_snapshot(runtime, &wasm)
    } else {
        policy
    })
}

/// The module (`wasm`, whose `metadata` the caller has read) as a policy
/// with `settings` evaluates it: from a snapshot taken after
/// `validate_settings` when there are settings and the module asks for one
/// ([`Metadata::snapshot_after_validate_settings`]), else from its own
/// initial state. A snapshot that cannot be taken is only slower, never
/// another answer: the module is then used as it is (and a guest that
/// fails `validate_settings` is reported by the settings check after).
pub fn load_module(
    runtime: &Runtime,
    policy_id: &str,
    wasm: &[u8],
    metadata: &Metadata,
    settings: &Settings,
    limits: Limits,
) -> Result<Arc<CompiledModule>, LoadError> {
    // With no settings there is nothing to prepare, and a snapshot costs
    // two more compilations of the module.
    if !settings.is_empty() && metadata.snapshot_after_validate_settings() {
        let payload = SettingsText::new(settings);
        match runtime.load_snapshot(wasm, "validate_settings", payload.as_bytes(), limits) {
            Ok(module) => return Ok(module),
            Err(error) => tracing::warn!(
                policy = policy_id,
                %error,
                "evaluations start from the module's own initial state"
            ),
        }
    }
    runtime.load(wasm)
}
