//! The policy server over real sockets, plain HTTP and HTTPS:
//! AdmissionReviews built from the example pods, the patches checked, and
//! every kind of bad request answered clearly.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use base64::Engine as _;
use common::{
    FillingCluster, blank_hash_timestamps, fixtures, golden_cases, module_file, pod_create,
    runtime, scratch_dir,
};
use kruise_policy_modules::{LAUNCH_PRIORITY, SIDECARSET};
use kruise_wasm_host::admission::TIMEOUT_MESSAGE;
use kruise_wasm_host::chains_file;
use kruise_wasm_host::cluster_fixtures::ClusterReads;
use kruise_wasm_host::policy::{load_policies, load_policies_with_cluster};
use kruise_wasm_host::server::api::Policies;
use kruise_wasm_host::server::{RunningServer, ServerConfig, TlsFiles, start};
use rustls::pki_types::pem::PemObject as _;
use serde_json::{Value, json};

/// A module that answers `validate_settings` but loops in `validate`, with
/// the metadata policy-server requires.
const LOOPING_POLICY: &str = r#"(module
    (import "wapc" "__guest_response" (func $response (param i32 i32)))
    (memory (export "memory") 1)
    (data (i32.const 0) "{\"valid\":true}")
    (func (export "__guest_call") (param $op_len i32) (param $msg_len i32) (result i32)
      (if (i32.eq (local.get $op_len) (i32.const 8)) (then (loop (br 0))))
      (call $response (i32.const 0) (i32.const 14))
      (i32.const 1))
    (@custom "io.kubewarden.metadata" "{\"protocolVersion\":\"v1\"}"))"#;

fn policies_yml(name: &str) -> PathBuf {
    let dir = scratch_dir(name);
    std::fs::write(
        dir.join("looping.wasm"),
        wat::parse_str(LOOPING_POLICY).unwrap(),
    )
    .unwrap();
    let scs_demo: Value = serde_yaml::from_str(
        &std::fs::read_to_string(example("sidecarset-scs-demo.yaml")).unwrap(),
    )
    .unwrap();
    let policies = json!({
        "sidecarset": {"module": module_file(&SIDECARSET), "allowedToMutate": true,
                       "settings": {"sidecarSets": [scs_demo]}},
        "launch-priority": {"module": module_file(&LAUNCH_PRIORITY), "allowedToMutate": true},
        "launch-priority-validating": {"module": module_file(&LAUNCH_PRIORITY)},
        "looping": {"module": "looping.wasm", "timeoutEvalSeconds": 1},
    });
    let path = dir.join("policies.yml");
    std::fs::write(&path, serde_yaml::to_string(&policies).unwrap()).unwrap();
    path
}

fn config(workers: usize, tls: Option<TlsFiles>) -> ServerConfig {
    ServerConfig {
        address: [127, 0, 0, 1].into(),
        port: 0,
        readiness_port: 0,
        workers,
        tls,
        tls_reload_every: Duration::from_millis(100),
        max_body_bytes: 1 << 20,
        reuse_port: false,
    }
}

fn shared<P>(loaded: BTreeMap<String, P>) -> BTreeMap<String, Arc<P>> {
    loaded
        .into_iter()
        .map(|(id, policy)| (id, Arc::new(policy)))
        .collect()
}

fn serve(name: &str, tls: Option<TlsFiles>) -> RunningServer {
    let loaded =
        load_policies(runtime(), &policies_yml(name), Some(Duration::from_secs(2))).unwrap();
    let policies = shared(loaded);
    // OpenKruise's pod webhook.
    let chains =
        chains_file::parse("pod-webhook: [sidecarset, launch-priority]", &policies).unwrap();
    let policies = Policies {
        policies,
        always_accept_namespace: Some("kube-system".to_owned()),
        chains,
    };
    start(policies, &config(2, tls)).unwrap()
}

/// One server for the plain-HTTP tests.
fn plain() -> &'static RunningServer {
    static SERVER: OnceLock<RunningServer> = OnceLock::new();
    SERVER.get_or_init(|| serve("server-plain", None))
}

fn example(name: &str) -> PathBuf {
    fixtures().join("examples").join(name)
}

fn example_review(name: &str) -> Value {
    let pod: Value =
        serde_yaml::from_str(&std::fs::read_to_string(example(name)).unwrap()).unwrap();
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": pod_create(&pod)})
}

struct Reply {
    status: u16,
    body: String,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
}

/// One HTTP/1.1 request on its own connection.
fn exchange(
    mut stream: impl Read + Write,
    path: &str,
    content_type: Option<&str>,
    body: &[u8],
) -> Reply {
    let mut head = format!(
        "POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    if let Some(content_type) = content_type {
        head = head + "Content-Type: " + content_type + "\r\n";
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).unwrap();
    // The server may answer (413) before reading everything.
    let _ = stream.write_all(body);
    let mut reply = Vec::new();
    let _ = stream.read_to_end(&mut reply);
    let reply = String::from_utf8_lossy(&reply).into_owned();
    let status = reply
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {reply:?}"));
    let body = reply
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Reply { status, body }
}

fn post(address: SocketAddr, path: &str, body: &Value) -> Reply {
    post_bytes(
        address,
        path,
        Some("application/json"),
        body.to_string().as_bytes(),
    )
}

fn post_bytes(address: SocketAddr, path: &str, content_type: Option<&str>, body: &[u8]) -> Reply {
    exchange(
        TcpStream::connect(address).unwrap(),
        path,
        content_type,
        body,
    )
}

fn decoded_patch(response: &Value) -> json_patch::Patch {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(response["patch"].as_str().unwrap())
        .unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

fn golden_expected(name: &str) -> Value {
    golden_cases("injection")
        .into_iter()
        .find(|(n, _)| n == name)
        .unwrap()
        .1["expected"]
        .clone()
}

#[test]
fn validate_injects_the_example_pod() {
    let review = example_review("pod-test-pod.yaml");
    let reply = post(plain().address, "/validate/sidecarset", &review);
    assert_eq!(reply.status, 200, "{}", reply.body);
    let answer = reply.json();
    assert_eq!(answer["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(answer["kind"], "AdmissionReview");
    let response = &answer["response"];
    assert_eq!(response["uid"], review["request"]["uid"]);
    assert_eq!(response["allowed"], true);
    assert_eq!(response["patchType"], "JSONPatch");

    let mut pod = review["request"]["object"].clone();
    json_patch::patch(&mut pod, &decoded_patch(response)).unwrap();
    let mut expected = golden_expected("example-scs-demo-test-pod.yaml");
    blank_hash_timestamps(&mut pod["metadata"]);
    blank_hash_timestamps(&mut expected["metadata"]);
    assert_eq!(pod, expected);
}

#[test]
fn validate_enforces_and_audit_does_not() {
    let review = example_review("pod-launch-ordered.yaml");
    let mutated = post(plain().address, "/validate/launch-priority", &review).json();
    let patch = serde_json::to_value(decoded_patch(&mutated["response"])).unwrap();
    assert_eq!(
        patch[0]["value"][0]["valueFrom"]["configMapKeyRef"],
        json!({"key": "p_0", "name": "ordered-barrier"})
    );

    let refused = post(
        plain().address,
        "/validate/launch-priority-validating",
        &review,
    )
    .json();
    assert_eq!(refused["response"]["allowed"], false);
    assert!(refused["response"].get("patch").is_none());
    assert!(
        refused["response"]["status"]["message"]
            .as_str()
            .unwrap()
            .contains("configured to not allow mutations")
    );

    let audited = post(
        plain().address,
        "/audit/launch-priority-validating",
        &review,
    )
    .json();
    assert_eq!(audited["response"]["allowed"], true);
    assert_eq!(audited["response"]["patch"], mutated["response"]["patch"]);
}

#[test]
fn validate_raw_answers_a_bare_response() {
    let request = example_review("pod-launch-ordered.yaml")["request"].clone();
    let answer = post(
        plain().address,
        "/validate_raw/launch-priority",
        &json!({"request": request}),
    )
    .json();
    assert!(answer.get("apiVersion").is_none());
    assert_eq!(answer["response"]["uid"], request["uid"]);
    assert_eq!(answer["response"]["allowed"], true);
}

#[test]
fn the_always_accepted_namespace_skips_evaluation() {
    let mut review = example_review("pod-launch-ordered.yaml");
    review["request"]["namespace"] = json!("kube-system");
    let answer = post(
        plain().address,
        "/validate/launch-priority-validating",
        &review,
    )
    .json();
    assert_eq!(
        answer["response"],
        json!({"uid": review["request"]["uid"], "allowed": true, "auditAnnotations": null, "warnings": null})
    );
}

#[test]
fn bad_requests_get_clear_http_errors() {
    let address = plain().address;
    let review = example_review("pod-test-pod.yaml");

    let unknown = post(address, "/validate/nope", &review);
    assert_eq!(
        (unknown.status, unknown.json()),
        (
            404,
            json!({"message": "policy `nope` not found", "status": 404})
        )
    );

    let text = review.to_string();
    let truncated = post_bytes(
        address,
        "/validate/sidecarset",
        Some("application/json"),
        &text.as_bytes()[..text.len() / 2],
    );
    assert_eq!(truncated.status, 400);
    assert!(
        truncated.json()["message"]
            .as_str()
            .unwrap()
            .starts_with("Failed to parse the request body as JSON")
    );

    let malformed = post_bytes(
        address,
        "/validate/sidecarset",
        Some("application/json"),
        b"{\"request\": nope}",
    );
    assert_eq!(malformed.status, 400);

    let not_json = post_bytes(
        address,
        "/validate/sidecarset",
        Some("text/plain"),
        text.as_bytes(),
    );
    assert_eq!(not_json.status, 415);
    let no_type = post_bytes(address, "/validate/sidecarset", None, text.as_bytes());
    assert_eq!(no_type.status, 415);

    let mut wrong_kind = review.clone();
    wrong_kind["kind"] = json!("ConfigMap");
    let wrong_kind = post(address, "/validate/sidecarset", &wrong_kind);
    assert_eq!(
        (wrong_kind.status, wrong_kind.json()["message"].clone()),
        (422, json!("expected an AdmissionReview, got a ConfigMap"))
    );

    let no_request = post(
        address,
        "/validate/sidecarset",
        &json!({"kind": "AdmissionReview"}),
    );
    assert_eq!(no_request.status, 422);
    let mut no_uid = review.clone();
    no_uid["request"].as_object_mut().unwrap().remove("uid");
    let no_uid = post(address, "/validate/sidecarset", &no_uid);
    assert_eq!(no_uid.status, 422);
    assert!(
        no_uid.json()["message"]
            .as_str()
            .unwrap()
            .contains("missing field `uid`")
    );

    let mut oversized = review.clone();
    oversized["request"]["object"]["metadata"]["annotations"] = json!({"big": "x".repeat(2 << 20)});
    assert_eq!(
        post(address, "/validate/sidecarset", &oversized).status,
        413
    );

    // The server is still fine.
    assert_eq!(post(address, "/validate/sidecarset", &review).status, 200);
}

#[test]
fn a_policy_past_its_deadline_is_denied_while_others_are_served() {
    let address = plain().address;
    let review = example_review("pod-test-pod.yaml");
    let started = Instant::now();
    std::thread::scope(|scope| {
        // More spinning guests than the server has threads: each yields at
        // every epoch tick, so none holds a thread until its deadline.
        let looping: Vec<_> = (0..3)
            .map(|_| scope.spawn(|| post(address, "/validate/looping", &review)))
            .collect();
        std::thread::sleep(Duration::from_millis(100));
        for _ in 0..5 {
            let answer = post(
                address,
                "/validate/launch-priority",
                &example_review("pod-launch-ordered.yaml"),
            );
            assert_eq!(answer.status, 200);
            assert_eq!(answer.json()["response"]["allowed"], true);
        }
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "good requests waited: {:?}",
            started.elapsed()
        );
        for looping in looping {
            let timed_out = looping.join().unwrap();
            assert_eq!(
                timed_out.status, 200,
                "a timeout is an admission denial, not an HTTP error"
            );
            let response = &timed_out.json()["response"];
            assert_eq!(response["allowed"], false);
            assert_eq!(
                response["status"],
                json!({"message": TIMEOUT_MESSAGE, "code": 500})
            );
        }
    });
    assert!(started.elapsed() >= Duration::from_secs(1));
}

#[test]
fn readiness_answers_on_its_own_port() {
    let mut stream = TcpStream::connect(plain().readiness_address).unwrap();
    stream
        .write_all(b"GET /readiness HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).unwrap();
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
}

#[test]
fn https_serves_the_same_answers() {
    let tls_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/tls");
    let server = serve(
        "server-tls",
        Some(TlsFiles {
            cert: tls_dir.join("server.pem"),
            key: tls_dir.join("server-key.pem"),
        }),
    );

    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(rustls::pki_types::CertificateDer::from_pem_file(tls_dir.join("ca.pem")).unwrap())
        .unwrap();
    let client = Arc::new(
        rustls::ClientConfig::builder()
            .with_root_certificates(roots)
            .with_no_client_auth(),
    );
    let https = |path: &str, body: &Value| {
        let connection =
            rustls::ClientConnection::new(client.clone(), "localhost".try_into().unwrap()).unwrap();
        let stream =
            rustls::StreamOwned::new(connection, TcpStream::connect(server.address).unwrap());
        exchange(
            stream,
            path,
            Some("application/json"),
            body.to_string().as_bytes(),
        )
    };

    let review = example_review("pod-test-pod.yaml");
    let answer = https("/validate/sidecarset", &review).json();
    assert_eq!(answer["response"]["allowed"], true);
    let mut pod = review["request"]["object"].clone();
    json_patch::patch(&mut pod, &decoded_patch(&answer["response"])).unwrap();
    assert_eq!(pod["spec"]["containers"][0]["name"], "sidecar1");

    // Plain HTTP on the TLS port gets no answer.
    let plain_reply = {
        let mut stream = TcpStream::connect(server.address).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let _ = stream.write_all(
            b"POST /validate/sidecarset HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
        );
        let mut reply = Vec::new();
        let _ = stream.read_to_end(&mut reply);
        reply
    };
    assert!(!plain_reply.starts_with(b"HTTP/1.1 200"));
    server.shutdown();
}

fn get(address: SocketAddr, path: &str) -> Reply {
    let mut stream = TcpStream::connect(address).unwrap();
    let head = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    stream.write_all(head.as_bytes()).unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).unwrap();
    let status = reply.split(' ').nth(1).unwrap().parse().unwrap();
    let body = reply.split_once("\r\n\r\n").unwrap().1.to_owned();
    Reply { status, body }
}

#[test]
fn metrics_count_every_evaluation_by_outcome() {
    use kruise_wasm_host::server::metrics::{evaluation_series, sample};
    // Its own server: the shared one's counters move with the other tests.
    let server = serve("server-metrics", None);
    assert_eq!(get(server.readiness_address, "/livez").status, 200);
    let test_pod = example_review("pod-test-pod.yaml");
    let ordered = example_review("pod-launch-ordered.yaml");
    for _ in 0..3 {
        post(server.address, "/validate/sidecarset", &test_pod);
    }
    post(
        server.address,
        "/validate/launch-priority-validating",
        &ordered,
    );
    post(server.address, "/validate/launch-priority", &test_pod);
    post(server.address, "/validate/looping", &test_pod);
    post(server.address, "/mutate/pod-webhook", &test_pod);
    let mut skipped = test_pod.clone();
    skipped["request"]["namespace"] = json!("kube-system");
    post(server.address, "/validate/sidecarset", &skipped);

    let scrape = get(server.readiness_address, "/metrics");
    assert_eq!(scrape.status, 200);
    let value = |series: &str| sample(&scrape.body, series);
    assert_eq!(
        value(&evaluation_series("sidecarset", "mutated")),
        Some(3.0)
    );
    assert_eq!(
        value(&evaluation_series("launch-priority-validating", "rejected")),
        Some(1.0)
    );
    assert_eq!(
        value(&evaluation_series("launch-priority", "accepted")),
        Some(1.0)
    );
    assert_eq!(value(&evaluation_series("looping", "error")), Some(1.0));
    assert_eq!(
        value(&evaluation_series("chain/pod-webhook", "mutated")),
        Some(1.0)
    );
    assert_eq!(
        value("kruise_wasm_policy_timeouts_total{policy=\"looping\"}"),
        Some(1.0)
    );
    assert_eq!(
        value("kruise_wasm_policy_errors_total{policy=\"looping\"}"),
        Some(1.0)
    );
    assert_eq!(
        value("kruise_wasm_policy_errors_total{policy=\"sidecarset\"}"),
        None
    );
    assert_eq!(
        value("kruise_wasm_policy_evaluation_latency_seconds_count{policy=\"sidecarset\"}"),
        Some(3.0),
        "the always-accepted request is not an evaluation"
    );
    server.shutdown();
}

#[test]
fn the_pod_webhook_chain_answers_one_combined_patch() {
    let mut review = example_review("pod-test-pod.yaml");
    review["request"]["object"]["metadata"]["annotations"] =
        json!({"apps.kruise.io/container-launch-priority": "Ordered"});
    let reply = post(plain().address, "/mutate/pod-webhook", &review);
    assert_eq!(reply.status, 200, "{}", reply.body);
    let response = &reply.json()["response"];
    assert_eq!(response["allowed"], true);
    assert_eq!(response["uid"], review["request"]["uid"]);
    assert_eq!(response["patchType"], "JSONPatch");

    let mut pod = review["request"]["object"].clone();
    json_patch::patch(&mut pod, &decoded_patch(response)).unwrap();
    let containers = pod["spec"]["containers"].as_array().unwrap();
    let names: Vec<&str> = containers
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["sidecar1", "app"], "the sidecar is injected");
    assert_eq!(pod["spec"]["volumes"][0]["name"], "log-volume");
    // Launch priority saw the injected sidecar: it starts first.
    let barrier = |c: &Value| {
        c["env"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == "KRUISE_CONTAINER_BARRIER")
            .map(|e| e["valueFrom"]["configMapKeyRef"].clone())
    };
    assert_eq!(
        barrier(&containers[0]),
        Some(json!({"key": "p_0", "name": "test-pod-barrier"}))
    );
    assert_eq!(
        barrier(&containers[1]),
        Some(json!({"key": "p_-1", "name": "test-pod-barrier"}))
    );
}

#[test]
fn unknown_chains_are_404_and_chains_are_not_policies() {
    let review = example_review("pod-test-pod.yaml");
    let reply = post(plain().address, "/mutate/nope", &review);
    assert_eq!(reply.status, 404);
    assert_eq!(
        reply.json(),
        json!({"message": "chain `nope` not found", "status": 404})
    );
    assert_eq!(
        post(plain().address, "/validate/pod-webhook", &review).status,
        404
    );
    assert_eq!(
        post(plain().address, "/mutate/sidecarset", &review).status,
        404
    );
}

/// Completes a TLS handshake with the server, trusting only `ca_pem`.
fn handshake(server: &RunningServer, ca_pem: &str) -> Result<(), String> {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(rustls::pki_types::CertificateDer::from_pem_slice(ca_pem.as_bytes()).unwrap())
        .unwrap();
    let client = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let mut connection =
        rustls::ClientConnection::new(Arc::new(client), "localhost".try_into().unwrap()).unwrap();
    let mut socket = TcpStream::connect(server.address).unwrap();
    while connection.is_handshaking() {
        connection
            .complete_io(&mut socket)
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

#[test]
fn a_renewed_certificate_is_served_without_a_restart() {
    let dir = scratch_dir("server-tls-reload");
    let authority = |name: &str| {
        let dir = dir.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        kruise_devcluster::Pki::generate(&dir).unwrap()
    };
    let (old, new) = (authority("old-ca"), authority("new-ca"));
    let files = TlsFiles {
        cert: dir.join("tls.crt"),
        key: dir.join("tls.key"),
    };
    let install = |authority: &kruise_devcluster::Pki| {
        let pair = authority.issue_serving(&["localhost"]).unwrap();
        std::fs::write(&files.key, pair.key_pem).unwrap();
        std::fs::write(&files.cert, pair.cert_pem).unwrap();
    };
    install(&old);
    let server = serve("server-tls-reload-policies", Some(files.clone()));
    handshake(&server, &old.ca_pem).unwrap();
    assert!(handshake(&server, &new.ca_pem).is_err());

    // A pair that does not load (here: not PEM at all) is refused and the
    // one in use kept; several reload periods pass meanwhile.
    std::fs::write(&files.cert, "not a certificate").unwrap();
    std::thread::sleep(Duration::from_millis(500));
    handshake(&server, &old.ca_pem).unwrap();

    install(&new);
    let deadline = Instant::now() + Duration::from_secs(20);
    while handshake(&server, &new.ca_pem).is_err() {
        assert!(
            Instant::now() < deadline,
            "the renewed certificate was not served within 20 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(handshake(&server, &old.ca_pem).is_err());
}

/// A request whose policy waits for the host's watch caches (they fill
/// after the server starts) holds no evaluation slot: with more such
/// requests waiting than the server has slots, a policy that reads nothing
/// is answered at once, and the waiting ones are answered when the caches
/// fill.
#[test]
fn requests_waiting_for_the_watch_caches_hold_no_evaluation_slot() {
    let path = scratch_dir("server-cache-wait").join("policies.yml");
    let launch_priority = module_file(&LAUNCH_PRIORITY);
    let policies = json!({
        "reader": {"module": launch_priority, "allowedToMutate": true,
                   "contextAwareResources": [{"apiVersion": "v1", "kind": "Namespace"}]},
        "blind": {"module": launch_priority, "allowedToMutate": true},
    });
    std::fs::write(&path, serde_yaml::to_string(&policies).unwrap()).unwrap();
    let (fill, filled) = tokio::sync::watch::channel(false);
    let cluster: Arc<dyn ClusterReads> = Arc::new(FillingCluster(filled));
    let loaded = load_policies_with_cluster(runtime(), &path, None, Some(&cluster)).unwrap();
    let config = config(1, None);
    let policies = Policies {
        policies: shared(loaded),
        always_accept_namespace: None,
        chains: BTreeMap::new(),
    };
    let server = start(policies, &config).unwrap();
    let review = example_review("pod-launch-ordered.yaml");
    let waiting_count = config.evaluation_slots() + 1;
    std::thread::scope(|scope| {
        let waiting: Vec<_> = (0..waiting_count)
            .map(|_| scope.spawn(|| post(server.address, "/validate/reader", &review)))
            .collect();
        // Each waiting request holds a receiver of the cache's state, beside
        // the cluster's own. They give up after CLUSTER_FILL_WAIT (5 s), so
        // all must be waiting well before that.
        let deadline = Instant::now() + Duration::from_secs(3);
        while fill.receiver_count() < 1 + waiting_count {
            assert!(Instant::now() < deadline, "the requests never all waited");
            std::thread::sleep(Duration::from_millis(10));
        }
        let blind = post(server.address, "/validate/blind", &review);
        assert_eq!(blind.json()["response"]["allowed"], true);
        assert!(waiting.iter().all(|request| !request.is_finished()));

        fill.send_replace(true);
        for request in waiting {
            let answer = request.join().unwrap().json();
            assert_eq!(answer["response"]["allowed"], true, "{answer}");
            assert!(answer["response"]["patch"].is_string(), "{answer}");
        }
    });
}
