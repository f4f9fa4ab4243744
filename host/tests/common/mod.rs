//! What the host's integration tests share: one runtime per test binary,
//! the golden cases of `policies/fixtures`, requests shaped as
//! policy-server sends them, and the reference waPC host (the `wapc` crate
//! on `wasmtime-provider`, what policy-server is built on).

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)] // each test file uses a part

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use kruise_wasm_host::runtime::{HostCalls, Runtime, RuntimeConfig, block_on};
use serde_json::{Value, json};

/// Compiled modules are cached on disk across test binaries and runs: a
/// debug build takes seconds of Cranelift per policy module.
pub fn cache_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("kruise-wasm-cache")
}

pub fn runtime() -> &'static Runtime {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        let config = RuntimeConfig {
            cache_dir: Some(cache_dir()),
            ..RuntimeConfig::default()
        };
        Runtime::new(config).expect("the runtime starts")
    })
}

pub fn fixtures() -> PathBuf {
    kruise_policy_modules::fixtures::dir()
}

pub fn golden_cases(folder: &str) -> Vec<(String, Value)> {
    kruise_policy_modules::fixtures::golden_cases(folder).unwrap()
}

/// An AdmissionRequest creating `object`, shaped as policy-server sends it.
pub fn pod_create(object: &Value) -> Value {
    kruise_policy_modules::fixtures::pod_create(object)
}

pub fn validation_request(request: &Value, settings: &Value) -> Vec<u8> {
    serde_json::to_vec(&json!({"request": request, "settings": settings})).unwrap()
}

/// A host-call handler made of a closure, usable by both hosts.
pub type HostFn = Arc<dyn Fn(&str, &str, &str, &[u8]) -> Result<Vec<u8>, String> + Send + Sync>;

pub fn denying_host() -> HostFn {
    Arc::new(|_, _, _, _| Err("no cluster in this test".to_owned()))
}

pub struct FnHost(pub HostFn);

impl HostCalls for FnHost {
    fn host_call(
        &self,
        binding: &str,
        namespace: &str,
        operation: &str,
        payload: &[u8],
    ) -> Result<Vec<u8>, String> {
        (self.0)(binding, namespace, operation, payload)
    }
}

/// One host call as the host saw it: binding, namespace, operation, payload.
pub type RecordedCall = (String, String, String, Vec<u8>);

/// Records what it is given, answers from a fixed table.
#[derive(Default)]
pub struct RecordingHost {
    pub calls: Mutex<Vec<RecordedCall>>,
    pub logs: Mutex<Vec<String>>,
    pub answers: HashMap<String, Result<Vec<u8>, String>>,
}

impl HostCalls for RecordingHost {
    fn host_call(
        &self,
        binding: &str,
        namespace: &str,
        operation: &str,
        payload: &[u8],
    ) -> Result<Vec<u8>, String> {
        self.calls.lock().unwrap().push((
            binding.to_owned(),
            namespace.to_owned(),
            operation.to_owned(),
            payload.to_vec(),
        ));
        self.answers
            .get(operation)
            .cloned()
            .unwrap_or_else(|| Err(format!("unknown operation: {operation}")))
    }

    fn console_log(&self, message: &str) {
        self.logs.lock().unwrap().push(message.to_owned());
    }
}

/// Runs `operation` the way policy-server does: `wapc::WapcHost` on
/// `wasmtime-provider`, a fresh instance per call.
pub fn reference_call(
    wasm: &'static [u8],
    operation: &str,
    payload: &[u8],
    host: HostFn,
) -> Result<Vec<u8>, String> {
    let (engine, module) = reference_module(wasm);
    let provider = wasmtime_provider::WasmtimeEngineProviderBuilder::new()
        .engine(engine)
        .module(module)
        .build()
        .expect("the module instantiates");
    let callback =
        move |_id: u64, binding: &str, namespace: &str, operation: &str, payload: &[u8]| {
            host(binding, namespace, operation, payload)
                .map_err(|e| -> Box<dyn std::error::Error + Send + Sync> { e.into() })
        };
    let wapc = wapc::WapcHost::new(Box::new(provider), Some(Box::new(callback)))
        .expect("the waPC host starts");
    wapc.call(operation, payload).map_err(|e| e.to_string())
}

fn reference_module(wasm: &'static [u8]) -> (wasmtime::Engine, wasmtime::Module) {
    static CACHE: OnceLock<Mutex<HashMap<usize, (wasmtime::Engine, wasmtime::Module)>>> =
        OnceLock::new();
    let mut cache = CACHE.get_or_init(Default::default).lock().unwrap();
    cache
        .entry(wasm.as_ptr() as usize)
        .or_insert_with(|| {
            // policy-server's engine settings, with the same disk cache.
            let mut cache = wasmtime::CacheConfig::new();
            cache.with_directory(cache_dir());
            let mut config = wasmtime::Config::new();
            config.cache(Some(wasmtime::Cache::new(cache).unwrap()));
            let engine = wasmtime::Engine::new(&config).unwrap();
            let module = wasmtime::Module::new(&engine, wasm).expect("the module compiles");
            (engine, module)
        })
        .clone()
}

/// Runs `operation` under our runtime with default limits.
pub fn our_call(
    wasm: &[u8],
    operation: &str,
    payload: &[u8],
    host: HostFn,
) -> Result<Vec<u8>, String> {
    let module = runtime().load(wasm).map_err(|e| e.to_string())?;
    block_on(module.call(
        operation,
        payload,
        runtime().limits(Some(kruise_wasm_host::runtime::DEFAULT_TIMEOUT)),
        Arc::new(FnHost(host)),
    ))
    .map_err(|e| e.to_string())
}

pub fn blank_hash_timestamps(metadata: &mut Value) {
    kruise_policy_modules::fixtures::blank_hash_timestamps(metadata).unwrap();
}

/// The policy modules as files, as a user would have them.
pub fn module_file(module: &kruise_policy_modules::PolicyModule) -> PathBuf {
    // Written once per content: tests in parallel must not see a half file,
    // and each writer (test binaries, and threads within one) has its own.
    static WRITERS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("modules");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{}.wasm", module.name));
    if std::fs::read(&path).ok().as_deref() != Some(module.wasm) {
        let writer = WRITERS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let partial = dir.join(format!(
            "{}.{}.{writer}.part",
            module.name,
            std::process::id()
        ));
        std::fs::write(&partial, module.wasm).unwrap();
        std::fs::rename(&partial, &path).unwrap();
    }
    path
}

/// A fresh directory for one test.
pub fn scratch_dir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("scratch")
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Cluster reads whose caches fill when the test says so (`true` on the
/// channel), or whose watches stop (the sender dropped); until then their
/// lists are empty.
#[derive(Debug)]
pub struct FillingCluster(pub tokio::sync::watch::Receiver<bool>);

impl kruise_wasm_host::cluster_fixtures::ClusterReads for FillingCluster {
    fn cache_filled(&self, _: &str, kind: &str) -> Result<(), String> {
        match (*self.0.borrow(), self.0.is_closed()) {
            (true, _) => Ok(()),
            (false, true) => Err(format!("the watch of {kind} has stopped")),
            (false, false) => Err(format!("the cache of {kind} has not filled yet")),
        }
    }

    fn until_filled(&self, _: &str, _: &str) -> futures::future::BoxFuture<'static, ()> {
        let mut filled = self.0.clone();
        Box::pin(async move {
            let _ = filled.wait_for(|filled| *filled).await;
        })
    }

    fn list(&self, _: &kruise_wasm_host::cluster_fixtures::ListRequest) -> Result<Vec<u8>, String> {
        Ok(br#"{"apiVersion": "v1", "kind": "List", "items": []}"#.to_vec())
    }

    fn get(&self, _: &kruise_wasm_host::cluster_fixtures::GetRequest) -> Result<Vec<u8>, String> {
        Err("not found".to_owned())
    }
}
