//! The `kruise-wasm` binary: `run` as `kwctl run`, `inject` on the example
//! pods and workloads.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::Write as _;
use std::process::{Command, Output, Stdio};

use base64::Engine as _;
use common::{blank_hash_timestamps, fixtures, golden_cases, module_file, pod_create, scratch_dir};
use kruise_policy_modules::{LAUNCH_PRIORITY, SIDECARSET};
use serde_json::{Value, json};

fn kruise_wasm(args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kruise-wasm"))
        .args(args)
        .env("KRUISE_WASM_CACHE_DIR", common::cache_dir())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    input
        .write_all(stdin.unwrap_or_default().as_bytes())
        .unwrap();
    drop(input);
    child.wait_with_output().unwrap()
}

fn stdout(output: &Output) -> String {
    assert!(
        output.status.success(),
        "failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout.clone()).unwrap()
}

fn example(name: &str) -> String {
    fixtures().join("examples").join(name).display().to_string()
}

fn ordered_pod() -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web-0", "namespace": "default",
                     "annotations": {"apps.kruise.io/container-launch-priority": "Ordered"}},
        "spec": {"containers": [{"name": "a", "image": "a"}, {"name": "b", "image": "b"}]}})
}

fn decoded_patch(response: &Value) -> Value {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(response["patch"].as_str().unwrap())
        .unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

#[test]
fn run_prints_the_admission_response_of_a_review_or_a_bare_request() {
    let dir = scratch_dir("cli-run");
    let module = module_file(&LAUNCH_PRIORITY).display().to_string();
    let review = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": pod_create(&ordered_pod())});
    let review_file = dir.join("review.json");
    std::fs::write(&review_file, review.to_string()).unwrap();

    let from_file = stdout(&kruise_wasm(
        &[
            "run",
            "--module",
            &module,
            "--request",
            review_file.to_str().unwrap(),
        ],
        None,
    ));
    assert_eq!(from_file.lines().count(), 1, "one line: {from_file}");
    let response: Value = serde_json::from_str(&from_file).unwrap();
    assert_eq!(response["uid"], "705ab4f5-6393-11e8-b7cc-42010a800002");
    assert_eq!(response["allowed"], true);
    assert_eq!(response["patchType"], "JSONPatch");
    assert_eq!(response["auditAnnotations"], Value::Null);
    let patch = decoded_patch(&response);
    assert_eq!(patch[0]["path"], "/spec/containers/0/env");
    assert_eq!(
        patch[0]["value"][0]["valueFrom"]["configMapKeyRef"],
        json!({"key": "p_0", "name": "web-0-barrier"})
    );

    let bare = pod_create(&ordered_pod()).to_string();
    let from_stdin = stdout(&kruise_wasm(
        &["run", "-m", &module, "-r", "-", "--settings-json", "{}"],
        Some(&bare),
    ));
    assert_eq!(
        from_stdin, from_file,
        "a bare request from stdin answers the same"
    );
}

#[test]
fn run_refuses_invalid_settings_with_kwctls_message() {
    let module = module_file(&LAUNCH_PRIORITY).display().to_string();
    let request = pod_create(&ordered_pod()).to_string();
    let output = kruise_wasm(
        &[
            "run",
            "-m",
            &module,
            "-r",
            "-",
            "--settings-json",
            r#"{"priority": 1}"#,
        ],
        Some(&request),
    );
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(
        stderr.starts_with("Error: Provided settings are not valid: "),
        "{stderr}"
    );
    assert!(stderr.contains("unknown field `priority`"), "{stderr}");
    assert!(output.stdout.is_empty());

    let dir = scratch_dir("cli-settings");
    let settings = dir.join("settings.yaml");
    std::fs::write(
        &settings,
        "sidecarSets:\n- kind: SidecarSet\n  metadata: {name: x}\n  spec: {containers: no}\n",
    )
    .unwrap();
    let sidecarset = module_file(&SIDECARSET).display().to_string();
    let output = kruise_wasm(
        &[
            "run",
            "-m",
            &sidecarset,
            "-r",
            "-",
            "-s",
            settings.to_str().unwrap(),
        ],
        Some(&request),
    );
    assert_eq!(output.status.code(), Some(1));
    assert!(
        String::from_utf8(output.stderr)
            .unwrap()
            .contains("sidecarSets[0] (x): spec.containers")
    );
}

#[test]
fn run_reports_a_rejection_and_bad_input_clearly() {
    let module = module_file(&LAUNCH_PRIORITY).display().to_string();
    // Not a pod: the policy rejects it, kwctl-style, with exit code 0.
    let deployment = pod_create(
        &json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}}),
    );
    let rejected: Value = serde_json::from_str(&stdout(&kruise_wasm(
        &["run", "-m", &module, "-r", "-"],
        Some(&deployment.to_string()),
    )))
    .unwrap();
    assert_eq!(rejected["allowed"], false);
    assert_eq!(rejected["status"]["code"], 400);

    let output = kruise_wasm(
        &["run", "-m", &module, "-r", "-"],
        Some(r#"{"kind": "AdmissionReview"}"#),
    );
    assert_eq!(output.status.code(), Some(1));
    assert!(
        String::from_utf8(output.stderr)
            .unwrap()
            .contains("the AdmissionReview has no request")
    );

    let output = kruise_wasm(&["run", "-m", "/nonexistent.wasm", "-r", "-"], Some("{}"));
    assert_eq!(output.status.code(), Some(1));
    assert!(
        String::from_utf8(output.stderr)
            .unwrap()
            .contains("cannot read /nonexistent.wasm")
    );
}

/// The golden case that pairs the same example files.
fn golden(name: &str) -> Value {
    golden_cases("injection")
        .into_iter()
        .find(|(n, _)| n == name)
        .unwrap()
        .1
}

#[test]
fn inject_gives_the_golden_pod() {
    let yaml = stdout(&kruise_wasm(
        &[
            "inject",
            "-f",
            &example("pod-test-pod.yaml"),
            "--sidecarsets",
            &example("sidecarset-scs-demo.yaml"),
        ],
        None,
    ));
    let mut injected: Value = serde_yaml::from_str(&yaml).unwrap();
    let mut expected = golden("example-scs-demo-test-pod.yaml")["expected"].clone();
    blank_hash_timestamps(&mut injected["metadata"]);
    blank_hash_timestamps(&mut expected["metadata"]);
    assert_eq!(injected, expected);
}

#[test]
fn inject_puts_the_injected_template_back_into_a_deployment() {
    let args = [
        "inject",
        "-f",
        &example("deployment-nginx.yaml"),
        "--sidecarsets",
        &example("sidecarset-canary.yaml"),
    ];
    let original: Value =
        serde_yaml::from_str(&std::fs::read_to_string(example("deployment-nginx.yaml")).unwrap())
            .unwrap();
    let mut injected: Value = serde_yaml::from_str(&stdout(&kruise_wasm(&args, None))).unwrap();

    let expected = golden("example-canary-deployment-nginx.yaml")["expected"].clone();
    let template = injected["spec"]["template"].clone();
    assert_eq!(template["spec"], expected["spec"]);
    let mut metadata = template["metadata"].clone();
    let mut expected_metadata = expected["metadata"].clone();
    blank_hash_timestamps(&mut metadata);
    blank_hash_timestamps(&mut expected_metadata);
    assert_eq!(metadata["annotations"], expected_metadata["annotations"]);
    assert_eq!(
        injected["metadata"], original["metadata"],
        "the Deployment's own metadata is untouched"
    );

    // --patch: applied to the input, it gives the same object.
    let patch: json_patch::Patch = serde_json::from_str(&stdout(&kruise_wasm(
        &[&args[..], &["--patch"]].concat(),
        None,
    )))
    .unwrap();
    let mut patched = original.clone();
    json_patch::patch(&mut patched, &patch).unwrap();
    blank_hash_timestamps(&mut patched["spec"]["template"]["metadata"]);
    blank_hash_timestamps(&mut injected["spec"]["template"]["metadata"]);
    assert_eq!(patched, injected);
}

#[test]
fn inject_orders_an_injected_sidecar_first_in_an_ordered_pod() {
    let output = kruise_wasm(
        &[
            "inject",
            "-f",
            &example("pod-launch-ordered.yaml"),
            "--sidecarsets",
            &example("sidecarset-scs-demo.yaml"),
        ],
        None,
    );
    // pod-launch-ordered has no app=nginx label: only launch priority acts.
    let pod: Value = serde_yaml::from_str(&stdout(&output)).unwrap();
    let containers = pod["spec"]["containers"].as_array().unwrap();
    assert_eq!(containers.len(), 2);
    let barrier = |c: &Value| c["env"][0]["valueFrom"]["configMapKeyRef"].clone();
    assert_eq!(
        barrier(&containers[0]),
        json!({"key": "p_0", "name": "ordered-barrier"})
    );
    assert_eq!(
        barrier(&containers[1]),
        json!({"key": "p_-1", "name": "ordered-barrier"})
    );
}

#[test]
fn inject_explains_what_it_cannot_do() {
    let dir = scratch_dir("cli-inject-errors");
    let not_sidecarsets = dir.join("pods.yaml");
    std::fs::write(&not_sidecarsets, "kind: Pod\nmetadata: {name: p}\n").unwrap();
    let output = kruise_wasm(
        &[
            "inject",
            "-f",
            &example("pod-test-pod.yaml"),
            "--sidecarsets",
            not_sidecarsets.to_str().unwrap(),
        ],
        None,
    );
    assert_eq!(output.status.code(), Some(1));
    assert!(
        String::from_utf8(output.stderr)
            .unwrap()
            .contains("document 1 is a Pod, not a SidecarSet")
    );

    let output = kruise_wasm(
        &[
            "inject",
            "-f",
            &example("sidecarset-canary.yaml"),
            "--sidecarsets",
            &example("sidecarset-scs-demo.yaml"),
        ],
        None,
    );
    assert_eq!(output.status.code(), Some(1));
    assert!(
        String::from_utf8(output.stderr)
            .unwrap()
            .contains("kind SidecarSet is neither a Pod nor a workload")
    );

    // A template that asks for launch ordering: injected, with a note.
    let ordered_deployment = dir.join("ordered.yaml");
    std::fs::write(
        &ordered_deployment,
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  template:\n    metadata:\n      labels: {app: nginx}\n      annotations: {apps.kruise.io/container-launch-priority: Ordered}\n    spec:\n      containers: [{name: a, image: a}]\n",
    )
    .unwrap();
    let output = kruise_wasm(
        &[
            "inject",
            "-f",
            ordered_deployment.to_str().unwrap(),
            "--sidecarsets",
            &example("sidecarset-scs-demo.yaml"),
        ],
        None,
    );
    let deployment: Value = serde_yaml::from_str(&stdout(&output)).unwrap();
    assert_eq!(
        deployment["spec"]["template"]["spec"]["containers"][0]["name"],
        "sidecar1"
    );
    assert!(
        String::from_utf8(output.stderr)
            .unwrap()
            .contains("Note: launch priority not applied")
    );
}

/// `kruise-wasm serve` of the launch-priority policy on a free loopback
/// port, its policies file in `dir`: the process and its address.
fn serve_launch_priority(dir: &std::path::Path) -> (std::process::Child, String) {
    use std::io::{BufRead as _, BufReader};
    let policies = dir.join("policies.yml");
    std::fs::write(
        &policies,
        format!(
            "launch-priority:\n  module: {}\n  allowedToMutate: true\n",
            module_file(&LAUNCH_PRIORITY).display()
        ),
    )
    .unwrap();
    let mut server = Command::new(env!("CARGO_BIN_EXE_kruise-wasm"))
        .args([
            "serve",
            "--policies",
            policies.to_str().unwrap(),
            "--address",
            "127.0.0.1",
        ])
        .args(["--port", "0", "--readiness-probe-port", "0"])
        .env("KRUISE_WASM_CACHE_DIR", common::cache_dir())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut banner = String::new();
    BufReader::new(server.stderr.as_mut().unwrap())
        .read_line(&mut banner)
        .unwrap();
    let address = banner
        .split("http://")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no address in {banner:?}"))
        .to_owned();
    assert!(
        banner.starts_with("serving 1 policies on http://127.0.0.1:"),
        "{banner}"
    );
    (server, address)
}

/// An HTTP/1.1 request of the ordered pod's review to the launch-priority
/// policy, with `headers` (each ending in CRLF) added.
fn launch_priority_request(headers: &str) -> String {
    let review = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": pod_create(&ordered_pod())}).to_string();
    format!(
        "POST /validate/launch-priority HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{headers}\r\n{review}",
        review.len()
    )
}

#[test]
fn serve_answers_until_stopped_and_refuses_a_bad_policy() {
    use std::io::Read as _;
    let dir = scratch_dir("cli-serve");
    let policies = dir.join("policies.yml");
    let (mut server, address) = serve_launch_priority(&dir);

    let mut stream = std::net::TcpStream::connect(&address).unwrap();
    stream
        .write_all(launch_priority_request("Connection: close\r\n").as_bytes())
        .unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).unwrap();
    server.kill().unwrap();
    server.wait().unwrap();
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    assert!(reply.contains(r#""patchType":"JSONPatch""#), "{reply}");

    std::fs::write(
        &policies,
        format!(
            "strict:\n  module: {}\n  settings: {{priority: 1}}\n",
            module_file(&LAUNCH_PRIORITY).display()
        ),
    )
    .unwrap();
    let output = kruise_wasm(
        &[
            "serve",
            "--policies",
            policies.to_str().unwrap(),
            "--port",
            "0",
            "--readiness-probe-port",
            "0",
        ],
        None,
    );
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(
        stderr.starts_with("Error: policy `strict`: settings are not valid:"),
        "{stderr}"
    );
}

/// One answer read off a keep-alive connection: the status line and
/// headers (lower-cased), then as many body bytes as they announce.
fn read_answer(stream: &mut std::io::BufReader<std::net::TcpStream>) -> (String, String) {
    use std::io::{BufRead as _, Read as _};
    let mut head = String::new();
    loop {
        let mut line = String::new();
        assert!(
            stream.read_line(&mut line).unwrap() > 0,
            "closed mid-answer: {head}"
        );
        if line == "\r\n" {
            break;
        }
        head.push_str(&line.to_ascii_lowercase());
    }
    let length: usize = head
        .lines()
        .find_map(|line| line.strip_prefix("content-length: "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no content-length in {head}"));
    let mut body = vec![0; length];
    stream.read_exact(&mut body).unwrap();
    (head, String::from_utf8(body).unwrap())
}

#[test]
fn serve_drains_keep_alive_connections_after_sigterm() {
    use std::io::{BufReader, Read as _};
    let dir = scratch_dir("cli-serve-drain");
    let (mut server, address) = serve_launch_priority(&dir);
    let request = launch_priority_request("");
    let mut stream = BufReader::new(std::net::TcpStream::connect(&address).unwrap());
    stream.get_mut().write_all(request.as_bytes()).unwrap();
    let (head, _) = read_answer(&mut stream);
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(!head.contains("connection: close"), "{head}");

    // Kubernetes stops a pod with SIGTERM. The connection is idle now, as
    // the API server's pooled connections mostly are: it must still be
    // answered on, and closed by the client after that answer.
    let killed = Command::new("kill")
        .args(["-TERM", &server.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    std::thread::sleep(std::time::Duration::from_millis(300));
    stream.get_mut().write_all(request.as_bytes()).unwrap();
    let (head, body) = read_answer(&mut stream);
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(head.contains("connection: close"), "{head}");
    assert!(body.contains(r#""patchType":"JSONPatch""#), "{body}");
    let mut rest = Vec::new();
    stream.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty(), "the server kept the connection open");

    // Once no request comes for a moment, the server stops on its own.
    let status = server.wait().unwrap();
    assert!(status.success(), "{status}");
}

#[test]
fn serve_refuses_a_chain_of_unknown_policies() {
    let dir = scratch_dir("cli-serve-chains");
    let policies = dir.join("policies.yml");
    std::fs::write(
        &policies,
        format!(
            "launch-priority:\n  module: {}\n  allowedToMutate: true\n",
            module_file(&LAUNCH_PRIORITY).display()
        ),
    )
    .unwrap();
    let chains = dir.join("chains.yml");
    std::fs::write(&chains, "pod-webhook: [sidecarset, launch-priority]\n").unwrap();
    let output = kruise_wasm(
        &[
            "serve",
            "--policies",
            policies.to_str().unwrap(),
            "--chains",
            chains.to_str().unwrap(),
            "--port",
            "0",
            "--readiness-probe-port",
            "0",
        ],
        None,
    );
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(
        stderr.contains(
            "chains.yml: chain `pod-webhook`: policy `sidecarset` is not in the policies file"
        ),
        "{stderr}"
    );
}
