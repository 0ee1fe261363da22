//! The checkpoint facts in a job's status (each task's checkpoint, `CheckpointStale`,
//! `RecoveryGap`), read by an in-process reconcile from manifests written to the real S3 server
//! and from offsets on the real broker. No workers run: the manifests are written as a worker
//! would write them.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

mod operator_support;

use kube::api::PostParams;
use operator_support::checkpoints::{manifest, now_ms, put_manifest};
use operator_support::{support, *};
use rdkafka::TopicPartitionList;
use rdkafka::admin::AdminOptions;
use rdkafka::config::ClientConfig;
use rdkafka::producer::{FutureProducer, FutureRecord};
use streamkeeper::api::{StatefulStreamJob, TaskCheckpoint};

/// Sends `count` keyed records to `partition` of `topic`.
async fn produce(topic: &str, partition: i32, count: usize) {
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", support::kafka_bootstrap())
        .create()
        .unwrap();
    for i in 0..count {
        producer
            .send(
                FutureRecord::<str, str>::to(topic)
                    .partition(partition)
                    .key(&format!("k{i}"))
                    .payload(&format!("{i}")),
                TIMEOUT,
            )
            .await
            .expect("produced");
    }
}

/// Moves the log start of `partition` of `topic` to `offset`.
async fn delete_records_before(topic: &str, partition: i32, offset: i64) {
    let mut before = TopicPartitionList::new();
    before
        .add_partition_offset(topic, partition, rdkafka::Offset::Offset(offset))
        .unwrap();
    admin()
        .delete_records(
            &before,
            &AdminOptions::new().operation_timeout(Some(TIMEOUT)),
        )
        .await
        .expect("records deleted");
}

fn checkpoint_of(job: &StatefulStreamJob, task: usize) -> TaskCheckpoint {
    let status = job.status.as_ref().expect("status written");
    status.tasks[task]
        .last_checkpoint
        .clone()
        .unwrap_or_else(|| panic!("task {task} shows no checkpoint: {:#?}", status.tasks))
}

#[tokio::test]
async fn checkpoint_age_and_recovery_gap_come_from_s3_and_the_log_start() {
    // Retention 4 h: max safe checkpoint age 2 h.
    let s = setup("op-ckpt", &[("retention.ms", "14400000")]).await;
    let ctx = context(&s.client);
    let name = "counts";
    // Task 0: fresh, and its input is still there. Task 1: 3 h old. Task 2: resumes at offset 2
    // but the partition's log now starts at 5.
    let now = now_ms();
    for (task, created_at_ms, input_offset) in [
        (0, now - 60_000, 0),
        (1, now - 3 * 3_600_000, 0),
        (2, now - 60_000, 2),
    ] {
        let manifest = manifest(task, 1, 0, created_at_ms, input_offset);
        put_manifest(&s.prefix, &s.namespace, name, &manifest).await;
    }
    produce(&s.input, 2, 10).await;
    delete_records_before(&s.input, 2, 5).await;

    s.jobs
        .create(&PostParams::default(), &job(name, &s.input, &s.prefix))
        .await
        .unwrap();
    reconcile_once(&ctx, &s.jobs, name).await.unwrap();
    let job = s.jobs.get(name).await.unwrap();
    let stale = condition(&job, "CheckpointStale");
    assert_eq!(stale.status, "True");
    assert_eq!(stale.reason, "CheckpointTooOld");
    assert!(stale.message.contains("task 1"), "{}", stale.message);
    assert!(!stale.message.contains("task 0"), "{}", stale.message);
    let gap = condition(&job, "RecoveryGap");
    assert_eq!(gap.status, "True");
    assert_eq!(gap.reason, "InputTruncated");
    assert!(
        gap.message.contains("task 2") && gap.message.contains("starts at 5"),
        "{}",
        gap.message
    );
    assert_eq!(job.status.as_ref().unwrap().tasks.len(), 3);
    assert_eq!(checkpoint_of(&job, 2).input_offset, 2);
    // Status times have whole seconds.
    assert_eq!(
        job.status
            .unwrap()
            .newest_checkpoint_time
            .unwrap()
            .0
            .as_second(),
        i64::try_from((now - 3 * 3_600_000) / 1000).unwrap()
    );

    delete_namespace(&s.client, &s.namespace).await;
}

#[tokio::test]
async fn the_status_shows_the_checkpoint_a_restore_would_use() {
    let s = setup("op-best", &[]).await;
    let ctx = context(&s.client);
    let name = "counts";
    // The changelog is made here, not by the operator, so that its log start can be moved:
    // the broker refuses DeleteRecords on a topic that is only compacted. `compact,delete` with
    // unlimited time keeps every key, which the operator accepts.
    let changelog = format!("{}.{name}.changelog", s.namespace);
    create_topic(
        &changelog,
        3,
        &[("cleanup.policy", "compact,delete"), ("retention.ms", "-1")],
    )
    .await;
    // Changelog partition 0 holds [5, 10], partition 1 holds [0, 10], partition 2 is empty.
    produce(&changelog, 0, 10).await;
    produce(&changelog, 1, 10).await;
    delete_records_before(&changelog, 0, 5).await;
    let now = now_ms();
    // Task 0: the only usable checkpoint is older than the 4 newest, which all start below the
    // changelog's log start (a delta replay cannot start there).
    let mut written = vec![manifest(0, 1, 7, now, 0)];
    written.extend((2..=5).map(|sequence| manifest(0, sequence, 2, now, 0)));
    // Task 1: the checkpoint with the highest changelog offset lies past the changelog's end.
    written.push(manifest(1, 1, 12, now, 0));
    written.push(manifest(1, 2, 6, now, 0));
    // Task 2: one checkpoint at the end of the empty partition.
    written.push(manifest(2, 1, 0, now, 0));
    for manifest in &written {
        put_manifest(&s.prefix, &s.namespace, name, manifest).await;
    }

    s.jobs
        .create(&PostParams::default(), &job(name, &s.input, &s.prefix))
        .await
        .unwrap();
    reconcile_once(&ctx, &s.jobs, name).await.unwrap();
    let job = s.jobs.get(name).await.unwrap();
    let shown: Vec<(i64, i64)> = (0..3)
        .map(|task| {
            let checkpoint = checkpoint_of(&job, task);
            (checkpoint.sequence, checkpoint.changelog_offset)
        })
        .collect();
    assert_eq!(shown, vec![(1, 7), (2, 6), (1, 0)]);

    delete_namespace(&s.client, &s.namespace).await;
}

/// The operator's S3 requests of `operation` so far, from its metrics.
fn s3_requests(ctx: &streamkeeper::controller::Context, operation: &str) -> u64 {
    let sample = format!("streamkeeper_operator_s3_requests_total{{operation=\"{operation}\"}} ");
    ctx.metrics
        .encode()
        .lines()
        .find_map(|line| line.strip_prefix(&sample)?.trim().parse().ok())
        .unwrap_or(0)
}

#[tokio::test]
async fn a_refresh_reads_only_the_manifests_it_has_not_seen_and_drops_the_deleted() {
    let s = setup("op-kept", &[]).await;
    let ctx = context(&s.client);
    let name = "counts";
    let now = now_ms();
    // Task 0 holds two checkpoints at the end of its empty changelog partition, the newer of
    // 100 bytes in one file.
    put_manifest(&s.prefix, &s.namespace, name, &manifest(0, 1, 0, now, 0)).await;
    let mut sized = manifest(0, 2, 0, now, 0);
    sized.files.push(streamkeeper_contract::CheckpointFile {
        name: "000007.sst".into(),
        object_key: format!("{}/objects/{}", s.prefix, "ab".repeat(32)),
        size: 100,
        sha256: "ab".repeat(32),
    });
    put_manifest(&s.prefix, &s.namespace, name, &sized).await;
    s.jobs
        .create(&PostParams::default(), &job(name, &s.input, &s.prefix))
        .await
        .unwrap();
    let refresh = async || {
        reconcile_once(&ctx, &s.jobs, name).await.unwrap();
        let job = s.jobs.get(name).await.unwrap();
        let gets = s3_requests(&ctx, "GetObject");
        (
            checkpoint_of(&job, 0).sequence,
            gets,
            s3_requests(&ctx, "ListObjectsV2"),
        )
    };
    let (shown, gets, lists) = refresh().await;
    assert_eq!(shown, 2);
    assert!(
        gets >= 2,
        "the first refresh reads both manifests ({gets} reads)"
    );

    // Nothing new: listed again (retention may have deleted some), none read again, and the
    // status shows the kept manifest as read (its size is its file list's).
    let (shown, gets_again, lists_again) = refresh().await;
    assert_eq!(
        (shown, gets_again),
        (2, gets),
        "a kept manifest was read again"
    );
    assert!(
        lists_again > lists,
        "a refresh lists the manifests every time"
    );
    let job = s.jobs.get(name).await.unwrap();
    assert_eq!(checkpoint_of(&job, 0).bytes, 100);

    // A new checkpoint is read, and only it.
    let key = put_manifest(&s.prefix, &s.namespace, name, &manifest(0, 3, 0, now, 0)).await;
    let (shown, gets_new, _) = refresh().await;
    assert_eq!((shown, gets_new), (3, gets + 1));

    // Retention deleted it: the status falls back to the one before, from what was kept.
    s3_client()
        .delete_object()
        .bucket(support::s3_settings().bucket)
        .key(&key)
        .send()
        .await
        .unwrap();
    let (shown, gets_after, _) = refresh().await;
    assert_eq!((shown, gets_after), (2, gets + 1));
    assert_eq!(
        ctx.manifests.len(),
        2,
        "task 0's two listed manifests are kept"
    );

    delete_namespace(&s.client, &s.namespace).await;
}
