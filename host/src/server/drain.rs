//! Draining before a stop. Closing a keep-alive connection while it is idle
//! races the next request a client may be writing on it: the API server
//! then reports the webhook call as failed ("write: broken pipe"), and a
//! pod creation is refused during a rolling upgrade of the host. So after
//! SIGTERM the server keeps answering, and every answer carries
//! `Connection: close`: each client closes its own connection after its
//! next answer and opens a new one, which reaches a replica that stays.
//! The stop follows once no request has come for [`QUIET`], or after
//! [`LONGEST`] at most.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::{HeaderValue, header};
use axum::middleware::Next;
use axum::response::Response;

/// No request for this long: the clients have moved on.
const QUIET: Duration = Duration::from_secs(1);
/// Draining ends here in any case (a client that keeps opening new
/// connections to this replica, through a port it shares with the next).
const LONGEST: Duration = Duration::from_secs(5);
const POLL: Duration = Duration::from_millis(100);

#[derive(Debug, Default)]
pub struct Drain {
    draining: AtomicBool,
    /// Requests seen since the start; how the drain tells quiet.
    requests: AtomicU64,
}

impl Drain {
    /// Answers from now on ask clients to close their connections; returns
    /// once they have gone quiet.
    pub async fn run(&self) {
        self.draining.store(true, Ordering::Relaxed);
        let started = Instant::now();
        let mut seen = self.requests.load(Ordering::Relaxed);
        let mut last_request = started;
        loop {
            tokio::time::sleep(POLL).await;
            let now = Instant::now();
            let count = self.requests.load(Ordering::Relaxed);
            if count != seen {
                seen = count;
                last_request = now;
            }
            if is_over(started, last_request, now) {
                return;
            }
        }
    }
}

/// Whether a drain that began at `started`, and last saw a request at
/// `last_request`, is over at `now`.
fn is_over(started: Instant, last_request: Instant, now: Instant) -> bool {
    now.duration_since(last_request) >= QUIET || now.duration_since(started) >= LONGEST
}

/// Middleware: counts each request, and while draining marks its answer
/// `Connection: close` (hyper then closes the connection after it).
pub async fn mark(State(drain): State<Arc<Drain>>, request: Request, next: Next) -> Response {
    drain.requests.fetch_add(1, Ordering::Relaxed);
    let mut response = next.run(request).await;
    if drain.draining.load(Ordering::Relaxed) {
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_drain_ends_after_a_quiet_second_or_five_seconds() {
        let start = Instant::now();
        let at = |ms| start + Duration::from_millis(ms);
        assert!(!is_over(start, start, at(999)));
        assert!(is_over(start, start, at(1_000)));
        // Requests keep coming: still draining, up to the longest.
        assert!(!is_over(start, at(4_500), at(4_900)));
        assert!(is_over(start, at(4_900), at(5_000)));
    }
}
