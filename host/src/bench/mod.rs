//! `kruise-wasm bench`: starts the policy server on loopback with the
//! embedded modules, loads it over plain HTTP and TLS, and measures the
//! fixed cost of a fresh instance.
//!
//! Workloads: the bar's own (the add-label bench module: one label added to
//! the seed pod), launch-priority on the Ordered example pod (a small
//! mutation through typed Kubernetes objects), and the sidecarset module on
//! the seed pod (`pod-test-pod` with `scs-demo` inline), as our server
//! serves it (from a snapshot taken after validate_settings) and without
//! that snapshot. With a kubeconfig, also the sidecarset module reading
//! `scs-demo` from that cluster (our server from its watch caches).
//!
//! With `--policy-server`, Kubewarden's policy-server serves the same
//! modules and settings beside ours, with the same workers and transport,
//! and each workload runs in rounds alternating the two servers (the
//! machine is shared: alternation spreads its noise over both); the report
//! gives both medians and the ratios.

mod cluster;
pub mod load;
mod policy_server;

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
use crate::cluster_fixtures::ClusterReads;
use crate::inject::{pod_create_request, sidecarset_settings};
use crate::live_cluster::LiveCluster;
use crate::metadata::Metadata;
use crate::policy::{Policy, load_module};
use crate::runtime::{CompiledModule, Limits, Runtime, block_on};
use crate::server::api::Policies;
use crate::server::{self, ServerConfig, TlsFiles};
use load::{Figures, Load};
use policy_server::{KUBERNETES_CAPABILITIES, PolicyFile, PolicyServer};

const SEED_POD: &str = include_str!("../../../policies/fixtures/examples/pod-test-pod.yaml");
const SCS_DEMO: &str = include_str!("../../../policies/fixtures/examples/sidecarset-scs-demo.yaml");
const ORDERED_POD: &str =
    include_str!("../../../policies/fixtures/examples/pod-launch-ordered.yaml");

/// The sidecarset workload's policy without the snapshot our server
/// takes after validate_settings.
const NO_SNAPSHOT: &str = "sidecarset-no-snapshot";
/// The sidecarset policy reading its SidecarSets from the cluster.
const CLUSTER: &str = "sidecarset-cluster";

/// Every workload: the policy it is POSTed to and the pod it creates.
const WORKLOADS: [(&str, &str); 5] = [
    ("add-label", SEED_POD),
    ("launch-priority", ORDERED_POD),
    ("sidecarset", SEED_POD),
    (NO_SNAPSHOT, SEED_POD),
    (CLUSTER, SEED_POD),
];

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
    /// Kubewarden's policy-server, measured beside ours.
    pub policy_server: Option<PathBuf>,
    /// Runs per server and workload when comparing.
    pub rounds: usize,
    /// The workloads to run by name; empty runs every one that can run.
    pub workloads: Vec<String>,
    /// The kubeconfig of the cluster the cluster-mode workload reads.
    pub kubeconfig: Option<PathBuf>,
}

/// The workloads `config` asks for: those it names, or else every one
/// that can run (the cluster-mode one needs a kubeconfig).
fn chosen_workloads(config: &BenchConfig) -> Result<Vec<(&'static str, &'static str)>, String> {
    if let Some(unknown) = config
        .workloads
        .iter()
        .find(|name| !WORKLOADS.iter().any(|(id, _)| id == name))
    {
        let known: Vec<&str> = WORKLOADS.iter().map(|(id, _)| *id).collect();
        return Err(format!(
            "no workload {unknown}: the workloads are {}",
            known.join(", ")
        ));
    }
    let chosen: Vec<_> = WORKLOADS
        .into_iter()
        .filter(|(id, _)| {
            if config.workloads.is_empty() {
                *id != CLUSTER || config.kubeconfig.is_some()
            } else {
                config.workloads.iter().any(|name| name == id)
            }
        })
        .collect();
    if config.kubeconfig.is_none() && chosen.iter().any(|(id, _)| *id == CLUSTER) {
        return Err(format!(
            "{CLUSTER} reads its SidecarSets from a cluster: give --kubeconfig"
        ));
    }
    Ok(chosen)
}

/// Runs everything and returns the report's lines.
pub fn run(runtime: &Runtime, config: &BenchConfig) -> Result<Vec<String>, String> {
    if config.duration > MAX_DURATION {
        return Err(format!(
            "--duration is at most {} s",
            MAX_DURATION.as_secs()
        ));
    }
    let chosen = chosen_workloads(config)?;
    let files = policy_files(&chosen)?;
    let cluster = connect_cluster(config, &chosen)?;
    let (policies, modules) = policies(runtime, &files, cluster.as_ref())?;
    let workloads = chosen
        .iter()
        .map(|(policy, pod)| Ok((*policy, review(pod)?)))
        .collect::<Result<Vec<_>, String>>()?;
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
        let tls_files = tls.as_ref().map(|(files, _)| files.clone());
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
                tls: tls_files.clone(),
                ..ServerConfig::default()
            },
        )?;
        let reference = match &config.policy_server {
            Some(program) => Some(PolicyServer::start(
                program,
                &std::env::temp_dir()
                    .join(format!("kruise-bench-{}-{transport}", std::process::id())),
                &files,
                config.workers,
                tls_files.as_ref(),
                config.kubeconfig.as_deref(),
            )?),
            None => None,
        };
        for (policy, body) in &workloads {
            let ours = Load {
                address: server.address,
                tls: tls.as_ref().map(|(_, client)| Arc::clone(client)),
                path: format!("/validate/{policy}"),
                body: Arc::new(body.clone()),
                connections: config.connections,
                duration: config.duration,
            };
            check_mutates(&ours, "our server")?;
            warm_up(&ours)?;
            let Some(reference) = &reference else {
                report.push(line(transport, policy, &ours.run()?));
                continue;
            };
            let theirs = Load {
                address: reference.address,
                ..ours.clone()
            };
            check_mutates(&theirs, "policy-server")?;
            warm_up(&theirs)?;
            let (mut mine, mut other) = (Vec::new(), Vec::new());
            for _ in 0..config.rounds.max(1) {
                mine.push(ours.run()?);
                other.push(theirs.run()?);
            }
            report.extend(comparison(transport, policy, &mine, &other));
        }
        server.shutdown();
    }
    report.extend(instance_costs(&modules, runtime, config.instances)?);
    report.extend(evaluation_costs(&policies, &workloads, config.instances)?);
    Ok(report)
}

/// What one evaluation of each workload costs on its own: the policy run
/// on a fresh instance, one after another on this thread, without HTTP,
/// JSON of the review or other requests beside it. Set beside the server's
/// figures, it tells the evaluation from the serving.
fn evaluation_costs(
    policies: &PolicyMap,
    workloads: &[(&str, Vec<u8>)],
    count: usize,
) -> Result<Vec<String>, String> {
    workloads
        .iter()
        .map(|(id, body)| {
            let policy = policies.get(*id).ok_or_else(|| format!("no policy {id}"))?;
            let document = serde_json::from_slice(body).map_err(|e| e.to_string())?;
            let request = AdmissionRequest::from_document(document).map_err(|e| e.to_string())?;
            let (median, runs) = median_time(count, || {
                let answer = block_on(policy.validate(&request));
                if answer.allowed {
                    Ok(())
                } else {
                    Err(format!("{id} refused the bench's request: {answer:?}"))
                }
            })?;
            Ok(format!(
                "{id} evaluation (fresh instance, no HTTP): median {:.1} µs over {runs} requests",
                median.as_secs_f64() * 1e6,
            ))
        })
        .collect()
}

/// Runs `once` `count` times (at least once), timing each run: the median
/// time, and how many runs it is of.
fn median_time(
    count: usize,
    mut once: impl FnMut() -> Result<(), String>,
) -> Result<(Duration, usize), String> {
    let mut times = Vec::with_capacity(count);
    for _ in 0..count.max(1) {
        let started = Instant::now();
        once()?;
        times.push(started.elapsed());
    }
    let runs = times.len();
    Ok((median(times), runs))
}

/// The middle value (the upper one of an even count); the default of none.
fn median<T: Copy + PartialOrd + Default>(mut values: Vec<T>) -> T {
    values.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    values.get(values.len() / 2).copied().unwrap_or_default()
}

/// The cluster the cluster-mode workload reads, with scs-demo stored there,
/// when that workload was chosen.
fn connect_cluster(
    config: &BenchConfig,
    chosen: &[(&str, &str)],
) -> Result<Option<Arc<LiveCluster>>, String> {
    match &config.kubeconfig {
        Some(path) if chosen.iter().any(|(id, _)| *id == CLUSTER) => {
            let scs_demo: Value = serde_yaml::from_str(SCS_DEMO).map_err(|e| e.to_string())?;
            let kinds = Metadata::of(kruise_policy_modules::SIDECARSET.wasm)?;
            cluster::connect(path, &scs_demo, &kinds.context_aware_resources).map(Some)
        }
        _ => Ok(None),
    }
}

/// What a sidecarset instance costs before its policy runs, fresh and from
/// the snapshot, timed when their workloads ran.
fn instance_costs(
    modules: &BTreeMap<String, Arc<CompiledModule>>,
    runtime: &Runtime,
    count: usize,
) -> Result<Vec<String>, String> {
    let timed = [
        (
            NO_SNAPSHOT,
            "fresh sidecarset instance (instantiate + _start + wapc_init)",
        ),
        (
            "sidecarset",
            "sidecarset instance from its snapshot (instantiate)",
        ),
    ];
    timed
        .into_iter()
        .filter_map(|(id, label)| Some((modules.get(id)?, label)))
        .map(|(module, label)| instance_cost(module, label, runtime, count))
        .collect()
}

/// Fills the pool's slots and the connections' TLS sessions.
fn warm_up(load: &Load) -> Result<(), String> {
    Load {
        duration: Duration::from_millis(500),
        ..load.clone()
    }
    .run()
    .map(drop)
}

/// The median of each figure over a server's rounds, and its totals.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Medians {
    per_second: f64,
    p50: Duration,
    p99: Duration,
    requests: usize,
    errors: usize,
}

fn medians(rounds: &[Figures]) -> Medians {
    Medians {
        per_second: median(rounds.iter().map(Figures::per_second).collect()),
        p50: median(rounds.iter().map(|f| f.p50).collect()),
        p99: median(rounds.iter().map(|f| f.p99).collect()),
        requests: rounds.iter().map(|f| f.requests).sum(),
        errors: rounds.iter().map(|f| f.errors).sum(),
    }
}

/// Our medians, policy-server's, and ours over theirs: throughput (with
/// the lowest and highest round-by-round ratio) and latencies.
fn comparison(transport: &str, policy: &str, ours: &[Figures], theirs: &[Figures]) -> Vec<String> {
    let (mine, other) = (medians(ours), medians(theirs));
    let server_line = |server: &str, m: &Medians| {
        format!(
            "{transport:5} {policy:22} {server:13} {:>8.0} req/s  p50 {:>7.3} ms  p99 {:>7.3} ms  ({} requests, {} errors, {} rounds)",
            m.per_second,
            m.p50.as_secs_f64() * 1e3,
            m.p99.as_secs_f64() * 1e3,
            m.requests,
            m.errors,
            ours.len()
        )
    };
    let by_round: Vec<f64> = ours
        .iter()
        .zip(theirs)
        .map(|(a, b)| a.per_second() / b.per_second())
        .collect();
    let lowest = by_round.iter().copied().fold(f64::INFINITY, f64::min);
    let highest = by_round.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    vec![
        server_line("ours", &mine),
        server_line("policy-server", &other),
        format!(
            "{transport:5} {policy:22} {:13} {:>7.2}x throughput (rounds {lowest:.2}x to {highest:.2}x)  p50 {:.2}x  p99 {:.2}x",
            "ratio",
            mine.per_second / other.per_second,
            mine.p50.as_secs_f64() / other.p50.as_secs_f64(),
            mine.p99.as_secs_f64() / other.p99.as_secs_f64(),
        ),
    ]
}

fn line(transport: &str, policy: &str, figures: &Figures) -> String {
    format!(
        "{transport:5} {policy:22} {:>8.0} req/s  p50 {:>7.3} ms  p99 {:>7.3} ms  ({} requests, {} errors)",
        figures.per_second(),
        figures.p50.as_secs_f64() * 1e3,
        figures.p99.as_secs_f64() * 1e3,
        figures.requests,
        figures.errors
    )
}

type PolicyMap = BTreeMap<String, Arc<Policy>>;

/// The policies of the `chosen` workloads, as both servers load them.
fn policy_files(chosen: &[(&str, &str)]) -> Result<Vec<PolicyFile<'static>>, String> {
    let scs_demo: Value = serde_yaml::from_str(SCS_DEMO).map_err(|e| e.to_string())?;
    let inline = sidecarset_settings(vec![scs_demo], "default", None);
    let file = |id, wasm, settings, snapshot, reads_cluster| PolicyFile {
        id,
        wasm,
        settings,
        snapshot,
        reads_cluster,
    };
    let sidecarset = kruise_policy_modules::SIDECARSET.wasm;
    let all = [
        file("sidecarset", sidecarset, inline.clone(), true, false),
        // The same policy, each evaluation from the module's own initial
        // state: what the snapshot after validate_settings saves.
        file(NO_SNAPSHOT, sidecarset, inline, false, false),
        // No inline SidecarSets: the policy reads the cluster's.
        file(CLUSTER, sidecarset, Settings::new(), true, true),
        file(
            "launch-priority",
            kruise_policy_modules::LAUNCH_PRIORITY.wasm,
            Settings::new(),
            true,
            false,
        ),
        file(
            "add-label",
            kruise_policy_modules::BENCH_ADD_LABEL.wasm,
            add_label_settings(),
            true,
            false,
        ),
    ];
    Ok(all
        .into_iter()
        .filter(|file| chosen.iter().any(|(id, _)| *id == file.id))
        .collect())
}

/// The policies as our server loads them (those that read the cluster read
/// `cluster`), and each one's module (for the instance timing).
fn policies(
    runtime: &Runtime,
    files: &[PolicyFile<'_>],
    cluster: Option<&Arc<LiveCluster>>,
) -> Result<(PolicyMap, BTreeMap<String, Arc<CompiledModule>>), String> {
    let mut policies = PolicyMap::new();
    let mut modules = BTreeMap::new();
    for file in files {
        let limits = runtime.limits(Some(crate::runtime::DEFAULT_TIMEOUT));
        let metadata = Metadata::of(file.wasm)?;
        let module = if file.snapshot {
            load_module(
                runtime,
                file.id,
                file.wasm,
                &metadata,
                &file.settings,
                limits,
            )
        } else {
            runtime.load(file.wasm)
        }
        .map_err(|e| e.to_string())?;
        modules.insert(file.id.to_owned(), Arc::clone(&module));
        let (grants, cluster) = if file.reads_cluster {
            let grants = Grants {
                host_capabilities: vec![KUBERNETES_CAPABILITIES.to_owned()],
                context_aware_resources: metadata.context_aware_resources.clone(),
            };
            (
                grants,
                cluster.map(|c| Arc::clone(c) as Arc<dyn ClusterReads>),
            )
        } else {
            (Grants::default(), None)
        };
        let host = PolicyHost {
            policy_id: file.id.to_owned(),
            grants,
            cluster: cluster.clone(),
        };
        let mut policy = Policy::new(
            file.id,
            module,
            &file.settings,
            Enforcement::kwctl_run(file.id),
            limits,
            Arc::new(host),
        );
        if let Some(cluster) = cluster {
            policy = policy.with_cluster_reads(cluster, metadata.context_aware_resources.clone());
        }
        block_on(policy.validate_settings())
            .map_err(|message| format!("{}: settings are not valid: {message}", file.id))?;
        // As the server does once the caches have filled (they have).
        if file.snapshot && metadata.snapshot_after_read_cluster() {
            policy = policy.with_cluster_snapshot(runtime, file.wasm);
            if policy.takes_cluster_snapshots() {
                policy
                    .take_cluster_snapshot()
                    .map_err(|message| format!("{}: cluster snapshot: {message}", file.id))?;
            }
        }
        policies.insert(file.id.to_owned(), Arc::new(policy));
    }
    Ok((policies, modules))
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

/// A workload that the policy rejects (or a cluster read that fails)
/// would measure the wrong path: each must come back from each server as
/// an accepted mutation.
fn check_mutates(load: &Load, server: &str) -> Result<(), String> {
    let (status, body) = load.answer()?;
    let review: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let response = &review["response"];
    if status == 200 && response["allowed"] == true && response["patch"].is_string() {
        Ok(())
    } else {
        Err(format!(
            "{server} does not mutate the pod of {}: {status} {}",
            load.path,
            String::from_utf8_lossy(&body)
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

/// Instantiation plus the start functions (none for a snapshot), no guest
/// call: what every evaluation pays before the policy runs.
fn instance_cost(
    module: &CompiledModule,
    label: &str,
    runtime: &Runtime,
    count: usize,
) -> Result<String, String> {
    let limits: Limits = runtime.limits(Some(crate::runtime::DEFAULT_TIMEOUT));
    let (median, runs) = median_time(count, || {
        block_on(module.instantiate_only(limits)).map_err(|e| e.to_string())
    })?;
    Ok(format!(
        "{label}: median {:.1} µs over {runs} instances",
        median.as_secs_f64() * 1e6,
    ))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn round(requests: usize, p50_us: u64, p99_us: u64) -> Figures {
        Figures {
            requests,
            errors: 0,
            elapsed: Duration::from_secs(1),
            p50: Duration::from_micros(p50_us),
            p99: Duration::from_micros(p99_us),
        }
    }

    fn config(workloads: &[&str], kubeconfig: Option<&str>) -> BenchConfig {
        BenchConfig {
            connections: 1,
            duration: Duration::from_secs(1),
            workers: 1,
            tls: None,
            instances: 1,
            policy_server: None,
            rounds: 1,
            workloads: workloads.iter().map(|w| (*w).to_owned()).collect(),
            kubeconfig: kubeconfig.map(PathBuf::from),
        }
    }

    fn ids(config: &BenchConfig) -> Result<Vec<&'static str>, String> {
        chosen_workloads(config).map(|chosen| chosen.into_iter().map(|(id, _)| id).collect())
    }

    #[test]
    fn every_workload_runs_by_default_the_cluster_one_with_a_kubeconfig() {
        let local = ["add-label", "launch-priority", "sidecarset", NO_SNAPSHOT];
        assert_eq!(ids(&config(&[], None)).unwrap(), local);
        assert_eq!(
            ids(&config(&[], Some("kubeconfig"))).unwrap(),
            [&local[..], &[CLUSTER]].concat()
        );
    }

    #[test]
    fn named_workloads_run_alone_and_unknown_or_unrunnable_ones_are_refused() {
        assert_eq!(
            ids(&config(&[CLUSTER], Some("kubeconfig"))).unwrap(),
            [CLUSTER]
        );
        assert_eq!(
            ids(&config(&["sidecarset", "add-label"], None)).unwrap(),
            ["add-label", "sidecarset"]
        );
        let unknown = ids(&config(&["sidecar"], None)).unwrap_err();
        assert!(unknown.starts_with("no workload sidecar: the workloads are add-label,"));
        let no_cluster = ids(&config(&[CLUSTER], None)).unwrap_err();
        assert!(no_cluster.contains("give --kubeconfig"), "{no_cluster}");
    }

    #[test]
    fn only_the_chosen_workloads_policies_are_loaded() {
        let files = policy_files(&[(CLUSTER, SEED_POD)]).unwrap();
        let [file] = &files[..] else {
            panic!("{} files", files.len());
        };
        assert_eq!(file.id, CLUSTER);
        assert!(file.reads_cluster && file.settings.is_empty());
    }

    #[test]
    fn medians_are_per_figure_and_totals_are_summed() {
        let rounds = [round(300, 9, 90), round(100, 30, 50), round(200, 10, 70)];
        let medians = medians(&rounds);
        assert!((medians.per_second - 200.0).abs() < 1e-9);
        assert_eq!(medians.p50, Duration::from_micros(10));
        assert_eq!(medians.p99, Duration::from_micros(70));
        assert_eq!(medians.requests, 600);
    }

    #[test]
    fn the_ratio_is_ours_over_policy_servers_with_the_spread_of_the_rounds() {
        let ours = [
            round(600, 500, 900),
            round(800, 400, 800),
            round(700, 460, 850),
        ];
        let theirs = [
            round(100, 2000, 3000),
            round(100, 2000, 3000),
            round(200, 1000, 2000),
        ];
        let lines = comparison("http", "sidecarset", &ours, &theirs);
        assert_eq!(lines.len(), 3);
        assert!(
            lines[0].contains("ours") && lines[0].contains("700 req/s"),
            "{}",
            lines[0]
        );
        assert!(lines[1].contains("policy-server") && lines[1].contains("100 req/s"));
        assert!(
            lines[2].contains("7.00x throughput (rounds 3.50x to 8.00x)"),
            "{}",
            lines[2]
        );
        assert!(lines[2].contains("p50 0.23x  p99 0.28x"), "{}", lines[2]);
    }
}
