//! The load generator: N keep-alive HTTP/1.1 connections, all driven by one
//! thread (a current-thread tokio runtime, as `wrk -t1` drives its
//! connections from one epoll loop), sending the same request back to back
//! for a fixed time. One thread rather than one per connection: the
//! generator shares the 2 cores with the server, and every cycle it spends
//! is one the server does not get.
//! Hand-written HTTP on purpose: the server answers with Content-Length,
//! and a client library would be one more thing measured.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::ClientConfig;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// A plain or TLS connection to the server.
trait Connection: AsyncRead + AsyncWrite + Unpin + Send {}
impl<S: AsyncRead + AsyncWrite + Unpin + Send> Connection for S {}

/// One load run.
#[derive(Debug, Clone)]
pub struct Load {
    pub address: SocketAddr,
    /// TLS client settings; plain HTTP when `None`.
    pub tls: Option<Arc<ClientConfig>>,
    pub path: String,
    pub body: Arc<Vec<u8>>,
    pub connections: usize,
    pub duration: Duration,
}

/// What a run measured.
#[derive(Debug, Clone, PartialEq)]
pub struct Figures {
    pub requests: usize,
    /// Non-200 answers and broken connections.
    pub errors: usize,
    pub elapsed: Duration,
    pub p50: Duration,
    pub p99: Duration,
}

impl Figures {
    #[allow(clippy::cast_precision_loss)] // request counts are far below 2^52
    pub fn per_second(&self) -> f64 {
        self.requests as f64 / self.elapsed.as_secs_f64()
    }
}

/// What one connection measured: latencies of its 200s, and its failures.
type Tally = (Vec<Duration>, usize);

impl Load {
    pub fn run(&self) -> Result<Figures, String> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .map_err(|e| format!("cannot start the load generator: {e}"))?;
        let started = Instant::now();
        let deadline = started + self.duration;
        let tallies = runtime.block_on(async {
            let connections: Vec<_> = (0..self.connections.max(1))
                .map(|_| tokio::spawn(self.clone().connection(deadline)))
                .collect();
            let mut tallies = Vec::with_capacity(connections.len());
            for connection in connections {
                tallies.push(
                    connection
                        .await
                        .map_err(|_| "a connection task panicked".to_owned())?,
                );
            }
            Ok::<_, String>(tallies)
        })?;
        let elapsed = started.elapsed();
        let mut latencies = Vec::new();
        let mut errors = 0;
        for tally in tallies {
            let (mine, failed) = tally?;
            latencies.extend(mine);
            errors += failed;
        }
        latencies.sort_unstable();
        Ok(Figures {
            requests: latencies.len(),
            errors,
            elapsed,
            p50: percentile(&latencies, 50),
            p99: percentile(&latencies, 99),
        })
    }

    /// One connection until the deadline. A broken connection counts as an
    /// error and is reopened; one that cannot be opened ends the run.
    async fn connection(self, deadline: Instant) -> Result<Tally, String> {
        let mut tally = (Vec::new(), 0);
        while Instant::now() < deadline {
            let stream = self.open().await?;
            self.exchanges(stream, deadline, &mut tally).await;
        }
        Ok(tally)
    }

    /// A new connection to the server, TLS when the load has a client
    /// configuration.
    async fn open(&self) -> Result<Box<dyn Connection>, String> {
        let tcp = TcpStream::connect(self.address)
            .await
            .map_err(|e| format!("cannot connect to {}: {e}", self.address))?;
        // Requests are written in one piece and wait for their answer.
        tcp.set_nodelay(true).map_err(|e| e.to_string())?;
        let Some(config) = &self.tls else {
            return Ok(Box::new(tcp));
        };
        let name = ServerName::try_from("localhost").map_err(|e| e.to_string())?;
        let tls = TlsConnector::from(Arc::clone(config))
            .connect(name, tcp)
            .await
            .map_err(|e| format!("TLS: {e}"))?;
        Ok(Box::new(tls))
    }

    /// Requests back to back on one open connection until the deadline or
    /// until it breaks.
    async fn exchanges<S>(&self, mut stream: S, deadline: Instant, tally: &mut Tally)
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let request = self.request_bytes();
        let mut buffer = Vec::with_capacity(64 << 10);
        while Instant::now() < deadline {
            let sent = Instant::now();
            match exchange(&mut stream, &request, &mut buffer).await {
                Ok(Head { status: 200, .. }) => tally.0.push(sent.elapsed()),
                Ok(_) => tally.1 += 1,
                Err(_) => {
                    tally.1 += 1;
                    return;
                }
            }
        }
    }

    /// One request on a connection of its own: the answer's status and
    /// body (to check what a server answers before it is measured).
    pub fn answer(&self) -> Result<(u16, Vec<u8>), String> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .map_err(|e| format!("cannot start the load generator: {e}"))?;
        runtime.block_on(async {
            let mut stream = self.open().await?;
            let (request, mut buffer) = (self.request_bytes(), Vec::new());
            let head = exchange(&mut stream, &request, &mut buffer)
                .await
                .map_err(|e| format!("{}{}: {e}", self.address, self.path))?;
            Ok((head.status, buffer.split_off(head.body_start)))
        })
    }

    fn request_bytes(&self) -> Vec<u8> {
        let mut request = format!(
            "POST {} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            self.path,
            self.body.len()
        )
        .into_bytes();
        request.extend_from_slice(&self.body);
        request
    }
}

/// Sends one request and reads its whole answer into `buffer` (reused
/// between exchanges, cleared first); the answer's head.
async fn exchange<S>(stream: &mut S, request: &[u8], buffer: &mut Vec<u8>) -> std::io::Result<Head>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    stream.write_all(request).await?;
    stream.flush().await?;
    buffer.clear();
    let head = loop {
        if let Some(head) = parse_head(buffer)? {
            break head;
        }
        read_more(stream, buffer).await?;
    };
    while buffer.len() < head.total_len {
        read_more(stream, buffer).await?;
    }
    // A keep-alive answer is followed by nothing until the next request.
    if buffer.len() > head.total_len {
        return Err(broken("more bytes than the answer's Content-Length"));
    }
    Ok(head)
}

async fn read_more<S: AsyncRead + Unpin>(
    stream: &mut S,
    buffer: &mut Vec<u8>,
) -> std::io::Result<()> {
    if buffer.capacity() - buffer.len() < 16 << 10 {
        buffer.reserve(64 << 10);
    }
    if stream.read_buf(buffer).await? == 0 {
        return Err(broken("connection closed mid-answer"));
    }
    Ok(())
}

/// The status line and headers of an answer, once all of them are in.
#[derive(Debug, PartialEq, Eq)]
struct Head {
    status: u16,
    /// Where the body starts.
    body_start: usize,
    /// Headers plus body.
    total_len: usize,
}

fn parse_head(bytes: &[u8]) -> std::io::Result<Option<Head>> {
    let Some(end) = bytes.windows(4).position(|w| w == b"\r\n\r\n") else {
        return Ok(None);
    };
    let text = std::str::from_utf8(&bytes[..end]).map_err(|_| broken("headers not UTF-8"))?;
    let mut lines = text.split("\r\n");
    let status = lines
        .next()
        .and_then(|line| line.split(' ').nth(1))
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| broken("no status line"))?;
    let length = lines
        .filter_map(|line| line.split_once(':'))
        .find(|(name, _)| name.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, value)| value.trim().parse::<usize>().ok())
        .ok_or_else(|| broken("no Content-Length"))?;
    Ok(Some(Head {
        status,
        body_start: end + 4,
        total_len: end + 4 + length,
    }))
}

fn broken(what: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_owned())
}

fn percentile(sorted: &[Duration], percent: usize) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = (sorted.len() * percent).div_ceil(100).max(1);
    sorted[rank - 1]
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let values: Vec<Duration> = (1..=200).map(Duration::from_micros).collect();
        assert_eq!(percentile(&values, 50), Duration::from_micros(100));
        assert_eq!(percentile(&values, 99), Duration::from_micros(198));
        assert_eq!(percentile(&[], 99), Duration::ZERO);
        assert_eq!(
            percentile(&[Duration::from_micros(7)], 50),
            Duration::from_micros(7)
        );
    }

    #[test]
    fn heads_are_read_once_complete() {
        let answer =
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nContent-Length: 2\r\n\r\n{}";
        assert_eq!(parse_head(&answer[..20]).unwrap(), None);
        assert_eq!(
            parse_head(answer).unwrap(),
            Some(Head {
                status: 200,
                body_start: answer.len() - 2,
                total_len: answer.len()
            })
        );
        assert!(parse_head(b"HTTP/1.1 200 OK\r\n\r\n").is_err());
        assert!(parse_head(b"garbage\r\n\r\n").is_err());
    }

    #[tokio::test]
    async fn an_exchange_reads_exactly_one_answer() {
        let (mut client, mut server) = tokio::io::duplex(64);
        let answer = b"HTTP/1.1 404 Not Found\r\nContent-Length: 5\r\n\r\nnope!";
        let serving = tokio::spawn(async move {
            let mut request = [0_u8; 4];
            server.read_exact(&mut request).await.unwrap();
            server.write_all(answer).await.unwrap();
            server
        });
        let mut buffer = Vec::new();
        let head = exchange(&mut client, b"ping", &mut buffer).await.unwrap();
        assert_eq!(head.status, 404);
        assert_eq!(&buffer[head.body_start..], b"nope!");
        drop(serving.await.unwrap());
        let error = exchange(&mut client, b"ping", &mut buffer)
            .await
            .unwrap_err();
        assert_eq!(error.kind(), std::io::ErrorKind::BrokenPipe);
    }
}
