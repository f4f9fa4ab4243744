//! The manager's decisions for a ContainerRecreateRequest (OpenKruise's
//! `pkg/controller/containerrecreaterequest`, its v1.9 unit tests
//! TestSyncContainerStatuses_CollectsRunningContainers and
//! TestWaitRecreateGracePeriod_PreservesConditionTimestamp among them).

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kruise_api::ContainerRecreateRequest;
use kruise_api::containerrecreaterequest::{
    SYNC_CONTAINER_STATUSES_ANNOTATION, UNREADY_ACQUIRED_KEY,
};
use kruise_core::crr::controller::{
    DAEMON_SILENT, DEADLINE_EXCEEDED, POD_GONE, SNAPSHOT_EVERY, Step, holder, plan,
};
use kruise_core::pod_readiness;
use serde_json::{Value, json};

const CREATED: &str = "2026-01-01T00:00:00Z";

fn at(seconds: i64) -> Timestamp {
    let base: Timestamp = CREATED.parse().unwrap();
    base.checked_add(SignedDuration::from_secs(seconds))
        .unwrap()
}

fn request(spec_extra: Value, status: Value) -> ContainerRecreateRequest {
    let mut object = json!({
        "apiVersion": "apps.kruise.io/v1alpha1",
        "kind": "ContainerRecreateRequest",
        "metadata": {"name": "r", "namespace": "default", "creationTimestamp": CREATED,
                     "labels": {"crr.apps.kruise.io/pod-uid": "uid-1", "crr.apps.kruise.io/active": "true"}},
        "spec": {"podName": "web-0", "containers": [{"name": "app"}, {"name": "side"}]},
    });
    if let Value::Object(extra) = spec_extra {
        for (key, value) in extra {
            object["spec"][key] = value;
        }
    }
    if !status.is_null() {
        object["status"] = status;
    }
    serde_json::from_value(object).unwrap()
}

/// A pod whose `app` runs since `app_started` and `side` since long ago.
fn pod(gate: bool, app_started: &str) -> Pod {
    let mut pod = json!({
        "metadata": {"name": "web-0", "namespace": "default", "uid": "uid-1"},
        "spec": {"containers": [{"name": "app"}, {"name": "side"}]},
        "status": {"containerStatuses": [
            {"name": "app", "ready": true, "restartCount": 1, "image": "i", "imageID": "",
             "containerID": "containerd://app-1",
             "state": {"running": {"startedAt": app_started}}},
            {"name": "side", "ready": true, "restartCount": 0, "image": "i", "imageID": "",
             "containerID": "containerd://side-0",
             "state": {"running": {"startedAt": "2025-12-31T00:00:00Z"}}},
        ]},
    });
    if gate {
        pod["spec"]["readinessGates"] = json!([{"conditionType": "KruisePodReady"}]);
    }
    serde_json::from_value(pod).unwrap()
}

fn recreating() -> Value {
    json!({"phase": "Recreating"})
}

#[test]
fn a_request_whose_pod_has_gone_completes() {
    let r = request(json!({}), recreating());
    assert_eq!(
        plan(&r, None, at(1)),
        Step::Complete {
            message: POD_GONE.to_owned()
        }
    );
    let mut other = pod(false, CREATED);
    other.metadata.uid = Some("uid-2".to_owned());
    assert!(
        matches!(plan(&r, Some(&other), at(1)), Step::Complete { message } if message == POD_GONE)
    );
    let mut deleting = pod(false, CREATED);
    deleting.metadata.deletion_timestamp = r.metadata.creation_timestamp.clone();
    assert!(
        matches!(plan(&r, Some(&deleting), at(1)), Step::Complete { message } if message == POD_GONE)
    );
}

#[test]
fn a_silent_daemon_is_given_a_minute() {
    let r = request(json!({}), Value::Null);
    let p = pod(false, CREATED);
    assert_eq!(
        plan(&r, Some(&p), at(10)),
        Step::Wait(Some(Duration::from_secs(50)))
    );
    assert_eq!(
        plan(&r, Some(&p), at(60)),
        Step::Complete {
            message: DAEMON_SILENT.to_owned()
        }
    );
}

#[test]
fn the_active_deadline_counts_from_creation() {
    let r = request(
        json!({"activeDeadlineSeconds": 5}),
        json!({"phase": "Pending"}),
    );
    let p = pod(false, CREATED);
    assert_eq!(
        plan(&r, Some(&p), at(2)),
        Step::Wait(Some(Duration::from_secs(3)))
    );
    assert_eq!(
        plan(&r, Some(&p), at(5)),
        Step::Complete {
            message: DEADLINE_EXCEEDED.to_owned()
        }
    );
}

#[test]
fn the_snapshot_has_only_containers_started_since_the_request() {
    let r = request(json!({}), recreating());
    let p = pod(false, "2026-01-01T00:00:04Z");
    let Step::WriteSnapshot(snapshot) = plan(&r, Some(&p), at(5)) else {
        panic!("expected a snapshot");
    };
    assert_eq!(snapshot.len(), 1);
    assert_eq!(snapshot[0].name, "app");
    assert_eq!(
        snapshot[0].container_id.as_deref(),
        Some("containerd://app-1")
    );
    assert!(snapshot[0].ready);
    // Written: nothing more to do until the next refresh.
    let mut r = r;
    r.metadata.annotations = Some(
        [(
            SYNC_CONTAINER_STATUSES_ANNOTATION.to_owned(),
            serde_json::to_string(&snapshot).unwrap(),
        )]
        .into(),
    );
    assert_eq!(kruise_core::crr::snapshot(&r), snapshot);
    assert_eq!(plan(&r, Some(&p), at(6)), Step::Wait(Some(SNAPSHOT_EVERY)));
    // Between the old instance's exit and the new one's start the pod
    // shows nothing new: the last snapshot stays.
    let old = pod(false, "2025-12-31T00:00:00Z");
    assert_eq!(
        plan(&r, Some(&old), at(7)),
        Step::Wait(Some(SNAPSHOT_EVERY))
    );
}

#[test]
fn the_unready_grace_holds_a_gated_pod_then_starts() {
    let spec = json!({"strategy": {"unreadyGracePeriodSeconds": 3}});
    let mut r = request(spec, recreating());
    let mut p = pod(true, "2025-12-31T00:00:00Z");
    assert_eq!(plan(&r, Some(&p), at(1)), Step::AddFinalizer);
    r.metadata.finalizers = Some(vec![UNREADY_ACQUIRED_KEY.to_owned()]);
    let Step::WritePodCondition(condition) = plan(&r, Some(&p), at(1)) else {
        panic!("expected the pod to be held");
    };
    assert_eq!(condition.status, "False");
    assert_eq!(
        condition.message.as_deref(),
        Some(r#"[{"userAgent":"ContainerRecreateRequest","key":"default/r"}]"#)
    );
    p.status.as_mut().unwrap().conditions = Some(vec![condition]);
    assert!(pod_readiness::is_held_by(&p, &holder(&r)));
    assert_eq!(plan(&r, Some(&p), at(2)), Step::StartGrace(at(2)));
    // Once set, later passes leave its time alone.
    r.metadata.annotations = Some([(UNREADY_ACQUIRED_KEY.to_owned(), at(2).to_string())].into());
    assert_eq!(kruise_core::crr::unready_acquired_at(&r), Some(at(2)));
    assert_eq!(plan(&r, Some(&p), at(9)), Step::Wait(Some(SNAPSHOT_EVERY)));
}

#[test]
fn a_pod_without_the_gate_stays_ready_and_the_grace_still_starts() {
    let r = request(
        json!({"strategy": {"unreadyGracePeriodSeconds": 3}}),
        recreating(),
    );
    let p = pod(false, "2025-12-31T00:00:00Z");
    assert_eq!(plan(&r, Some(&p), at(1)), Step::StartGrace(at(1)));
}

#[test]
fn a_finished_request_lets_go_of_the_pod_then_its_label_then_goes_after_its_ttl() {
    let status = json!({"phase": "Completed", "completionTime": "2026-01-01T00:00:10Z"});
    let mut r = request(json!({"ttlSecondsAfterFinished": 30}), status);
    r.metadata.finalizers = Some(vec![UNREADY_ACQUIRED_KEY.to_owned()]);
    let mut p = pod(true, CREATED);
    p.status.as_mut().unwrap().conditions =
        Some(vec![pod_readiness::hold(&p, &holder(&r), at(1)).unwrap()]);
    let Step::WritePodCondition(released) = plan(&r, Some(&p), at(11)) else {
        panic!("expected the pod to be released");
    };
    assert_eq!(released.status, "True");
    p.status.as_mut().unwrap().conditions = Some(vec![released]);
    assert_eq!(plan(&r, Some(&p), at(11)), Step::RemoveFinalizer);
    r.metadata.finalizers = None;
    assert_eq!(plan(&r, Some(&p), at(11)), Step::RemoveActiveLabel);
    r.metadata
        .labels
        .as_mut()
        .unwrap()
        .remove("crr.apps.kruise.io/active");
    assert_eq!(
        plan(&r, Some(&p), at(20)),
        Step::Wait(Some(Duration::from_secs(20)))
    );
    assert_eq!(plan(&r, Some(&p), at(40)), Step::Delete);
}

#[test]
fn another_holder_keeps_the_pod_not_ready() {
    let status = json!({"phase": "Completed", "completionTime": CREATED});
    let mut r = request(json!({}), status);
    r.metadata.finalizers = Some(vec![UNREADY_ACQUIRED_KEY.to_owned()]);
    let mut p = pod(true, CREATED);
    let other = pod_readiness::Holder {
        user_agent: "Other".to_owned(),
        key: "x".to_owned(),
    };
    let held = pod_readiness::hold(&p, &holder(&r), at(1)).unwrap();
    p.status.as_mut().unwrap().conditions = Some(vec![held]);
    let both = pod_readiness::hold(&p, &other, at(1)).unwrap();
    p.status.as_mut().unwrap().conditions = Some(vec![both]);
    let Step::WritePodCondition(released) = plan(&r, Some(&p), at(2)) else {
        panic!("expected a release");
    };
    assert_eq!(released.status, "False");
    assert_eq!(
        released.message.as_deref(),
        Some(r#"[{"userAgent":"Other","key":"x"}]"#)
    );
}

#[test]
fn a_deleted_request_whose_pod_has_gone_drops_its_finalizer() {
    let mut r = request(json!({}), recreating());
    r.metadata.finalizers = Some(vec![UNREADY_ACQUIRED_KEY.to_owned()]);
    r.metadata.deletion_timestamp = r.metadata.creation_timestamp.clone();
    assert_eq!(plan(&r, None, at(1)), Step::RemoveFinalizer);
    r.metadata.finalizers = None;
    assert_eq!(plan(&r, None, at(1)), Step::Wait(None));
}
