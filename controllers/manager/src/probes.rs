//! The manager's and the node agent's probe endpoint: `/healthz` for the
//! kubelet's liveness probe, `/readyz` (ready once every running
//! controller's cache has synced; a standby replica runs none) and
//! `/metrics` (the controllers' Prometheus metrics, `kruise_reconcile_*`).

use std::net::SocketAddr;

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use kruise_controller_runtime::{metrics, readiness};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Serves the probes on `address` until the task is dropped; the address
/// actually bound (port 0 picks one).
pub async fn serve(address: SocketAddr) -> Result<(SocketAddr, JoinHandle<()>), String> {
    let listener = TcpListener::bind(address)
        .await
        .map_err(|e| format!("cannot listen on {address} for the probes: {e}"))?;
    let bound = listener
        .local_addr()
        .map_err(|e| format!("the probe listener: {e}"))?;
    let routes = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(ready))
        .route("/metrics", get(metrics_text));
    let task = tokio::spawn(async move {
        if let Err(error) = axum::serve(listener, routes).await {
            tracing::warn!(%error, "the probe endpoint stopped");
        }
    });
    Ok((bound, task))
}

async fn ready() -> (StatusCode, String) {
    let waiting = readiness::global().waiting_for();
    if waiting.is_empty() {
        (StatusCode::OK, "ok".to_owned())
    } else {
        let caches = waiting.join(", ");
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("waiting for caches: {caches}"),
        )
    }
}

async fn metrics_text() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, OPENMETRICS)],
        metrics::global().encode(),
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    use super::*;

    async fn get(address: SocketAddr, path: &str) -> String {
        let mut stream = TcpStream::connect(address).await.unwrap();
        let request = format!("GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.unwrap();
        answer
    }

    #[tokio::test]
    async fn health_and_the_controllers_metrics_are_served() {
        let (address, task) = serve("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let health = get(address, "/healthz").await;
        assert!(health.starts_with("HTTP/1.1 200"), "{health}");
        assert!(health.ends_with("ok"), "{health}");
        metrics::global().record("probe-test", std::time::Duration::from_millis(3), false);
        let text = get(address, "/metrics").await;
        assert!(text.contains("application/openmetrics-text"), "{text}");
        assert!(
            text.contains("kruise_reconcile_failures_total{controller=\"probe-test\"} 1"),
            "{text}"
        );
        task.abort();
    }

    #[tokio::test]
    async fn not_ready_until_every_expected_cache_synced() {
        let (address, task) = serve("127.0.0.1:0".parse().unwrap()).await.unwrap();
        readiness::global().expect("probe-test-cache");
        let waiting = get(address, "/readyz").await;
        assert!(waiting.starts_with("HTTP/1.1 503"), "{waiting}");
        assert!(
            waiting.ends_with("waiting for caches: probe-test-cache"),
            "{waiting}"
        );
        readiness::global().mark_synced("probe-test-cache");
        let ready = get(address, "/readyz").await;
        assert!(ready.starts_with("HTTP/1.1 200"), "{ready}");
        task.abort();
    }
}
