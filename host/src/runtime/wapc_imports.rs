//! The nine host functions a waPC guest imports from module `"wapc"`
//! (spec §1.1). All are defined, since a module imports whichever subset
//! it uses. A guest that breaks the contract (no `memory` export, a pointer
//! outside its memory, text that is not UTF-8) traps with a
//! [`ContractViolation`]; nothing here panics on guest input.

use wasmtime::{Caller, Extern, Linker, Memory};

use super::error::ContractViolation;
use super::store_data::StoreData;

const WAPC: &str = "wapc";

type HostResult<T> = wasmtime::Result<T>;

pub(crate) fn define(linker: &mut Linker<StoreData>) -> wasmtime::Result<()> {
    linker.func_wrap(WAPC, "__guest_request", guest_request)?;
    linker.func_wrap(WAPC, "__guest_response", guest_response)?;
    linker.func_wrap(WAPC, "__guest_error", guest_error)?;
    linker.func_wrap(WAPC, "__host_call", host_call)?;
    linker.func_wrap(WAPC, "__host_response_len", host_response_len)?;
    linker.func_wrap(WAPC, "__host_response", host_response)?;
    linker.func_wrap(WAPC, "__host_error_len", host_error_len)?;
    linker.func_wrap(WAPC, "__host_error", host_error)?;
    linker.func_wrap(WAPC, "__console_log", console_log)?;
    Ok(())
}

/// Copies the operation name to `op_ptr` and the payload to `msg_ptr`
/// (operation first: the order the guest declares).
fn guest_request(mut caller: Caller<'_, StoreData>, op_ptr: i32, msg_ptr: i32) -> HostResult<()> {
    const FUNCTION: &str = "__guest_request";
    let memory = guest_memory(&mut caller)?;
    let (bytes, data) = memory.data_and_store_mut(&mut caller);
    if let Some(request) = data.wapc.request() {
        write(bytes, FUNCTION, msg_ptr, &request.payload)?;
        write(bytes, FUNCTION, op_ptr, request.operation.as_bytes())?;
    }
    Ok(())
}

fn guest_response(mut caller: Caller<'_, StoreData>, ptr: i32, len: i32) -> HostResult<()> {
    let response = read_guest(&mut caller, "__guest_response", ptr, len)?;
    caller.data_mut().wapc.set_guest_response(response);
    Ok(())
}

fn guest_error(mut caller: Caller<'_, StoreData>, ptr: i32, len: i32) -> HostResult<()> {
    const FUNCTION: &str = "__guest_error";
    let bytes = read_guest(&mut caller, FUNCTION, ptr, len)?;
    let message = utf8(bytes, FUNCTION, "error message")?;
    caller.data_mut().wapc.set_guest_error(message);
    Ok(())
}

#[allow(clippy::too_many_arguments)] // the waPC signature
fn host_call(
    mut caller: Caller<'_, StoreData>,
    binding_ptr: i32,
    binding_len: i32,
    namespace_ptr: i32,
    namespace_len: i32,
    operation_ptr: i32,
    operation_len: i32,
    payload_ptr: i32,
    payload_len: i32,
) -> HostResult<i32> {
    const FUNCTION: &str = "__host_call";
    let text = |caller: &mut Caller<'_, StoreData>, what, ptr, len| {
        utf8(read_guest(caller, FUNCTION, ptr, len)?, FUNCTION, what)
    };
    let binding = text(&mut caller, "binding", binding_ptr, binding_len)?;
    let namespace = text(&mut caller, "namespace", namespace_ptr, namespace_len)?;
    let operation = text(&mut caller, "operation", operation_ptr, operation_len)?;
    let payload = read_guest(&mut caller, FUNCTION, payload_ptr, payload_len)?;

    let data = caller.data_mut();
    data.wapc.begin_host_call();
    let answer = data
        .host
        .host_call(&binding, &namespace, &operation, &payload);
    Ok(data.wapc.finish_host_call(answer))
}

#[allow(clippy::needless_pass_by_value)] // wasmtime hands the caller over by value
fn host_response_len(caller: Caller<'_, StoreData>) -> HostResult<i32> {
    wapc_len(
        "__host_response_len",
        caller.data().wapc.host_response().map_or(0, <[u8]>::len),
    )
}

fn host_response(mut caller: Caller<'_, StoreData>, ptr: i32) -> HostResult<()> {
    let memory = guest_memory(&mut caller)?;
    let (bytes, data) = memory.data_and_store_mut(&mut caller);
    if let Some(response) = data.wapc.host_response() {
        write(bytes, "__host_response", ptr, response)?;
    }
    Ok(())
}

#[allow(clippy::needless_pass_by_value)] // wasmtime hands the caller over by value
fn host_error_len(caller: Caller<'_, StoreData>) -> HostResult<i32> {
    wapc_len(
        "__host_error_len",
        caller.data().wapc.host_error().map_or(0, str::len),
    )
}

fn host_error(mut caller: Caller<'_, StoreData>, ptr: i32) -> HostResult<()> {
    let memory = guest_memory(&mut caller)?;
    let (bytes, data) = memory.data_and_store_mut(&mut caller);
    if let Some(error) = data.wapc.host_error() {
        write(bytes, "__host_error", ptr, error.as_bytes())?;
    }
    Ok(())
}

fn console_log(mut caller: Caller<'_, StoreData>, ptr: i32, len: i32) -> HostResult<()> {
    const FUNCTION: &str = "__console_log";
    let message = utf8(
        read_guest(&mut caller, FUNCTION, ptr, len)?,
        FUNCTION,
        "message",
    )?;
    caller.data().host.console_log(&message);
    Ok(())
}

/// The export the waPC contract names `memory`, looked up on every call as
/// the `wapc` host does.
fn guest_memory(caller: &mut Caller<'_, StoreData>) -> HostResult<Memory> {
    match caller.get_export("memory") {
        Some(Extern::Memory(memory)) => Ok(memory),
        _ => Err(ContractViolation::NoMemory.into()),
    }
}

fn read_guest(
    caller: &mut Caller<'_, StoreData>,
    function: &'static str,
    ptr: i32,
    len: i32,
) -> HostResult<Vec<u8>> {
    let memory = guest_memory(caller)?;
    let len = guest_u32(len) as usize;
    Ok(range(memory.data(&*caller), function, ptr, len)?.to_vec())
}

fn write(memory: &mut [u8], function: &'static str, ptr: i32, bytes: &[u8]) -> HostResult<()> {
    let start = guest_u32(ptr) as usize;
    let target = start
        .checked_add(bytes.len())
        .and_then(|end| memory.get_mut(start..end))
        .ok_or(ContractViolation::OutOfBounds {
            function,
            ptr: guest_u32(ptr),
            len: bytes.len(),
        })?;
    target.copy_from_slice(bytes);
    Ok(())
}

fn range<'a>(
    memory: &'a [u8],
    function: &'static str,
    ptr: i32,
    len: usize,
) -> Result<&'a [u8], ContractViolation> {
    let start = guest_u32(ptr) as usize;
    start
        .checked_add(len)
        .and_then(|end| memory.get(start..end))
        .ok_or(ContractViolation::OutOfBounds {
            function,
            ptr: guest_u32(ptr),
            len,
        })
}

/// Wasm passes pointers and lengths as `i32` bit patterns of `u32` values.
#[allow(clippy::cast_sign_loss)]
fn guest_u32(value: i32) -> u32 {
    value as u32
}

fn utf8(bytes: Vec<u8>, function: &'static str, what: &'static str) -> HostResult<String> {
    String::from_utf8(bytes).map_err(|_| ContractViolation::NotUtf8 { function, what }.into())
}

fn wapc_len(function: &'static str, len: usize) -> HostResult<i32> {
    i32::try_from(len).map_err(|_| ContractViolation::TooLong { function, len }.into())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn reads_stay_inside_memory() {
        let memory = [1u8, 2, 3, 4];
        assert_eq!(range(&memory, "f", 1, 2).unwrap(), &[2, 3]);
        assert_eq!(range(&memory, "f", 4, 0).unwrap(), &[] as &[u8]);
        assert_eq!(
            range(&memory, "f", 3, 2),
            Err(ContractViolation::OutOfBounds {
                function: "f",
                ptr: 3,
                len: 2
            })
        );
        // A negative i32 is a pointer near 4 GiB, not an index from the end.
        assert!(range(&memory, "f", -1, 1).is_err());
    }

    #[test]
    fn writes_stay_inside_memory() {
        let mut memory = [0u8; 4];
        write(&mut memory, "f", 2, b"ab").unwrap();
        assert_eq!(memory, [0, 0, b'a', b'b']);
        assert!(write(&mut memory, "f", 3, b"ab").is_err());
        assert_eq!(memory, [0, 0, b'a', b'b'], "a failed write changes nothing");
    }
}
