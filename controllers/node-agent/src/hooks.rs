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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::Mutex;

    use k8s_openapi::api::core::v1::{ExecAction, HTTPHeader, TCPSocketAction};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;
    use crate::runtime::{ExecOutput, RuntimeContainer};

    /// The execs a recorder saw: container ID and command.
    type Calls = std::sync::Arc<Mutex<Vec<(String, Vec<String>)>>>;

    /// Records execs; answers with `exit_code`.
    #[derive(Clone)]
    struct Recorder {
        exit_code: i32,
        calls: Calls,
    }

    impl ContainerRuntime for Recorder {
        async fn pod_containers(&self, _pod: &Pod) -> Result<Vec<RuntimeContainer>, RuntimeError> {
            Ok(Vec::new())
        }
        async fn exec(
            &self,
            id: &str,
            command: &[String],
            _timeout: Duration,
        ) -> Result<ExecOutput, RuntimeError> {
            self.calls
                .lock()
                .unwrap()
                .push((id.to_owned(), command.to_vec()));
            Ok(ExecOutput {
                exit_code: self.exit_code,
                stdout: Vec::new(),
                stderr: b"boom\n".to_vec(),
            })
        }
        async fn stop_container(&self, _id: &str, _grace: Duration) -> Result<(), RuntimeError> {
            Ok(())
        }
        async fn image_id(&self, _reference: &str) -> Result<Option<String>, RuntimeError> {
            Err(RuntimeError::Failed("hooks pull no images".to_owned()))
        }
        async fn pull_image(
            &self,
            _reference: &str,
            _credential: Option<&crate::runtime::Credential>,
            _sandbox: Option<&crate::runtime::SandboxConfig>,
        ) -> Result<String, RuntimeError> {
            Err(RuntimeError::Failed("hooks pull no images".to_owned()))
        }
    }

    fn recorder(exit_code: i32) -> Recorder {
        Recorder {
            exit_code,
            calls: std::sync::Arc::default(),
        }
    }

    fn pod_at(ip: &str) -> Pod {
        serde_json::from_value(serde_json::json!({"status": {"podIP": ip}})).unwrap()
    }

    const SECOND: Duration = Duration::from_secs(1);

    #[tokio::test]
    async fn an_exec_hook_runs_in_the_container_and_a_non_zero_exit_fails() {
        let hook = ProbeHandler {
            exec: Some(ExecAction {
                command: Some(vec!["sh".into(), "-c".into(), "echo bye".into()]),
            }),
            ..ProbeHandler::default()
        };
        let runtime = recorder(0);
        run_pre_stop(
            &runtime,
            &pod_at("127.0.0.1"),
            "containerd://a",
            &hook,
            &[],
            SECOND,
        )
        .await
        .unwrap();
        let calls = runtime.calls.lock().unwrap().clone();
        assert_eq!(
            calls,
            [(
                "containerd://a".to_owned(),
                vec!["sh".to_owned(), "-c".to_owned(), "echo bye".to_owned()]
            )]
        );
        let error = run_pre_stop(
            &recorder(3),
            &pod_at("127.0.0.1"),
            "containerd://a",
            &hook,
            &[],
            SECOND,
        )
        .await
        .unwrap_err();
        assert!(error.contains("exited with 3: boom"), "{error}");
    }

    /// Serves one HTTP request with `status`; the request's head.
    async fn one_http_answer(status: &'static str) -> (u16, tokio::task::JoinHandle<String>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let served = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut head = vec![0; 4096];
            let read = stream.read(&mut head).await.unwrap();
            let answer = format!("HTTP/1.1 {status}\r\ncontent-length: 0\r\n\r\n");
            stream.write_all(answer.as_bytes()).await.unwrap();
            String::from_utf8_lossy(&head[..read]).into_owned()
        });
        (port, served)
    }

    fn http_hook(port: IntOrString) -> ProbeHandler {
        ProbeHandler {
            http_get: Some(HTTPGetAction {
                path: Some("/quit".into()),
                port,
                http_headers: Some(vec![HTTPHeader {
                    name: "X-Reason".into(),
                    value: "recreate".into(),
                }]),
                ..HTTPGetAction::default()
            }),
            ..ProbeHandler::default()
        }
    }

    #[tokio::test]
    async fn an_http_hook_gets_the_path_on_a_named_port_with_its_headers() {
        let (port, served) = one_http_answer("200 OK").await;
        let ports = [ContainerPort {
            name: Some("http".into()),
            container_port: i32::from(port),
            ..ContainerPort::default()
        }];
        let hook = http_hook(IntOrString::String("http".into()));
        run_pre_stop(
            &recorder(0),
            &pod_at("127.0.0.1"),
            "x://y",
            &hook,
            &ports,
            SECOND,
        )
        .await
        .unwrap();
        let head = served.await.unwrap().to_lowercase();
        assert!(head.starts_with("get /quit http/1.1"), "{head}");
        assert!(head.contains("x-reason: recreate"), "{head}");
    }

    #[tokio::test]
    async fn an_http_error_answer_or_an_unknown_port_fails_the_hook() {
        let (port, _served) = one_http_answer("500 Internal Server Error").await;
        let hook = http_hook(IntOrString::Int(i32::from(port)));
        let error = run_pre_stop(
            &recorder(0),
            &pod_at("127.0.0.1"),
            "x://y",
            &hook,
            &[],
            SECOND,
        )
        .await
        .unwrap_err();
        assert!(error.contains("500"), "{error}");
        let named = http_hook(IntOrString::String("metrics".into()));
        let error = run_pre_stop(
            &recorder(0),
            &pod_at("127.0.0.1"),
            "x://y",
            &named,
            &[],
            SECOND,
        )
        .await
        .unwrap_err();
        assert!(error.contains("no port named \"metrics\""), "{error}");
    }

    #[tokio::test]
    async fn a_tcp_hook_connects() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let hook = ProbeHandler {
            tcp_socket: Some(TCPSocketAction {
                port: IntOrString::Int(i32::from(port)),
                host: None,
            }),
            ..ProbeHandler::default()
        };
        run_pre_stop(
            &recorder(0),
            &pod_at("127.0.0.1"),
            "x://y",
            &hook,
            &[],
            SECOND,
        )
        .await
        .unwrap();
        drop(listener);
        let error = run_pre_stop(
            &recorder(0),
            &pod_at("127.0.0.1"),
            "x://y",
            &hook,
            &[],
            SECOND,
        )
        .await
        .unwrap_err();
        assert!(error.contains("preStop tcpSocket"), "{error}");
    }
}
