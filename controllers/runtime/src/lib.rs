//! What every controller shares, written once: best-effort events, one
//! retry backoff, and the API answers a controller branches on.

pub mod api_error;
pub mod backoff;
pub mod events;
