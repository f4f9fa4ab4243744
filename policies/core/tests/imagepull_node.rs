//! The NodeImage controller's and the node agent's decisions, after
//! OpenKruise's `nodeimage_controller_test.go` (TestDoUpdateNodeImage) and
//! `imagepuller_test.go`, and the pull-secret mirrors
//! (TestSyncJobPullSecrets*, TestReleaseImagePullJobSecrets_*).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Node, ObjectReference, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kruise_api::nodeimage::{
    ImagePullPhase, ImagePullPolicy, ImageSpec, ImageStatus, ImageTagPullPolicy, ImageTagSpec,
    ImageTagStatus, NodeImage, NodeImageStatus, ReferenceObject,
};
use kruise_core::imagepull::nodeimage::{
    self, Lifecycle, MESSAGE_DEADLINE, MESSAGE_NODE_SILENT, Referents, housekeep, job_owners,
    lifecycle, recount, watchdog,
};
use kruise_core::imagepull::puller::{self, Report, attempt_timeout, attempts, merge, retry_delay};
use kruise_core::imagepull::secrets::{
    self, MirrorWrite, REFERENCES_ANNOTATION, SOURCE_KEY_ANNOTATION, credentials_for, plan_mirrors,
    release,
};

fn now() -> Timestamp {
    "2026-01-01T01:00:00Z".parse().unwrap()
}

fn ago(seconds: i64) -> Time {
    Time(now() - SignedDuration::from_secs(seconds))
}

fn ready_node(since: &Time) -> Node {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": "n1", "labels": {"pool": "web"}},
        "status": {"conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": since}]},
    }))
    .unwrap()
}

fn job_owner(uid: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some("apps.kruise.io/v1alpha1".to_owned()),
        kind: Some("ImagePullJob".to_owned()),
        uid: Some(uid.to_owned()),
        ..ObjectReference::default()
    }
}

fn tag(name: &str, created: Option<Time>, owners: &[&str]) -> ImageTagSpec {
    ImageTagSpec {
        tag: name.to_owned(),
        created_at: created,
        owner_references: owners.iter().map(|o| job_owner(o)).collect(),
        ..ImageTagSpec::default()
    }
}

fn node_image(tags: Vec<ImageTagSpec>) -> NodeImage {
    let mut image = NodeImage::default();
    image.metadata.name = Some("n1".to_owned());
    image.spec.images.insert(
        "nginx".to_owned(),
        ImageSpec {
            tags,
            ..ImageSpec::default()
        },
    );
    image
}

fn reported(image: &mut NodeImage, status: ImageTagStatus) {
    let all = image.status.get_or_insert_with(NodeImageStatus::default);
    nodeimage::set_tag_status(all, "nginx", status);
}

/// The node's report of `tag` being pulled.
fn pulling(tag: &str) -> ImageTagStatus {
    ImageTagStatus {
        tag: tag.to_owned(),
        phase: ImagePullPhase::Pulling,
        ..Default::default()
    }
}

fn done(tag: &str, phase: ImagePullPhase, completed: Time) -> ImageTagStatus {
    ImageTagStatus {
        tag: tag.to_owned(),
        phase,
        completion_time: Some(completed),
        ..ImageTagStatus::default()
    }
}

#[test]
fn a_node_image_is_created_after_the_node_is_ready_for_the_delay() {
    let delay = Duration::from_secs(30);
    let fresh = ready_node(&ago(10));
    assert_eq!(
        lifecycle(Some(&fresh), None, delay, now()),
        Lifecycle::WaitToCreate(Duration::from_secs(20))
    );
    assert_eq!(
        lifecycle(Some(&ready_node(&ago(30))), None, delay, now()),
        Lifecycle::Create
    );
    assert_eq!(
        lifecycle(Some(&fresh), None, Duration::ZERO, now()),
        Lifecycle::Create
    );
    let mut not_ready = fresh.clone();
    not_ready
        .status
        .as_mut()
        .unwrap()
        .conditions
        .as_mut()
        .unwrap()[0]
        .status = "False".to_owned();
    assert_eq!(
        lifecycle(Some(&not_ready), None, delay, now()),
        Lifecycle::Keep
    );
    assert_eq!(
        lifecycle(Some(&fresh), Some(&NodeImage::default()), delay, now()),
        Lifecycle::Keep
    );
}

#[test]
fn a_node_image_goes_with_its_node_unless_fake() {
    let image = node_image(Vec::new());
    assert_eq!(
        lifecycle(None, Some(&image), Duration::ZERO, now()),
        Lifecycle::Delete
    );
    let mut deleting = ready_node(&ago(100));
    deleting.metadata.deletion_timestamp = Some(ago(1));
    assert_eq!(
        lifecycle(Some(&deleting), Some(&image), Duration::ZERO, now()),
        Lifecycle::Delete
    );
    let mut fake = image;
    fake.metadata.labels = Some(
        [(
            nodeimage::FAKE_NODE_IMAGE_LABEL.to_owned(),
            "true".to_owned(),
        )]
        .into(),
    );
    assert_eq!(
        lifecycle(None, Some(&fake), Duration::ZERO, now()),
        Lifecycle::Keep
    );
    assert_eq!(
        lifecycle(None, None, Duration::ZERO, now()),
        Lifecycle::Keep
    );
}

fn referents(jobs: &[&str]) -> Referents {
    Referents {
        job_uids: jobs.iter().map(|j| (*j).to_owned()).collect(),
        secrets: [("kruise-daemon-config".to_owned(), "kept".to_owned())].into(),
    }
}

#[test]
fn housekeeping_copies_labels_and_drops_what_nobody_wants() {
    let mut image = node_image(vec![
        tag("no-created-at", None, &["alive"]),
        tag("gone-owner", Some(ago(5)), &["gone"]),
        tag("shared", Some(ago(5)), &["gone", "alive"]),
        tag("alive", Some(ago(5)), &["alive"]),
    ]);
    let mut foreign = tag("foreign", Some(ago(5)), &[]);
    foreign.owner_references.push(ObjectReference {
        kind: Some("Pod".to_owned()),
        api_version: Some("v1".to_owned()),
        uid: Some("gone".to_owned()),
        ..ObjectReference::default()
    });
    image
        .spec
        .images
        .get_mut("nginx")
        .unwrap()
        .tags
        .push(foreign);
    image.spec.images.get_mut("nginx").unwrap().pull_secrets = ["kept", "gone"]
        .iter()
        .map(|name| ReferenceObject {
            namespace: Some("kruise-daemon-config".to_owned()),
            name: Some((*name).to_owned()),
        })
        .collect();
    let labels: BTreeMap<String, String> = [("pool".to_owned(), "web".to_owned())].into();
    let result = housekeep(&image, &labels, &referents(&["alive"]), now());
    let (new_labels, spec) = result.update.expect("an update");
    assert_eq!(new_labels, labels);
    let nginx = &spec.images["nginx"];
    let names: Vec<&str> = nginx.tags.iter().map(|t| t.tag.as_str()).collect();
    assert_eq!(
        names,
        ["shared", "alive", "foreign"],
        "other owner kinds are kept"
    );
    assert_eq!(nginx.tags[0].owner_references.len(), 1);
    assert_eq!(nginx.pull_secrets.len(), 1);
    assert_eq!(nginx.pull_secrets[0].name.as_deref(), Some("kept"));
}

#[test]
fn the_jobs_a_node_image_names_are_listed_once_each() {
    let mut image = node_image(vec![
        tag("a", Some(ago(5)), &["job-1", "job-2"]),
        tag("b", Some(ago(5)), &["job-2"]),
    ]);
    let nginx = image.spec.images.get_mut("nginx").unwrap();
    nginx.tags[1].owner_references.push(ObjectReference {
        kind: Some("Pod".to_owned()),
        api_version: Some("v1".to_owned()),
        uid: Some("a-pod".to_owned()),
        ..ObjectReference::default()
    });
    nginx.tags[1].owner_references.push(ObjectReference {
        uid: None,
        ..job_owner("")
    });
    let uids: Vec<&str> = job_owners(&image)
        .iter()
        .filter_map(|o| o.uid.as_deref())
        .collect();
    assert_eq!(uids, ["job-1", "job-2"], "jobs only, with a UID, once");
}

#[test]
fn housekeeping_removes_images_left_empty_and_is_quiet_when_clean() {
    let image = node_image(vec![tag("a", Some(ago(5)), &["gone"])]);
    let result = housekeep(&image, &BTreeMap::new(), &referents(&[]), now());
    assert!(result.update.unwrap().1.images.is_empty());
    let clean = node_image(vec![tag("a", Some(ago(5)), &["alive"])]);
    let result = housekeep(&clean, &BTreeMap::new(), &referents(&["alive"]), now());
    assert_eq!(result.update, None);
}

#[test]
fn a_finished_tag_goes_after_its_ttl_at_the_same_version() {
    let mut expiring = tag("a", Some(ago(600)), &["alive"]);
    expiring.pull_policy = Some(ImageTagPullPolicy {
        ttl_seconds_after_finished: Some(300),
        ..ImageTagPullPolicy::default()
    });
    expiring.version = 1;
    let mut image = node_image(vec![expiring]);
    // Finished 100 s ago at version 1: 200 s to go.
    reported(
        &mut image,
        ImageTagStatus {
            version: 1,
            ..done("a", ImagePullPhase::Succeeded, ago(100))
        },
    );
    let result = housekeep(&image, &BTreeMap::new(), &referents(&["alive"]), now());
    assert_eq!(result.update, None);
    assert_eq!(result.requeue, Some(Duration::from_secs(200)));
    // Finished 300 s ago: gone.
    reported(
        &mut image,
        ImageTagStatus {
            version: 1,
            ..done("a", ImagePullPhase::Failed, ago(300))
        },
    );
    let result = housekeep(&image, &BTreeMap::new(), &referents(&["alive"]), now());
    assert!(result.update.unwrap().1.images.is_empty());
    // A completion of an older version does not count.
    reported(
        &mut image,
        ImageTagStatus {
            version: 0,
            ..done("a", ImagePullPhase::Succeeded, ago(900))
        },
    );
    let result = housekeep(&image, &BTreeMap::new(), &referents(&["alive"]), now());
    assert_eq!(result.update, None);
}

#[test]
fn the_watchdog_fails_tags_a_node_never_answered() {
    let mut image = node_image(vec![
        tag("silent", Some(ago(601)), &[]),
        tag("recent", Some(ago(60)), &[]),
    ]);
    let (status, requeue) = watchdog(&image, now());
    let status = status.expect("a status change");
    let tags = &status.image_statuses["nginx"].tags;
    assert_eq!(tags.len(), 1);
    assert_eq!(tags[0].tag, "silent");
    assert_eq!(tags[0].phase, ImagePullPhase::Failed);
    assert_eq!(tags[0].message.as_deref(), Some(MESSAGE_NODE_SILENT));
    assert_eq!((status.desired, status.failed), (2, 1));
    assert_eq!(requeue, Some(Duration::from_mins(9)));
    // Once the node reported, the watchdog leaves it alone.
    image.status = Some(status);
    reported(&mut image, pulling("recent"));
    image.status = image.status.take().map(|s| recount(&image.spec, s));
    let (again, _) = watchdog(&image, now());
    assert_eq!(again, None);
}

#[test]
fn the_watchdog_fails_a_pull_past_its_deadline() {
    let mut slow = tag("slow", Some(ago(1_000)), &[]);
    slow.pull_policy = Some(ImageTagPullPolicy {
        active_deadline_seconds: Some(300),
        ..ImageTagPullPolicy::default()
    });
    let mut image = node_image(vec![slow]);
    reported(&mut image, pulling("slow"));
    // 300 s + 10 min grace = 900 s < 1000 s.
    let (status, _) = watchdog(&image, now());
    let tags = &status.unwrap().image_statuses["nginx"].tags;
    assert_eq!(tags[0].message.as_deref(), Some(MESSAGE_DEADLINE));
}

/// A tag created near the end of time, with a deadline or TTL that takes
/// it past the end, is watched and kept, not a panic of the controller.
#[test]
fn deadlines_and_ttls_past_the_end_of_time_never_come() {
    let near_the_end: Timestamp = "9999-12-30T21:55:00Z".parse().unwrap();
    let created = Some(Time(near_the_end));
    for seconds in [i64::MAX, 300_000_000_000, 600] {
        let mut slow = tag("slow", created.clone(), &["alive"]);
        slow.pull_policy = Some(ImageTagPullPolicy {
            active_deadline_seconds: Some(seconds),
            ttl_seconds_after_finished: Some(i32::MAX),
            ..ImageTagPullPolicy::default()
        });
        let mut image = node_image(vec![slow]);
        reported(&mut image, pulling("slow"));
        let (status, _) = watchdog(&image, near_the_end);
        let failed = status
            .iter()
            .flat_map(|s| &s.image_statuses["nginx"].tags)
            .any(|t| t.phase == ImagePullPhase::Failed);
        assert!(!failed, "{seconds}");
        reported(
            &mut image,
            done("slow", ImagePullPhase::Succeeded, Time(near_the_end)),
        );
        let result = housekeep(
            &image,
            &BTreeMap::new(),
            &referents(&["alive"]),
            near_the_end,
        );
        assert_eq!(result.update, None, "{seconds}");
    }
}

#[test]
fn recount_drops_entries_the_spec_lost_and_counts_phases() {
    let image = node_image(vec![
        tag("a", Some(ago(1)), &[]),
        tag("b", Some(ago(1)), &[]),
    ]);
    let mut status = NodeImageStatus::default();
    for (tag, phase) in [
        ("a", ImagePullPhase::Pulling),
        ("b", ImagePullPhase::Waiting),
        ("gone", ImagePullPhase::Succeeded),
    ] {
        nodeimage::set_tag_status(
            &mut status,
            "nginx",
            ImageTagStatus {
                tag: tag.to_owned(),
                phase,
                ..Default::default()
            },
        );
    }
    status.image_statuses.insert(
        "redis".to_owned(),
        ImageStatus {
            tags: vec![done("x", ImagePullPhase::Failed, ago(1))],
        },
    );
    let counted = recount(&image.spec, status);
    assert_eq!(
        (
            counted.desired,
            counted.pulling,
            counted.waiting,
            counted.succeeded,
            counted.failed
        ),
        (2, 1, 1, 0, 0)
    );
    assert_eq!(counted.image_statuses.len(), 1);
    assert_eq!(counted.image_statuses["nginx"].tags.len(), 2);
}

#[test]
fn the_puller_works_on_unfinished_tags_at_their_version() {
    let mut fresh = tag("new", Some(ago(1)), &[]);
    fresh.pull_policy = Some(ImageTagPullPolicy {
        timeout_seconds: Some(30),
        backoff_limit: Some(-1),
        active_deadline_seconds: Some(90),
        ..ImageTagPullPolicy::default()
    });
    fresh.image_pull_policy = Some(ImagePullPolicy::Always);
    let mut repull = tag("repull", Some(ago(1)), &[]);
    repull.version = 2;
    let mut image = node_image(vec![fresh, repull, tag("done", Some(ago(1)), &[])]);
    reported(&mut image, done("done", ImagePullPhase::Succeeded, ago(1)));
    reported(
        &mut image,
        ImageTagStatus {
            version: 1,
            ..done("repull", ImagePullPhase::Succeeded, ago(1))
        },
    );
    let tasks = puller::tasks(&image);
    let names: Vec<&str> = tasks.iter().map(|t| t.tag.as_str()).collect();
    assert_eq!(names, ["new", "repull"]);
    let first = &tasks[0];
    assert_eq!(first.reference(), "nginx:new");
    assert_eq!(first.limits.timeout, Duration::from_secs(30));
    assert_eq!(
        first.limits.attempts, 4,
        "a negative backoffLimit is the default 3"
    );
    assert_eq!(first.limits.deadline, Some(Duration::from_secs(90)));
    assert_eq!(first.image_pull_policy, ImagePullPolicy::Always);
    assert_eq!(tasks[1].version, 2);
    assert_eq!(tasks[1].limits.timeout, Duration::from_mins(10));
}

#[test]
fn attempts_back_off_and_respect_the_deadline() {
    assert_eq!(attempts(None), 4);
    assert_eq!(attempts(Some(0)), 1);
    assert_eq!(attempts(Some(2)), 3);
    let delays: Vec<u64> = (0..7).map(|a| retry_delay(a).as_secs()).collect();
    assert_eq!(delays, [1, 2, 4, 8, 16, 30, 30]);
    assert_eq!(retry_delay(200), Duration::from_secs(30));
    let limits = puller::Limits {
        timeout: Duration::from_secs(30),
        attempts: 2,
        deadline: Some(Duration::from_secs(40)),
    };
    assert_eq!(
        attempt_timeout(&limits, Duration::ZERO),
        Some(Duration::from_secs(30))
    );
    assert_eq!(
        attempt_timeout(&limits, Duration::from_secs(25)),
        Some(Duration::from_secs(15))
    );
    assert_eq!(attempt_timeout(&limits, Duration::from_secs(40)), None);
    let open = puller::Limits {
        deadline: None,
        ..limits
    };
    assert_eq!(
        attempt_timeout(&open, Duration::from_secs(1000)),
        Some(Duration::from_secs(30))
    );
}

#[test]
fn reports_fold_into_the_status_once() {
    let image = node_image(vec![
        tag("a", Some(ago(1)), &[]),
        tag("b", Some(ago(1)), &[]),
    ]);
    let tasks = puller::tasks(&image);
    let reports = vec![
        Report::pulling(&tasks[0], now()),
        Report::waiting(&tasks[1]),
    ];
    let status = merge(&image, &reports).expect("a change");
    assert_eq!((status.desired, status.pulling, status.waiting), (2, 1, 1));
    assert_eq!(
        status.image_statuses["nginx"].tags[0].start_time,
        Some(Time(now()))
    );
    let mut written = image.clone();
    written.status = Some(status);
    assert_eq!(
        merge(&written, &reports),
        None,
        "no write when nothing changed"
    );
    let finished = vec![
        Report::pulling(&tasks[0], now()).succeeded("sha256:abc", now()),
        Report::pulling(&tasks[1], now()).failed("not found", now()),
    ];
    let status = merge(&written, &finished).unwrap();
    let tags = &status.image_statuses["nginx"].tags;
    assert_eq!(tags[0].image_id.as_deref(), Some("nginx@sha256:abc"));
    assert_eq!(tags[0].progress, 100);
    assert_eq!(tags[1].message.as_deref(), Some("not found"));
    assert_eq!((status.succeeded, status.failed, status.pulling), (1, 1, 0));
}

#[test]
fn stale_reports_and_regressions_are_ignored() {
    let mut image = node_image(vec![ImageTagSpec {
        version: 3,
        ..tag("a", Some(ago(1)), &[])
    }]);
    let mut old_task = puller::tasks(&image).remove(0);
    old_task.version = 2;
    assert_eq!(
        merge(&image, &[Report::pulling(&old_task, now())]).map(|s| s.pulling),
        Some(0)
    );
    // The watchdog failed version 3: a late "pulling" does not undo it.
    reported(
        &mut image,
        ImageTagStatus {
            version: 3,
            ..done("a", ImagePullPhase::Failed, ago(1))
        },
    );
    let status = image.status.clone().map(|s| recount(&image.spec, s));
    image.status = status;
    let task = ImageTagStatus {
        version: 3,
        ..Default::default()
    };
    let late = Report {
        image: "nginx".to_owned(),
        status: ImageTagStatus {
            tag: "a".to_owned(),
            phase: ImagePullPhase::Pulling,
            ..task
        },
    };
    assert_eq!(merge(&image, &[late]), None);
}

fn secret(namespace: &str, name: &str, annotations: &[(&str, &str)]) -> Secret {
    let mut secret = Secret::default();
    secret.metadata.namespace = Some(namespace.to_owned());
    secret.metadata.name = Some(name.to_owned());
    if !annotations.is_empty() {
        secret.metadata.annotations = Some(
            annotations
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        );
    }
    secret.data = Some([(".dockerconfigjson".to_owned(), ByteString(b"{}".to_vec()))].into());
    secret
}

fn references(secret: &Secret) -> &str {
    secret.metadata.annotations.as_ref().unwrap()[REFERENCES_ANNOTATION].as_str()
}

#[test]
fn a_new_source_gets_a_mirror_and_an_existing_one_is_shared() {
    let sources = [secret("default", "creds", &[])];
    let mut suffix = || "a1b2c3".to_owned();
    let (writes, refs) = plan_mirrors(
        "default/job-1",
        &sources,
        &[],
        "kruise-daemon-config",
        &mut suffix,
    );
    let [MirrorWrite::Create(created)] = writes.as_slice() else {
        panic!("{writes:?}");
    };
    assert_eq!(created.metadata.name.as_deref(), Some("creds-a1b2c3"));
    assert_eq!(
        created.metadata.namespace.as_deref(),
        Some("kruise-daemon-config")
    );
    assert_eq!(created.data, sources[0].data);
    let annotations = created.metadata.annotations.as_ref().unwrap();
    assert_eq!(annotations[SOURCE_KEY_ANNOTATION], "default/creds");
    assert_eq!(annotations[secrets::MODE_ANNOTATION], "batch");
    assert_eq!(references(created), "default/job-1");
    assert_eq!(refs[0].name.as_deref(), Some("creds-a1b2c3"));
    // A second job shares the mirror: its name joins the references.
    let mirrors = [created.clone()];
    let (writes, refs) = plan_mirrors(
        "default/job-0",
        &sources,
        &mirrors,
        "kruise-daemon-config",
        &mut suffix,
    );
    let [MirrorWrite::Replace(shared)] = writes.as_slice() else {
        panic!("{writes:?}");
    };
    assert_eq!(references(shared), "default/job-0,default/job-1");
    assert_eq!(refs[0].name.as_deref(), Some("creds-a1b2c3"));
    // Nothing new: no write.
    let (writes, _) = plan_mirrors(
        "default/job-1",
        &sources,
        &mirrors,
        "kruise-daemon-config",
        &mut suffix,
    );
    assert!(writes.is_empty(), "{writes:?}");
}

#[test]
fn mirrors_follow_the_source_data_and_are_released() {
    let mirror = secret(
        "kruise-daemon-config",
        "creds-x",
        &[
            (SOURCE_KEY_ANNOTATION, "default/creds"),
            (REFERENCES_ANNOTATION, "default/a,default/b"),
        ],
    );
    let mut source = secret("default", "creds", &[]);
    source.data = Some(
        [(
            ".dockerconfigjson".to_owned(),
            ByteString(b"{\"auths\":{}}".to_vec()),
        )]
        .into(),
    );
    let mut suffix = || unreachable!("no new mirror");
    let (writes, _) = plan_mirrors(
        "default/a",
        std::slice::from_ref(&source),
        std::slice::from_ref(&mirror),
        "kruise-daemon-config",
        &mut suffix,
    );
    let [MirrorWrite::Replace(updated)] = writes.as_slice() else {
        panic!("{writes:?}");
    };
    assert_eq!(updated.data, source.data);
    // A job that no longer names the source leaves the mirror.
    let (writes, refs) = plan_mirrors(
        "default/a",
        &[],
        std::slice::from_ref(&mirror),
        "kruise-daemon-config",
        &mut suffix,
    );
    assert!(refs.is_empty());
    let [MirrorWrite::Replace(left)] = writes.as_slice() else {
        panic!("{writes:?}");
    };
    assert_eq!(references(left), "default/b");
    // The last user released: the mirror is deleted.
    assert_eq!(
        release("default/b", std::slice::from_ref(left)),
        [MirrorWrite::Delete(left.clone())]
    );
    assert!(release("default/zzz", std::slice::from_ref(&mirror)).is_empty());
}

fn docker_config(json: &str) -> BTreeMap<String, ByteString> {
    [(
        ".dockerconfigjson".to_owned(),
        ByteString(json.as_bytes().to_vec()),
    )]
    .into()
}

#[test]
fn credentials_come_from_the_matching_registry_entry() {
    // "dXNlcjpzZWNyZXQ=" is base64 of "user:secret".
    let data = docker_config(
        r#"{"auths": {"https://127.0.0.1:5000/v1/": {"auth": "dXNlcjpzZWNyZXQ="}, "other.io": {"username": "o", "password": "p"}}}"#,
    );
    let found = credentials_for(&data, "127.0.0.1:5000").unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(
        (found[0].username.as_str(), found[0].password.as_str()),
        ("user", "secret")
    );
    assert!(
        !format!("{:?}", found[0]).contains("secret"),
        "the password stays out of logs"
    );
    assert!(credentials_for(&data, "elsewhere.io").unwrap().is_empty());
    let hub = docker_config(
        r#"{"auths": {"https://index.docker.io/v1/": {"username": "u", "password": "p"}}}"#,
    );
    assert_eq!(credentials_for(&hub, "docker.io").unwrap().len(), 1);
    let legacy: BTreeMap<String, ByteString> = [(
        ".dockercfg".to_owned(),
        ByteString(br#"{"reg.io": {"username": "u", "password": "p"}}"#.to_vec()),
    )]
    .into();
    assert_eq!(credentials_for(&legacy, "reg.io").unwrap()[0].username, "u");
}

#[test]
fn unreadable_pull_secrets_say_why() {
    for (data, expected) in [
        (
            docker_config("not json"),
            ".dockerconfigjson is not a docker config",
        ),
        (
            docker_config(r#"{"auths": {"r.io": {"auth": "%%%"}}}"#),
            "not base64",
        ),
        (
            docker_config(r#"{"auths": {"r.io": {"auth": "bm9jb2xvbg=="}}}"#),
            "not user:password",
        ),
        (
            docker_config(r#"{"auths": {"r.io": {}}}"#),
            "no username/password",
        ),
        (BTreeMap::new(), "neither"),
    ] {
        let error = credentials_for(&data, "r.io").unwrap_err();
        assert!(error.contains(expected), "{error}");
    }
}
