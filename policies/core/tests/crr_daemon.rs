//! The node agent's decisions for a ContainerRecreateRequest: which request
//! of a pod runs, each container's state from the runtime, what to kill.
//! Cases follow OpenKruise's daemon (`pkg/daemon/containerrecreate`) and
//! its e2e expectations (simple, ordered, forced, failure policies).

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kruise_api::ContainerRecreateRequest;
use kruise_api::containerrecreaterequest::{
    ContainerRecreateRequestContainerRecreateState as State,
    ContainerRecreateRequestPhase as Phase, ContainerStatusSnapshot,
    SYNC_CONTAINER_STATUSES_ANNOTATION, UNREADY_ACQUIRED_KEY,
};
use kruise_core::crr::daemon::{
    Observed, Pick, RECHECK, RuntimeContainer, RuntimeState, STOPPING_ANNOTATION, Step,
    kill_failed, pick, plan,
};
use serde_json::{Value, json};

const CREATED: &str = "2026-01-01T00:00:00Z";

fn at(seconds: i64) -> Timestamp {
    let base: Timestamp = CREATED.parse().unwrap();
    base.checked_add(k8s_openapi::jiff::SignedDuration::from_secs(seconds))
        .unwrap()
}

/// A request for `app` and `side` (IDs `containerd://app-0`, `side-0`),
/// with `strategy` and `status` as given.
fn request(strategy: Value, status: Value) -> ContainerRecreateRequest {
    let mut object = json!({
        "apiVersion": "apps.kruise.io/v1alpha1",
        "kind": "ContainerRecreateRequest",
        "metadata": {"name": "r", "namespace": "default", "creationTimestamp": CREATED},
        "spec": {
            "podName": "web-0",
            "containers": [
                {"name": "app", "statusContext": {"containerID": "containerd://app-0", "restartCount": 0},
                 "preStop": {"exec": {"command": ["sh", "-c", "echo bye"]}}},
                {"name": "side", "statusContext": {"containerID": "containerd://side-0", "restartCount": 0}},
            ],
        },
    });
    object["spec"]["strategy"] = strategy;
    let mut status = status;
    // What the manager writes in annotations, given beside the status:
    // the snapshot and the time the pod was held not-ready.
    if let Some(snapshot) = status
        .as_object_mut()
        .and_then(|s| s.remove("containerStatusSnapshot"))
    {
        object["metadata"]["annotations"][SYNC_CONTAINER_STATUSES_ANNOTATION] =
            Value::String(snapshot.to_string());
    }
    if let Some(since) = status
        .as_object_mut()
        .and_then(|s| s.remove("unreadyAcquired"))
    {
        object["metadata"]["annotations"][UNREADY_ACQUIRED_KEY] = since;
    }
    if !status.is_null() {
        object["status"] = status;
    }
    serde_json::from_value(object).unwrap()
}

fn named(name: &str, created: &str, status: Value) -> ContainerRecreateRequest {
    let mut r = request(json!({}), status);
    r.metadata.name = Some(name.to_owned());
    r.metadata.creation_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        created.parse().unwrap(),
    ));
    r
}

fn recreating(states: Value) -> Value {
    let mut recreating = json!({"phase": "Recreating"});
    recreating["containerRecreateStates"] = states;
    recreating
}

fn running(name: &str, restart: i32, started: i64) -> RuntimeContainer {
    RuntimeContainer {
        id: format!("containerd://{name}-{restart}"),
        name: name.to_owned(),
        state: RuntimeState::Running,
        restart_count: restart,
        started_at: Some(at(started)),
    }
}

fn exited(name: &str, restart: i32) -> RuntimeContainer {
    RuntimeContainer {
        state: RuntimeState::Exited,
        ..running(name, restart, -100)
    }
}

fn state(name: &str, phase: Phase, killed: bool) -> State {
    State {
        name: name.to_owned(),
        phase,
        message: None,
        is_killed: killed,
    }
}

fn plan_at(request: &ContainerRecreateRequest, runtime: &[RuntimeContainer], now: i64) -> Step {
    plan(&Observed {
        request,
        runtime,
        now: at(now),
    })
}

fn states_json(states: &[State]) -> Value {
    serde_json::to_value(states).unwrap()
}

// --- which request runs -------------------------------------------------

#[test]
fn the_oldest_new_request_is_picked_and_the_others_queued() {
    let requests = [
        named("b", "2026-01-01T00:00:02Z", Value::Null),
        named("a", "2026-01-01T00:00:01Z", Value::Null),
        named("c", "2026-01-01T00:00:03Z", Value::Null),
    ];
    assert_eq!(
        pick(&requests),
        Some(Pick {
            picked: 1,
            to_queue: vec![0, 2]
        })
    );
}

#[test]
fn a_recreating_request_keeps_the_pod_before_older_queued_ones() {
    let requests = [
        named("old", "2026-01-01T00:00:01Z", json!({"phase": "Pending"})),
        named(
            "running",
            "2026-01-01T00:00:05Z",
            json!({"phase": "Recreating"}),
        ),
        named("new", "2026-01-01T00:00:09Z", Value::Null),
    ];
    assert_eq!(
        pick(&requests),
        Some(Pick {
            picked: 1,
            to_queue: vec![2]
        })
    );
}

#[test]
fn finished_and_deleting_requests_never_block_the_queue() {
    let mut deleting = named(
        "deleting",
        "2026-01-01T00:00:00Z",
        json!({"phase": "Recreating"}),
    );
    deleting.metadata.deletion_timestamp = deleting.metadata.creation_timestamp.clone();
    let requests = [
        named(
            "done",
            "2026-01-01T00:00:00Z",
            json!({"phase": "Completed", "completionTime": CREATED}),
        ),
        deleting,
        named(
            "queued",
            "2026-01-01T00:00:07Z",
            json!({"phase": "Pending"}),
        ),
    ];
    assert_eq!(
        pick(&requests),
        Some(Pick {
            picked: 2,
            to_queue: vec![]
        })
    );
    assert_eq!(pick(&requests[..2]), None);
}

#[test]
fn three_requests_on_one_pod_run_one_after_the_other_in_creation_order() {
    // Each round: the picked one runs to completion; the rest wait.
    let mut requests = vec![
        named("third", "2026-01-01T00:00:03Z", Value::Null),
        named("first", "2026-01-01T00:00:01Z", Value::Null),
        named("second", "2026-01-01T00:00:02Z", Value::Null),
    ];
    let mut order = Vec::new();
    while let Some(Pick { picked, to_queue }) = pick(&requests) {
        for i in to_queue {
            requests[i].status = serde_json::from_value(json!({"phase": "Pending"})).unwrap();
        }
        order.push(requests[picked].metadata.name.clone().unwrap());
        requests[picked].status =
            serde_json::from_value(json!({"phase": "Completed", "completionTime": CREATED}))
                .unwrap();
    }
    assert_eq!(order, ["first", "second", "third"]);
}

// --- the steps of one request -------------------------------------------

#[test]
fn a_new_request_starts_recreating_first() {
    let r = request(json!({}), Value::Null);
    assert_eq!(plan_at(&r, &[], 0), Step::StartRecreating);
    let queued = request(json!({}), json!({"phase": "Pending"}));
    assert_eq!(plan_at(&queued, &[], 0), Step::StartRecreating);
}

#[test]
fn states_are_written_before_anything_is_killed() {
    let r = request(json!({}), recreating(json!([])));
    let runtime = [running("app", 0, -50), running("side", 0, -50)];
    assert_eq!(
        plan_at(&r, &runtime, 1),
        Step::WriteStates(vec![
            state("app", Phase::Pending, false),
            state("side", Phase::Pending, false)
        ])
    );
}

#[test]
fn the_first_pending_container_is_killed_with_its_hook_and_grace() {
    let r = request(
        json!({"terminationGracePeriodSeconds": 7}),
        recreating(
            json!([{"name": "app", "phase": "Pending"}, {"name": "side", "phase": "Pending"}]),
        ),
    );
    let runtime = [running("app", 0, -50), running("side", 0, -50)];
    let Step::Kill { kill, states } = plan_at(&r, &runtime, 1) else {
        panic!("expected a kill");
    };
    assert_eq!(kill.index, 0);
    assert_eq!(kill.container_id, "containerd://app-0");
    assert_eq!(kill.grace_seconds, 7);
    assert!(
        kill.pre_stop
            .as_ref()
            .and_then(|h| h.exec.as_ref())
            .is_some()
    );
    assert_eq!(
        states,
        [
            state("app", Phase::Recreating, true),
            state("side", Phase::Pending, false)
        ]
    );
}

#[test]
fn unordered_kills_the_next_container_while_the_first_restarts() {
    let r = request(
        json!({}),
        recreating(
            json!([{"name": "app", "phase": "Recreating", "isKilled": true}, {"name": "side", "phase": "Pending"}]),
        ),
    );
    let runtime = [exited("app", 0), running("side", 0, -50)];
    let Step::Kill { kill, .. } = plan_at(&r, &runtime, 2) else {
        panic!("expected a kill");
    };
    assert_eq!(kill.name, "side");
    assert_eq!(
        kill.grace_seconds, 30,
        "kubelet's default without a grace period"
    );
}

#[test]
fn ordered_waits_for_the_first_container_to_succeed() {
    let r = request(
        json!({"orderedRecreate": true}),
        recreating(
            json!([{"name": "app", "phase": "Recreating", "isKilled": true}, {"name": "side", "phase": "Pending"}]),
        ),
    );
    let runtime = [
        exited("app", 0),
        running("app", 1, 1),
        running("side", 0, -50),
    ];
    assert_eq!(plan_at(&r, &runtime, 2), Step::Wait(RECHECK));
}

#[test]
fn a_new_instance_succeeds_once_seen_ready_and_running_long_enough() {
    let recreating_with = |snapshot: Value| {
        json!({"phase": "Recreating",
               "containerRecreateStates": [{"name": "app", "phase": "Recreating", "isKilled": true},
                                           {"name": "side", "phase": "Succeeded", "isKilled": true}],
               "containerStatusSnapshot": snapshot})
    };
    let runtime = [
        exited("app", 0),
        running("app", 1, 10),
        running("side", 1, 5),
    ];
    let strategy = json!({"minStartedSeconds": 5});
    // The manager has not seen the new instance ready yet.
    let unseen = request(
        strategy.clone(),
        recreating_with(
            json!([{"name": "app", "ready": false, "restartCount": 1, "containerID": "containerd://app-1"}]),
        ),
    );
    assert_eq!(plan_at(&unseen, &runtime, 20), Step::Wait(RECHECK));
    // Seen ready, but only running for 3 of the 5 seconds.
    let seen = request(
        strategy,
        recreating_with(
            json!([{"name": "app", "ready": true, "restartCount": 1, "containerID": "containerd://app-1"}]),
        ),
    );
    assert_eq!(plan_at(&seen, &runtime, 13), Step::Wait(RECHECK));
    let Step::WriteStates(states) = plan_at(&seen, &runtime, 15) else {
        panic!("expected the state to change");
    };
    assert_eq!(states[0], state("app", Phase::Succeeded, true));
    // With every container succeeded the request completes.
    let done = request(
        json!({}),
        json!({"phase": "Recreating", "containerRecreateStates": states_json(&states)}),
    );
    assert_eq!(
        plan_at(&done, &runtime, 16),
        Step::Complete {
            states,
            message: None
        }
    );
}

#[test]
fn a_snapshot_of_the_old_instance_does_not_count() {
    let r = request(
        json!({}),
        json!({"phase": "Recreating",
               "containerRecreateStates": [{"name": "app", "phase": "Recreating", "isKilled": true},
                                           {"name": "side", "phase": "Recreating", "isKilled": true}],
               "containerStatusSnapshot": [
                   {"name": "app", "ready": true, "restartCount": 0, "containerID": "containerd://app-0"}]}),
    );
    let runtime = [running("app", 1, 1), running("side", 1, 1)];
    assert_eq!(plan_at(&r, &runtime, 30), Step::Wait(RECHECK));
}

#[test]
fn a_container_restarted_since_the_request_counts_as_recreated_without_a_kill() {
    let r = request(json!({}), recreating(json!([])));
    let runtime = [running("app", 1, 1), running("side", 0, -50)];
    let Step::WriteStates(states) = plan_at(&r, &runtime, 2) else {
        panic!("expected states");
    };
    assert_eq!(states[0], state("app", Phase::Recreating, false));
    assert_eq!(states[1], state("side", Phase::Pending, false));
}

#[test]
fn force_recreate_kills_a_container_that_restarted_on_its_own() {
    let r = request(
        json!({"forceRecreate": true}),
        recreating(
            json!([{"name": "app", "phase": "Pending"}, {"name": "side", "phase": "Pending"}]),
        ),
    );
    // app crash-restarted after the request was made.
    let runtime = [running("app", 2, 1), running("side", 0, -50)];
    let Step::Kill { kill, .. } = plan_at(&r, &runtime, 2) else {
        panic!("expected a kill");
    };
    assert_eq!(kill.container_id, "containerd://app-2");
}

/// OpenKruise v1.9's daemon stops its walk at a container the runtime
/// does not list, ordered or not: the containers after it wait too.
#[test]
fn a_container_missing_on_the_node_holds_the_walk() {
    let r = request(json!({}), recreating(json!([])));
    let runtime = [running("side", 0, -50)];
    let Step::WriteStates(states) = plan_at(&r, &runtime, 2) else {
        panic!("expected states");
    };
    assert_eq!(states[0].phase, Phase::Pending);
    assert_eq!(
        states[0].message.as_deref(),
        Some("not found container on Node")
    );
    for ordered in [false, true] {
        let r = request(
            json!({"orderedRecreate": ordered}),
            json!({"phase": "Recreating", "containerRecreateStates": states_json(&states)}),
        );
        assert_eq!(
            plan_at(&r, &runtime, 3),
            Step::Wait(RECHECK),
            "ordered: {ordered}"
        );
    }
    // Once app is on the node, its state is written again, then it is
    // killed first.
    let r = request(
        json!({}),
        json!({"phase": "Recreating", "containerRecreateStates": states_json(&states)}),
    );
    let runtime = [running("app", 0, -50), running("side", 0, -50)];
    let Step::WriteStates(states) = plan_at(&r, &runtime, 4) else {
        panic!("expected states");
    };
    let r = request(
        json!({}),
        json!({"phase": "Recreating", "containerRecreateStates": states_json(&states)}),
    );
    let Step::Kill { kill, .. } = plan_at(&r, &runtime, 5) else {
        panic!("expected a kill");
    };
    assert_eq!(kill.name, "app");
}

#[test]
fn the_newest_instance_of_a_container_is_the_one_that_counts() {
    let r = request(
        json!({}),
        recreating(
            json!([{"name": "app", "phase": "Pending"}, {"name": "side", "phase": "Pending"}]),
        ),
    );
    // Listed newest first: the order must not matter.
    let runtime = [
        running("app", 0, -50),
        exited("app", 0),
        running("side", 0, -50),
    ];
    let Step::Kill { kill, .. } = plan_at(&r, &runtime, 1) else {
        panic!("expected a kill");
    };
    assert_eq!(kill.container_id, "containerd://app-0");
}

#[test]
fn a_failed_kill_completes_the_request_under_fail() {
    let states = kill_failed(
        vec![
            state("app", Phase::Recreating, true),
            state("side", Phase::Pending, false),
        ],
        0,
        "rpc error: boom",
    );
    assert_eq!(states[0].phase, Phase::Failed);
    assert_eq!(
        states[0].message.as_deref(),
        Some("kill container error: rpc error: boom")
    );
    let r = request(
        json!({"failurePolicy": "Fail"}),
        json!({"phase": "Recreating", "containerRecreateStates": states_json(&states)}),
    );
    let runtime = [running("app", 0, -50), running("side", 0, -50)];
    assert_eq!(
        plan_at(&r, &runtime, 2),
        Step::Complete {
            states,
            message: None
        }
    );
}

#[test]
fn a_failed_kill_goes_on_with_the_next_container_under_ignore() {
    let states = kill_failed(
        vec![
            state("app", Phase::Recreating, true),
            state("side", Phase::Pending, false),
        ],
        0,
        "boom",
    );
    let r = request(
        json!({"failurePolicy": "Ignore"}),
        json!({"phase": "Recreating", "containerRecreateStates": states_json(&states)}),
    );
    let runtime = [running("app", 0, -50), running("side", 0, -50)];
    let Step::Kill { kill, .. } = plan_at(&r, &runtime, 2) else {
        panic!("expected a kill");
    };
    assert_eq!(kill.name, "side");
}

#[test]
fn the_unready_grace_waits_for_the_manager_then_for_its_seconds() {
    let strategy = json!({"unreadyGracePeriodSeconds": 3});
    let waiting = request(strategy.clone(), recreating(json!([])));
    let runtime = [running("app", 0, -50), running("side", 0, -50)];
    assert_eq!(plan_at(&waiting, &runtime, 1), Step::Wait(RECHECK));
    let held = request(
        strategy,
        json!({"phase": "Recreating", "unreadyAcquired": "2026-01-01T00:00:10Z"}),
    );
    assert_eq!(
        plan_at(&held, &runtime, 11),
        Step::Wait(Duration::from_millis(2100))
    );
    assert!(matches!(plan_at(&held, &runtime, 13), Step::WriteStates(_)));
}

#[test]
fn a_request_without_valid_container_ids_completes_with_the_reason() {
    let mut r = request(json!({}), recreating(json!([])));
    r.spec.containers[1].status_context = None;
    let Step::Complete { message, .. } = plan_at(&r, &[], 1) else {
        panic!("expected completion");
    };
    assert!(
        message
            .unwrap()
            .contains("container side has no valid containerID")
    );
    let mut r = request(json!({}), recreating(json!([])));
    if let Some(c) = r.spec.containers[1].status_context.as_mut() {
        c.container_id = "cri-o://x".to_owned();
    }
    let Step::Complete { message, .. } = plan_at(&r, &[], 1) else {
        panic!("expected completion");
    };
    assert!(message.unwrap().contains("different runtimes"));
}

#[test]
fn a_whole_recreation_walks_to_completion() {
    // Drive plan() as the agent would, with a runtime that restarts killed
    // containers and a manager that snapshots running ones as ready.
    let mut r = request(json!({"orderedRecreate": true}), Value::Null);
    let mut runtime = vec![running("app", 0, -50), running("side", 0, -50)];
    let mut killed_at = Vec::new();
    for second in 0..60 {
        // The manager's snapshot: running instances started after creation.
        let snapshot: Vec<ContainerStatusSnapshot> = runtime
            .iter()
            .filter(|c| c.state == RuntimeState::Running && c.started_at >= Some(at(0)))
            .map(|c| ContainerStatusSnapshot {
                name: c.name.clone(),
                ready: true,
                restart_count: c.restart_count,
                container_id: Some(c.id.clone()),
            })
            .collect();
        r.metadata.annotations = Some(
            [(
                SYNC_CONTAINER_STATUSES_ANNOTATION.to_owned(),
                serde_json::to_string(&snapshot).unwrap(),
            )]
            .into(),
        );
        match plan_at(&r, &runtime, second) {
            Step::StartRecreating => {
                r.status = serde_json::from_value(json!({"phase": "Recreating"})).unwrap();
            }
            Step::WriteStates(states) => {
                r.status.as_mut().unwrap().container_recreate_states = states;
            }
            Step::Kill { kill, states } => {
                killed_at.push((kill.name.clone(), second));
                let old = runtime
                    .iter_mut()
                    .find(|c| c.id == kill.container_id)
                    .unwrap();
                old.state = RuntimeState::Exited;
                let restart = old.restart_count + 1;
                runtime.push(running(&kill.name, restart, second));
                r.status.as_mut().unwrap().container_recreate_states = states;
            }
            Step::Complete { states, message } => {
                assert_eq!(message, None);
                assert!(
                    states
                        .iter()
                        .all(|s| s.phase == Phase::Succeeded && s.is_killed)
                );
                assert_eq!(killed_at.len(), 2);
                assert!(killed_at[0].1 < killed_at[1].1, "ordered: {killed_at:?}");
                assert_eq!(killed_at[0].0, "app");
                return;
            }
            Step::Wait(_) => {}
        }
    }
    panic!("did not complete: {:?}", r.status);
}

// --- a forced stop across an agent crash ----------------------------------

/// A forced request, `app` pending, with `note` (if any) as the stop the
/// agent noted before it stopped `app`.
fn forced_with_note(note: Option<&str>) -> ContainerRecreateRequest {
    let mut r = request(
        json!({"forceRecreate": true}),
        recreating(
            json!([{"name": "app", "phase": "Pending"}, {"name": "side", "phase": "Pending"}]),
        ),
    );
    if let Some(id) = note {
        let value = json!({"name": "app", "containerID": id}).to_string();
        r.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(STOPPING_ANNOTATION.to_owned(), value);
    }
    r
}

#[test]
fn a_forced_stop_is_noted_before_it_is_made() {
    let runtime = [running("app", 0, -50), running("side", 0, -50)];
    let Step::Kill { kill, .. } = plan_at(&forced_with_note(None), &runtime, 2) else {
        panic!("expected a kill");
    };
    let note: Value = serde_json::from_str(kill.note.as_deref().unwrap()).unwrap();
    assert_eq!(
        note,
        json!({"name": "app", "containerID": "containerd://app-0"})
    );
    // Without force a stop needs no note: a restarted container is one
    // the request asked for.
    let both = json!([{"name": "app", "phase": "Pending"}, {"name": "side", "phase": "Pending"}]);
    let r = request(json!({}), recreating(both));
    let Step::Kill { kill, .. } = plan_at(&r, &runtime, 2) else {
        panic!("expected a kill");
    };
    assert_eq!(kill.note, None);
}

/// The agent stopped app-0 and crashed before recording it; kubelet
/// started app-1. The note says app-0 was the one: app counts as killed,
/// and app-1 is not stopped.
#[test]
fn a_noted_stop_whose_instance_is_gone_is_not_made_again() {
    let r = forced_with_note(Some("containerd://app-0"));
    let runtime = [running("app", 1, 1), running("side", 0, -50)];
    let step = plan_at(&r, &runtime, 2);
    if let Step::Kill { kill, .. } = &step {
        assert_ne!(kill.name, "app", "app-1 stopped again");
    }
    let (Step::Kill { states, .. } | Step::WriteStates(states)) = step else {
        panic!("expected states: {step:?}");
    };
    assert_eq!(states[0], state("app", Phase::Recreating, true));
}

/// The note was written but the agent crashed before the stop: app-0
/// still runs, and is stopped now.
#[test]
fn a_noted_stop_not_made_is_made() {
    let r = forced_with_note(Some("containerd://app-0"));
    let runtime = [running("app", 0, -50), running("side", 0, -50)];
    let Step::Kill { kill, .. } = plan_at(&r, &runtime, 2) else {
        panic!("expected a kill");
    };
    assert_eq!(kill.container_id, "containerd://app-0");
}
