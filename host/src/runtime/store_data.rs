//! What one evaluation's wasmtime `Store` holds: the waPC call state, the
//! WASI context, the memory cap and the host-call handler.

use std::sync::Arc;
use std::time::Instant;

use wasmtime::ResourceLimiter;
use wasmtime_wasi::WasiCtxBuilder;
use wasmtime_wasi::p1::WasiP1Ctx;

use super::call_state::CallState;
use super::error::MemoryLimitExceeded;
use super::host_calls::HostCalls;

pub(crate) struct StoreData {
    pub wapc: CallState,
    pub clock: GuestClock,
    pub wasi: WasiP1Ctx,
    pub memory_cap: MemoryCap,
    pub host: Arc<dyn HostCalls>,
}

impl StoreData {
    pub fn new(memory_limit: usize, host: Arc<dyn HostCalls>) -> Self {
        Self {
            wapc: CallState::default(),
            clock: GuestClock {
                started: Instant::now(),
                deadline: None,
            },
            wasi: sandboxed_wasi(),
            memory_cap: MemoryCap {
                limit: memory_limit,
            },
            host,
        }
    }
}

/// The guest function running now: when it started, and when it must have
/// returned (`None`: timeouts disabled).
#[derive(Debug, Clone, Copy)]
pub(crate) struct GuestClock {
    pub started: Instant,
    pub deadline: Option<Instant>,
}

/// WASI preview1 as policy-server gives it: no preopened directories, no
/// environment, no arguments, stdin closed. Guest output goes to our
/// stderr rather than stdout because the CLI's stdout carries the response.
fn sandboxed_wasi() -> WasiP1Ctx {
    WasiCtxBuilder::new()
        .stdout(std::io::stderr())
        .stderr(std::io::stderr())
        .build_p1()
}

/// Caps one instance's linear memory. Growing past the cap traps with
/// [`MemoryLimitExceeded`] instead of making `memory.grow` return -1: a
/// Rust guest would turn -1 into an anonymous `unreachable` trap, and the
/// operator wants to know the policy ran out of memory.
#[derive(Debug)]
pub(crate) struct MemoryCap {
    limit: usize,
}

impl ResourceLimiter for MemoryCap {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.limit {
            return Err(wasmtime::Error::new(MemoryLimitExceeded {
                limit: self.limit,
                requested: desired,
            }));
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        _desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        // Tables are bounded by the pool's `table_elements`.
        Ok(true)
    }
}
