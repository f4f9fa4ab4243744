//! `kruise-wasm bench`: starts the policy server on loopback with the two
//! embedded modules, loads it over plain HTTP and TLS, and measures the
//! fixed cost of a fresh instance.
//!
//! Workloads: the bar's own (the add-label bench module: one label added to
//! the seed pod), launch-priority on the Ordered example pod (a small
//! mutation through typed Kubernetes objects), and the sidecarset module on
//! the seed pod (`pod-test-pod` with `scs-demo`).

pub mod load;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::ClientConfig;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject as _;
use serde_json::{Value, json};

use crate::admission::{AdmissionRequest, Enforcement, Settings};
use crate::capabilities::{Grants, PolicyHost};
use crate::inject::{pod_create_request, sidecarset_settings};
use crate::policy::Policy;
use crate::runtime::{CompiledModule, Limits, Runtime, block_on};
use crate::server::api::Policies;
use crate::server::{self, ServerConfig, TlsFiles};
use load::{Figures, Load};

const SEED_POD: &str = include_str!("../../../policies/fixtures/examples/pod-test-pod.yaml");
const SCS_DEMO: &str = include_str!("../../../policies/fixtures/examples/sidecarset-scs-demo.yaml");
const ORDERED_POD: &str =
    include_str!("../../../policies/fixtures/examples/pod-launch-ordered.yaml");

/// The longest run accepted: a bench must not hold a shared machine.
pub const MAX_DURATION: Duration = Duration::from_mins(1);

#[derive(Debug, Clone)]
pub struct BenchConfig {
    pub connections: usize,
    pub duration: Duration,
    pub workers: usize,
    /// Server certificate and key, and the CA the client trusts; the TLS
    /// runs are skipped without them.
    pub tls: Option<(TlsFiles, PathBuf)>,
    /// Fresh instances created to time instantiation.
    pub instances: usize,
}

/// Runs everything and returns the report's lines.
pub fn run(runtime: &Runtime, config: &BenchConfig) -> Result<Vec<String>, String> {
    if config.duration > MAX_DURATION {
        return Err(format!(
            "--duration is at most {} s",
            MAX_DURATION.as_secs()
        ));
    }
    let (policies, sidecarset) = policies(runtime)?;
    let workloads = [
        ("add-label", review(SEED_POD)?),
        ("launch-priority", review(ORDERED_POD)?),
        ("sidecarset", review(SEED_POD)?),
    ];
    for (policy, body) in &workloads {
        check_mutates(&policies, policy, body)?;
    }
    let mut transports = vec![("http", None)];
    if let Some((files, ca)) = &config.tls {
        transports.push(("https", Some((files.clone(), client_config(ca)?))));
    }
    let mut report = vec![format!(
        "{} connections, {} s per run, {} workers, loopback",
        config.connections,
        config.duration.as_secs_f64(),
        config.workers
    )];
    for (transport, tls) in transports {
        let server = server::start(
            Policies {
                policies: policies.clone(),
                ..Policies::default()
            },
            &ServerConfig {
                address: [127, 0, 0, 1].into(),
                port: 0,
                readiness_port: 0,
                workers: config.workers,
                tls: tls.as_ref().map(|(files, _)| files.clone()),
                ..ServerConfig::default()
            },
        )?;
        for (policy, body) in &workloads {
            let load = Load {
                address: server.address,
                tls: tls.as_ref().map(|(_, client)| Arc::clone(client)),
                path: format!("/validate/{policy}"),
                body: Arc::new(body.clone()),
                connections: config.connections,
                duration: config.duration,
            };
            // Fills the pool's slots and the connections' TLS sessions.
            Load {
                duration: Duration::from_millis(500),
                ..load.clone()
            }
            .run()?;
            report.push(line(transport, policy, &load.run()?));
        }
        server.shutdown();
    }
    report.push(instance_cost(&sidecarset, runtime, config.instances)?);
    Ok(report)
}

fn line(transport: &str, policy: &str, figures: &Figures) -> String {
    format!(
        "{transport:5} {policy:15} {:>8.0} req/s  p50 {:>7.3} ms  p99 {:>7.3} ms  ({} requests, {} errors)",
        figures.per_second(),
        figures.p50.as_secs_f64() * 1e3,
        figures.p99.as_secs_f64() * 1e3,
        figures.requests,
        figures.errors
    )
}

type PolicyMap = BTreeMap<String, Arc<Policy>>;

/// The two embedded modules as the server would load them, and the
/// sidecarset module for the instance timing.
fn policies(runtime: &Runtime) -> Result<(PolicyMap, Arc<CompiledModule>), String> {
    let scs_demo: Value = serde_yaml::from_str(SCS_DEMO).map_err(|e| e.to_string())?;
    let sidecarset = runtime
        .load(kruise_policy_modules::SIDECARSET.wasm)
        .map_err(|e| e.to_string())?;
    let launch_priority = runtime
        .load(kruise_policy_modules::LAUNCH_PRIORITY.wasm)
        .map_err(|e| e.to_string())?;
    let add_label = runtime
        .load(kruise_policy_modules::BENCH_ADD_LABEL.wasm)
        .map_err(|e| e.to_string())?;
    let policy = |id: &str, module: &Arc<CompiledModule>, settings: Settings| {
        let host = PolicyHost {
            policy_id: id.to_owned(),
            grants: Grants::default(),
            cluster: None,
        };
        let policy = Policy::new(
            id,
            Arc::clone(module),
            settings,
            Enforcement::kwctl_run(id),
            runtime.limits(Some(crate::runtime::DEFAULT_TIMEOUT)),
            Arc::new(host),
        );
        block_on(policy.validate_settings())
            .map(|()| (id.to_owned(), Arc::new(policy)))
            .map_err(|message| format!("{id}: settings are not valid: {message}"))
    };
    let policies = [
        policy(
            "sidecarset",
            &sidecarset,
            sidecarset_settings(vec![scs_demo], "default", None),
        )?,
        policy("launch-priority", &launch_priority, Settings::new())?,
        policy("add-label", &add_label, add_label_settings())?,
    ];
    Ok((policies.into_iter().collect(), sidecarset))
}

/// The bar's policy: one label added to every object.
fn add_label_settings() -> Settings {
    let mut settings = Settings::new();
    settings.insert("key".to_owned(), json!("bench.kruise.io/seen"));
    settings.insert("value".to_owned(), json!("yes"));
    settings
}

/// The AdmissionReview of a pod CREATE, as the API server sends it.
fn review(pod_yaml: &str) -> Result<Vec<u8>, String> {
    let pod: Value = serde_yaml::from_str(pod_yaml).map_err(|e| e.to_string())?;
    let request = pod_create_request(&pod, "default")?;
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": request,
    }))
    .map_err(|e| e.to_string())
}

/// A workload that the policy rejects would measure the wrong path: each
/// must come back as an accepted mutation.
fn check_mutates(policies: &PolicyMap, id: &str, body: &[u8]) -> Result<(), String> {
    let review: Value = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    let request = AdmissionRequest::from_document(review).map_err(|e| e.to_string())?;
    let policy = policies.get(id).ok_or_else(|| format!("no policy {id}"))?;
    let response = block_on(policy.validate(&request));
    if response.allowed && response.patch.is_some() {
        Ok(())
    } else {
        Err(format!(
            "{id} does not mutate its bench pod: {}",
            response.to_json()
        ))
    }
}

fn client_config(ca: &std::path::Path) -> Result<Arc<ClientConfig>, String> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).map_err(|e| format!("{}: {e}", ca.display()))? {
        roots
            .add(cert.map_err(|e| format!("{}: {e}", ca.display()))?)
            .map_err(|e| format!("{}: {e}", ca.display()))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// Instantiation plus `_start`/`wapc_init`, no guest call: what every
/// evaluation pays before the policy runs.
fn instance_cost(
    module: &CompiledModule,
    runtime: &Runtime,
    count: usize,
) -> Result<String, String> {
    let limits: Limits = runtime.limits(Some(crate::runtime::DEFAULT_TIMEOUT));
    let mut times = Vec::with_capacity(count);
    for _ in 0..count.max(1) {
        let started = Instant::now();
        block_on(module.instantiate_only(limits)).map_err(|e| e.to_string())?;
        times.push(started.elapsed());
    }
    times.sort_unstable();
    let median = times[times.len() / 2];
    Ok(format!(
        "fresh sidecarset instance (instantiate + _start + wapc_init): median {:.1} µs over {} instances",
        median.as_secs_f64() * 1e6,
        times.len()
    ))
}
