//! A compiled policy module and one evaluation of it: a fresh store and
//! instance, `_start` then `wapc_init`, then one `__guest_call`, run as a
//! future (a wasmtime fiber) that yields at every epoch tick.

use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmtime::{
    Engine, ExternType, Instance, InstancePre, Module, Store, Trap, UpdateDeadline, ValType,
};
use wasmtime_wasi::I32Exit;

use super::error::{CallError, ContractViolation, LoadError, MemoryLimitExceeded};
use super::host_calls::{HostCalls, NoHostCalls};
use super::store_data::{GuestClock, StoreData};

/// What one evaluation may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// How long each guest function may run (`_start`, `wapc_init`, the
    /// call: policy-server gives each the full deadline); `None` disables
    /// the deadline (policy-server's `--disable-timeout-protection`).
    pub timeout: Option<Duration>,
    /// The instance's linear memory cap, at most the runtime's
    /// `max_memory_bytes`.
    pub memory_bytes: usize,
}

/// policy-server's default `--policy-timeout`.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(2);

/// The sha256 of a module's bytes: modules are compiled once per digest.
pub type Digest = [u8; 32];

/// A module checked against the waPC contract, compiled, and linked.
pub struct CompiledModule {
    digest: Digest,
    pre: InstancePre<StoreData>,
    starters: Vec<&'static str>,
    max_memory_bytes: usize,
}

impl std::fmt::Debug for CompiledModule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompiledModule")
            .field("digest", &hex(&self.digest))
            .field("starters", &self.starters)
            .finish_non_exhaustive()
    }
}

pub(crate) fn hex(digest: &Digest) -> String {
    use std::fmt::Write as _;
    digest.iter().fold(String::new(), |mut text, byte| {
        let _ = write!(text, "{byte:02x}");
        text
    })
}

/// The start functions, in the order of `wapc::wapc_functions::REQUIRED_STARTS`.
const STARTERS: [&str; 2] = ["_start", "wapc_init"];
const GUEST_CALL: &str = "__guest_call";

impl CompiledModule {
    pub(crate) fn new(
        engine: &Engine,
        linker: &wasmtime::Linker<StoreData>,
        wasm: &[u8],
        digest: Digest,
        max_memory_bytes: usize,
    ) -> Result<Self, LoadError> {
        let module =
            Module::from_binary(engine, wasm).map_err(|e| LoadError::Compile(format!("{e:#}")))?;
        check_exports(&module)?;
        let starters = STARTERS
            .into_iter()
            .filter(|name| module.get_export(name).is_some())
            .collect();
        let pre = linker
            .instantiate_pre(&module)
            .map_err(|e| LoadError::Link(format!("{e:#}")))?;
        Ok(Self {
            digest,
            pre,
            starters,
            max_memory_bytes,
        })
    }

    pub fn digest(&self) -> &Digest {
        &self.digest
    }

    /// Runs `operation` with `payload` in a brand-new instance, so no guest
    /// state survives between calls (as policy-server since Kubewarden
    /// 1.10), and a guest that timed out is never entered again.
    pub async fn call(
        &self,
        operation: &str,
        payload: &[u8],
        limits: Limits,
        host: Arc<dyn HostCalls>,
    ) -> Result<Vec<u8>, CallError> {
        let (mut store, instance) = self.fresh_instance(limits, host).await?;
        guest_call(&mut store, instance, operation, payload, limits).await
    }

    /// The module run as [`CompiledModule::call`] runs it, its instance
    /// kept: [`super::snapshot`] reads its state afterwards.
    pub(super) async fn call_and_keep(
        &self,
        operation: &str,
        payload: &[u8],
        limits: Limits,
        host: Arc<dyn HostCalls>,
    ) -> Result<(Store<StoreData>, Instance), CallError> {
        let (mut store, instance) = self.fresh_instance(limits, host).await?;
        guest_call(&mut store, instance, operation, payload, limits).await?;
        Ok((store, instance))
    }

    /// This module, its start functions taken as already run: for a
    /// snapshot, whose state is what they (and more) left.
    pub(super) fn started(mut self) -> Self {
        self.starters.clear();
        self
    }

    /// Instantiates and initialises (`_start`, `wapc_init`) without calling
    /// the guest: the fixed cost of every evaluation, which `bench` reports.
    pub async fn instantiate_only(&self, limits: Limits) -> Result<(), CallError> {
        self.fresh_instance(limits, Arc::new(NoHostCalls))
            .await
            .map(drop)
    }

    async fn fresh_instance(
        &self,
        limits: Limits,
        host: Arc<dyn HostCalls>,
    ) -> Result<(Store<StoreData>, Instance), CallError> {
        let memory_bytes = limits.memory_bytes.min(self.max_memory_bytes);
        let mut store = Store::new(
            self.pre.module().engine(),
            StoreData::new(memory_bytes, host),
        );
        store.limiter(|data| &mut data.memory_cap);
        // At every epoch tick a running guest lands here: past its deadline
        // it is stopped; once it has run a while it lets the thread's other
        // tasks run before going on.
        store.epoch_deadline_callback(|store| {
            let clock = store.data().clock;
            let now = Instant::now();
            Ok(match clock.deadline {
                Some(deadline) if now >= deadline => UpdateDeadline::Interrupt,
                _ if now < clock.started + RUN_BEFORE_YIELDING => UpdateDeadline::Continue(1),
                _ => UpdateDeadline::Yield(1),
            })
        });

        // Instantiation can run a wasm `start` function: it is under the
        // deadline too.
        start_the_clock(&mut store, limits);
        let instance = self
            .pre
            .instantiate_async(&mut store)
            .await
            .map_err(|e| classify(&e, CallError::Instantiate))?;
        self.run_starters(&mut store, instance, limits).await?;
        Ok((store, instance))
    }

    async fn run_starters(
        &self,
        store: &mut Store<StoreData>,
        instance: Instance,
        limits: Limits,
    ) -> Result<(), CallError> {
        for name in &self.starters {
            let start = instance
                .get_typed_func::<(), ()>(&mut *store, name)
                .map_err(|e| CallError::Init(format!("{name}: {e:#}")))?;
            start_the_clock(store, limits);
            if let Err(error) = start.call_async(&mut *store, ()).await {
                // TinyGo >= 0.35 ends `main` with `proc_exit(0)`.
                if error
                    .downcast_ref::<I32Exit>()
                    .is_some_and(|exit| exit.0 == 0)
                {
                    continue;
                }
                return Err(classify(&error, |detail| {
                    CallError::Init(format!("{name}: {detail}"))
                }));
            }
        }
        Ok(())
    }
}

/// One waPC `__guest_call` of `operation` with `payload`.
async fn guest_call(
    store: &mut Store<StoreData>,
    instance: Instance,
    operation: &str,
    payload: &[u8],
    limits: Limits,
) -> Result<Vec<u8>, CallError> {
    let guest_call = instance
        .get_typed_func::<(i32, i32), i32>(&mut *store, GUEST_CALL)
        .map_err(|e| CallError::Instantiate(format!("{e:#}")))?;
    let operation_len = wapc_len(operation.len())?;
    let payload_len = wapc_len(payload.len())?;
    store.data_mut().wapc.begin_guest_call(operation, payload);
    start_the_clock(store, limits);
    match guest_call
        .call_async(&mut *store, (operation_len, payload_len))
        .await
    {
        Ok(code) => store.data_mut().wapc.take_outcome(code),
        Err(error) => Err(classify(&error, CallError::Guest)),
    }
}

/// Gives the guest function about to run its full timeout (policy-server
/// gives each of `_start`, `wapc_init` and the call the whole deadline),
/// checked at the next epoch tick and every tick after.
fn start_the_clock(store: &mut Store<StoreData>, limits: Limits) {
    let started = Instant::now();
    store.data_mut().clock = GuestClock {
        started,
        // A timeout past what the clock can count (timeoutEvalSeconds is
        // any u64) is no deadline at all, not a panic.
        deadline: limits
            .timeout
            .and_then(|timeout| started.checked_add(timeout)),
    };
    store.set_epoch_deadline(1);
}

/// How long a guest function runs before it starts yielding at every epoch
/// tick. Evaluations take well under a millisecond, so they are never
/// preempted (a yield sends the request to the back of its thread's queue);
/// a guest spinning towards its deadline shares its thread in tick-sized
/// slices with the requests that come after it.
const RUN_BEFORE_YIELDING: Duration = Duration::from_millis(5);

/// Timeouts and memory exhaustion are told apart from every other failure,
/// which `other` wraps.
fn classify(error: &wasmtime::Error, other: impl FnOnce(String) -> CallError) -> CallError {
    if matches!(error.downcast_ref::<Trap>(), Some(Trap::Interrupt)) {
        return CallError::DeadlineExceeded;
    }
    if let Some(exceeded) = error.downcast_ref::<MemoryLimitExceeded>() {
        return CallError::MemoryLimit(*exceeded);
    }
    other(describe(error))
}

/// One line that says what went wrong, without wasmtime's backtrace.
fn describe(error: &wasmtime::Error) -> String {
    if let Some(violation) = error.downcast_ref::<ContractViolation>() {
        return violation.to_string();
    }
    if let Some(exit) = error.downcast_ref::<I32Exit>() {
        return format!("the guest exited with status {}", exit.0);
    }
    if let Some(trap) = error.downcast_ref::<Trap>() {
        return trap.to_string();
    }
    format!("{error:#}")
}

fn wapc_len(len: usize) -> Result<i32, CallError> {
    i32::try_from(len)
        .map_err(|_| CallError::Guest(format!("{len} bytes do not fit a waPC length")))
}

/// The exports waPC needs, with their types, checked once at load so a
/// broken module stops start-up instead of failing every request.
fn check_exports(module: &Module) -> Result<(), LoadError> {
    let missing = |name, expected| LoadError::MissingExport { name, expected };
    match module.get_export("memory") {
        Some(ExternType::Memory(_)) => {}
        _ => return Err(missing("memory", "a memory")),
    }
    match module.get_export(GUEST_CALL) {
        Some(ExternType::Func(f)) if is_i32s(f.params(), 2) && is_i32s(f.results(), 1) => {}
        _ => return Err(missing("__guest_call", "a function (i32, i32) -> i32")),
    }
    for name in STARTERS {
        match module.get_export(name) {
            None => {}
            Some(ExternType::Func(f)) if f.params().len() == 0 && f.results().len() == 0 => {}
            Some(_) => {
                return Err(missing(
                    if name == "_start" {
                        "_start"
                    } else {
                        "wapc_init"
                    },
                    "a function () -> ()",
                ));
            }
        }
    }
    Ok(())
}

fn is_i32s(types: impl ExactSizeIterator<Item = ValType>, count: usize) -> bool {
    types.len() == count && types.into_iter().all(|t| matches!(t, ValType::I32))
}
