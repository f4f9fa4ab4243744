//! Modules that misbehave, written as WAT: each is stopped with a clear
//! error, and the runtime keeps serving well-behaved policies meanwhile.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{RecordingHost, pod_create, runtime, validation_request};
use kruise_policy_modules::LAUNCH_PRIORITY;
use kruise_wasm_host::admission::{AdmissionRequest, Enforcement, Settings, TIMEOUT_MESSAGE};
use kruise_wasm_host::capabilities::{Grants, PolicyHost};
use kruise_wasm_host::chain::run_chain;
use kruise_wasm_host::cluster_fixtures::{ClusterReads, GetRequest, ListRequest};
use kruise_wasm_host::policy::Policy;
use kruise_wasm_host::runtime::{
    CallError, DEFAULT_TIMEOUT, Limits, LoadError, NoHostCalls, block_on,
};
use serde_json::{Value, json};

fn wasm(wat: &str) -> Vec<u8> {
    wat::parse_str(wat).expect("valid WAT")
}

fn limits(timeout_ms: u64, memory_mib: usize) -> Limits {
    Limits {
        timeout: Some(Duration::from_millis(timeout_ms)),
        memory_bytes: memory_mib << 20,
    }
}

fn call(wat: &str, limits: Limits) -> Result<Vec<u8>, CallError> {
    let module = runtime().load(&wasm(wat)).expect("the module loads");
    block_on(module.call("validate", b"{}", limits, Arc::new(NoHostCalls)))
}

/// A guest whose `__guest_call` runs `body` (which must leave an i32).
fn guest_call(imports: &str, body: &str) -> String {
    format!(
        r#"(module {imports}
             (memory (export "memory") 1)
             (data (i32.const 1024) "\ff\fe not utf-8")
             (data (i32.const 2048) "not json at all")
             (func (export "__guest_call") (param i32 i32) (result i32) {body}))"#
    )
}

const GUEST_RESPONSE: &str =
    r#"(import "wapc" "__guest_response" (func $response (param i32 i32)))"#;
const GUEST_ERROR: &str = r#"(import "wapc" "__guest_error" (func $error (param i32 i32)))"#;

const INFINITE_LOOP: &str = "(loop (br 0)) (i32.const 1)";

#[test]
fn an_infinite_loop_is_stopped_at_its_deadline() {
    let started = Instant::now();
    let error = call(&guest_call("", INFINITE_LOOP), limits(300, 16)).unwrap_err();
    let elapsed = started.elapsed();
    assert_eq!(error, CallError::DeadlineExceeded);
    assert_eq!(
        error.to_string(),
        "Guest call failure: guest code interrupted, execution deadline exceeded"
    );
    assert!(
        elapsed >= Duration::from_millis(300),
        "stopped early: {elapsed:?}"
    );
    assert!(
        elapsed < Duration::from_millis(1500),
        "stopped late: {elapsed:?}"
    );
}

#[test]
fn the_default_deadline_is_two_seconds_even_in_wapc_init() {
    let wat = r#"(module
        (memory (export "memory") 1)
        (func (export "wapc_init") (loop (br 0)))
        (func (export "__guest_call") (param i32 i32) (result i32) (i32.const 1)))"#;
    let started = Instant::now();
    let error = call(wat, runtime().limits(Some(DEFAULT_TIMEOUT))).unwrap_err();
    let elapsed = started.elapsed();
    assert_eq!(error, CallError::DeadlineExceeded);
    assert!(
        elapsed >= DEFAULT_TIMEOUT && elapsed < Duration::from_millis(2500),
        "{elapsed:?}"
    );
}

#[test]
fn a_memory_bomb_is_stopped_at_its_cap() {
    let bomb = "(loop (drop (memory.grow (i32.const 16))) (br 0)) (i32.const 1)";
    // With a deadline far away: only the cap can stop it.
    let error = call(&guest_call("", bomb), limits(20_000, 16)).unwrap_err();
    let CallError::MemoryLimit(exceeded) = &error else {
        panic!("{error:?}")
    };
    assert_eq!(exceeded.limit, 16 << 20);
    assert!(exceeded.requested > 16 << 20);
    assert!(
        error.to_string().starts_with(
            "Guest call failure: the policy exceeded its memory limit of 16777216 bytes"
        ),
        "{error}"
    );
}

#[test]
fn a_huge_initial_memory_is_refused() {
    // 1000 pages (62.5 MiB): more than this policy's cap, within the pool's slots.
    let big = r#"(module (memory (export "memory") 1000)
        (func (export "__guest_call") (param i32 i32) (result i32) (i32.const 1)))"#;
    let error = call(big, limits(1000, 16)).unwrap_err();
    assert!(matches!(error, CallError::MemoryLimit(_)), "{error:?}");

    // 60000 pages (3.7 GiB): more than any slot, so the module is refused
    // when loaded rather than on every call.
    let huge = big.replace("1000", "60000");
    let error = runtime().load(&wasm(&huge)).unwrap_err();
    assert!(matches!(error, LoadError::Compile(_)), "{error:?}");
    assert!(error.to_string().contains("memory"), "{error}");
}

#[test]
fn a_trap_is_a_clear_guest_failure() {
    let error = call(&guest_call("", "unreachable"), limits(1000, 16)).unwrap_err();
    assert_eq!(
        error,
        CallError::Guest("wasm trap: wasm `unreachable` instruction executed".to_owned())
    );
}

#[test]
fn garbage_output_is_handed_back_as_is() {
    // The runtime does not read responses; the admission layer rejects them.
    let body = "(call $response (i32.const 2048) (i32.const 15)) (i32.const 1)";
    let answer = call(&guest_call(GUEST_RESPONSE, body), limits(1000, 16)).unwrap();
    assert_eq!(answer, b"not json at all");
}

#[test]
fn an_error_that_is_not_utf8_traps() {
    let body = "(call $error (i32.const 1024) (i32.const 14)) (i32.const 0)";
    let error = call(&guest_call(GUEST_ERROR, body), limits(1000, 16)).unwrap_err();
    assert_eq!(
        error,
        CallError::Guest("__guest_error: the error message is not valid UTF-8".to_owned())
    );
}

#[test]
fn pointers_outside_memory_trap() {
    let body = "(call $response (i32.const 65530) (i32.const 100)) (i32.const 1)";
    let error = call(&guest_call(GUEST_RESPONSE, body), limits(1000, 16)).unwrap_err();
    assert_eq!(
        error.to_string(),
        "Guest call failure: __guest_response: 100 bytes at offset 65530 are outside the guest's memory"
    );
}

#[test]
fn missing_or_mistyped_exports_are_refused_at_load() {
    let cases = [
        (r#"(module (memory (export "memory") 1))"#, "__guest_call"),
        (
            r#"(module (func (export "__guest_call") (param i32 i32) (result i32) (i32.const 1)))"#,
            "memory",
        ),
        (
            r#"(module (memory (export "memory") 1) (func (export "__guest_call") (param i32) (result i32) (i32.const 1)))"#,
            "__guest_call",
        ),
        (
            r#"(module (memory (export "memory") 1) (func (export "__guest_call") (param i32 i32) (result i32) (i32.const 1))
             (func (export "wapc_init") (param i32)))"#,
            "wapc_init",
        ),
    ];
    for (wat, export) in cases {
        let error = runtime().load(&wasm(wat)).unwrap_err();
        assert!(
            matches!(&error, LoadError::MissingExport { name, .. } if *name == export),
            "{error:?}"
        );
    }
    let error = runtime().load(b"\0asm garbage").unwrap_err();
    assert!(matches!(error, LoadError::Compile(_)), "{error:?}");
}

#[test]
fn unknown_imports_are_refused_at_load() {
    let wat = r#"(module (import "wapc" "__not_wapc" (func))
        (memory (export "memory") 1)
        (func (export "__guest_call") (param i32 i32) (result i32) (i32.const 1)))"#;
    let error = runtime().load(&wasm(wat)).unwrap_err();
    assert!(matches!(error, LoadError::Link(_)), "{error:?}");
    assert!(error.to_string().contains("__not_wapc"), "{error}");
}

#[test]
fn start_may_exit_zero_but_not_otherwise() {
    let with_start = |code: i32| {
        format!(
            r#"(module
            (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
            (import "wapc" "__guest_response" (func $response (param i32 i32)))
            (memory (export "memory") 1)
            (data (i32.const 0) "ok")
            (func (export "_start") (call $exit (i32.const {code})))
            (func (export "__guest_call") (param i32 i32) (result i32)
              (call $response (i32.const 0) (i32.const 2)) (i32.const 1)))"#
        )
    };
    assert_eq!(call(&with_start(0), limits(1000, 16)).unwrap(), b"ok");
    assert_eq!(
        call(&with_start(3), limits(1000, 16)).unwrap_err(),
        CallError::Init("_start: the guest exited with status 3".to_owned())
    );
}

#[test]
fn start_runs_before_wapc_init_on_every_fresh_instance() {
    // _start writes 1 at 0; wapc_init appends 2 only if it sees the 1;
    // the call answers both bytes. A global counter shows no state survives.
    let wat = r#"(module
        (import "wapc" "__guest_response" (func $response (param i32 i32)))
        (memory (export "memory") 1)
        (global $calls (mut i32) (i32.const 0))
        (func (export "_start") (i32.store8 (i32.const 0) (i32.const 49)))
        (func (export "wapc_init")
          (if (i32.eq (i32.load8_u (i32.const 0)) (i32.const 49))
            (then (i32.store8 (i32.const 1) (i32.const 50)))))
        (func (export "__guest_call") (param i32 i32) (result i32)
          (global.set $calls (i32.add (global.get $calls) (i32.const 1)))
          (i32.store8 (i32.const 2) (i32.add (i32.const 48) (global.get $calls)))
          (call $response (i32.const 0) (i32.const 3)) (i32.const 1)))"#;
    for _ in 0..3 {
        assert_eq!(call(wat, limits(1000, 16)).unwrap(), b"121");
    }
}

#[test]
fn no_memory_survives_between_evaluations() {
    // Each call reports what a fresh instance must see (a zero page, the
    // data segment, two pages, another zero byte), then dirties all of it
    // and grows the memory. Slots are reused and reset in place (only the
    // pages present), so every call must still see the module's image.
    let wat = r#"(module
        (import "wapc" "__guest_response" (func $response (param i32 i32)))
        (memory (export "memory") 2)
        (data (i32.const 65636) "image")
        (func (export "__guest_call") (param i32 i32) (result i32)
          (i32.store8 (i32.const 8) (i32.add (i32.const 48) (i32.load8_u (i32.const 70000))))
          (i32.store8 (i32.const 9) (i32.load8_u (i32.const 65636)))
          (i32.store8 (i32.const 10) (i32.add (i32.const 48) (memory.size)))
          (i32.store8 (i32.const 11) (i32.add (i32.const 48) (i32.load8_u (i32.const 100))))
          (i32.store8 (i32.const 70000) (i32.const 7))
          (i32.store8 (i32.const 65636) (i32.const 88))
          (i32.store8 (i32.const 100) (i32.const 5))
          (drop (memory.grow (i32.const 1)))
          (i32.store8 (i32.const 131172) (i32.const 9))
          (call $response (i32.const 8) (i32.const 4))
          (i32.const 1)))"#;
    let module = runtime().load(&wasm(wat)).expect("the module loads");
    for _ in 0..5 {
        let answer =
            block_on(module.call("validate", b"{}", limits(1000, 16), Arc::new(NoHostCalls)));
        assert_eq!(answer.unwrap(), b"0i20");
    }
}

#[test]
fn guest_request_writes_the_operation_first_then_the_payload() {
    // The guest asks for the operation at 0 and the payload right after it,
    // then answers that whole range.
    let wat = r#"(module
        (import "wapc" "__guest_request" (func $request (param i32 i32)))
        (import "wapc" "__guest_response" (func $response (param i32 i32)))
        (memory (export "memory") 1)
        (func (export "__guest_call") (param $op_len i32) (param $msg_len i32) (result i32)
          (call $request (i32.const 0) (local.get $op_len))
          (call $response (i32.const 0) (i32.add (local.get $op_len) (local.get $msg_len)))
          (i32.const 1)))"#;
    let module = runtime().load(&wasm(wat)).unwrap();
    let answer = block_on(module.call(
        "validate",
        b"{\"x\":1}",
        limits(1000, 16),
        Arc::new(NoHostCalls),
    ))
    .unwrap();
    assert_eq!(answer, b"validate{\"x\":1}");
}

/// A guest that makes one host call with the strings at 0.., then answers
/// `R:<host response>` or `E:<host error>`.
const HOST_CALLER: &str = r#"(module
    (import "wapc" "__host_call" (func $call (param i32 i32 i32 i32 i32 i32 i32 i32) (result i32)))
    (import "wapc" "__host_response_len" (func $response_len (result i32)))
    (import "wapc" "__host_response" (func $host_response (param i32)))
    (import "wapc" "__host_error_len" (func $error_len (result i32)))
    (import "wapc" "__host_error" (func $host_error (param i32)))
    (import "wapc" "__guest_request" (func $request (param i32 i32)))
    (import "wapc" "__guest_response" (func $response (param i32 i32)))
    (import "wapc" "__console_log" (func $log (param i32 i32)))
    (memory (export "memory") 1)
    (data (i32.const 0) "kubewardenkubernetesget_resource")
    (data (i32.const 100) "R:E:hello host")
    (func (export "__guest_call") (param $op_len i32) (param $msg_len i32) (result i32)
      (local $len i32)
      (call $log (i32.const 104) (i32.const 10))
      ;; the payload goes to 200: it is what the guest sends on
      (call $request (i32.const 300) (i32.const 200))
      (if (call $call (i32.const 0) (i32.const 10) (i32.const 10) (i32.const 10)
                      (i32.const 20) (i32.const 12) (i32.const 200) (local.get $msg_len))
        (then
          (i32.store16 (i32.const 1000) (i32.load16_u (i32.const 100)))
          (local.set $len (call $response_len))
          (call $host_response (i32.const 1002)))
        (else
          (i32.store16 (i32.const 1000) (i32.load16_u (i32.const 102)))
          (local.set $len (call $error_len))
          (call $host_error (i32.const 1002))))
      (call $response (i32.const 1000) (i32.add (i32.const 2) (local.get $len)))
      (i32.const 1)))"#;

/// A cluster whose `can_i` answers only once the test signals it (or
/// fails after 10 s), and says when it has started waiting.
#[derive(Debug)]
struct SlowAuthorizer {
    waiting: Mutex<Option<tokio::sync::oneshot::Sender<()>>>,
    signalled: Mutex<std::sync::mpsc::Receiver<()>>,
}

impl ClusterReads for SlowAuthorizer {
    fn list(&self, _: &ListRequest) -> Result<Vec<u8>, String> {
        Err("not served".to_owned())
    }

    fn get(&self, _: &GetRequest) -> Result<Vec<u8>, String> {
        Err("not served".to_owned())
    }

    fn can_i(&self, _: &Value) -> Result<Value, String> {
        if let Some(waiting) = self.waiting.lock().unwrap().take() {
            let _ = waiting.send(());
        }
        let signalled = self.signalled.lock().unwrap();
        signalled
            .recv_timeout(Duration::from_secs(10))
            .map(|()| json!({"allowed": true}))
            .map_err(|_| "nothing else ran while can_i waited".to_owned())
    }
}

/// A guest waiting on a slow `kubernetes/can_i` does not hold the server
/// thread it runs on: with one worker, another task still runs meanwhile.
#[test]
fn a_host_call_that_waits_lets_the_servers_thread_serve_others() {
    let caller = HOST_CALLER.replace("get_resource\")", "can_i\")").replace(
        "(i32.const 20) (i32.const 12)",
        "(i32.const 20) (i32.const 5)",
    );
    let module = runtime().load(&wasm(&caller)).unwrap();
    let (waiting, started) = tokio::sync::oneshot::channel();
    let (signal, signalled) = std::sync::mpsc::channel();
    let host = Arc::new(PolicyHost {
        policy_id: "slow".to_owned(),
        grants: Grants {
            host_capabilities: vec!["kubernetes/can_i".to_owned()],
            context_aware_resources: Vec::new(),
        },
        cluster: Some(Arc::new(SlowAuthorizer {
            waiting: Mutex::new(Some(waiting)),
            signalled: Mutex::new(signalled),
        })),
    });
    let server = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let answer = server.block_on(async move {
        let call = tokio::spawn(async move {
            module
                .call("validate", b"{}", limits(30_000, 16), host)
                .await
        });
        started.await.unwrap();
        // Another request's task, queued on the one worker.
        tokio::spawn(async move { signal.send(()) });
        call.await.unwrap()
    });
    assert_eq!(answer.unwrap(), b"R:{\"allowed\":true}");
}

#[test]
fn host_calls_carry_binding_namespace_operation_and_payload() {
    let module = runtime().load(&wasm(HOST_CALLER)).unwrap();
    let host = Arc::new(RecordingHost {
        answers: [(
            "get_resource".to_owned(),
            Ok(b"{\"kind\":\"Namespace\"}".to_vec()),
        )]
        .into(),
        ..RecordingHost::default()
    });
    let answer = block_on(module.call(
        "validate",
        b"{\"name\":\"ns\"}",
        limits(1000, 16),
        host.clone(),
    ))
    .unwrap();
    assert_eq!(answer, b"R:{\"kind\":\"Namespace\"}");
    assert_eq!(
        *host.calls.lock().unwrap(),
        vec![(
            "kubewarden".to_owned(),
            "kubernetes".to_owned(),
            "get_resource".to_owned(),
            b"{\"name\":\"ns\"}".to_vec()
        )]
    );
    assert_eq!(*host.logs.lock().unwrap(), vec!["hello host".to_owned()]);

    let denied = Arc::new(RecordingHost::default());
    let answer = block_on(module.call("validate", b"{}", limits(1000, 16), denied)).unwrap();
    assert_eq!(answer, b"E:unknown operation: get_resource");
}

#[test]
fn good_evaluations_go_on_while_hostile_ones_run() {
    let pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web-0", "annotations": {"apps.kruise.io/container-launch-priority": "Ordered"}},
        "spec": {"containers": [{"name": "a", "image": "a"}, {"name": "b", "image": "b"}]}});
    let payload = validation_request(&pod_create(&pod), &json!({}));
    let good = runtime().load(LAUNCH_PRIORITY.wasm).unwrap();
    let looping = runtime()
        .load(&wasm(&guest_call("", INFINITE_LOOP)))
        .unwrap();
    let bomb = runtime()
        .load(&wasm(&guest_call(
            "",
            "(loop (drop (memory.grow (i32.const 1))) (br 0)) (i32.const 1)",
        )))
        .unwrap();

    let hostile_deadline = Duration::from_millis(1500);
    let started = Instant::now();
    std::thread::scope(|scope| {
        let hostile: Vec<_> = [&looping, &looping, &bomb]
            .into_iter()
            .map(|module| {
                scope.spawn(|| {
                    block_on(module.call(
                        "validate",
                        b"{}",
                        limits(1500, 64),
                        Arc::new(NoHostCalls),
                    ))
                })
            })
            .collect();
        let good_threads: Vec<_> = (0..3)
            .map(|_| {
                scope.spawn(|| {
                    let mut answered = 0;
                    for _ in 0..5 {
                        let answer = block_on(good.call(
                            "validate",
                            &payload,
                            limits(2000, 64),
                            Arc::new(NoHostCalls),
                        ))
                        .unwrap();
                        let response: Value = serde_json::from_slice(&answer).unwrap();
                        assert_eq!(response["accepted"], true);
                        assert!(response["mutated_object"].is_object());
                        answered += 1;
                    }
                    (answered, started.elapsed())
                })
            })
            .collect();
        for thread in good_threads {
            let (answered, done_at) = thread.join().unwrap();
            assert_eq!(answered, 5);
            assert!(
                done_at < hostile_deadline,
                "good work waited for the hostile guests: {done_at:?}"
            );
        }
        let outcomes: Vec<_> = hostile.into_iter().map(|t| t.join().unwrap()).collect();
        assert_eq!(outcomes[0], Err(CallError::DeadlineExceeded));
        assert_eq!(outcomes[1], Err(CallError::DeadlineExceeded));
        assert!(
            matches!(outcomes[2], Err(CallError::MemoryLimit(_))),
            "{:?}",
            outcomes[2]
        );
    });
    // And the runtime still serves afterwards.
    assert!(
        block_on(good.call(
            "validate",
            &payload,
            limits(2000, 64),
            Arc::new(NoHostCalls)
        ))
        .is_ok()
    );
}

/// A policy around `wat`, as policy-server would serve it.
fn policy(wat: &str, timeout_ms: u64) -> Policy {
    Policy::new(
        "hostile",
        runtime().load(&wasm(wat)).unwrap(),
        &Settings::new(),
        Enforcement::kwctl_run("hostile"),
        limits(timeout_ms, 16),
        Arc::new(NoHostCalls),
    )
}

/// A guest that answers every call with `answer` (JSON, no `"` inside
/// strings needing more than WAT's `\"`).
fn answering(answer: &Value) -> String {
    let text = answer.to_string();
    let body = format!(
        "(call $response (i32.const 4096) (i32.const {})) (i32.const 1)",
        text.len()
    );
    let escaped = text.replace('"', "\\\"");
    guest_call(GUEST_RESPONSE, &body).replace(
        "(func (export",
        &format!("(data (i32.const 4096) \"{escaped}\") (func (export"),
    )
}

/// A chain that ends in a refusal keeps what every policy run said: the
/// warnings and the audit annotations (chain.rs's promise).
#[test]
fn a_refused_chain_keeps_every_policys_audit_annotations() {
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": []}});
    let request = AdmissionRequest::from_document(pod_create(&pod)).unwrap();
    let first = policy(
        &answering(
            &json!({"accepted": true, "audit_annotations": {"first": "1"},
                           "warnings": ["from the first"]}),
        ),
        2000,
    );
    let second = policy(
        &answering(&json!({"accepted": false, "message": "no", "code": 403,
                           "audit_annotations": {"second": "2"}})),
        2000,
    );
    let outcome = block_on(run_chain(&[&first, &second], &request));
    assert!(!outcome.response.allowed);
    let annotations = outcome.response.audit_annotations.unwrap_or_default();
    assert_eq!(
        annotations.into_iter().collect::<Vec<_>>(),
        [
            ("first".to_owned(), "1".to_owned()),
            ("second".to_owned(), "2".to_owned())
        ]
    );
    assert_eq!(
        outcome.response.warnings,
        Some(vec!["from the first".to_owned()])
    );
}

#[test]
fn misbehaving_policies_become_admission_denials_with_code_500() {
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": []}});
    let request = AdmissionRequest::from_document(pod_create(&pod)).unwrap();
    let status = |policy: Policy| {
        let response = block_on(policy.validate(&request));
        assert!(!response.allowed);
        assert_eq!(response.uid, request.uid);
        let status = response.status.unwrap();
        assert_eq!(status.code, Some(500));
        status.message.unwrap()
    };

    let garbage = "(call $response (i32.const 2048) (i32.const 15)) (i32.const 1)";
    assert_eq!(
        status(policy(&guest_call(GUEST_RESPONSE, garbage), 1000)),
        "internal server error: Cannot deserialize policy validation response: expected ident at line 1 column 2"
    );
    assert_eq!(
        status(policy(&guest_call("", "unreachable"), 1000)),
        "internal server error: Guest call failure: wasm trap: wasm `unreachable` instruction executed"
    );
    assert_eq!(
        status(policy(&guest_call("", INFINITE_LOOP), 200)),
        TIMEOUT_MESSAGE
    );
    let bomb = "(loop (drop (memory.grow (i32.const 16))) (br 0)) (i32.const 1)";
    assert!(status(policy(&guest_call("", bomb), 1000)).starts_with(
        "internal server error: Guest call failure: the policy exceeded its memory limit"
    ));
}
