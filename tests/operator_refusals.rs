//! What the operator refuses, against the real kube-apiserver and Kafka: a changelog that is not
//! compacted or has the wrong partition count, a changelog another job writes, a checkpoint
//! interval that does not fit the input's retention (with the numbers), an S3 prefix or a
//! changelog another cluster's job holds, a join whose topics are not co-partitioned, and an
//! unreachable broker (a condition and an error, not a crash). Nothing starts while a refusal
//! stands.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

mod operator_support;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use operator_support::{support, *};
use std::time::Duration;
use streamkeeper::api::JobPhase;

#[tokio::test]
async fn a_changelog_without_compaction_is_refused_and_nothing_starts() {
    let s = setup("op-nocompact", &[]).await;
    let ctx = context(&s.client);
    let name = "counts";
    let changelog = format!("{}.{name}.changelog", s.namespace);
    create_topic(&changelog, 3, &[("cleanup.policy", "delete")]).await;
    s.jobs
        .create(&PostParams::default(), &job(name, &s.input, &s.prefix))
        .await
        .unwrap();
    reconcile_once(&ctx, &s.jobs, name).await.unwrap();
    let job = s.jobs.get(name).await.unwrap();
    let invalid = condition(&job, "Invalid");
    assert_eq!(invalid.status, "True");
    assert_eq!(invalid.reason, "NotCompacted");
    assert!(
        invalid.message.contains("spec.kafka.changelogTopic"),
        "{}",
        invalid.message
    );
    assert!(invalid.message.contains("compact"), "{}", invalid.message);
    assert_eq!(condition(&job, "ChangelogReady").status, "False");
    assert_eq!(job.status.as_ref().unwrap().phase, Some(JobPhase::Failed));
    let sets: Api<StatefulSet> = Api::namespaced(s.client.clone(), &s.namespace);
    assert!(
        sets.get_opt(name).await.unwrap().is_none(),
        "no StatefulSet may exist"
    );
    let config_maps: Api<ConfigMap> = Api::namespaced(s.client.clone(), &s.namespace);
    assert!(
        config_maps
            .get_opt(&format!("{name}-worker-config"))
            .await
            .unwrap()
            .is_none()
    );

    // A wrong partition count is refused the same way.
    let other = "other";
    create_topic(
        &format!("{}.{other}.changelog", s.namespace),
        2,
        &[("cleanup.policy", "compact")],
    )
    .await;
    s.jobs
        .create(
            &PostParams::default(),
            &operator_support::job(other, &s.input, &s.prefix),
        )
        .await
        .unwrap();
    reconcile_once(&ctx, &s.jobs, other).await.unwrap();
    let job = s.jobs.get(other).await.unwrap();
    assert_eq!(condition(&job, "Invalid").reason, "PartitionMismatch");
    assert!(sets.get_opt(other).await.unwrap().is_none());

    delete_namespace(&s.client, &s.namespace).await;
}

#[tokio::test]
async fn a_changelog_another_job_writes_is_refused_to_the_newer_job() {
    let s = setup("op-claimed", &[]).await;
    let ctx = context(&s.client);
    let sets: Api<StatefulSet> = Api::namespaced(s.client.clone(), &s.namespace);
    let first = "first";
    s.jobs
        .create(&PostParams::default(), &job(first, &s.input, &s.prefix))
        .await
        .unwrap();
    reconcile_once(&ctx, &s.jobs, first).await.unwrap();
    let changelog = format!("{}.{first}.changelog", s.namespace);
    assert_eq!(
        condition(&s.jobs.get(first).await.unwrap(), "ChangelogReady").status,
        "True"
    );

    // A second job naming the first one's changelog: refused, and nothing of it is applied.
    let second = "second";
    let mut spec = job(second, &s.input, &s.prefix);
    spec.spec.kafka.changelog_topic = Some(changelog.clone());
    s.jobs.create(&PostParams::default(), &spec).await.unwrap();
    reconcile_once(&ctx, &s.jobs, second).await.unwrap();
    let refused = s.jobs.get(second).await.unwrap();
    let invalid = condition(&refused, "Invalid");
    assert_eq!(
        (invalid.status.as_str(), invalid.reason.as_str()),
        ("True", "ChangelogClaimed")
    );
    let owner = format!("{}/{first}", s.namespace);
    assert!(invalid.message.contains(&owner), "{}", invalid.message);
    assert!(invalid.message.contains(&changelog), "{}", invalid.message);
    assert_eq!(condition(&refused, "ChangelogReady").status, "False");
    assert!(
        sets.get_opt(second).await.unwrap().is_none(),
        "no StatefulSet for the refused job"
    );

    // The first job goes on as before: the refusal is the newer job's alone.
    reconcile_once(&ctx, &s.jobs, first).await.unwrap();
    let kept = s.jobs.get(first).await.unwrap();
    assert_eq!(condition(&kept, "ChangelogReady").status, "True");
    assert_eq!(condition(&kept, "Invalid").status, "False");

    delete_namespace(&s.client, &s.namespace).await;
}

#[tokio::test]
async fn an_interval_that_does_not_fit_the_retention_is_refused_with_the_numbers() {
    // 1 minute of input retention allows a checkpoint interval of at most 15 s; the job asks 30 s.
    let s = setup("op-retention", &[("retention.ms", "60000")]).await;
    let ctx = context(&s.client);
    let name = "counts";
    s.jobs
        .create(&PostParams::default(), &job(name, &s.input, &s.prefix))
        .await
        .unwrap();
    reconcile_once(&ctx, &s.jobs, name).await.unwrap();
    let job = s.jobs.get(name).await.unwrap();
    let safe = condition(&job, "RetentionSafe");
    assert_eq!(safe.status, "False");
    assert_eq!(safe.reason, "IntervalExceedsRetention");
    for part in [
        "checkpoint.interval 30s",
        "retention 1m",
        "/ 4 = 15s",
        "retention / 2",
    ] {
        assert!(
            safe.message.contains(part),
            "{part} missing in: {}",
            safe.message
        );
    }
    let invalid = condition(&job, "Invalid");
    assert_eq!(invalid.status, "True");
    assert!(
        invalid.message.starts_with("spec.checkpoint.interval: "),
        "{}",
        invalid.message
    );
    let sets: Api<StatefulSet> = Api::namespaced(s.client.clone(), &s.namespace);
    assert!(
        sets.get_opt(name).await.unwrap().is_none(),
        "nothing may start"
    );
    assert_eq!(job.status.as_ref().unwrap().phase, Some(JobPhase::Failed));

    // A spec that becomes valid recovers by itself.
    patch_spec(
        &s.jobs,
        name,
        serde_json::json!({"checkpoint": {"interval": "10s"}}),
    )
    .await;
    reconcile_once(&ctx, &s.jobs, name).await.unwrap();
    let job = s.jobs.get(name).await.unwrap();
    assert_eq!(condition(&job, "RetentionSafe").status, "True");
    assert_eq!(condition(&job, "Invalid").status, "False");
    assert!(sets.get_opt(name).await.unwrap().is_some());

    delete_namespace(&s.client, &s.namespace).await;
}

#[tokio::test]
async fn an_unreachable_broker_is_a_condition_and_an_error_not_a_crash() {
    let s = setup("op-nokafka", &[]).await;
    let ctx = context(&s.client);
    let name = "counts";
    let mut spec = job(name, &s.input, &s.prefix);
    spec.spec.kafka.bootstrap_servers = "127.0.0.1:1".into();
    s.jobs.create(&PostParams::default(), &spec).await.unwrap();
    let error = reconcile_once(&ctx, &s.jobs, name)
        .await
        .expect_err("Kafka is unreachable");
    assert_eq!(error.category(), "KafkaUnavailable");
    assert!(ctx.backoff("any") >= Duration::from_secs(2));
    let job = s.jobs.get(name).await.unwrap();
    let changelog = condition(&job, "ChangelogReady");
    assert_eq!(changelog.status, "Unknown");
    assert_eq!(changelog.reason, "KafkaUnavailable");
    assert!(
        changelog.message.contains("127.0.0.1:1"),
        "{}",
        changelog.message
    );

    // Pointing it at the real broker recovers without anything else.
    patch_spec(
        &s.jobs,
        name,
        serde_json::json!({"kafka": {"bootstrapServers": support::kafka_bootstrap()}}),
    )
    .await;
    reconcile_once(&ctx, &s.jobs, name).await.unwrap();
    let job = s.jobs.get(name).await.unwrap();
    assert_eq!(condition(&job, "ChangelogReady").status, "True");

    delete_namespace(&s.client, &s.namespace).await;
}

#[tokio::test]
async fn a_prefix_another_clusters_job_holds_is_refused_until_its_marker_is_gone() {
    let s = setup("op-prefix", &[]).await;
    let ctx = context(&s.client);
    let name = "counts";
    // The same namespace and job name in another cluster sharing the bucket (no cluster name).
    let job_prefix = format!("{}/{}/{name}/", s.prefix, s.namespace);
    checkpoints::put_owner_marker(&job_prefix, &s.namespace, name, Some("another-cluster")).await;
    s.jobs
        .create(&PostParams::default(), &job(name, &s.input, &s.prefix))
        .await
        .unwrap();
    reconcile_once(&ctx, &s.jobs, name).await.unwrap();
    let refused = s.jobs.get(name).await.unwrap();
    let ready = condition(&refused, "Ready");
    assert_eq!(ready.status, "False");
    assert_eq!(ready.reason, "ForeignObject");
    for part in [
        "streamkeeper-job.json",
        "another-cluster",
        "uid-of-the-other-clusters-job",
    ] {
        assert!(ready.message.contains(part), "{part}: {}", ready.message);
    }
    let sets: Api<StatefulSet> = Api::namespaced(s.client.clone(), &s.namespace);
    assert!(
        sets.get_opt(name).await.unwrap().is_none(),
        "nothing starts"
    );
    let refused = s.jobs.get(name).await.unwrap().status.unwrap();
    assert_eq!(
        refused.owner_records.and_then(|records| records.changelog),
        None,
        "a refused changelog is not recorded as held"
    );

    // The other cluster's job is gone for good and its marker deleted: this job claims the prefix.
    s3_client()
        .delete_object()
        .bucket(support::s3_settings().bucket)
        .key(format!("{job_prefix}streamkeeper-job.json"))
        .send()
        .await
        .unwrap();
    reconcile_once(&ctx, &s.jobs, name).await.unwrap();
    assert!(sets.get_opt(name).await.unwrap().is_some());
    let marker = checkpoints::owner_marker(&job_prefix).await;
    assert_eq!(marker.cluster_id.as_deref(), Some(TEST_CLUSTER_ID));
    assert_eq!(
        Some(marker.uid),
        s.jobs.get(name).await.unwrap().metadata.uid
    );

    delete_namespace(&s.client, &s.namespace).await;
}

#[tokio::test]
async fn a_changelog_another_clusters_job_claimed_is_refused_and_a_new_one_is_claimed() {
    let s = setup("op-owner", &[]).await;
    let ctx = context(&s.client);
    let sets: Api<StatefulSet> = Api::namespaced(s.client.clone(), &s.namespace);

    // A new changelog: the job's owner record is its first record.
    let first = "claims";
    s.jobs
        .create(&PostParams::default(), &job(first, &s.input, &s.prefix))
        .await
        .unwrap();
    reconcile_once(&ctx, &s.jobs, first).await.unwrap();
    let changelog = format!("{}.{first}.changelog", s.namespace);
    let (key, marker) = owner_records::first_record_as_owner(&changelog);
    assert!(
        streamkeeper_contract::owner_marker::is_changelog_owner_key(&key),
        "{key:?}"
    );
    assert_eq!(marker.cluster_id.as_deref(), Some(TEST_CLUSTER_ID));
    assert_eq!(
        (marker.namespace.as_str(), marker.name.as_str()),
        (s.namespace.as_str(), first)
    );
    let claimed = s.jobs.get(first).await.unwrap();
    assert_eq!(Some(marker.uid), claimed.metadata.uid);
    // The status records both claims, so a new leader reads neither record again.
    let recorded = claimed.status.unwrap().owner_records.unwrap();
    assert_eq!(recorded.changelog.as_deref(), Some(changelog.as_str()));
    assert!(
        recorded
            .checkpoint_marker
            .is_some_and(|key| key.ends_with(&format!("{first}/streamkeeper-job.json"))),
        "the S3 owner marker's key is recorded"
    );

    // The same namespace and job name in another cluster sharing this Kafka (not the bucket)
    // created and claimed the changelog first.
    let name = "counts";
    let theirs = format!("{}.{name}.changelog", s.namespace);
    create_topic(&theirs, 3, &[("cleanup.policy", "compact")]).await;
    owner_records::write_foreign_owner_record(&theirs, &s.namespace, name, "another-cluster");
    s.jobs
        .create(&PostParams::default(), &job(name, &s.input, &s.prefix))
        .await
        .unwrap();
    reconcile_once(&ctx, &s.jobs, name).await.unwrap();
    let ready = condition(&s.jobs.get(name).await.unwrap(), "Ready").clone();
    assert_eq!(ready.status, "False");
    assert_eq!(ready.reason, "ForeignObject");
    for part in ["changelog owner record", theirs.as_str(), "another-cluster"] {
        assert!(ready.message.contains(part), "{part}: {}", ready.message);
    }
    assert!(
        sets.get_opt(name).await.unwrap().is_none(),
        "nothing starts"
    );
    let refused = s.jobs.get(name).await.unwrap().status.unwrap();
    assert_eq!(
        refused.owner_records.and_then(|records| records.changelog),
        None,
        "a refused changelog is not recorded as held"
    );

    delete_namespace(&s.client, &s.namespace).await;
}

#[tokio::test]
async fn a_join_whose_topics_are_not_co_partitioned_is_refused_until_they_are() {
    let s = setup("op-copart", &[]).await;
    let ctx = context(&s.client);
    let sets: Api<StatefulSet> = Api::namespaced(s.client.clone(), &s.namespace);
    let cards = support::unique_name("op-copart-cards");
    create_topic(&cards, 2, &[]).await;
    let name = "enrich";
    let join = serde_json::json!({
        "kind": "table",
        "mode": "left",
        "right": {"topic": cards, "timeField": "ts"},
        "history": "24h",
    });
    let joined = join_job(name, &s.input, &s.prefix, "card", join);
    s.jobs
        .create(&PostParams::default(), &joined)
        .await
        .unwrap();
    reconcile_once(&ctx, &s.jobs, name).await.unwrap();
    let job = s.jobs.get(name).await.unwrap();
    let invalid = condition(&job, "Invalid");
    assert_eq!(
        (invalid.status.as_str(), invalid.reason.as_str()),
        ("True", "NotCoPartitioned")
    );
    for part in [
        format!("{} has 3 partitions", s.input),
        format!("{cards} has 2"),
    ] {
        assert!(
            invalid.message.contains(&part),
            "{part}: {}",
            invalid.message
        );
    }
    assert_eq!(condition(&job, "Ready").status, "False");
    assert!(sets.get_opt(name).await.unwrap().is_none(), "no pod starts");

    // The right topic gets its third partition: no change of the spec, and the job starts.
    let added = admin()
        .create_partitions(
            [&rdkafka::admin::NewPartitions::new(&cards, 3)],
            &rdkafka::admin::AdminOptions::new(),
        )
        .await
        .unwrap();
    assert!(added.iter().all(Result::is_ok), "{added:?}");
    support::wait_for(
        "the broker to report 3 partitions",
        Duration::from_secs(30),
        || {
            admin()
                .inner()
                .fetch_metadata(Some(&cards), Duration::from_secs(5))
                .ok()
                .and_then(|metadata| Some(metadata.topics().first()?.partitions().len()))
                == Some(3)
        },
    );
    reconcile_once(&ctx, &s.jobs, name).await.unwrap();
    let job = s.jobs.get(name).await.unwrap();
    assert_eq!(condition(&job, "Invalid").status, "False");
    assert!(sets.get_opt(name).await.unwrap().is_some(), "it starts");

    delete_namespace(&s.client, &s.namespace).await;
}
