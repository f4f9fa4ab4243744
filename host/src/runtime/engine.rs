//! The one wasmtime `Engine` every policy shares: how it is configured and
//! the thread that advances its epoch (the clock of every deadline).

use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

/// How the runtime is sized. The defaults are for a 2-core machine serving
/// many small policies; see each field for the reasoning.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// How often the epoch advances, hence the granularity of deadlines.
    /// policy-server ticks once a second; 10 ms costs 100 wake-ups a second
    /// and lets a 2 s deadline fire within 2.00–2.01 s.
    pub epoch_tick: Duration,
    /// Instances that can be alive at once (pool slots). Every evaluation
    /// holds one for its duration; on 2 cores the worker pool keeps only a
    /// few busy, and 64 leaves room for guests stuck until their deadline.
    /// A slot costs address space, not memory: 64 × (4 GiB reservation +
    /// 32 MiB guard) ≈ 260 GiB of `PROT_NONE` mappings, no RSS.
    pub max_instances: u32,
    /// The largest linear memory any instance may reach; a policy's own cap
    /// ([`super::Limits::memory_bytes`]) can only be lower. Our policies
    /// use a few MiB; 256 MiB leaves room for large admission objects and
    /// for policies in Go.
    pub max_memory_bytes: usize,
    /// Bytes of each memory slot reset with `memset` (only dirty pages,
    /// with Linux's `PAGEMAP_SCAN`) instead of `madvise` when an instance
    /// ends: the next evaluation of the same module then takes no page
    /// faults on its stack and the start of its heap. 1 MiB covers the
    /// shadow stack and the small heap of a Rust policy; at most
    /// 64 slots × 1 MiB = 64 MiB stays resident.
    pub keep_resident_bytes: usize,
    /// Where compiled modules are kept between processes (absolute path);
    /// `None` compiles every module in every process. Needs the
    /// `compile-cache` feature.
    pub cache_dir: Option<std::path::PathBuf>,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self {
            epoch_tick: Duration::from_millis(10),
            max_instances: 64,
            max_memory_bytes: 256 << 20,
            keep_resident_bytes: 1 << 20,
            cache_dir: None,
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
        .table_keep_resident(64 << 10);

    let mut wasm = Config::new();
    wasm.allocation_strategy(InstanceAllocationStrategy::Pooling(pool))
        // A fresh instance per evaluation maps the module's initial memory
        // copy-on-write instead of copying its data segments each time.
        .memory_init_cow(true)
        .epoch_interruption(true)
        // As policy-server: modules built by Go >= 1.26 need it.
        .wasm_function_references(true);
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
/// Ticks are counted from the start rather than per wake-up: on a busy
/// machine this thread wakes late, and sleeping a tick after each late
/// wake-up would stretch a 2 s deadline to several seconds.
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

/// Epoch ticks for a deadline: one more than the rounded-up quotient,
/// because the first tick can come right after the deadline is set.
pub(crate) fn deadline_ticks(timeout: Duration, tick: Duration) -> u64 {
    let tick = tick.as_nanos().max(1);
    let ticks = timeout.as_nanos().div_ceil(tick) + 1;
    u64::try_from(ticks).unwrap_or(NO_DEADLINE)
}

/// A deadline that never comes (timeouts disabled): far enough, and far
/// from overflowing the epoch counter.
pub(crate) const NO_DEADLINE: u64 = u64::MAX / 2;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadlines_never_fire_early() {
        let tick = Duration::from_millis(10);
        assert_eq!(deadline_ticks(Duration::from_secs(2), tick), 201);
        assert_eq!(deadline_ticks(Duration::from_millis(15), tick), 3);
        assert_eq!(deadline_ticks(Duration::ZERO, tick), 1);
        assert_eq!(
            deadline_ticks(Duration::MAX, Duration::from_nanos(1)),
            NO_DEADLINE
        );
    }
}
