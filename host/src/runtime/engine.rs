//! The one wasmtime `Engine` every policy shares: how it is configured and
//! the thread that advances its epoch (the clock deadlines are checked on).

use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use wasmtime::{
    Config, Enabled, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, ProfilingStrategy,
};

/// How the runtime is sized. The defaults are for a 2-core machine serving
/// many small policies; see each field for the reasoning.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// How often the epoch advances: how often a running guest checks its
    /// deadline and, once it has run a while, yields to the other tasks of
    /// its thread. policy-server ticks once a second; 1 ms costs a thousand
    /// wake-ups a second of one small thread, lets a 2 s deadline fire
    /// within 2.000–2.001 s, and slices a spinning guest finely enough that
    /// requests queued behind it on its thread wait milliseconds, not
    /// seconds.
    pub epoch_tick: Duration,
    /// Instances that can be alive at once (pool slots). Every evaluation
    /// holds one for its duration; the server lets four evaluations per
    /// thread be under way (`ServerConfig::evaluation_slots`, which `serve`
    /// sizes the pool for), and 64 covers that up to 16 threads.
    /// A slot costs address space, not memory: 64 × (4 GiB reservation +
    /// 32 MiB guard) ≈ 260 GiB of `PROT_NONE` mappings, no RSS.
    pub max_instances: u32,
    /// The largest linear memory any instance may reach; a policy's own cap
    /// ([`super::Limits::memory_bytes`]) can only be lower. Our policies
    /// use under half a MiB; 256 MiB leaves room for large admission
    /// objects and for policies in Go.
    pub max_memory_bytes: usize,
    /// Bytes of each memory slot reset in place (with Linux's
    /// `PAGEMAP_SCAN`: only the pages ever touched, rewritten from the
    /// module's image or zeroed) instead of given back with `madvise` when
    /// an instance ends. Given-back pages cost the next instance a page
    /// fault each, and each `madvise` and copy-on-write fault a TLB
    /// shootdown across the cores: measured, that halved throughput
    /// (docs/benchmarks.md). 16 MiB holds the whole working set of our
    /// policies (stack, data and heap); what stays resident is only what
    /// guests touched, in the slots in use. Every touched page is reset
    /// after every evaluation (the scan cannot tell which were dirtied this
    /// time), which is why our policies are linked with a small stack.
    pub keep_resident_bytes: usize,
    /// Where compiled modules are kept between processes (absolute path);
    /// `None` compiles every module in every process. Needs the
    /// `compile-cache` feature.
    pub cache_dir: Option<std::path::PathBuf>,
    /// Write a perf map (`/tmp/perf-<pid>.map`) of the compiled guest
    /// code, for profiling with Linux `perf`.
    pub perf_map: bool,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self {
            epoch_tick: Duration::from_millis(1),
            max_instances: 64,
            max_memory_bytes: 256 << 20,
            keep_resident_bytes: 16 << 20,
            cache_dir: None,
            perf_map: false,
        }
    }
}

pub(crate) fn engine(config: &RuntimeConfig) -> wasmtime::Result<Engine> {
    let mut pool = PoolingAllocationConfig::default();
    pool.total_core_instances(config.max_instances)
        .total_memories(config.max_instances)
        .total_tables(config.max_instances)
        // GC heaps are only used by wasm-GC modules, but each pool entry
        // reserves address space: no more than there can be instances.
        .total_gc_heaps(config.max_instances)
        .max_memory_size(config.max_memory_bytes)
        .linear_memory_keep_resident(config.keep_resident_bytes)
        // Off by default in wasmtime 49: without it every reset rewrites
        // the whole accessible memory, with it only the pages present (on
        // Linux >= 6.7; older kernels fall back). A fresh instance went
        // from ~15 µs to ~11 µs (docs/benchmarks.md).
        .pagemap_scan(Enabled::Auto)
        .table_keep_resident(64 << 10)
        // Every evaluation runs as a future on a fiber, whose native stack
        // comes from the pool too.
        .total_stacks(config.max_instances);

    let mut wasm = Config::new();
    wasm.allocation_strategy(InstanceAllocationStrategy::Pooling(pool))
        // A fresh instance per evaluation maps the module's initial memory
        // copy-on-write instead of copying its data segments each time.
        .memory_init_cow(true)
        .epoch_interruption(true)
        // As policy-server: modules built by Go >= 1.26 need it.
        .wasm_function_references(true);
    if config.perf_map {
        wasm.profiler(ProfilingStrategy::PerfMap);
    }
    #[cfg(feature = "compile-cache")]
    if let Some(dir) = &config.cache_dir {
        let mut cache = wasmtime::CacheConfig::new();
        cache.with_directory(dir);
        wasm.cache(Some(wasmtime::Cache::new(cache)?));
    }
    Engine::new(&wasm)
}

/// Advances the engine's epoch every tick until dropped.
#[derive(Debug)]
pub(crate) struct EpochTicker {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl EpochTicker {
    pub fn start(engine: Engine, tick: Duration) -> std::io::Result<Self> {
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("wasm-epoch".to_owned())
            .spawn(move || follow_the_clock(&engine, tick, &stopped))?;
        Ok(Self {
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

/// Increments the epoch once per elapsed tick until `stopped` disconnects.
/// Ticks are counted from the start rather than per wake-up, so a thread
/// woken late on a busy machine keeps the cadence instead of drifting.
fn follow_the_clock(engine: &Engine, tick: Duration, stopped: &mpsc::Receiver<()>) {
    let tick_nanos = tick.as_nanos().max(1);
    let started = Instant::now();
    let mut ticks: u128 = 0;
    loop {
        let next_tick =
            Duration::from_nanos(u64::try_from((ticks + 1) * tick_nanos).unwrap_or(u64::MAX));
        let wait = next_tick.saturating_sub(started.elapsed());
        match stopped.recv_timeout(wait) {
            Err(RecvTimeoutError::Timeout) => {
                let due = started.elapsed().as_nanos() / tick_nanos;
                while ticks < due {
                    engine.increment_epoch();
                    ticks += 1;
                }
            }
            // Dropping the sender ends the loop.
            Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
