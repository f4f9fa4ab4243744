//! The ImagePullJob controller's decisions, after OpenKruise's
//! `imagepulljob_controller_test.go` (TestReconcileImagePullJob_calculateStatus,
//! ..._CompletionPolicy, TestSyncNodeImages) and `imagepulljob_utils_test.go`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kruise_api::imagepulljob::{CompletionPolicyType, ImagePullJob};
use kruise_api::nodeimage::{
    ImagePullPhase, ImageSpec, ImageStatus, ImageTagSpec, ImageTagStatus, NodeImage,
    NodeImageStatus, ReferenceObject,
};
use kruise_core::imagepull::job::{
    Finished, MESSAGE_COMPLETED, MESSAGE_DEADLINE, MESSAGE_NO_PROGRESS, SpecError, TargetState,
    classify, finished, job_image, parallelism, plan, release_tags, sync_node_image,
    tag_pull_policy,
};

fn now() -> Timestamp {
    "2026-01-01T00:10:00Z".parse().unwrap()
}

fn job(yaml_spec: &str) -> ImagePullJob {
    let text = format!(
        "apiVersion: apps.kruise.io/v1alpha1\nkind: ImagePullJob\nmetadata: {{name: pull, namespace: default, uid: job-uid}}\nspec:\n{yaml_spec}"
    );
    serde_yaml::from_str(&text).unwrap()
}

fn always_job() -> ImagePullJob {
    job("  image: nginx:1.25\n  parallelism: 2\n  completionPolicy: {type: Always}\n")
}

fn node(name: &str) -> NodeImage {
    let mut node = NodeImage::default();
    node.metadata.name = Some(name.to_owned());
    node
}

fn owner(uid: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some("apps.kruise.io/v1beta1".to_owned()),
        kind: Some("ImagePullJob".to_owned()),
        uid: Some(uid.to_owned()),
        ..ObjectReference::default()
    }
}

/// A node carrying `nginx:1.25` at `version`, owned by `owners`, with a
/// reported phase at `reported_version`.
fn node_with(
    name: &str,
    version: i64,
    owners: &[&str],
    reported: Option<(ImagePullPhase, i64)>,
) -> NodeImage {
    let mut node = node(name);
    node.spec.images.insert(
        "nginx".to_owned(),
        ImageSpec {
            tags: vec![ImageTagSpec {
                tag: "1.25".to_owned(),
                version,
                created_at: Some(Time(now())),
                owner_references: owners.iter().map(|o| owner(o)).collect(),
                ..ImageTagSpec::default()
            }],
            ..ImageSpec::default()
        },
    );
    if let Some((phase, version)) = reported {
        node.status = Some(NodeImageStatus {
            image_statuses: [(
                "nginx".to_owned(),
                ImageStatus {
                    tags: vec![ImageTagStatus {
                        tag: "1.25".to_owned(),
                        phase,
                        version,
                        ..ImageTagStatus::default()
                    }],
                },
            )]
            .into(),
            ..NodeImageStatus::default()
        });
    }
    node
}

#[test]
fn targets_are_classified_by_owner_version_and_phase() {
    let image = job_image(&always_job()).unwrap();
    let cases = [
        (node("empty"), TargetState::NotSynced),
        (
            node_with("other-owner", 0, &["other"], None),
            TargetState::NotSynced,
        ),
        (
            node_with("unreported", 0, &["job-uid"], None),
            TargetState::Active,
        ),
        (
            node_with(
                "pulling",
                0,
                &["job-uid"],
                Some((ImagePullPhase::Pulling, 0)),
            ),
            TargetState::Active,
        ),
        (
            node_with(
                "old-round",
                1,
                &["job-uid"],
                Some((ImagePullPhase::Succeeded, 0)),
            ),
            TargetState::Active,
        ),
        (
            node_with(
                "done",
                1,
                &["job-uid"],
                Some((ImagePullPhase::Succeeded, 1)),
            ),
            TargetState::Succeeded,
        ),
        (
            node_with(
                "failed",
                0,
                &["other", "job-uid"],
                Some((ImagePullPhase::Failed, 0)),
            ),
            TargetState::Failed,
        ),
    ];
    for (node, expected) in cases {
        let name = node.metadata.name.clone().unwrap();
        assert_eq!(classify(&node, &image, "job-uid", &[]), expected, "{name}");
    }
}

#[test]
fn a_missing_mirrored_secret_means_not_synced() {
    let image = job_image(&always_job()).unwrap();
    let node = node_with("n", 0, &["job-uid"], Some((ImagePullPhase::Succeeded, 0)));
    let secret = ReferenceObject {
        namespace: Some("kruise-daemon-config".to_owned()),
        name: Some("creds-abc123".to_owned()),
    };
    let secrets = std::slice::from_ref(&secret);
    assert_eq!(
        classify(&node, &image, "job-uid", secrets),
        TargetState::NotSynced
    );
    let mut with_secret = node;
    with_secret
        .spec
        .images
        .get_mut("nginx")
        .unwrap()
        .pull_secrets = vec![secret.clone()];
    assert_eq!(
        classify(&with_secret, &image, "job-uid", secrets),
        TargetState::Succeeded
    );
}

#[test]
fn status_counts_and_message_mid_way() {
    // Five targets: one succeeded, two active, two not synced yet.
    let targets = [
        node_with("a", 0, &["job-uid"], Some((ImagePullPhase::Succeeded, 0))),
        node_with("b", 0, &["job-uid"], Some((ImagePullPhase::Pulling, 0))),
        node_with("c", 0, &["job-uid"], None),
        node("d"),
        node("e"),
    ];
    let plan = plan(&always_job(), &targets, &[], now()).unwrap();
    let status = &plan.status;
    assert_eq!(
        (
            status.desired,
            status.active,
            status.succeeded,
            status.failed
        ),
        (5, 2, 1, 0)
    );
    assert_eq!(
        status.message.as_deref(),
        Some("job is running, progress 20.0%")
    );
    assert_eq!(status.start_time, Some(Time(now())));
    assert_eq!(status.completion_time, None);
    // Parallelism 2, two active: no slot free.
    assert!(plan.sync.is_empty());
}

#[test]
fn parallelism_fills_free_slots_in_target_order() {
    let targets = [
        node_with("a", 0, &["job-uid"], Some((ImagePullPhase::Succeeded, 0))),
        node_with("b", 0, &["job-uid"], Some((ImagePullPhase::Pulling, 0))),
        node("c"),
        node("d"),
        node("e"),
    ];
    // One active of two: one slot, the first not-synced target.
    assert_eq!(plan(&always_job(), &targets, &[], now()).unwrap().sync, [2]);
    let mut wide = always_job();
    wide.spec.parallelism = Some(IntOrString::String("10".to_owned()));
    assert_eq!(plan(&wide, &targets, &[], now()).unwrap().sync, [2, 3, 4]);
    let mut paused = always_job();
    paused.spec.parallelism = Some(IntOrString::Int(0));
    assert!(plan(&paused, &targets, &[], now()).unwrap().sync.is_empty());
    let mut default = always_job();
    default.spec.parallelism = None;
    assert!(
        plan(&default, &targets, &[], now())
            .unwrap()
            .sync
            .is_empty(),
        "one node at a time by default, and one is active"
    );
}

#[test]
fn bad_parallelism_and_images_are_spec_errors() {
    for bad in [IntOrString::Int(-1), IntOrString::String("50%".to_owned())] {
        let mut job = always_job();
        job.spec.parallelism = Some(bad);
        assert!(matches!(parallelism(&job), Err(SpecError::Parallelism(_))));
        assert!(plan(&job, &[], &[], now()).is_err());
    }
    let mut job = always_job();
    job.spec.image = "Not An Image".to_owned();
    let error = plan(&job, &[], &[], now()).unwrap_err();
    assert!(error.to_string().contains("Not An Image"), "{error}");
}

#[test]
fn an_always_job_completes_when_every_target_finished() {
    let targets = [
        node_with("a", 0, &["job-uid"], Some((ImagePullPhase::Succeeded, 0))),
        node_with("b", 0, &["job-uid"], Some((ImagePullPhase::Failed, 0))),
    ];
    let status = plan(&always_job(), &targets, &[], now()).unwrap().status;
    assert_eq!(status.completion_time, Some(Time(now())));
    assert_eq!(status.message.as_deref(), Some(MESSAGE_COMPLETED));
    assert_eq!(status.failed_nodes, ["b"]);
    // No targets at all: complete at once.
    let empty = plan(&always_job(), &[], &[], now()).unwrap().status;
    assert_eq!(empty.completion_time, Some(Time(now())));
    assert_eq!(empty.desired, 0);
}

#[test]
fn a_never_job_never_completes() {
    let never = job("  image: nginx:1.25\n  completionPolicy: {type: Never}\n");
    let targets = [node_with(
        "a",
        0,
        &["job-uid"],
        Some((ImagePullPhase::Succeeded, 0)),
    )];
    let status = plan(&never, &targets, &[], now()).unwrap().status;
    assert_eq!(status.completion_time, None);
    assert_eq!(
        status.message.as_deref(),
        Some("job is running, progress 100.0%")
    );
    let empty = plan(&never, &[], &[], now()).unwrap().status;
    assert_eq!(empty.message.as_deref(), Some(MESSAGE_NO_PROGRESS));
}

#[test]
fn the_deadline_fails_whatever_has_not_succeeded() {
    let mut job = job(
        "  image: nginx:1.25\n  completionPolicy: {type: Always, activeDeadlineSeconds: 600}\n",
    );
    let started = now() - SignedDuration::from_secs(300);
    job.status = Some(kruise_api::imagepulljob::ImagePullJobStatus {
        start_time: Some(Time(started)),
        ..Default::default()
    });
    let targets = [
        node_with("a", 0, &["job-uid"], Some((ImagePullPhase::Succeeded, 0))),
        node_with("b", 0, &["job-uid"], Some((ImagePullPhase::Pulling, 0))),
        node("c"),
    ];
    let before = plan(&job, &targets, &[], now()).unwrap();
    assert_eq!(before.status.completion_time, None);
    assert_eq!(before.requeue, Some(std::time::Duration::from_mins(5)));
    let late = now() + SignedDuration::from_secs(301);
    let after = plan(&job, &targets, &[], late).unwrap();
    assert_eq!(after.status.message.as_deref(), Some(MESSAGE_DEADLINE));
    assert_eq!(after.status.completion_time, Some(Time(late)));
    assert_eq!(
        (
            after.status.succeeded,
            after.status.failed,
            after.status.active
        ),
        (1, 2, 0)
    );
    assert_eq!(after.status.failed_nodes, ["b", "c"]);
    assert!(
        after.sync.is_empty(),
        "no NodeImage writes after the deadline"
    );
    // A Never job has no deadline.
    job.spec.completion_policy.type_ = Some(CompletionPolicyType::Never);
    assert_eq!(
        plan(&job, &targets, &[], late)
            .unwrap()
            .status
            .completion_time,
        None
    );
}

#[test]
fn a_new_tag_entry_starts_one_past_the_last_reported_version() {
    let job = always_job();
    let mut target = node("a");
    target.status = node_with("x", 4, &[], Some((ImagePullPhase::Succeeded, 4))).status;
    let policy = tag_pull_policy(&job, 0, 0);
    let changed = sync_node_image(
        &mut target.spec,
        target.status.as_ref(),
        &job,
        &[],
        now(),
        policy,
    )
    .unwrap();
    assert!(changed);
    let tag = &target.spec.images["nginx"].tags[0];
    assert_eq!(tag.tag, "1.25");
    assert_eq!(tag.version, 5);
    assert_eq!(tag.owner_references[0].uid.as_deref(), Some("job-uid"));
    assert_eq!(tag.owner_references[0].name.as_deref(), Some("pull"));
    assert_eq!(tag.created_at, Some(Time(now())));
    // Synced: a second write changes nothing.
    let again = target.spec.clone();
    let policy = tag_pull_policy(&job, 0, 0);
    assert!(!sync_node_image(&mut target.spec, None, &job, &[], now(), policy).unwrap());
    assert_eq!(target.spec, again);
}

#[test]
fn a_second_job_on_the_same_tag_starts_a_new_round() {
    let job = always_job();
    let mut target = node_with("a", 2, &["first-job"], Some((ImagePullPhase::Succeeded, 2)));
    let later = now() + SignedDuration::from_secs(60);
    let policy = tag_pull_policy(&job, 0, 0);
    assert!(sync_node_image(&mut target.spec, None, &job, &[], later, policy).unwrap());
    let tag = &target.spec.images["nginx"].tags[0];
    assert_eq!(tag.version, 3);
    assert_eq!(tag.owner_references.len(), 2);
    assert_eq!(tag.created_at, Some(Time(later)));
}

/// A tag the job already lists is left as it is (OpenKruise's
/// `syncNodeImages` skips it): a later edit of the job's pull policy, or a
/// second job that joined the tag with settings of its own, starts no
/// write, so two jobs on one tag never undo each other's.
#[test]
fn a_tag_the_job_already_lists_is_left_as_it_is() {
    let mut job = always_job();
    let mut other = always_job();
    other.metadata.uid = Some("other-uid".to_owned());
    other.spec.image_pull_policy = Some(kruise_api::nodeimage::ImagePullPolicy::Always);
    other.spec.pull_policy = Some(kruise_api::imagepulljob::PullPolicy {
        timeout_seconds: Some(30),
        backoff_limit: Some(1),
    });
    let mut target = node("a");
    let policy = tag_pull_policy(&job, 0, 0);
    assert!(sync_node_image(&mut target.spec, None, &job, &[], now(), policy.clone()).unwrap());
    assert!(sync_node_image(&mut target.spec, None, &other, &[], now(), policy.clone()).unwrap());
    let joined = target.spec.clone();
    assert_eq!(joined.images["nginx"].tags[0].owner_references.len(), 2);
    job.spec.pull_policy = Some(kruise_api::imagepulljob::PullPolicy {
        timeout_seconds: Some(60),
        backoff_limit: Some(2),
    });
    for each in [&job, &other] {
        let planned = plan(each, std::slice::from_ref(&target), &[], now()).unwrap();
        assert_eq!(planned.sync, Vec::<usize>::new());
        assert_eq!(planned.status.active, 1);
        assert!(
            !sync_node_image(&mut target.spec, None, each, &[], now(), policy.clone()).unwrap()
        );
    }
    assert_eq!(target.spec, joined);
}

#[test]
fn secrets_and_sandbox_config_are_written_with_the_tag() {
    let mut job = always_job();
    job.spec.sandbox_config = Some(kruise_api::nodeimage::SandboxConfig {
        labels: [("team".to_owned(), "web".to_owned())].into(),
        ..Default::default()
    });
    let secret = ReferenceObject {
        namespace: Some("kruise-daemon-config".to_owned()),
        name: Some("creds-abc123".to_owned()),
    };
    let mut target = node("a");
    let policy = tag_pull_policy(&job, 0, 0);
    sync_node_image(
        &mut target.spec,
        None,
        &job,
        std::slice::from_ref(&secret),
        now(),
        policy,
    )
    .unwrap();
    let image = &target.spec.images["nginx"];
    assert_eq!(image.pull_secrets, [secret]);
    assert_eq!(image.sandbox_config, job.spec.sandbox_config);
}

#[test]
fn tag_ttls_follow_the_completion_policy() {
    // Always: the job's TTL, else its deadline, else timeout × retries,
    // plus the operator's extra and a spread below 300 s.
    let with_ttl = job(
        "  image: a\n  completionPolicy: {type: Always, ttlSecondsAfterFinished: 300, activeDeadlineSeconds: 1200}\n  pullPolicy: {timeoutSeconds: 100, backoffLimit: 2}\n",
    );
    let policy = tag_pull_policy(&with_ttl, 299, 0);
    assert_eq!(policy.ttl_seconds_after_finished, Some(599));
    assert_eq!(policy.active_deadline_seconds, Some(1200));
    assert_eq!(
        (policy.timeout_seconds, policy.backoff_limit),
        (Some(100), Some(2))
    );
    let deadline_only =
        job("  image: a\n  completionPolicy: {type: Always, activeDeadlineSeconds: 1200}\n");
    assert_eq!(
        tag_pull_policy(&deadline_only, 0, 60).ttl_seconds_after_finished,
        Some(1260)
    );
    let bare = job(
        "  image: a\n  completionPolicy: {}\n  pullPolicy: {timeoutSeconds: 100, backoffLimit: 2}\n",
    );
    assert_eq!(
        tag_pull_policy(&bare, 0, 0).ttl_seconds_after_finished,
        Some(200)
    );
    // The extra is capped at 31 days.
    assert_eq!(
        tag_pull_policy(&bare, 0, i32::MAX).ttl_seconds_after_finished,
        Some(200 + 31 * 86_400)
    );
    // Never: a day ± 10 minutes, and a deadline of at least 30 minutes
    // (TestGetActiveDeadlineSecondsForNever).
    let never =
        job("  image: a\n  completionPolicy: {type: Never}\n  pullPolicy: {timeoutSeconds: 100}\n");
    for random in [0, 599, 1_199, u64::MAX] {
        let ttl = tag_pull_policy(&never, random, 0)
            .ttl_seconds_after_finished
            .unwrap();
        assert!((86_400 - 600..86_400 + 600).contains(&ttl), "{ttl}");
    }
    assert_eq!(
        tag_pull_policy(&never, 0, 0).active_deadline_seconds,
        Some(1_800)
    );
    let slow = job(
        "  image: a\n  completionPolicy: {type: Never}\n  pullPolicy: {timeoutSeconds: 4000}\n",
    );
    assert_eq!(
        tag_pull_policy(&slow, 0, 0).active_deadline_seconds,
        Some(4_000)
    );
}

#[test]
fn releasing_drops_the_job_and_tags_left_unowned() {
    let mut shared = node_with("a", 0, &["job-uid", "other"], None).spec;
    shared.images.insert(
        "redis".to_owned(),
        node_with("b", 0, &["job-uid"], None).spec.images["nginx"].clone(),
    );
    let keep = job_image(&always_job()).unwrap();
    // Keeping nginx:1.25 (the job's image), redis goes.
    let mut spec = shared.clone();
    assert!(release_tags(&mut spec, "job-uid", Some(&keep)));
    assert!(!spec.images.contains_key("redis"));
    assert_eq!(spec.images["nginx"].tags[0].owner_references.len(), 2);
    // The job deleted: it leaves nginx, which another job still owns.
    let mut spec = shared;
    assert!(release_tags(&mut spec, "job-uid", None));
    assert_eq!(spec.images.len(), 1);
    assert_eq!(spec.images["nginx"].tags[0].owner_references.len(), 1);
    assert!(!release_tags(&mut spec, "job-uid", None));
}

#[test]
fn a_finished_job_is_deleted_after_its_ttl() {
    let mut job =
        job("  image: a\n  completionPolicy: {type: Always, ttlSecondsAfterFinished: 60}\n");
    assert_eq!(finished(&job, now()), Finished::Running);
    job.status = Some(kruise_api::imagepulljob::ImagePullJobStatus {
        completion_time: Some(Time(now())),
        ..Default::default()
    });
    assert_eq!(
        finished(&job, now() + SignedDuration::from_secs(20)),
        Finished::Keep(Some(std::time::Duration::from_secs(40)))
    );
    assert_eq!(
        finished(&job, now() + SignedDuration::from_secs(60)),
        Finished::Delete
    );
    job.spec.completion_policy.ttl_seconds_after_finished = None;
    assert_eq!(finished(&job, now()), Finished::Keep(None));
}

/// Deadlines and TTLs past the end of time (any int64 a user may write,
/// from a time near its end) never come; they are not a panic that would
/// stop the manager on every start.
#[test]
fn deadlines_and_ttls_past_the_end_of_time_never_come() {
    let near_the_end: Timestamp = "9999-12-01T00:00:00Z".parse().unwrap();
    for seconds in [i64::MAX, i64::MAX / 2, 300_000_000_000] {
        let mut job = job(&format!(
            "  image: nginx:1.25\n  completionPolicy: {{type: Always, activeDeadlineSeconds: {seconds}}}\n"
        ));
        job.status = Some(kruise_api::imagepulljob::ImagePullJobStatus {
            start_time: Some(Time(near_the_end)),
            ..Default::default()
        });
        let targets = [node_with(
            "b",
            0,
            &["job-uid"],
            Some((ImagePullPhase::Pulling, 0)),
        )];
        let planned = plan(&job, &targets, &[], near_the_end).unwrap();
        assert_eq!(planned.status.completion_time, None, "{seconds}");
        assert!(planned.requeue.is_some(), "{seconds}");
    }
    let mut job = job(&format!(
        "  image: a\n  completionPolicy: {{type: Always, ttlSecondsAfterFinished: {}}}\n",
        i32::MAX
    ));
    job.status = Some(kruise_api::imagepulljob::ImagePullJobStatus {
        completion_time: Some(Time(near_the_end)),
        ..Default::default()
    });
    assert!(matches!(
        finished(&job, near_the_end),
        Finished::Keep(Some(_))
    ));
}

fn labelled(name: &str, pool: &str) -> NodeImage {
    let mut node = node(name);
    node.metadata.labels = Some([("pool".to_owned(), pool.to_owned())].into());
    node
}

fn pod(name: &str, node: Option<&str>, phase: &str) -> k8s_openapi::api::core::v1::Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "labels": {"app": "web"}},
        "spec": {"containers": [], "nodeName": node},
        "status": {"phase": phase},
    }))
    .unwrap()
}

#[test]
fn targets_by_names_labels_pods_or_all() {
    use kruise_core::imagepull::job::select_targets;
    // TestAll of OpenKruise's imagejob_reader_test.go, in short.
    let nodes = [
        labelled("c", "web"),
        labelled("a", "db"),
        labelled("b", "web"),
    ];
    let all = job("  image: a\n  completionPolicy: {}\n");
    assert_eq!(select_targets(&all, &nodes, &[]).unwrap(), [1, 2, 0]);
    let named =
        job("  image: a\n  completionPolicy: {}\n  selector: {names: [c, missing, a, c]}\n");
    assert_eq!(select_targets(&named, &nodes, &[]).unwrap(), [0, 1]);
    let none = job("  image: a\n  completionPolicy: {}\n  selector: {names: []}\n");
    assert!(select_targets(&none, &nodes, &[]).unwrap().is_empty());
    let web = job("  image: a\n  completionPolicy: {}\n  selector: {matchLabels: {pool: web}}\n");
    assert_eq!(select_targets(&web, &nodes, &[]).unwrap(), [2, 0]);
    let by_pods =
        job("  image: a\n  completionPolicy: {}\n  podSelector: {matchLabels: {app: web}}\n");
    let pods = [
        pod("p3", Some("c"), "Running"),
        pod("p1", Some("c"), "Running"),
        pod("p2", None, "Pending"),
        pod("p4", Some("a"), "Succeeded"),
        pod("p5", Some("b"), "Pending"),
        pod("p6", Some("gone"), "Running"),
    ];
    let pods: Vec<&k8s_openapi::api::core::v1::Pod> = pods.iter().collect();
    assert_eq!(select_targets(&by_pods, &nodes, &pods).unwrap(), [0, 2]);
    let bad = job(
        "  image: a\n  completionPolicy: {}\n  selector: {matchExpressions: [{key: pool, operator: Maybe}]}\n",
    );
    assert!(select_targets(&bad, &nodes, &[]).is_err());
}
