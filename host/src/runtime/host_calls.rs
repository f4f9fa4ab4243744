//! What a guest reaches through `__host_call` and `__console_log`: the seam
//! where capabilities (Kubernetes, logging, …) are plugged into the runtime.

/// Answers a guest's waPC host calls.
///
/// Calls are synchronous: the guest is blocked (and its epoch deadline keeps
/// running) until the answer comes back, as in policy-server.
pub trait HostCalls: Send + Sync {
    /// One `__host_call(binding, namespace, operation, payload)`. `Ok` bytes
    /// reach the guest through `__host_response`, `Err` text through
    /// `__host_error`.
    fn host_call(
        &self,
        binding: &str,
        namespace: &str,
        operation: &str,
        payload: &[u8],
    ) -> Result<Vec<u8>, String>;

    /// One `__console_log` line. Kubewarden's SDKs log through the
    /// `kubewarden/tracing/log` host call instead, so the default drops it.
    fn console_log(&self, message: &str) {
        let _ = message;
    }
}

/// A host that grants nothing: every host call fails, as on a policy-server
/// with no cluster connection.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoHostCalls;

impl HostCalls for NoHostCalls {
    fn host_call(
        &self,
        binding: &str,
        namespace: &str,
        operation: &str,
        _payload: &[u8],
    ) -> Result<Vec<u8>, String> {
        Err(format!(
            "host capability {binding}/{namespace}/{operation} is not available"
        ))
    }
}
