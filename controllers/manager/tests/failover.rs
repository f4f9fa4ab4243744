//! Two `kruise-manager run` replicas on the dev cluster, as a Deployment
//! of two would run: one takes the Lease and runs the controllers, the
//! other stands by. The leader is killed (SIGKILL: no chance to step down)
//! mid-rollout; the standby takes the Lease and finishes the rollout, with
//! maxSurge and maxUnavailable held at every watched pod change. The new
//! leader's `/metrics` counts its reconciles; SIGTERM stops it cleanly and
//! releases the Lease.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Namespace;
use kruise_api::CloneSet;
use kruise_core::cloneset::has_ready_condition;
use kruise_devcluster::simnode::READY_AFTER_SECONDS;
use kruise_devcluster::wait::wait_for;
use kruise_devcluster::watch::PodCounts;
use kruise_manager::dev::{DevEnvironment, DevOptions};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::process::{Child, Command};

const LEASE: &str = "kruise-wasm-manager";
const SYSTEM: &str = "kruise-system";
/// The Lease's duration: how long a dead leader blocks the standby.
const LEASE_SECONDS: u64 = 3;

struct Replica {
    name: &'static str,
    probes: SocketAddr,
    process: Child,
}

impl Replica {
    fn start(name: &'static str, kubeconfig: &Path, port: u16, logs: &Path) -> Self {
        let probes = SocketAddr::from(([127, 0, 0, 1], port));
        let log = std::fs::File::create(logs.join(format!("{name}.log"))).unwrap();
        let process = Command::new(env!("CARGO_BIN_EXE_kruise-manager"))
            .args(["run", "--kubeconfig"])
            .arg(kubeconfig)
            .arg(format!("--probe-address={probes}"))
            .arg(format!("--leader-election-lease-duration={LEASE_SECONDS}s"))
            .args([
                "--leader-election-renew-deadline=2s",
                "--leader-election-retry-period=250ms",
            ])
            // The Lease's holder is HOSTNAME_<random>.
            .env("HOSTNAME", name)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        Self {
            name,
            probes,
            process,
        }
    }

    fn terminate(&self) {
        let pid = self.process.id().expect("running").to_string();
        let sent = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap();
        assert!(sent.success());
    }
}

/// Status code and body of GET `path`.
async fn get(address: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect(address).await.ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.ok()?;
    let code = answer.get(9..12)?.parse().ok()?;
    let body = answer.split_once("\r\n\r\n")?.1.to_owned();
    Some((code, body))
}

async fn wait_ready(replica: &Replica) {
    let deadline = Instant::now() + Duration::from_mins(1);
    loop {
        let answer = get(replica.probes, "/readyz").await;
        if matches!(answer, Some((200, _))) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{} never ready: {answer:?}",
            replica.name
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The replica named in the Lease's holder, once `check` accepts it.
async fn holder(leases: &Api<Lease>, what: &str, check: impl Fn(Option<&str>) -> bool) -> String {
    wait_for(leases, LEASE, what, |lease| {
        let holder = lease.spec.as_ref()?.holder_identity.as_deref();
        check(holder).then(|| {
            holder
                .and_then(|h| h.split_once('_'))
                .map_or_else(String::new, |(name, _)| name.to_owned())
        })
    })
    .await
}

fn cloneset() -> CloneSet {
    serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet",
        "metadata": {"name": "failover", "namespace": "default"},
        "spec": {
            "replicas": 5,
            "selector": {"matchLabels": {"app": "failover"}},
            "template": {
                "metadata": {
                    "labels": {"app": "failover"},
                    // Slow enough that the rollout spans the failover.
                    "annotations": {READY_AFTER_SECONDS: "2"},
                },
                "spec": {"containers": [{"name": "main", "image": "nginx:1.25"}]},
            },
            "updateStrategy": {"type": "ReCreate", "maxUnavailable": 1, "maxSurge": 1},
        },
    }))
    .unwrap()
}

/// Waits until all five pods run `image` and are ready, as the status says.
async fn rolled_out(clonesets: &Api<CloneSet>) {
    let deadline = Instant::now() + Duration::from_mins(2);
    loop {
        let cloneset = clonesets.get("failover").await.unwrap();
        let status = cloneset.status.clone().unwrap_or_default();
        let seen = status.observed_generation == cloneset.metadata.generation;
        if seen && status.updated_ready_replicas == 5 && status.replicas == 5 {
            return;
        }
        assert!(Instant::now() < deadline, "rollout stuck: {status:#?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_standby_takes_over_a_rollout_when_the_leader_dies() {
    let env = DevEnvironment::start(DevOptions {
        run_controllers: false,
        ..DevOptions::default()
    })
    .await
    .unwrap();
    let client: Client = env.client();
    let namespace: Namespace =
        serde_json::from_value(json!({"metadata": {"name": SYSTEM}})).unwrap();
    let _ = Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await;
    let logs = env.cluster.work_dir.clone();
    let ports = kruise_devcluster::ports::free_ports(2).unwrap();
    let mut replicas = [
        Replica::start("replica-a", env.kubeconfig(), ports[0], &logs),
        Replica::start("replica-b", env.kubeconfig(), ports[1], &logs),
    ];
    let leases: Api<Lease> = Api::namespaced(client.clone(), SYSTEM);
    let first = holder(&leases, "a leader", |h| h.is_some()).await;
    for replica in &replicas {
        // The standby too: it is healthy, waiting for the Lease.
        wait_ready(replica).await;
    }

    let clonesets: Api<CloneSet> = Api::namespaced(client.clone(), "default");
    clonesets
        .create(&PostParams::default(), &cloneset())
        .await
        .unwrap();
    rolled_out(&clonesets).await;
    let counts = PodCounts::start(&client, "app=failover", has_ready_condition);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let image = json!({"spec": {"template": {"spec": {"containers": [{"name": "main", "image": "nginx:1.26"}]}}}});
    clonesets
        .patch("failover", &PatchParams::default(), &Patch::Merge(image))
        .await
        .unwrap();
    wait_for(&clonesets, "failover", "the rollout under way", |c| {
        let status = c.status.as_ref()?;
        (status.updated_replicas >= 1 && status.updated_ready_replicas < 5).then_some(())
    })
    .await;

    let leader = replicas.iter_mut().find(|r| r.name == first).unwrap();
    leader.process.start_kill().unwrap();
    leader.process.wait().await.unwrap();
    let second = holder(&leases, "the standby leading", |h| {
        h.is_some_and(|h| !h.starts_with(&first))
    })
    .await;
    rolled_out(&clonesets).await;

    let seen = counts.take();
    assert!(seen.len() > 5, "the watch saw the rollout: {seen:?}");
    assert!(
        seen.iter().all(|(total, _)| *total <= 6),
        "maxSurge 1: {seen:?}"
    );
    assert!(
        seen.iter().all(|(_, ready)| *ready >= 4),
        "maxUnavailable 1: {seen:?}"
    );
    let lease = leases.get(LEASE).await.unwrap().spec.unwrap();
    assert_eq!(lease.lease_transitions, Some(1), "one takeover: {lease:?}");

    let new_leader = replicas.iter_mut().find(|r| r.name == second).unwrap();
    let (code, metrics) = get(new_leader.probes, "/metrics").await.unwrap();
    assert_eq!(code, 200);
    let counted =
        "kruise_reconcile_duration_seconds_count{controller=\"kruise-cloneset-controller\"}";
    assert!(metrics.contains(counted), "{metrics}");

    new_leader.terminate();
    let exit = tokio::time::timeout(Duration::from_secs(30), new_leader.process.wait())
        .await
        .expect("SIGTERM stops the manager")
        .unwrap();
    assert!(exit.success(), "{exit}");
    let released = leases.get(LEASE).await.unwrap().spec.unwrap();
    assert_eq!(released.holder_identity, None, "stepped down: {released:?}");
    env.shutdown().await;
}
