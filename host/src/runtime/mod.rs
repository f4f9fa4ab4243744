//! Our waPC host on wasmtime (spec §1.1): modules compiled once per digest,
//! a fresh instance per evaluation, an epoch deadline and a memory cap per
//! instance, WASI preview1 with nothing granted.

mod call_state;
mod engine;
mod error;
mod host_calls;
mod module;
mod snapshot;
mod store_data;
mod wapc_imports;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use sha2::{Digest as _, Sha256};
use wasmtime::{Engine, Linker};

pub use engine::RuntimeConfig;
pub use error::{CallError, ContractViolation, LoadError, MemoryLimitExceeded, TIMEOUT_TEXT};
pub use host_calls::{HostCalls, NoHostCalls};
pub use module::{CompiledModule, DEFAULT_TIMEOUT, Digest, Limits};

use engine::EpochTicker;
use store_data::StoreData;

/// Runs an evaluation to completion on the calling thread, for callers
/// outside the server (the CLI, start-up checks, tests). Nothing in an
/// evaluation waits on I/O of this thread, so polling until done is enough.
pub fn block_on<F: Future>(future: F) -> F::Output {
    futures::executor::block_on(future)
}

/// The engine, the linker every module is instantiated against, and the
/// modules compiled so far. A clone shares all of them (a policy keeps one
/// to take its snapshots again).
#[derive(Clone)]
pub struct Runtime {
    engine: Engine,
    linker: Linker<StoreData>,
    config: RuntimeConfig,
    modules: Arc<Mutex<HashMap<Digest, Arc<CompiledModule>>>>,
    _ticker: Arc<EpochTicker>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Runtime {
    pub fn new(config: RuntimeConfig) -> Result<Self, LoadError> {
        let engine = engine::engine(&config).map_err(|e| LoadError::Engine(format!("{e:#}")))?;
        let mut linker = Linker::new(&engine);
        wapc_imports::define(&mut linker)
            .and_then(|()| {
                wasmtime_wasi::p1::add_to_linker_async(&mut linker, |data| &mut data.wasi)
            })
            .map_err(|e| LoadError::Engine(format!("{e:#}")))?;
        let ticker = EpochTicker::start(engine.clone(), config.epoch_tick)
            .map_err(|e| LoadError::Engine(format!("cannot start the epoch thread: {e}")))?;
        Ok(Self {
            engine,
            linker,
            config,
            modules: Arc::default(),
            _ticker: Arc::new(ticker),
        })
    }

    pub fn config(&self) -> &RuntimeConfig {
        &self.config
    }

    /// The module for these bytes, compiled on first sight.
    pub fn load(&self, wasm: &[u8]) -> Result<Arc<CompiledModule>, LoadError> {
        let digest: Digest = Sha256::digest(wasm).into();
        self.kept_or_compiled(digest, || {
            CompiledModule::new(
                &self.engine,
                &self.linker,
                wasm,
                digest,
                self.config.max_memory_bytes,
            )
            .map(Arc::new)
        })
    }

    /// The module for these bytes as it is after `operation(payload)` in a
    /// fresh instance granted no host calls: every evaluation starts from
    /// that state ([`snapshot`]). Kept per module, operation and payload,
    /// so policies with the same settings share one.
    pub fn load_snapshot(
        &self,
        wasm: &[u8],
        operation: &str,
        payload: &[u8],
        limits: Limits,
    ) -> Result<Arc<CompiledModule>, LoadError> {
        let key: Digest = Sha256::new()
            .chain_update(b"snapshot after ")
            .chain_update(Sha256::digest(wasm))
            .chain_update(Sha256::digest(operation))
            .chain_update(Sha256::digest(payload))
            .finalize()
            .into();
        self.kept_or_compiled(key, || {
            self.snapshot(wasm, operation, payload, limits, Arc::new(NoHostCalls))
        })
    }

    /// [`Runtime::load_snapshot`] with `host` answering the run's host
    /// calls, so the snapshot holds what they answered then: it is not
    /// kept here, its owner replaces it when those answers change
    /// (`cluster_snapshot`).
    pub fn snapshot(
        &self,
        wasm: &[u8],
        operation: &str,
        payload: &[u8],
        limits: Limits,
        host: Arc<dyn HostCalls>,
    ) -> Result<Arc<CompiledModule>, LoadError> {
        let compile = |wasm: &[u8]| {
            CompiledModule::new(
                &self.engine,
                &self.linker,
                wasm,
                Sha256::digest(wasm).into(),
                self.config.max_memory_bytes,
            )
        };
        let snapshot = block_on(snapshot::snapshot_after(
            wasm, compile, operation, payload, limits, host,
        ))?;
        Ok(Arc::new(compile(&snapshot)?.started()))
    }

    /// The module kept under `key`, else `compile`'s, kept there. Compiling
    /// is done outside the lock: two different modules compile in
    /// parallel (and the first of two of the same one is kept).
    fn kept_or_compiled(
        &self,
        key: Digest,
        compile: impl FnOnce() -> Result<Arc<CompiledModule>, LoadError>,
    ) -> Result<Arc<CompiledModule>, LoadError> {
        let kept = self.lock_modules().get(&key).cloned();
        if let Some(module) = kept {
            return Ok(module);
        }
        let compiled = compile()?;
        Ok(Arc::clone(
            self.lock_modules().entry(key).or_insert(compiled),
        ))
    }

    fn lock_modules(&self) -> std::sync::MutexGuard<'_, HashMap<Digest, Arc<CompiledModule>>> {
        self.modules.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Limits for a policy: its own timeout, the runtime's memory bound.
    pub fn limits(&self, timeout: Option<std::time::Duration>) -> Limits {
        Limits {
            timeout,
            memory_bytes: self.config.max_memory_bytes,
        }
    }
}
