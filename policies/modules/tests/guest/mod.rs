//! Running a policy module the way Kubewarden does: the `wapc` host on the
//! `wasmtime-provider` engine (the crates policy-server is built on).

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)] // each test file uses a part

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use serde_json::{Value, json};

/// Compiling a module takes seconds in a debug build: once per module per
/// test binary, then every guest is a fresh instance of it.
fn compiled(module: &'static [u8]) -> (wasmtime::Engine, wasmtime::Module) {
    static CACHE: OnceLock<Mutex<HashMap<usize, (wasmtime::Engine, wasmtime::Module)>>> =
        OnceLock::new();
    let mut cache = CACHE.get_or_init(Default::default).lock().unwrap();
    cache
        .entry(module.as_ptr() as usize)
        .or_insert_with(|| {
            let engine = wasmtime::Engine::default();
            let compiled = wasmtime::Module::new(&engine, module).expect("the module compiles");
            (engine, compiled)
        })
        .clone()
}

pub struct Guest {
    host: wapc::WapcHost,
}

impl Guest {
    /// A guest whose host calls all fail, as on a policy-server without a
    /// cluster.
    pub fn new(module: &'static [u8]) -> Self {
        Self::with_host_calls(module, |_, _, _, _| Err("no cluster in this test".into()))
    }

    pub fn with_host_calls(
        module: &'static [u8],
        host_call: impl Fn(&str, &str, &str, &[u8]) -> Result<Vec<u8>, String> + Send + Sync + 'static,
    ) -> Self {
        let (engine, module) = compiled(module);
        let engine = wasmtime_provider::WasmtimeEngineProviderBuilder::new()
            .engine(engine)
            .module(module)
            .build()
            .expect("the module instantiates");
        let callback =
            move |_id: u64, binding: &str, namespace: &str, operation: &str, payload: &[u8]| {
                host_call(binding, namespace, operation, payload)
                    .map_err(|e| -> Box<dyn std::error::Error + Send + Sync> { e.into() })
            };
        let host = wapc::WapcHost::new(Box::new(engine), Some(Box::new(callback)))
            .expect("the waPC host starts");
        Self { host }
    }

    pub fn call(&self, operation: &str, payload: &[u8]) -> Result<Vec<u8>, String> {
        self.host
            .call(operation, payload)
            .map_err(|e| e.to_string())
    }

    pub fn call_json(&self, operation: &str, payload: &Value) -> Value {
        let bytes = self
            .call(operation, &serde_json::to_vec(payload).unwrap())
            .unwrap();
        serde_json::from_slice(&bytes).expect("the guest answers JSON")
    }

    /// `validate` on a Pod CREATE of `object`.
    pub fn validate_pod_create(&self, object: &Value, settings: &Value) -> Value {
        self.call_json(
            "validate",
            &validation_request(&pod_create(object), settings),
        )
    }
}

pub fn golden_cases(folder: &str) -> Vec<(String, Value)> {
    kruise_policy_modules::fixtures::golden_cases(folder).unwrap()
}

/// An AdmissionRequest creating `object`, shaped as policy-server sends it.
pub fn pod_create(object: &Value) -> Value {
    kruise_policy_modules::fixtures::pod_create(object)
}

pub fn validation_request(request: &Value, settings: &Value) -> Value {
    json!({"request": request, "settings": settings})
}

/// The payloads of the custom sections named `name`, in file order.
pub fn custom_sections<'a>(module: &'a [u8], name: &str) -> Vec<&'a [u8]> {
    assert_eq!(&module[..8], b"\0asm\x01\0\0\0", "not a wasm module");
    let mut found = Vec::new();
    let mut rest = &module[8..];
    while let Some((&id, after_id)) = rest.split_first() {
        let (size, after_size) = read_leb128(after_id);
        let (section, next) = after_size.split_at(size);
        if id == 0 {
            let (name_len, after_len) = read_leb128(section);
            let (section_name, payload) = after_len.split_at(name_len);
            if section_name == name.as_bytes() {
                found.push(payload);
            }
        }
        rest = next;
    }
    found
}

fn read_leb128(bytes: &[u8]) -> (usize, &[u8]) {
    let mut value = 0usize;
    for (i, byte) in bytes.iter().enumerate() {
        value |= usize::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return (value, &bytes[i + 1..]);
        }
    }
    panic!("truncated LEB128");
}
