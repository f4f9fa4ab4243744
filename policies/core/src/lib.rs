//! Pure decisions over plain data, shared by the wasm policies, the webhook
//! host, the controllers and the JS package. No I/O, no clocks, no threads:
//! time and cluster state are passed in.

pub mod cloneset;
mod container_validation;
pub mod conversion;
pub mod crr;
mod decimal;
pub mod go_json;
pub mod history;
pub mod imagepull;
pub mod launch_priority;
mod names;
pub mod ordered;
pub mod owner;
pub mod pod_readiness;
pub mod quantity;
pub mod resourcedistribution;
pub mod selector;
pub mod sidecarset;
pub mod validation;
