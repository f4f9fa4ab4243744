//! What every controller shares, written once: best-effort events, one
//! retry backoff, one status writer, the API answers a controller branches
//! on, reconcile and API request metrics, cache readiness, the shared watches and reading them without acting twice, leader election, how the results
//! of a reconcile stream are logged, random draws, and (feature `testing`)
//! an in-memory API server for reconcile tests.

pub mod api_error;
pub mod api_requests;
pub mod backoff;
pub mod context;
pub mod events;
pub mod expectations;
pub mod leader;
pub mod metrics;
pub mod outcome;
pub mod random;
pub mod readiness;
pub mod shared;
pub mod status;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
