//! The policy server: policy-server's HTTP API (spec §3.3) over plain HTTP
//! or rustls, on `workers` threads that both move bytes and run guests,
//! and a separate readiness listener.

pub mod api;
mod body;
mod drain;
pub mod metrics;

use std::net::{IpAddr, SocketAddr, TcpListener};
use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum_server::Handle;
use axum_server::tls_rustls::RustlsConfig;
use serde_json::Value;
use tokio::sync::Semaphore;

use api::{ApiError, Endpoint, Evaluation, Policies};
use drain::Drain;
use metrics::Metrics;

#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub address: IpAddr,
    /// 0 picks a free port (tests).
    pub port: u16,
    pub readiness_port: u16,
    /// The server's threads; [`ServerConfig::evaluation_slots`] evaluations
    /// may be under way at once, more wait for a slot.
    pub workers: usize,
    /// Certificate and key (PEM): HTTPS when set.
    pub tls: Option<TlsFiles>,
    /// How often the certificate and key files are read again: a changed
    /// pair (a renewed Secret, which kubelet swaps into the mounted
    /// volume) is served from the next connection on.
    pub tls_reload_every: Duration,
    /// The largest request body accepted. Kubernetes caps a request at
    /// 3 MiB, and an UPDATE review carries the object twice.
    pub max_body_bytes: usize,
    /// Bind with SO_REUSEPORT, so that a second server on the same address
    /// and port can start before this one stops: two replicas of a
    /// host-network Deployment on one node, during a rolling upgrade.
    pub reuse_port: bool,
}

#[derive(Debug, Clone)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// Evaluations under way per server thread. More than one, so that a guest
/// spinning until its deadline (yielding at every epoch tick) holds a slot
/// but not the thread's whole share; bounded, because each holds a pooled
/// instance.
const EVALUATIONS_PER_WORKER: usize = 4;

impl ServerConfig {
    /// How many evaluations may be under way at once: the instance pool
    /// must have at least as many slots.
    pub fn evaluation_slots(&self) -> usize {
        self.workers.max(1) * EVALUATIONS_PER_WORKER
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            address: IpAddr::from([0, 0, 0, 0]),
            port: 3000,
            readiness_port: 8081,
            workers: std::thread::available_parallelism().map_or(2, std::num::NonZero::get),
            tls: None,
            tls_reload_every: Duration::from_secs(10),
            max_body_bytes: 8 << 20,
            reuse_port: false,
        }
    }
}

struct App {
    policies: Policies,
    workers: Semaphore,
    metrics: Arc<Metrics>,
}

/// A server running on its own threads until shut down.
#[derive(Debug)]
pub struct RunningServer {
    pub address: SocketAddr,
    pub readiness_address: SocketAddr,
    handles: [Handle<SocketAddr>; 2],
    thread: Option<JoinHandle<()>>,
}

impl RunningServer {
    /// Stops accepting, lets requests in flight finish (up to 10 s). No
    /// drain first, unlike a signal: for callers that own the clients too
    /// (tests, the bench, the dev cluster's in-process host).
    pub fn shutdown(mut self) {
        for handle in &self.handles {
            handle.graceful_shutdown(Some(Duration::from_secs(10)));
        }
        self.join();
    }

    /// Blocks until the server stops (on SIGINT or SIGTERM).
    pub fn wait(mut self) {
        self.join();
    }

    fn join(&mut self) {
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A host serving no policies, only the CRD conversion, over TLS on a free
/// loopback port: what a cluster running controllers without admission
/// (their own end-to-end tests) needs for our CRDs. It may be called from
/// async code: the start, which blocks, runs on a thread of its own.
/// Returns the server and its address.
pub fn start_conversion_only(
    cert: PathBuf,
    key: PathBuf,
) -> Result<(RunningServer, SocketAddr), String> {
    let config = ServerConfig {
        address: IpAddr::from([127, 0, 0, 1]),
        port: 0,
        readiness_port: 0,
        workers: 1,
        tls: Some(TlsFiles { cert, key }),
        ..ServerConfig::default()
    };
    let server = std::thread::spawn(move || start(Policies::default(), &config))
        .join()
        .map_err(|_| "the conversion server panicked while starting".to_owned())??;
    let address = server.address;
    Ok((server, address))
}

/// Binds both listeners and starts serving. Binding happens before this
/// returns, so a port in use is reported here.
pub fn start(policies: Policies, config: &ServerConfig) -> Result<RunningServer, String> {
    let listener = listen(config.address, config.port, config.reuse_port)?;
    let readiness = listen(config.address, config.readiness_port, config.reuse_port)?;
    let address = listener.local_addr().map_err(|e| e.to_string())?;
    let readiness_address = readiness.local_addr().map_err(|e| e.to_string())?;

    // Guests run on the same threads as the connections, as futures: a
    // hand-off to a thread pool per request cost a third of the throughput
    // (docs/benchmarks.md). A guest yields at every epoch tick, so a slow
    // or hostile one delays the others on its thread by one tick at most.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(config.workers.max(1))
        .thread_name("kruise-wasm-http")
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    let tls = match &config.tls {
        Some(files) => Some(
            runtime
                .block_on(RustlsConfig::from_pem_file(&files.cert, &files.key))
                .map_err(|e| {
                    format!(
                        "cannot load the TLS certificate {} and key {}: {e}",
                        files.cert.display(),
                        files.key.display()
                    )
                })?,
        ),
        None => None,
    };
    let metrics = Arc::new(Metrics::default());
    let app = Arc::new(App {
        policies,
        workers: Semaphore::new(config.evaluation_slots()),
        metrics: Arc::clone(&metrics),
    });
    let drain = Arc::new(Drain::default());
    let router = policy_routes(app, Arc::clone(&drain), config.max_body_bytes);
    let handles = [Handle::new(), Handle::new()];
    let (main_handle, readiness_handle) = (handles[0].clone(), handles[1].clone());

    let serve_main = {
        let tls = tls.clone();
        async move {
            match tls {
                Some(tls) => {
                    axum_server::from_tcp_rustls(listener, tls)?
                        .handle(main_handle)
                        .serve(router.into_make_service())
                        .await
                }
                None => {
                    axum_server::from_tcp(listener)?
                        .handle(main_handle)
                        .serve(router.into_make_service())
                        .await
                }
            }
        }
    };
    let serve_readiness = async move {
        let router = probe_routes(metrics);
        axum_server::from_tcp(readiness)?
            .handle(readiness_handle)
            .serve(router.into_make_service())
            .await
    };
    let reload_tls = match (tls, &config.tls) {
        (Some(tls), Some(files)) => Some(reload_on_change(
            tls,
            files.clone(),
            config.tls_reload_every,
        )),
        _ => None,
    };
    let stop_on_signal = stop_on_signal(handles.clone(), drain);
    let thread = std::thread::Builder::new()
        .name("kruise-wasm-server".to_owned())
        .spawn(move || {
            runtime.block_on(async move {
                let signals = tokio::spawn(stop_on_signal);
                let reloads = reload_tls.map(tokio::spawn);
                let (main, readiness) = tokio::join!(serve_main, serve_readiness);
                signals.abort();
                if let Some(reloads) = reloads {
                    reloads.abort();
                }
                for result in [main, readiness] {
                    if let Err(error) = result {
                        eprintln!("server error: {error}");
                    }
                }
            });
        })
        .map_err(|e| format!("cannot start the server thread: {e}"))?;
    Ok(RunningServer {
        address,
        readiness_address,
        handles,
        thread: Some(thread),
    })
}

/// A listening socket on `address:port` with SO_REUSEADDR (as std's
/// `TcpListener::bind` sets it), and SO_REUSEPORT when asked.
fn listen(address: IpAddr, port: u16, reuse_port: bool) -> Result<TcpListener, String> {
    let address = SocketAddr::new(address, port);
    let bind = || -> std::io::Result<TcpListener> {
        let socket = socket2::Socket::new(
            socket2::Domain::for_address(address),
            socket2::Type::STREAM,
            Some(socket2::Protocol::TCP),
        )?;
        socket.set_reuse_address(true)?;
        socket.set_reuse_port(reuse_port)?;
        socket.bind(&address.into())?;
        socket.listen(1024)?;
        Ok(socket.into())
    };
    bind().map_err(|e| format!("cannot listen on {address}: {e}"))
}

/// Reads the certificate and key every `every` and serves a pair that
/// changed. A pair that does not load (caught mid-write, or bad) is
/// reported and the one in use kept.
async fn reload_on_change(tls: RustlsConfig, files: TlsFiles, every: Duration) {
    let read = || async {
        let cert = tokio::fs::read(&files.cert).await.ok()?;
        let key = tokio::fs::read(&files.key).await.ok()?;
        Some((cert, key))
    };
    let mut serving = read().await;
    loop {
        tokio::time::sleep(every).await;
        let current = read().await;
        if current.is_none() || current == serving {
            continue;
        }
        let Some((cert, key)) = current.clone() else {
            continue;
        };
        match tls.reload_from_pem(cert, key).await {
            Ok(()) => {
                eprintln!("serving the renewed certificate {}", files.cert.display());
                serving = current;
            }
            Err(error) => eprintln!(
                "cannot load the changed certificate {}: {error}; still serving the previous one",
                files.cert.display()
            ),
        }
    }
}

/// SIGINT or SIGTERM (how Kubernetes stops a pod) drains the connections
/// (drain.rs says why), then shuts both listeners down gracefully.
async fn stop_on_signal(handles: [Handle<SocketAddr>; 2], drain: Arc<Drain>) {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = terminate => {}
    }
    drain.run().await;
    for handle in &handles {
        handle.graceful_shutdown(Some(Duration::from_secs(10)));
    }
}

/// The probe listener (plain HTTP, not exposed to the API server):
/// readiness as policy-server, plus liveness and the Prometheus scrape.
/// Liveness answers from the async side only, so a pool busy with slow
/// policies does not get the pod restarted.
fn probe_routes(metrics: Arc<Metrics>) -> Router {
    Router::new()
        .route("/readiness", get(|| async { StatusCode::OK }))
        .route("/livez", get(|| async { StatusCode::OK }))
        .route(
            "/metrics",
            get(move || async move {
                (
                    [(
                        header::CONTENT_TYPE,
                        "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    )],
                    metrics.encode(),
                )
            }),
        )
}

fn policy_routes(app: Arc<App>, drain: Arc<Drain>, max_body_bytes: usize) -> Router {
    Router::new()
        .route("/validate/{id}", post(validate))
        .route("/audit/{id}", post(audit))
        .route("/validate_raw/{id}", post(validate_raw))
        .route("/mutate/{chain}", post(mutate))
        .route("/convert", post(convert))
        .layer(DefaultBodyLimit::max(max_body_bytes))
        .layer(axum::middleware::from_fn_with_state(drain, drain::mark))
        .with_state(app)
}

async fn validate(
    state: State<Arc<App>>,
    id: Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    evaluate(state, id, &headers, &body, Endpoint::Validate).await
}

async fn audit(
    state: State<Arc<App>>,
    id: Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    evaluate(state, id, &headers, &body, Endpoint::Audit).await
}

async fn validate_raw(
    state: State<Arc<App>>,
    id: Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    evaluate(state, id, &headers, &body, Endpoint::ValidateRaw).await
}

async fn mutate(
    state: State<Arc<App>>,
    chain: Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    evaluate(state, chain, &headers, &body, Endpoint::Mutate).await
}

/// CRD conversion: cheap and pure, so it runs here, without a worker slot.
async fn convert(body: Bytes) -> Response {
    match crate::conversion::review(&body) {
        Ok(review) => json_response(StatusCode::OK, &review),
        Err(error) => error_response(&error),
    }
}

async fn evaluate(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    headers: &HeaderMap,
    body: &[u8],
    endpoint: Endpoint,
) -> Response {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok());
    let evaluation = match app.policies.prepare(endpoint, &id, content_type, body) {
        Ok(evaluation) => evaluation,
        Err(error) => return error_response(&error),
    };
    // Neither waiting for the watch caches nor for a slot holds a thread,
    // and the caches are waited for first so that a request held up by
    // them holds no slot either.
    evaluation.wait_for_cluster().await;
    let Ok(_permit) = app.workers.acquire().await else {
        return error_response(&ApiError::internal());
    };
    let policy = match &evaluation {
        Evaluation::Admission { policy, .. } | Evaluation::Raw { policy, .. } => {
            Some(policy.id.clone())
        }
        Evaluation::Chain { label, .. } => Some(label.clone()),
        Evaluation::Answered(_) => None,
    };
    let started = Instant::now();
    let review = evaluation.run(endpoint).await;
    if let Some(policy) = policy {
        app.metrics
            .record(&policy, &review["response"], started.elapsed());
    }
    json_response(StatusCode::OK, &review)
}

fn error_response(error: &ApiError) -> Response {
    let status = StatusCode::from_u16(error.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    json_response(status, &error.body())
}

fn json_response(status: StatusCode, body: &Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::listen;
    use std::net::IpAddr;

    const LOOPBACK: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

    #[test]
    fn a_second_listener_shares_the_port_only_when_both_reuse_it() {
        let first = listen(LOOPBACK, 0, true).unwrap();
        let port = first.local_addr().unwrap().port();
        let second = listen(LOOPBACK, port, true).unwrap();
        assert_eq!(second.local_addr().unwrap().port(), port);

        let plain = listen(LOOPBACK, 0, false).unwrap();
        let taken = plain.local_addr().unwrap().port();
        let refused = listen(LOOPBACK, taken, true).unwrap_err();
        assert!(refused.contains("cannot listen on 127.0.0.1:"), "{refused}");
        assert!(listen(LOOPBACK, taken, false).is_err());
    }
}
