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
