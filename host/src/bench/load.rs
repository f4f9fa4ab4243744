//! The load generator: N keep-alive HTTP/1.1 connections, one blocking
//! thread each, sending the same request back to back for a fixed time.
//! Hand-written HTTP on purpose: the server answers with Content-Length,
//! and a client library would be one more thing measured.

use std::io::{BufRead as _, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection, StreamOwned};

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

impl Load {
    pub fn run(&self) -> Result<Figures, String> {
        let started = Instant::now();
        let deadline = started + self.duration;
        let threads = (0..self.connections.max(1))
            .map(|_| {
                let load = self.clone();
                std::thread::Builder::new()
                    .name("kruise-wasm-bench".to_owned())
                    .spawn(move || load.connection(deadline))
                    .map_err(|e| format!("cannot start a client thread: {e}"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut latencies = Vec::new();
        let mut errors = 0;
        for thread in threads {
            let (mine, failed) = thread
                .join()
                .map_err(|_| "a client thread panicked".to_owned())??;
            latencies.extend(mine);
            errors += failed;
        }
        let elapsed = started.elapsed();
        latencies.sort_unstable();
        Ok(Figures {
            requests: latencies.len(),
            errors,
            elapsed,
            p50: percentile(&latencies, 50),
            p99: percentile(&latencies, 99),
        })
    }

    /// One connection until the deadline: the latencies of its successful
    /// requests and how many failed. A broken connection is reopened.
    fn connection(&self, deadline: Instant) -> Result<(Vec<Duration>, usize), String> {
        let request = self.request_bytes();
        let mut latencies = Vec::new();
        let mut errors = 0;
        while Instant::now() < deadline {
            let mut stream = self.connect()?;
            while Instant::now() < deadline {
                let sent = Instant::now();
                match exchange(&mut stream, &request) {
                    Ok(200) => latencies.push(sent.elapsed()),
                    Ok(_) => errors += 1,
                    Err(_) => {
                        errors += 1;
                        break;
                    }
                }
            }
        }
        Ok((latencies, errors))
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

    fn connect(&self) -> Result<BufReader<Box<dyn ReadWrite>>, String> {
        let tcp = TcpStream::connect(self.address).map_err(|e| format!("cannot connect: {e}"))?;
        // Requests are written in one piece and wait for their answer.
        tcp.set_nodelay(true).map_err(|e| e.to_string())?;
        let stream: Box<dyn ReadWrite> = match &self.tls {
            None => Box::new(tcp),
            Some(config) => {
                let name = ServerName::try_from("localhost").map_err(|e| e.to_string())?;
                let connection = ClientConnection::new(Arc::clone(config), name)
                    .map_err(|e| format!("TLS: {e}"))?;
                Box::new(StreamOwned::new(connection, tcp))
            }
        };
        Ok(BufReader::with_capacity(64 << 10, stream))
    }
}

trait ReadWrite: Read + Write + Send {}
impl<T: Read + Write + Send> ReadWrite for T {}

/// Sends one request and reads its whole answer; the status code.
fn exchange(stream: &mut BufReader<Box<dyn ReadWrite>>, request: &[u8]) -> std::io::Result<u16> {
    let broken = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_owned());
    let writer = stream.get_mut();
    writer.write_all(request)?;
    writer.flush()?;
    let mut line = String::new();
    stream.read_line(&mut line)?;
    let status = line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| broken("no status line"))?;
    let mut length = None;
    loop {
        line.clear();
        if stream.read_line(&mut line)? == 0 {
            return Err(broken("connection closed in the headers"));
        }
        let header = line.trim_end();
        if header.is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse::<u64>().ok();
        }
    }
    let length = length.ok_or_else(|| broken("no Content-Length"))?;
    std::io::copy(&mut stream.by_ref().take(length), &mut std::io::sink())?;
    Ok(status)
}

fn percentile(sorted: &[Duration], percent: usize) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = (sorted.len() * percent).div_ceil(100).max(1);
    sorted[rank - 1]
}

#[cfg(test)]
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
}
