//! Why a module could not be loaded or a call did not produce a response.

/// A module that cannot be used at all: a policy with one must stop start-up.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("the wasmtime engine cannot be configured: {0}")]
    Engine(String),
    #[error("not a valid WebAssembly module: {0}")]
    Compile(String),
    #[error("the module's imports cannot be satisfied: {0}")]
    Link(String),
    #[error("the module does not export {name} as {expected}")]
    MissingExport {
        name: &'static str,
        expected: &'static str,
    },
    #[error("the module cannot be snapshotted: {0}")]
    Snapshot(String),
}

/// One guest call that produced no response bytes.
///
/// The texts of the first three follow the `wapc` host crate, so an
/// AdmissionResponse built from them reads like policy-server's
/// (`internal server error: Guest call failure: …`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    /// The epoch deadline fired. policy-server recognises a timeout by this
    /// exact text.
    #[error("Guest call failure: {TIMEOUT_TEXT}")]
    DeadlineExceeded,
    /// The guest reported an error (`__guest_error`, or no response at all),
    /// trapped, or broke the waPC contract during the call.
    #[error("Guest call failure: {0}")]
    Guest(String),
    /// The guest asked for more linear memory than its cap.
    #[error("Guest call failure: {0}")]
    MemoryLimit(MemoryLimitExceeded),
    /// `_start` or `wapc_init` failed.
    #[error("Initialization failed: {0}")]
    Init(String),
    /// The instance could not be created (e.g. the instance pool is full).
    #[error("cannot instantiate the module: {0}")]
    Instantiate(String),
}

/// The waPC-level text of an interrupted guest, as wasmtime-provider writes it.
pub const TIMEOUT_TEXT: &str = "guest code interrupted, execution deadline exceeded";

impl CallError {
    pub fn is_timeout(&self) -> bool {
        matches!(self, Self::DeadlineExceeded)
    }
}

/// The trap raised when a guest grows its memory past its cap. Kept as a
/// distinct type so the runtime can tell it from other traps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the policy exceeded its memory limit of {limit} bytes (it asked for {requested} bytes)")]
pub struct MemoryLimitExceeded {
    pub limit: usize,
    pub requested: usize,
}

/// A guest that broke the waPC contract inside a host function: the call
/// traps with this text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ContractViolation {
    #[error("the module exports no memory named `memory`")]
    NoMemory,
    #[error("{function}: {len} bytes at offset {ptr} are outside the guest's memory")]
    OutOfBounds {
        function: &'static str,
        ptr: u32,
        len: usize,
    },
    #[error("{function}: the {what} is not valid UTF-8")]
    NotUtf8 {
        function: &'static str,
        what: &'static str,
    },
    #[error("{function}: {len} bytes do not fit a waPC length")]
    TooLong { function: &'static str, len: usize },
}
