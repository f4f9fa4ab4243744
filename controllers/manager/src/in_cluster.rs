//! The install (`kubectl kustomize artifacts/deploy`) fitted to the dev
//! cluster's real node, where there is no pod network, no kube-proxy and no
//! cluster DNS (controllers/devcluster/REAL-NODE.md). Each change is what a
//! user running the install on the host network would make:
//!
//! - one replica each, on the host network, pinned to the real node;
//! - the ports free ports on the node, bound to the pod's (the node's)
//!   address, and given as numbers without declaring them: declared ports
//!   of a host-network pod are host ports, and the scheduler would not place
//!   a surge replica beside the old one;
//! - the host's upgrade on one node: the new replica shares the old one's
//!   port (`--reuse-port`), and the old one keeps serving longer after it
//!   is told to stop (its preStop sleep), until the new one listens;
//! - the API server at the address the test cluster serves on, since the
//!   `kubernetes` Service's ClusterIP routes nowhere here;
//! - the node agent on the real node's containerd socket;
//! - our images from the node's registry.
//!
//! The API server reaches the host pod through the Service's endpoints
//! (`--enable-aggregator-routing`), so the webhook configurations and the
//! CRDs are used unchanged.

use std::path::Path;

use kruise_devcluster::realnode::REAL_NODE_LABEL;
use serde_json::{Value, json};

/// Where and how the install runs.
#[derive(Debug, Clone)]
pub struct Placement<'a> {
    pub manager_image: &'a str,
    pub host_image: &'a str,
    /// `host:port` of the API server, as pods on the node reach it.
    pub api_server: (&'a str, u16),
    pub runtime_socket: &'a Path,
    pub ports: Ports,
}

/// Free ports on the node for the host-network pods.
#[derive(Debug, Clone, Copy)]
pub struct Ports {
    pub host: u16,
    pub host_readiness: u16,
    pub manager_probes: u16,
    pub agent_probes: u16,
}

const MANAGER: &str = "kruise-manager";
const HOST: &str = "kruise-webhook";
const AGENT: &str = "kruise-node-agent";

/// The install's objects (from kustomize, in order) placed on the real
/// node. Fails naming the object when one this placement changes is
/// missing or not shaped as `artifacts/deploy` writes it.
pub fn place(objects: Vec<Value>, placement: &Placement<'_>) -> Result<Vec<Value>, String> {
    let mut placed = Vec::with_capacity(objects.len());
    let mut changed = Vec::new();
    for mut object in objects {
        let kind = object["kind"].as_str().unwrap_or_default().to_owned();
        let name = object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let change = match (kind.as_str(), name.as_str()) {
            ("Deployment", MANAGER) => place_manager(&mut object, placement),
            ("Deployment", HOST) => place_host(&mut object, placement),
            ("DaemonSet", AGENT) => place_agent(&mut object, placement),
            ("Service", crate::deploy::HOST_SERVICE) => {
                set_target_port(&mut object, placement.ports.host)
            }
            _ => {
                placed.push(object);
                continue;
            }
        };
        change.map_err(|e| format!("{kind} {name}: {e}"))?;
        changed.push(format!("{kind}/{name}"));
        placed.push(object);
    }
    for expected in [
        format!("Deployment/{MANAGER}"),
        format!("Deployment/{HOST}"),
        format!("DaemonSet/{AGENT}"),
        format!("Service/{}", crate::deploy::HOST_SERVICE),
    ] {
        if !changed.contains(&expected) {
            return Err(format!("the install has no {expected}"));
        }
    }
    Ok(placed)
}

fn place_manager(deployment: &mut Value, placement: &Placement<'_>) -> Result<(), String> {
    deployment["spec"]["replicas"] = json!(1);
    let port = placement.ports.manager_probes;
    let container = on_the_node(deployment, placement, placement.manager_image)?;
    replace_arg(container, "--probe-address=", &format!("$(POD_IP):{port}"))?;
    numbered_probes(container, port)
}

fn place_host(deployment: &mut Value, placement: &Placement<'_>) -> Result<(), String> {
    deployment["spec"]["replicas"] = json!(1);
    let Ports {
        host,
        host_readiness,
        ..
    } = placement.ports;
    let container = on_the_node(deployment, placement, placement.host_image)?;
    replace_arg(container, "--port=", &host.to_string())?;
    replace_arg(
        container,
        "--readiness-probe-port=",
        &host_readiness.to_string(),
    )?;
    push_args(container, &["--address=$(POD_IP)", "--reuse-port"])?;
    // On a shared port the old replica may answer the new one's readiness
    // probe before the new one listens: the old one keeps serving long
    // enough for the new one to start.
    let sleep = &mut container["lifecycle"]["preStop"]["sleep"];
    if !sleep.is_object() {
        return Err("no preStop sleep".to_owned());
    }
    sleep["seconds"] = json!(SHARED_PORT_DRAIN_SECONDS);
    numbered_probes(container, host_readiness)
}

/// How long an old host replica keeps serving after it is told to stop,
/// when it shares its port with its successor.
const SHARED_PORT_DRAIN_SECONDS: u32 = 15;

fn place_agent(daemon_set: &mut Value, placement: &Placement<'_>) -> Result<(), String> {
    let port = placement.ports.agent_probes;
    let socket = placement.runtime_socket;
    let socket_dir = socket
        .parent()
        .ok_or_else(|| format!("{} has no directory", socket.display()))?
        .display()
        .to_string();
    let spec = &mut daemon_set["spec"]["template"]["spec"];
    let volume = spec["volumes"]
        .as_array_mut()
        .and_then(|volumes| volumes.iter_mut().find(|v| v["hostPath"].is_object()))
        .ok_or("no hostPath volume for the runtime socket")?;
    volume["hostPath"]["path"] = json!(socket_dir);
    let volume_name = volume["name"].clone();
    let container = on_the_node(daemon_set, placement, placement.manager_image)?;
    let mount = container["volumeMounts"]
        .as_array_mut()
        .and_then(|mounts| mounts.iter_mut().find(|m| m["name"] == volume_name))
        .ok_or("no mount of the runtime socket's volume")?;
    mount["mountPath"] = json!(socket_dir);
    replace_arg(container, "--probe-address=", &format!("$(POD_IP):{port}"))?;
    push_args(
        container,
        &[&format!("--runtime-endpoint={}", socket.display())],
    )?;
    numbered_probes(container, port)
}

/// The pod template on the real node's host network, with `image`, the
/// node's address as `POD_IP` and the API server's; its only container.
fn on_the_node<'v>(
    workload: &'v mut Value,
    placement: &Placement<'_>,
    image: &str,
) -> Result<&'v mut Value, String> {
    let spec = &mut workload["spec"]["template"]["spec"];
    if !spec.is_object() {
        return Err("no pod template".to_owned());
    }
    spec["hostNetwork"] = json!(true);
    spec["dnsPolicy"] = json!("ClusterFirstWithHostNet");
    spec["nodeSelector"] = json!({REAL_NODE_LABEL: "true"});
    spec["tolerations"] = json!([{"operator": "Exists"}]);
    let Some([container]) = spec["containers"].as_array_mut().map(Vec::as_mut_slice) else {
        return Err("not exactly one container".to_owned());
    };
    container["image"] = json!(image);
    let (host, port) = placement.api_server;
    if container["env"].is_null() {
        container["env"] = json!([]);
    }
    let env = container["env"].as_array_mut().ok_or("env is not a list")?;
    env.extend([
        json!({"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}),
        json!({"name": "KUBERNETES_SERVICE_HOST", "value": host}),
        json!({"name": "KUBERNETES_SERVICE_PORT", "value": port.to_string()}),
    ]);
    Ok(container)
}

fn args(container: &mut Value) -> Result<&mut Vec<Value>, String> {
    container["args"]
        .as_array_mut()
        .ok_or_else(|| "the container has no args".to_owned())
}

/// Sets the value of the argument `flag` (`--name=`), which must be there.
fn replace_arg(container: &mut Value, flag: &str, value: &str) -> Result<(), String> {
    let arg = args(container)?
        .iter_mut()
        .find(|arg| arg.as_str().is_some_and(|a| a.starts_with(flag)))
        .ok_or_else(|| format!("no {flag}… argument"))?;
    *arg = json!(format!("{flag}{value}"));
    Ok(())
}

fn push_args(container: &mut Value, extra: &[&str]) -> Result<(), String> {
    args(container)?.extend(extra.iter().map(|arg| json!(arg)));
    Ok(())
}

/// No declared ports, and every probe on `port`.
fn numbered_probes(container: &mut Value, port: u16) -> Result<(), String> {
    if let Some(fields) = container.as_object_mut() {
        fields.remove("ports");
    }
    let mut probes = 0;
    for probe in ["livenessProbe", "readinessProbe"] {
        if container[probe]["httpGet"].is_object() {
            container[probe]["httpGet"]["port"] = json!(port);
            probes += 1;
        }
    }
    if probes == 0 {
        return Err("no HTTP probe".to_owned());
    }
    Ok(())
}

fn set_target_port(service: &mut Value, port: u16) -> Result<(), String> {
    match service["spec"]["ports"]
        .as_array_mut()
        .map(Vec::as_mut_slice)
    {
        Some([service_port]) => {
            service_port["targetPort"] = json!(port);
            Ok(())
        }
        _ => Err("not exactly one port".to_owned()),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn placement() -> Placement<'static> {
        Placement {
            manager_image: "127.0.0.1:5001/kruise-wasm/manager:t",
            host_image: "127.0.0.1:5001/kruise-wasm/host:t",
            api_server: ("127.0.0.1", 6443),
            runtime_socket: Path::new("/tmp/node/containerd.sock"),
            ports: Ports {
                host: 4000,
                host_readiness: 4001,
                manager_probes: 4002,
                agent_probes: 4003,
            },
        }
    }

    /// The install as kustomize renders it.
    fn install() -> Vec<Value> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../artifacts/deploy");
        let mut objects = Vec::new();
        for file in [
            "manager.yaml",
            "webhook-host.yaml",
            "node-agent.yaml",
            "generated.yaml",
        ] {
            let text = std::fs::read_to_string(root.join(file)).unwrap();
            for document in serde_yaml::Deserializer::from_str(&text) {
                let value: Value = serde::Deserialize::deserialize(document).unwrap();
                if !value.is_null() {
                    objects.push(value);
                }
            }
        }
        objects
    }

    fn find<'v>(objects: &'v [Value], kind: &str, name: &str) -> &'v Value {
        objects
            .iter()
            .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
            .unwrap()
    }

    fn container(workload: &Value) -> &Value {
        &workload["spec"]["template"]["spec"]["containers"][0]
    }

    fn args_of(workload: &Value) -> Vec<&str> {
        container(workload)["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap())
            .collect()
    }

    #[test]
    fn every_pod_runs_on_the_real_nodes_host_network_with_our_images() {
        let placed = place(install(), &placement()).unwrap();
        for (kind, name, image) in [
            ("Deployment", MANAGER, "manager:t"),
            ("Deployment", HOST, "host:t"),
            ("DaemonSet", AGENT, "manager:t"),
        ] {
            let workload = find(&placed, kind, name);
            let spec = &workload["spec"]["template"]["spec"];
            assert_eq!(spec["hostNetwork"], true, "{name}");
            assert_eq!(spec["nodeSelector"][REAL_NODE_LABEL], "true", "{name}");
            let container = container(workload);
            assert!(container["image"].as_str().unwrap().ends_with(image));
            assert!(container.get("ports").is_none(), "{name}");
            let env = container["env"].as_array().unwrap();
            assert!(
                env.contains(&json!({"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"}))
            );
            assert!(env.contains(&json!({"name": "KUBERNETES_SERVICE_PORT", "value": "6443"})));
            if kind == "Deployment" {
                assert_eq!(workload["spec"]["replicas"], 1);
            }
        }
    }

    #[test]
    fn ports_are_the_free_ones_on_the_pods_address() {
        let placed = place(install(), &placement()).unwrap();
        let host = find(&placed, "Deployment", HOST);
        let args = args_of(host);
        for arg in [
            "--port=4000",
            "--readiness-probe-port=4001",
            "--address=$(POD_IP)",
            "--reuse-port",
        ] {
            assert!(args.contains(&arg), "{args:?}");
        }
        assert_eq!(container(host)["readinessProbe"]["httpGet"]["port"], 4001);
        assert_eq!(container(host)["livenessProbe"]["httpGet"]["port"], 4001);
        let sleep = &container(host)["lifecycle"]["preStop"]["sleep"]["seconds"];
        assert_eq!(sleep, SHARED_PORT_DRAIN_SECONDS);
        let service = find(&placed, "Service", "kruise-wasm-host");
        assert_eq!(service["spec"]["ports"][0]["targetPort"], 4000);
        assert_eq!(service["spec"]["ports"][0]["port"], 443);

        let manager = find(&placed, "Deployment", MANAGER);
        assert!(args_of(manager).contains(&"--probe-address=$(POD_IP):4002"));
        assert_eq!(
            container(manager)["readinessProbe"]["httpGet"]["port"],
            4002
        );
        let agent = find(&placed, "DaemonSet", AGENT);
        assert!(args_of(agent).contains(&"--probe-address=$(POD_IP):4003"));
        assert_eq!(container(agent)["livenessProbe"]["httpGet"]["port"], 4003);
    }

    #[test]
    fn the_agent_mounts_the_real_nodes_runtime_socket() {
        let placed = place(install(), &placement()).unwrap();
        let agent = find(&placed, "DaemonSet", AGENT);
        assert!(args_of(agent).contains(&"--runtime-endpoint=/tmp/node/containerd.sock"));
        let spec = &agent["spec"]["template"]["spec"];
        assert_eq!(spec["volumes"][0]["hostPath"]["path"], "/tmp/node");
        assert_eq!(
            container(agent)["volumeMounts"][0]["mountPath"],
            "/tmp/node"
        );
    }

    #[test]
    fn other_objects_pass_unchanged() {
        let objects = install();
        let placed = place(objects.clone(), &placement()).unwrap();
        assert_eq!(placed.len(), objects.len());
        let webhook = find(
            &objects,
            "MutatingWebhookConfiguration",
            "kruise-wasm-pod-webhook",
        );
        assert_eq!(
            find(
                &placed,
                "MutatingWebhookConfiguration",
                "kruise-wasm-pod-webhook"
            ),
            webhook
        );
    }

    #[test]
    fn an_install_the_placement_does_not_fit_is_refused_naming_what_is_missing() {
        let without_host: Vec<Value> = install()
            .into_iter()
            .filter(|o| o["metadata"]["name"] != HOST)
            .collect();
        let error = place(without_host, &placement()).unwrap_err();
        assert_eq!(error, "the install has no Deployment/kruise-webhook");

        let mut renamed_flag = install();
        for object in &mut renamed_flag {
            if object["metadata"]["name"] == HOST && object["kind"] == "Deployment" {
                let args = &mut object["spec"]["template"]["spec"]["containers"][0]["args"];
                *args = json!(["serve", "--listen=3000"]);
            }
        }
        let error = place(renamed_flag, &placement()).unwrap_err();
        assert_eq!(error, "Deployment kruise-webhook: no --port=… argument");
    }
}
