//! Image pre-download: OpenKruise's ImagePullJob and NodeImage, as the
//! pure decisions of the three parties that share them.
//!
//! - [`job`]: the ImagePullJob controller — the job's progress over its
//!   target NodeImages, which ones get its tag next (`parallelism`), and
//!   the tag entry it writes.
//! - [`nodeimage`]: the NodeImage controller — one NodeImage per Ready
//!   node, spec clean-up (gone owners, expired tags, gone secrets) and the
//!   watchdog for nodes that never answer.
//! - [`puller`]: the node agent — which tags to pull, attempt limits and
//!   retries, folding its workers' reports into the status.
//! - [`secrets`]: mirrored pull secrets and the credentials in them.
//! - [`reference`]: image references, normalised as Docker does.
//! - [`validation`]: admission of ImagePullJobs and NodeImages.

pub mod job;
pub mod nodeimage;
pub mod puller;
pub mod reference;
pub mod secrets;
pub mod validation;

use k8s_openapi::jiff::{SignedDuration, Timestamp};

/// `at` plus `span`, held at the ends of time: a deadline or TTL of any
/// size a user can write (`int64` seconds in the CRD), from any time a
/// stored object can carry, is a time that never comes (or has always
/// passed), not a panic of the controller reading it.
fn later(at: Timestamp, span: SignedDuration) -> Timestamp {
    let end = if span.is_negative() {
        Timestamp::MIN
    } else {
        Timestamp::MAX
    };
    at.checked_add(span).unwrap_or(end)
}
