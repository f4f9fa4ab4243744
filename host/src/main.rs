//! `kruise-wasm`: run a Kubewarden policy module on an admission request
//! (like `kwctl run`), or show what OpenKruise's pod webhook would inject
//! into a pod or workload (like `istioctl kube-inject`).

use std::io::{IsTerminal as _, Read as _};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use serde_json::Value;

use kruise_wasm_host::admission::{AdmissionRequest, Enforcement, Settings, settings_from_value};
use kruise_wasm_host::bench;
use kruise_wasm_host::capabilities::{Grants, PolicyHost};
use kruise_wasm_host::cluster_fixtures::{ClusterFixtures, ClusterReads};
use kruise_wasm_host::cluster_snapshot::Timing;
use kruise_wasm_host::inject::{
    Injector, labels_from_text, namespace_of, sidecar_sets_from_yaml, sidecarset_settings,
};
use kruise_wasm_host::live_cluster::Credentials;
use kruise_wasm_host::metadata::Metadata;
use kruise_wasm_host::policy::Policy;
use kruise_wasm_host::runtime::{Runtime, RuntimeConfig, block_on};
use kruise_wasm_host::serve::{self, ClusterSource, ServeFiles, read_text};
use kruise_wasm_host::server::{ServerConfig, TlsFiles};

/// mimalloc rather than glibc's malloc: the server allocates many small,
/// short-lived buffers per request from two threads, and in the bench
/// mimalloc served the sidecarset module ~9 % more requests
/// (docs/benchmarks.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug, Parser)]
#[command(name = "kruise-wasm", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Evaluate a policy module on one admission request and print the
    /// AdmissionResponse as one line of JSON.
    Run(RunArgs),
    /// Inject SidecarSets (then launch priority) into a Pod, Deployment,
    /// CloneSet or other workload, and print the result.
    Inject(InjectArgs),
    /// Serve the policies of a policies.yml as policy-server does.
    Serve(ServeArgs),
    /// Load a server started on loopback (embedded modules) over
    /// keep-alive connections; print requests/s and p50/p99.
    Bench(BenchArgs),
}

#[derive(Debug, Args)]
struct BenchArgs {
    #[arg(long, default_value_t = 8)]
    connections: usize,
    /// Seconds per run (at most 60).
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    #[arg(long, default_value_t = 2)]
    workers: usize,
    /// Server certificate (PEM) for the TLS runs, with --key-file and
    /// --ca-file; without them only plain HTTP is measured.
    #[arg(long, requires_all = ["key_file", "ca_file"])]
    cert_file: Option<PathBuf>,
    #[arg(long)]
    key_file: Option<PathBuf>,
    /// The CA the client trusts.
    #[arg(long)]
    ca_file: Option<PathBuf>,
    /// Fresh instances created to time instantiation, and evaluations
    /// timed per workload without HTTP.
    #[arg(long, default_value_t = 2000)]
    instances: usize,
    /// Kubewarden's policy-server binary: serve the same policies with it
    /// beside ours and compare, in rounds alternating the two.
    #[arg(long, env = "KRUISE_POLICY_SERVER")]
    policy_server: Option<PathBuf>,
    /// Runs per server and workload when comparing.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..=20))]
    rounds: u16,
    /// Only these workloads, comma-separated: add-label, launch-priority,
    /// sidecarset, sidecarset-no-snapshot, sidecarset-cluster. By default
    /// all (sidecarset-cluster only with --kubeconfig).
    #[arg(long, value_delimiter = ',')]
    workloads: Vec<String>,
    /// A cluster (the dev cluster's kubeconfig, say): adds the workload
    /// sidecarset-cluster, the sidecarset policy reading its SidecarSets
    /// there (ours from watch caches, policy-server through its host
    /// calls). The bench stores scs-demo there unless the cluster has a
    /// SidecarSet of that name.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Have wasmtime write /tmp/perf-<pid>.map, so that `perf report` on
    /// this process names each guest function (`wasm[0]::function[N]`)
    /// instead of showing anonymous JIT addresses (docs/benchmarks.md,
    /// "Profiling the guests").
    #[arg(long)]
    perf_map: bool,
}

#[derive(Debug, Args)]
struct ServeArgs {
    /// The policies file (policy-server's format).
    #[arg(long, default_value = "policies.yml")]
    policies: PathBuf,
    #[arg(long, default_value = "0.0.0.0")]
    address: std::net::IpAddr,
    #[arg(long, default_value_t = 3000)]
    port: u16,
    #[arg(long, default_value_t = 8081)]
    readiness_probe_port: u16,
    /// Bind both ports with SO_REUSEPORT: a new replica on the host
    /// network can start on the node before the old one stops (a rolling
    /// upgrade there without a gap).
    #[arg(long)]
    reuse_port: bool,
    /// Evaluate a policy that reads the cluster, when its module asks for
    /// it (the sidecarset module does), from a snapshot taken after it
    /// read the cluster, taken again when what it read changes. Faster in
    /// cluster mode; each snapshot compiles the module again, which needs
    /// memory headroom (host/README.md).
    #[arg(long)]
    cluster_snapshots: bool,
    /// Server threads, which run the connections and the guests (default:
    /// the number of CPUs); four evaluations per thread may be under way.
    #[arg(long)]
    workers: Option<usize>,
    /// Seconds each policy may run, unless its timeoutEvalSeconds says
    /// otherwise.
    #[arg(long, default_value_t = 2)]
    policy_timeout: u64,
    #[arg(long)]
    disable_timeout_protection: bool,
    /// PEM certificate: serve HTTPS (with --key-file).
    #[arg(long, requires = "key_file")]
    cert_file: Option<PathBuf>,
    #[arg(long, requires = "cert_file")]
    key_file: Option<PathBuf>,
    /// Accept every request in this namespace without evaluating it.
    #[arg(long)]
    always_accept_admission_reviews_on_namespace: Option<String>,
    /// Answer the Kubernetes host calls from this YAML list of objects.
    #[arg(long, conflicts_with_all = ["kubeconfig", "in_cluster"])]
    cluster_fixtures: Option<PathBuf>,
    /// Answer the Kubernetes host calls from watch caches of this
    /// cluster (the kinds the policies' contextAwareResources name).
    #[arg(long, conflicts_with = "in_cluster")]
    kubeconfig: Option<PathBuf>,
    /// The same, with the pod's service account (inside a cluster).
    #[arg(long)]
    in_cluster: bool,
    /// Chains served at POST /mutate/<chain>: a YAML map from chain name
    /// to policy ids, run in order (`pod-webhook: [sidecarset, launch-priority]`).
    #[arg(long)]
    chains: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct RunArgs {
    /// The policy module (.wasm).
    #[arg(long, short = 'm')]
    module: PathBuf,
    /// An AdmissionReview or a bare AdmissionRequest (JSON or YAML); `-`
    /// reads stdin.
    #[arg(long, short = 'r')]
    request: String,
    /// The policy's settings, a YAML or JSON file.
    #[arg(long, short = 's', conflicts_with = "settings_json")]
    settings: Option<PathBuf>,
    /// The policy's settings as a JSON string.
    #[arg(long)]
    settings_json: Option<String>,
    /// How long each guest function may run.
    #[arg(long, default_value_t = 2)]
    timeout_seconds: u64,
    /// Answer the Kubernetes host calls from this YAML list of objects,
    /// granting the kinds the module's metadata declares.
    #[arg(long)]
    cluster_fixtures: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct InjectArgs {
    /// The Pod or workload (YAML or JSON).
    #[arg(long, short = 'f')]
    filename: PathBuf,
    /// A YAML file of one or more SidecarSet documents.
    #[arg(long)]
    sidecarsets: PathBuf,
    /// Labels of the pod's namespace, `key=value,…`, for SidecarSets with a
    /// namespaceSelector.
    #[arg(long)]
    namespace_labels: Option<String>,
    /// The namespace of an object that names none.
    #[arg(long, default_value = "default")]
    namespace: String,
    /// Print the JSON Patch from the input to the result instead of the
    /// result.
    #[arg(long)]
    patch: bool,
}

fn main() -> ExitCode {
    // The server's own events (watch caches filled, snapshots taken or
    // not) on stderr, and other crates' warnings, unless RUST_LOG says
    // otherwise. None of ours is per request. Not `info` for every crate:
    // wasmtime-wasi opens an info span for each WASI call a guest makes,
    // which cost about 0.7 µs per evaluation once a subscriber listened.
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
                tracing_subscriber::EnvFilter::new("warn,kruise_wasm_host=info")
            }),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let outcome = match Cli::parse().command {
        Command::Run(args) => run(&args),
        Command::Inject(args) => inject(&args),
        Command::Serve(args) => serve(&args),
        Command::Bench(args) => bench(&args),
    };
    match outcome {
        Ok(output) => {
            println!("{output}");
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("Error: {message}");
            ExitCode::FAILURE
        }
    }
}

/// The CLI evaluates one thing at a time: a small pool is enough.
fn runtime() -> Result<Runtime, String> {
    runtime_with(RuntimeConfig {
        max_instances: 4,
        ..RuntimeConfig::default()
    })
}

/// Compiled modules are cached on disk, so only the first run pays for
/// Cranelift; a cache directory that cannot be used only costs that time.
/// The warning is given only when the runtime starts without the cache: a
/// runtime that cannot start either way reports its own error.
fn runtime_with(config: RuntimeConfig) -> Result<Runtime, String> {
    let cached = cache_dir().map(|dir| {
        Runtime::new(RuntimeConfig {
            cache_dir: Some(dir),
            ..config.clone()
        })
    });
    let cache_error = match cached {
        Some(Ok(runtime)) => return Ok(runtime),
        Some(Err(cache_error)) => Some(cache_error),
        None => None,
    };
    let runtime = Runtime::new(config).map_err(|e| e.to_string())?;
    if let Some(cache_error) = cache_error {
        eprintln!("Warning: compiled modules will not be cached: {cache_error}");
    }
    Ok(runtime)
}

/// `$KRUISE_WASM_CACHE_DIR` (empty: no cache), else the user's cache
/// directory.
fn cache_dir() -> Option<PathBuf> {
    let from_env = |name| std::env::var_os(name).map(PathBuf::from);
    if let Some(dir) = from_env("KRUISE_WASM_CACHE_DIR") {
        return (!dir.as_os_str().is_empty()).then_some(dir);
    }
    from_env("XDG_CACHE_HOME")
        .or_else(|| from_env("HOME").map(|home| home.join(".cache")))
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join("kruise-wasm"))
}

fn run(args: &RunArgs) -> Result<String, String> {
    let runtime = runtime()?;
    let wasm = std::fs::read(&args.module)
        .map_err(|e| format!("cannot read {}: {e}", args.module.display()))?;
    let module = runtime
        .load(&wasm)
        .map_err(|e| format!("{}: {e}", args.module.display()))?;
    let id = args
        .module
        .file_stem()
        .map_or_else(|| "policy".to_owned(), |s| s.to_string_lossy().into_owned());
    let cluster = cluster_fixtures(args.cluster_fixtures.as_deref())?;
    let mut grants = Grants::kwctl_run();
    if cluster.is_some() {
        grants.context_aware_resources = Metadata::of(&wasm)
            .map(|m| m.context_aware_resources)
            .unwrap_or_default();
    }
    let host = PolicyHost {
        policy_id: id.clone(),
        grants,
        cluster,
    };
    let policy = Policy::new(
        &id,
        module,
        &run_settings(args)?,
        Enforcement::kwctl_run(&id),
        runtime.limits(Some(Duration::from_secs(args.timeout_seconds))),
        Arc::new(host),
    );
    block_on(policy.validate_settings())
        .map_err(|message| format!("Provided settings are not valid: {message}"))?;
    let request = AdmissionRequest::from_document(read_document(&args.request)?)
        .map_err(|e| e.to_string())?;
    Ok(block_on(policy.validate(&request)).to_json())
}

fn run_settings(args: &RunArgs) -> Result<Settings, String> {
    let value = match (&args.settings, &args.settings_json) {
        (Some(path), _) => parse_document(&read_text(path)?)?,
        (None, Some(json)) => {
            serde_json::from_str(json).map_err(|e| format!("--settings-json: {e}"))?
        }
        (None, None) => Value::Null,
    };
    settings_from_value(value)
}

fn inject(args: &InjectArgs) -> Result<String, String> {
    let object = parse_document(&read_text(&args.filename)?)?;
    let sidecar_sets = sidecar_sets_from_yaml(&read_text(&args.sidecarsets)?)
        .map_err(|e| format!("{}: {e}", args.sidecarsets.display()))?;
    let namespace = namespace_of(&object, &args.namespace);
    let labels = args
        .namespace_labels
        .as_deref()
        .map(labels_from_text)
        .transpose()?;
    let runtime = runtime()?;
    let injector = Injector::new(
        &runtime,
        sidecarset_settings(sidecar_sets, &namespace, labels),
    )
    .map_err(|e| e.to_string())?;
    injector
        .validate_settings()
        .map_err(|message| format!("the SidecarSets are not valid: {message}"))?;
    let injected = injector.inject(&object, &namespace)?;
    for note in &injected.notes {
        eprintln!("Note: {note}");
    }
    if args.patch {
        Ok(injected.patch.to_string())
    } else {
        serde_yaml::to_string(&injected.object)
            .map(|yaml| yaml.trim_end().to_owned())
            .map_err(|e| e.to_string())
    }
}

fn serve(args: &ServeArgs) -> Result<String, String> {
    let timeout =
        (!args.disable_timeout_protection).then(|| Duration::from_secs(args.policy_timeout));
    let cluster = match (&args.cluster_fixtures, &args.kubeconfig, args.in_cluster) {
        (Some(path), _, _) => ClusterSource::Fixtures(path),
        (None, Some(path), _) => ClusterSource::Live(Credentials::Kubeconfig(path)),
        (None, None, true) => ClusterSource::Live(Credentials::InCluster),
        (None, None, false) => ClusterSource::None,
    };
    let defaults = ServerConfig::default();
    let config = ServerConfig {
        address: args.address,
        port: args.port,
        readiness_port: args.readiness_probe_port,
        reuse_port: args.reuse_port,
        workers: args.workers.unwrap_or(defaults.workers),
        tls: args
            .cert_file
            .clone()
            .zip(args.key_file.clone())
            .map(|(cert, key)| TlsFiles { cert, key }),
        ..defaults
    };
    let instances = RuntimeConfig::default().max_instances;
    let runtime = Runtime::new(RuntimeConfig {
        cache_dir: cache_dir(),
        max_instances: u32::try_from(config.evaluation_slots())
            .unwrap_or(u32::MAX)
            .max(instances),
        ..RuntimeConfig::default()
    })
    .map_err(|e| e.to_string())?;
    let files = ServeFiles {
        policies: &args.policies,
        chains: args.chains.as_deref(),
        always_accept_namespace: args.always_accept_admission_reviews_on_namespace.as_deref(),
    };
    let snapshots = args.cluster_snapshots.then(Timing::default);
    let (running, count) = serve::start(&runtime, files, cluster, timeout, &config, snapshots)?;
    eprintln!(
        "serving {count} policies on {}://{} (readiness on http://{}/readiness)",
        if config.tls.is_some() {
            "https"
        } else {
            "http"
        },
        running.address,
        running.readiness_address
    );
    running.wait();
    Ok("stopped".to_owned())
}

fn cluster_fixtures(path: Option<&Path>) -> Result<Option<Arc<dyn ClusterReads>>, String> {
    path.map(|path| {
        ClusterFixtures::from_yaml(&read_text(path)?)
            .map(|fixtures| Arc::new(fixtures) as Arc<dyn ClusterReads>)
            .map_err(|e| format!("{}: {e}", path.display()))
    })
    .transpose()
}

fn bench(args: &BenchArgs) -> Result<String, String> {
    let duration = Duration::try_from_secs_f64(args.duration)
        .ok()
        .filter(|d| *d <= bench::MAX_DURATION && !d.is_zero())
        .ok_or_else(|| {
            format!(
                "--duration must be above 0 and at most {} s",
                bench::MAX_DURATION.as_secs()
            )
        })?;
    let tls = match (&args.cert_file, &args.key_file, &args.ca_file) {
        (Some(cert), Some(key), Some(ca)) => Some((
            TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
            },
            ca.clone(),
        )),
        _ => None,
    };
    let runtime = runtime_with(RuntimeConfig {
        perf_map: args.perf_map,
        ..RuntimeConfig::default()
    })?;
    let report = bench::run(
        &runtime,
        &bench::BenchConfig {
            connections: args.connections,
            duration,
            workers: args.workers,
            tls,
            instances: args.instances,
            policy_server: args.policy_server.clone(),
            rounds: usize::from(args.rounds),
            workloads: args.workloads.clone(),
            kubeconfig: args.kubeconfig.clone(),
        },
    )?;
    Ok(report.join("\n"))
}

fn read_document(source: &str) -> Result<Value, String> {
    let text = if source == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|e| format!("cannot read stdin: {e}"))?;
        text
    } else {
        read_text(Path::new(source))?
    };
    parse_document(&text)
}

/// JSON, or else YAML (a superset, but slower and laxer).
fn parse_document(text: &str) -> Result<Value, String> {
    serde_json::from_str(text)
        .or_else(|_| serde_yaml::from_str(text).map_err(|e| format!("neither JSON nor YAML: {e}")))
}
