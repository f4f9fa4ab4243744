//! Modules whose evaluations start from a snapshot: the module is run once
//! (its start functions, then one waPC operation, such as
//! `validate_settings` with the policy's settings), and its memory and
//! globals at that point become the initial state of a new module
//! (Wizer's pre-initialisation, `wasmtime-wizer`). Every evaluation still
//! gets a fresh instance, mapped copy-on-write from that state, so nothing
//! of one request reaches another; what is saved is the work the guest
//! would otherwise redo on every request from the same settings.

use std::sync::Arc;

use wasmtime::{Instance, Store, Val};
use wasmtime_wizer::{InstanceState, SnapshotVal, ValType, Wizer};

use super::error::LoadError;
use super::host_calls::HostCalls;
use super::module::{CompiledModule, Limits};
use super::store_data::StoreData;

/// The module that starts where `wasm` leaves a fresh instance after
/// `operation(payload)`, as wasm bytes (`compile` compiles the
/// instrumented copy that is run). The operation's host calls go to
/// `host`: whoever grants any must replace the snapshot when they would
/// answer otherwise.
pub(super) async fn snapshot_after(
    wasm: &[u8],
    compile: impl FnOnce(&[u8]) -> Result<CompiledModule, LoadError>,
    operation: &str,
    payload: &[u8],
    limits: Limits,
    host: Arc<dyn HostCalls>,
) -> Result<Vec<u8>, LoadError> {
    let fail = |detail: String| LoadError::Snapshot(detail);
    let wizer = Wizer::new();
    // The same module with every mutable global and memory exported, so
    // that they can be read after the run.
    let (context, instrumented) = wizer.instrument(wasm).map_err(|e| fail(format!("{e:#}")))?;
    let module = compile(&instrumented)?;
    let (mut store, instance) = module
        .call_and_keep(operation, payload, limits, host)
        .await
        .map_err(|e| fail(format!("{operation}: {e}")))?;
    wizer
        .snapshot(
            &context,
            &mut Captured {
                store: &mut store,
                instance,
            },
        )
        .await
        .map_err(|e| fail(format!("{e:#}")))
}

/// The state Wizer reads: the instance of the instrumented module.
struct Captured<'a> {
    store: &'a mut Store<StoreData>,
    instance: Instance,
}

impl InstanceState for Captured<'_> {
    async fn global_get(&mut self, name: &str, _: ValType) -> SnapshotVal {
        // Wizer asks only for the globals it exported itself, of the value
        // types it accepted when it instrumented the module.
        let value = self
            .instance
            .get_global(&mut *self.store, name)
            .map(|global| global.get(&mut *self.store));
        match value {
            Some(Val::I32(x)) => SnapshotVal::I32(x),
            Some(Val::I64(x)) => SnapshotVal::I64(x),
            Some(Val::F32(x)) => SnapshotVal::F32(x),
            Some(Val::F64(x)) => SnapshotVal::F64(x),
            Some(Val::V128(x)) => SnapshotVal::V128(x.as_u128()),
            other => unreachable!("Wizer's export {name} is not a numeric global: {other:?}"),
        }
    }

    async fn memory_contents(&mut self, name: &str, contents: impl FnOnce(&[u8]) + Send) {
        match self.instance.get_memory(&mut *self.store, name) {
            Some(memory) => contents(memory.data(&*self.store)),
            None => unreachable!("Wizer's export {name} is not a memory"),
        }
    }
}
