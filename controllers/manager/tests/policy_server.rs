//! Kubewarden's own policy-server and our host, both serving the dev
//! environment's policies.yml and reading the same dev cluster, give the
//! same answer to every request: the user's examples, every golden pod and
//! every shared validation case, each sent to the policies that act on its
//! kind. Only what a guest draws from the clock or from randomness is
//! blanked (`fixtures::blank_drawn_values`).
//! policy-server is the reference build in ../shared/tools/kubewarden (or
//! `$KRUISE_POLICY_SERVER`); without it the test fails and says where it
//! looked.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use k8s_openapi::api::core::v1::Pod;
use kruise_core::cloneset::container_status;
use kruise_devcluster::wait::wait_for;
use kruise_manager::dev::{self, DevEnvironment, DevOptions};
use kruise_policy_modules::fixtures::{self, blank_drawn_values, kruise_request, pod_create};
use kruise_policy_modules::{
    LAUNCH_PRIORITY, MUTATE_CRR, MUTATE_DEFAULTS, MUTATE_IMAGEPULL, PolicyModule, SIDECARSET,
    VALIDATE_CLONESET, VALIDATE_RESOURCEDISTRIBUTION, VALIDATE_SIDECARSET,
};
use kruise_wasm_host::bench::{self, BenchConfig};
use kruise_wasm_host::live_cluster::Credentials;
use kruise_wasm_host::runtime::{Runtime, RuntimeConfig};
use kruise_wasm_host::serve::{self, ClusterSource, ServeFiles};
use kruise_wasm_host::server::{RunningServer, ServerConfig};
use kube::Api;
use kube::api::PostParams;
use serde_json::{Value, json};
use support::{examples, kubectl, kubewarden_tool};

/// How long policy-server may take to compile the modules and sync its
/// watches (it compiles each module with Cranelift on start).
const POLICY_SERVER_START: Duration = Duration::from_mins(5);

/// One request and the policies it goes to.
struct Review {
    label: String,
    policies: Vec<&'static PolicyModule>,
    request: Value,
    /// The pod's generateName, whose random suffix the guest draws.
    generate_name: Option<String>,
}

impl Review {
    fn new(label: String, policies: &[&'static PolicyModule], request: Value) -> Self {
        let generate_name = request["object"]["metadata"]["generateName"]
            .as_str()
            .map(str::to_owned);
        Self {
            label,
            policies: policies.to_vec(),
            request,
            generate_name,
        }
    }
}

/// The policies acting on `kind` and the request creating `object`.
fn review_of(label: String, object: &Value) -> Option<Review> {
    let kind = object["kind"].as_str()?;
    let (policies, resource): (&[&'static PolicyModule], &str) = match kind {
        "Pod" => (&[&SIDECARSET, &LAUNCH_PRIORITY], ""),
        "CloneSet" => (&[&VALIDATE_CLONESET, &MUTATE_DEFAULTS], "clonesets"),
        "SidecarSet" => (&[&VALIDATE_SIDECARSET, &MUTATE_DEFAULTS], "sidecarsets"),
        "ImagePullJob" => (&[&MUTATE_IMAGEPULL], "imagepulljobs"),
        "NodeImage" => (&[&MUTATE_IMAGEPULL], "nodeimages"),
        "ResourceDistribution" => (&[&VALIDATE_RESOURCEDISTRIBUTION], "resourcedistributions"),
        "ContainerRecreateRequest" => (&[&MUTATE_CRR], "containerrecreaterequests"),
        _ => return None,
    };
    let request = if kind == "Pod" {
        let mut pod = object.clone();
        if pod["metadata"]["namespace"].is_null() {
            pod["metadata"]["namespace"] = json!("default");
        }
        pod_create(&pod)
    } else {
        kruise_request(kind, resource, "CREATE", object, None)
    };
    Some(Review::new(label, policies, request))
}

/// Every request the test sends.
fn reviews() -> Vec<Review> {
    let mut reviews = Vec::new();
    for entry in std::fs::read_dir(examples()).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        for (index, document) in serde_yaml::Deserializer::from_str(&text).enumerate() {
            let object: Value = serde::Deserialize::deserialize(document).unwrap();
            reviews.extend(review_of(format!("example {name} #{index}"), &object));
        }
    }
    for folder in ["injection", "launch-priority"] {
        for (name, case) in fixtures::golden_cases(folder).unwrap() {
            let mut pod = case["pod"].clone();
            pod["kind"] = json!("Pod");
            reviews.extend(review_of(format!("{folder}/{name}"), &pod));
        }
    }
    // ResourceDistribution's cases are whole requests, creates and updates.
    let (_, distributions) = fixtures::golden_cases("resourcedistribution")
        .unwrap()
        .into_iter()
        .find(|(name, _)| name == "validation.yaml")
        .unwrap();
    for case in distributions["cases"].as_array().unwrap() {
        let (object, old) = (&case["object"], case.get("oldObject"));
        let operation = case["operation"].as_str().unwrap();
        let request = kruise_request(
            "ResourceDistribution",
            "resourcedistributions",
            operation,
            object,
            old,
        );
        let label = format!("ResourceDistribution validation {}", case["name"]);
        reviews.push(Review::new(
            label,
            &[&VALIDATE_RESOURCEDISTRIBUTION],
            request,
        ));
    }
    for kind in ["CloneSet", "SidecarSet", "ImagePullJob", "NodeImage"] {
        let (base, cases) = fixtures::validation_cases(&kind.to_lowercase()).unwrap();
        reviews.extend(review_of(format!("{kind} validation base"), &base));
        for case in cases {
            let label = format!("{kind} validation {}", case.name);
            reviews.extend(review_of(label, &case.object));
        }
    }
    reviews
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_server_and_our_host_answer_every_request_alike() {
    let reviews = reviews();
    assert!(reviews.len() > 150, "only {} requests", reviews.len());
    let env = DevEnvironment::start(DevOptions {
        sim_nodes: 1,
        run_controllers: false,
        ..DevOptions::default()
    })
    .await
    .unwrap();
    bench_in_cluster_mode(&env).await;
    let pod_uid = stock_the_cluster(&env).await;
    let mut reference = PolicyServer::start(&env);
    let ours = our_plain_host(&env).await;
    reference.wait_ready();
    let (mut mutated, mut refused, mut compared) = (0, 0, 0);
    let mut answers = std::collections::BTreeMap::new();
    for review in &reviews {
        let body = json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": review.request,
        })
        .to_string();
        for policy in &review.policies {
            let path = format!("/validate/{}", policy.name);
            let theirs = readable(&post(reference.address, &path, &body), review);
            let mine = readable(&post(ours.1.address, &path, &body), review);
            assert_eq!(mine, theirs, "{} by {}", review.label, policy.name);
            compared += 1;
            mutated += usize::from(!mine["response"]["patch"].is_null());
            refused += usize::from(mine["response"]["allowed"] == false);
            answers.insert((review.label.clone(), policy.name), mine);
        }
    }
    println!("{compared} answers alike: {mutated} mutate, {refused} refuse");
    // The requests exercise every kind of answer, not only "allowed".
    assert!(compared > 200, "{compared} answers compared");
    assert!(mutated > 20, "{mutated} of {compared} answers mutate");
    assert!(refused > 60, "{refused} of {compared} answers refuse");
    // And read the cluster: the user's test pod gets scs-demo's sidecar,
    // the user's recreate request the stored pod's uid.
    let answer = |label: &str, policy: &PolicyModule| &answers[&(label.to_owned(), policy.name)];
    let injected = answer("example pod-test-pod.yaml #0", &SIDECARSET);
    assert!(injected.to_string().contains("sidecar1"), "{injected:#}");
    let recreate = answer("example crr-demo.yaml #0", &MUTATE_CRR);
    assert!(recreate.to_string().contains(&pod_uid), "{recreate:#}");
    drop(ours);
    drop(reference);
    env.shutdown().await;
}

/// `kruise-wasm bench`'s cluster-mode workload, briefly, on the empty
/// cluster: the bench stores scs-demo there itself, then both servers must
/// inject it from the cluster (the bench checks each one's answer before
/// loading it). Timings are not asserted.
async fn bench_in_cluster_mode(env: &DevEnvironment) {
    let kubeconfig = env.kubeconfig().to_path_buf();
    let report = tokio::task::spawn_blocking(move || {
        let runtime = Runtime::new(RuntimeConfig {
            cache_dir: dev::compile_cache(),
            ..RuntimeConfig::default()
        })
        .unwrap();
        bench::run(
            &runtime,
            &BenchConfig {
                connections: 2,
                duration: Duration::from_millis(300),
                workers: 2,
                tls: None,
                instances: 1,
                policy_server: Some(kubewarden_tool("policy-server", "KRUISE_POLICY_SERVER")),
                rounds: 1,
                workloads: vec!["sidecarset-cluster".to_owned()],
                kubeconfig: Some(kubeconfig),
            },
        )
    })
    .await
    .unwrap()
    .unwrap();
    let lines: Vec<&String> = report
        .iter()
        .filter(|l| l.split_whitespace().nth(1) == Some("sidecarset-cluster"))
        .collect();
    assert_eq!(lines.len(), 3, "{report:#?}");
    for (line, server) in lines.iter().zip(["ours", "policy-server"]) {
        assert!(line.contains(server), "{line}");
        assert!(line.ends_with(" 0 errors, 1 rounds)"), "{line}");
        assert!(!line.contains("(0 requests"), "{line}");
    }
    assert!(lines[2].contains("x throughput"), "{}", lines[2]);
}

/// What the context-aware modules read: the user's SidecarSets, and a
/// running pod for the ContainerRecreateRequest webhook, with the
/// containers crr-demo.yaml names (its uid).
async fn stock_the_cluster(env: &DevEnvironment) -> String {
    for example in ["sidecarset-scs-demo.yaml", "sidecarset-log-sidecar.yaml"] {
        let path = examples().join(example);
        kubectl(env.kubeconfig(), &["apply", "-f", path.to_str().unwrap()]);
    }
    let pods: Api<Pod> = Api::namespaced(env.client(), "default");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "pod-name"},
        "spec": {"containers": [
            {"name": "app", "image": "busybox"},
            {"name": "sidecar", "image": "busybox"},
        ]},
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    wait_for(&pods, "pod-name", "app has a container", |p| {
        container_status(p, "app")?.container_id.as_ref()?;
        p.metadata.uid.clone()
    })
    .await
}

/// Our host serving the same policies.yml over plain HTTP, as
/// policy-server does here.
async fn our_plain_host(env: &DevEnvironment) -> (Runtime, RunningServer) {
    let policies = env.policies_file.clone();
    let kubeconfig = env.kubeconfig().to_path_buf();
    tokio::task::spawn_blocking(move || {
        // The environment's host compiled the same modules into this cache.
        let runtime = Runtime::new(RuntimeConfig {
            cache_dir: dev::compile_cache(),
            ..RuntimeConfig::default()
        })
        .unwrap();
        let config = ServerConfig {
            address: [127, 0, 0, 1].into(),
            port: 0,
            readiness_port: 0,
            ..ServerConfig::default()
        };
        let files = ServeFiles {
            policies: &policies,
            chains: None,
            always_accept_namespace: None,
        };
        let cluster = ClusterSource::Live(Credentials::Kubeconfig(&kubeconfig));
        let (server, _) = serve::start(&runtime, files, cluster, None, &config, None).unwrap();
        (runtime, server)
    })
    .await
    .unwrap()
}

/// An answer with its patch decoded, and what the guest drew blanked.
fn readable(review: &Value, sent: &Review) -> Value {
    let mut review = review.clone();
    if let Some(patch) = review["response"]["patch"].as_str() {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(patch)
            .unwrap();
        let text = String::from_utf8(bytes).unwrap();
        let text = blank_drawn_values(&text, sent.generate_name.as_deref());
        review["response"]["patch"] = serde_json::from_str(&text).unwrap();
    }
    review
}

/// One POST on a fresh connection; the answer's body (which must be a 200).
fn post(address: SocketAddr, path: &str, body: &str) -> Value {
    let mut stream = TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{path}: {answer}");
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{path}: {e}: {body}"))
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// policy-server on the environment's policies.yml and cluster; killed
/// when dropped.
struct PolicyServer {
    child: Child,
    address: SocketAddr,
    readiness: SocketAddr,
    log: std::path::PathBuf,
}

impl PolicyServer {
    fn start(env: &DevEnvironment) -> Self {
        let dir = env.cluster.work_dir.join("policy-server");
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("policy-server.log");
        let output = std::fs::File::create(&log).unwrap();
        let (port, readiness) = (free_port(), free_port());
        let child = Command::new(kubewarden_tool("policy-server", "KRUISE_POLICY_SERVER"))
            .current_dir(&dir)
            .env("KUBECONFIG", env.kubeconfig())
            .arg("--policies")
            .arg(&env.policies_file)
            .args(["--addr", "127.0.0.1", "--workers", "2", "--log-no-color"])
            .args(["--port", &port.to_string()])
            .args(["--readiness-probe-port", &readiness.to_string()])
            .arg("--policies-download-dir")
            .arg(&dir)
            .arg("--sigstore-cache-dir")
            .arg(dir.join("sigstore"))
            .stdout(output.try_clone().unwrap())
            .stderr(output)
            .stdin(Stdio::null())
            .spawn()
            .expect("policy-server starts");
        Self {
            child,
            address: ([127, 0, 0, 1], port).into(),
            readiness: ([127, 0, 0, 1], readiness).into(),
            log,
        }
    }

    /// Waits for its readiness probe to answer 200.
    fn wait_ready(&mut self) {
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("policy-server exited ({status}): {}", self.log_text());
            }
            if http_get_status(self.readiness, "/readiness") == Some(200) {
                return;
            }
            assert!(
                started.elapsed() < POLICY_SERVER_START,
                "policy-server not ready after {POLICY_SERVER_START:?}: {}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for PolicyServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The status of a GET, or `None` when nothing answers.
fn http_get_status(address: SocketAddr, path: &str) -> Option<u16> {
    let mut stream = TcpStream::connect(address).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    answer.split(' ').nth(1)?.parse().ok()
}
