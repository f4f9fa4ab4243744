//! A container's preStop hook, run by the agent before it stops the
//! container (kubelet would run it on a normal stop; a recreate goes
//! around kubelet, so the agent does it): exec in the container, an HTTP
//! GET, or a TCP connect, within the grace period.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::Empty;
use k8s_openapi::api::core::v1::{ContainerPort, HTTPGetAction, Pod};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kruise_api::containerrecreaterequest::ProbeHandler;
use tokio::net::TcpStream;

use crate::runtime::{ContainerRuntime, RuntimeError};

/// Runs the hook; an error says why it failed. Like kubelet, a failed hook
/// does not stop the container from being stopped: the caller logs it.
pub async fn run_pre_stop<R: ContainerRuntime>(
    runtime: &R,
    pod: &Pod,
    container_id: &str,
    hook: &ProbeHandler,
    ports: &[ContainerPort],
    timeout: Duration,
) -> Result<(), String> {
    if let Some(exec) = &hook.exec {
        let command = exec.command.clone().unwrap_or_default();
        let output = runtime
            .exec(container_id, &command, timeout)
            .await
            .map_err(|e: RuntimeError| format!("preStop exec: {e}"))?;
        if output.exit_code != 0 {
            return Err(format!(
                "preStop exec {command:?} exited with {}: {}",
                output.exit_code,
                String::from_utf8_lossy(&output.stderr).trim()
            ));
        }
        return Ok(());
    }
    let host = pod_host(pod);
    if let Some(get) = &hook.http_get {
        let port = port_number(&get.port, ports)?;
        let host = get.host.clone().filter(|h| !h.is_empty()).unwrap_or(host);
        return tokio::time::timeout(timeout, http_get(&host, port, get))
            .await
            .map_err(|_| format!("preStop httpGet timed out after {timeout:?}"))?;
    }
    if let Some(tcp) = &hook.tcp_socket {
        let port = port_number(&tcp.port, ports)?;
        let host = tcp.host.clone().filter(|h| !h.is_empty()).unwrap_or(host);
        return tokio::time::timeout(timeout, TcpStream::connect((host.as_str(), port)))
            .await
            .map_err(|_| format!("preStop tcpSocket timed out after {timeout:?}"))?
            .map(drop)
            .map_err(|e| format!("preStop tcpSocket {host}:{port}: {e}"));
    }
    Ok(())
}

/// The pod's address (a host-network pod's is its node's).
fn pod_host(pod: &Pod) -> String {
    pod.status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .unwrap_or_else(|| "127.0.0.1".to_owned())
}

/// A port number, or a named port of the container (the webhook copies the
/// container's ports into the request for this).
fn port_number(port: &IntOrString, ports: &[ContainerPort]) -> Result<u16, String> {
    let number = match port {
        IntOrString::Int(n) => *n,
        IntOrString::String(name) => ports
            .iter()
            .find(|p| p.name.as_deref() == Some(name))
            .map(|p| p.container_port)
            .ok_or_else(|| format!("the container has no port named {name:?}"))?,
    };
    u16::try_from(number).map_err(|_| format!("port {number} is out of range"))
}

/// A plain-HTTP GET; any answer below 400 is success, as for kubelet.
async fn http_get(host: &str, port: u16, get: &HTTPGetAction) -> Result<(), String> {
    if get
        .scheme
        .as_deref()
        .is_some_and(|s| !s.eq_ignore_ascii_case("HTTP"))
    {
        return Err("preStop httpGet over HTTPS is not supported by this agent".to_owned());
    }
    let fail = |e: &dyn std::fmt::Display| format!("preStop httpGet {host}:{port}: {e}");
    let stream = TcpStream::connect((host, port))
        .await
        .map_err(|e| fail(&e))?;
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .map_err(|e| fail(&e))?;
    tokio::spawn(connection);
    let path = get
        .path
        .clone()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| "/".to_owned());
    let mut request = hyper::Request::get(path).header("host", format!("{host}:{port}"));
    for header in get.http_headers.iter().flatten() {
        request = request.header(header.name.as_str(), header.value.as_str());
    }
    let request = request.body(Empty::<Bytes>::new()).map_err(|e| fail(&e))?;
    let response = sender.send_request(request).await.map_err(|e| fail(&e))?;
    let status = response.status();
    if status.as_u16() >= 400 {
        return Err(fail(&format!("answered {status}")));
    }
    Ok(())
}
