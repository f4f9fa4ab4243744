//! `kruise-wasm bench` end to end, briefly: every run completes over both
//! transports without a failed request. Timings are not asserted.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::process::Command;

/// A brief run: timings mean nothing here, only that every request is
/// answered.
const BRIEF: [&str; 6] = [
    "--duration",
    "0.3",
    "--connections",
    "2",
    "--instances",
    "3",
];

const WORKLOADS: [&str; 4] = [
    "add-label",
    "launch-priority",
    "sidecarset",
    "sidecarset-no-snapshot",
];

/// The report's lines for `transport` and `policy` (its second column).
fn lines_of<'a>(report: &'a str, transport: &str, policy: &str) -> Vec<&'a str> {
    report
        .lines()
        .filter(|l| l.starts_with(transport) && l.split_whitespace().nth(1) == Some(policy))
        .collect()
}

fn bench(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_kruise-wasm"))
        .arg("bench")
        .args(args)
        .env("KRUISE_WASM_CACHE_DIR", common::cache_dir())
        .output()
        .unwrap()
}

#[test]
fn bench_loads_both_transports_without_errors() {
    let tls = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/tls");
    let file = |name: &str| tls.join(name).to_str().unwrap().to_owned();
    let tls_args = [
        "--cert-file",
        &file("server.pem"),
        "--key-file",
        &file("server-key.pem"),
        "--ca-file",
        &file("ca.pem"),
    ];
    let output = bench(&[&BRIEF[..], &tls_args].concat());
    assert!(output.status.success(), "{output:?}");
    let report = String::from_utf8(output.stdout).unwrap();
    let runs = report.lines().filter(|l| l.contains("req/s")).count();
    assert_eq!(runs, 2 * WORKLOADS.len(), "{report}");
    for transport in ["http ", "https"] {
        for policy in WORKLOADS {
            let lines = lines_of(&report, transport, policy);
            let [run] = lines[..] else {
                panic!("{transport} {policy}: {report}");
            };
            assert!(run.ends_with(" 0 errors)"), "{run}");
            assert!(!run.contains("(0 requests"), "{run}");
        }
    }
    for instance in [
        "fresh sidecarset instance",
        "sidecarset instance from its snapshot",
    ] {
        assert!(
            report
                .lines()
                .any(|l| l.starts_with(instance) && l.ends_with("over 3 instances")),
            "{report}"
        );
    }
}

#[test]
fn bench_durations_are_bounded() {
    let output = bench(&["--duration", "61"]);
    assert!(!output.status.success());
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("at most 60 s"),
        "{output:?}"
    );
}

/// Kubewarden's reference policy-server (../shared/tools/kubewarden, or
/// `KRUISE_POLICY_SERVER`): the bench starts it beside ours. The path is
/// given relative to the test's working directory (the crate's), as
/// docs/benchmarks.md gives it: policy-server runs in a directory of its
/// own, where it would not resolve unless the bench makes it absolute.
#[test]
fn bench_beside_policy_server_reports_both_servers_and_the_ratio() {
    assert_eq!(
        std::env::current_dir().unwrap(),
        Path::new(env!("CARGO_MANIFEST_DIR"))
    );
    let policy_server = std::env::var_os("KRUISE_POLICY_SERVER").map_or_else(
        || Path::new("../../shared/tools/kubewarden/policy-server").to_path_buf(),
        std::path::PathBuf::from,
    );
    assert!(
        policy_server.exists(),
        "no policy-server at {}",
        policy_server.display()
    );
    let output = bench(
        &[
            &BRIEF[..],
            &[
                "--rounds",
                "1",
                "--policy-server",
                policy_server.to_str().unwrap(),
            ],
        ]
        .concat(),
    );
    assert!(output.status.success(), "{output:?}");
    let report = String::from_utf8(output.stdout).unwrap();
    for policy in WORKLOADS {
        let lines = lines_of(&report, "http ", policy);
        assert_eq!(lines.len(), 3, "{report}");
        for (line, server) in lines.iter().zip(["ours", "policy-server"]) {
            assert!(line.contains(server), "{line}");
            assert!(line.ends_with(" 0 errors, 1 rounds)"), "{line}");
            assert!(!line.contains("(0 requests"), "{line}");
        }
        assert!(
            lines[2].contains("ratio") && lines[2].contains("x throughput"),
            "{}",
            lines[2]
        );
    }
}

/// `--perf-map` leaves the map `perf report` reads guest function names
/// from; without it there is none.
#[test]
fn perf_map_names_the_guest_functions() {
    let run = |perf_map: bool| {
        let mut args = vec!["--workloads", "add-label", "--duration", "0.1"];
        args.extend(["--connections", "1", "--instances", "1"]);
        if perf_map {
            args.push("--perf-map");
        }
        let child = Command::new(env!("CARGO_BIN_EXE_kruise-wasm"))
            .arg("bench")
            .args(&args)
            .env("KRUISE_WASM_CACHE_DIR", common::cache_dir())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // wasmtime writes the map under /tmp, whatever TMPDIR says.
        let map = std::path::Path::new("/tmp").join(format!("perf-{}.map", child.id()));
        let output = child.wait_with_output().unwrap();
        assert!(output.status.success(), "{output:?}");
        let text = std::fs::read_to_string(&map).ok();
        let _ = std::fs::remove_file(&map);
        text
    };
    let text = run(true).expect("a perf map with --perf-map");
    assert!(
        text.lines().any(|l| l.contains("wasm[0]::function[")),
        "{}",
        text.chars().take(500).collect::<String>()
    );
    assert_eq!(run(false), None);
}
