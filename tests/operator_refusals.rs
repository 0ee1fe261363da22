//! What the operator refuses, against the real kube-apiserver and Kafka: a changelog that is not
//! compacted or has the wrong partition count, a checkpoint interval that does not fit the input's
//! retention (with the numbers), and an unreachable broker (a condition and an error, not a
//! crash). Nothing starts while a refusal stands.
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
