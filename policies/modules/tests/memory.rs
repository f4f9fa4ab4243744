//! After each evaluation the host resets every page of a guest's linear
//! memory that is present (docs/benchmarks.md, "Webhook host"), and all of
//! it on kernels without `PAGEMAP_SCAN`, so a fresh instance costs in
//! proportion to the memory a module starts with and touches. Ours are
//! linked with a 256 KiB shadow stack (build.rs) instead of Rust's 1 MiB
//! default; this keeps them there.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use kruise_policy_modules::{ALL, BENCH_ADD_LABEL};

const WASM_PAGE: u64 = 64 << 10;

#[test]
fn modules_start_with_under_half_a_mib_of_memory() {
    for module in ALL.iter().chain([&BENCH_ADD_LABEL]) {
        let bytes = initial_memory_pages(module.wasm) * WASM_PAGE;
        assert!(
            bytes <= 512 << 10,
            "{} starts with {bytes} bytes of memory: is the guest stack size flag gone?",
            module.name
        );
        // The stack alone is 256 KiB.
        assert!(bytes > 256 << 10, "{}: {bytes} bytes", module.name);
    }
}

/// The minimum of the module's one defined memory, read from its memory
/// section (id 5): a count, then limits (a flags byte and the minimum).
fn initial_memory_pages(wasm: &[u8]) -> u64 {
    let mut at = 8; // magic and version
    while at < wasm.len() {
        let id = wasm[at];
        let (size, body) = leb128(wasm, at + 1);
        if id == 5 {
            let (count, limits) = leb128(wasm, body);
            assert_eq!(count, 1, "one memory");
            return leb128(wasm, limits + 1).0;
        }
        at = body + usize::try_from(size).unwrap();
    }
    panic!("no memory section");
}

/// An unsigned LEB128 at `at`: the value and the offset after it.
fn leb128(bytes: &[u8], mut at: usize) -> (u64, usize) {
    let (mut value, mut shift) = (0_u64, 0);
    loop {
        let byte = bytes[at];
        at += 1;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return (value, at);
        }
        shift += 7;
    }
}

#[test]
fn the_section_reader_reads_a_hand_made_module() {
    // Header, then a memory section: one memory, no maximum, 300 pages
    // (LEB128 0xac 0x02).
    let module = [0, b'a', b's', b'm', 1, 0, 0, 0, 5, 4, 1, 0, 0xac, 0x02];
    assert_eq!(initial_memory_pages(&module), 300);
}
