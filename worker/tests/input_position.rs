//! The input position travels with the state, against the real broker: a restart resumes where
//! the state says even when Kafka's committed offsets are gone or moved (offset expiry, a deleted
//! or reset group), an idle task keeps its offsets alive, input deleted before it was processed
//! is a reported gap, a checkpoint taken after a full replay records the right input offset,
//! a task idle past the changelog's `delete.retention.ms` restarts from its local state, and an
//! input consumer that stops delivering records the broker holds is replaced.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

mod support;

use rdkafka::TopicPartitionList;
use rdkafka::admin::{AdminClient, AdminOptions, AlterConfig, ResourceSpecifier};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use std::collections::BTreeMap;
use std::time::Duration;
use support::checkpoints::*;
use support::*;

const PARTITIONS: i32 = 4;
const KEYS: u32 = 50;

async fn input_topic(range: std::ops::Range<u32>) -> String {
    let topic = unique_name("position-input");
    create_topic(&topic, PARTITIONS, false).await;
    produce(&topic, PARTITIONS, range.map(|i| card_event(i, KEYS)));
    topic
}

fn run_to_completion(job: &Job) {
    let mut worker = job.start(None);
    job.wait_until_caught_up(&mut worker, Duration::from_secs(180));
    worker.terminate(Duration::from_secs(30));
}

fn admin() -> AdminClient<DefaultClientContext> {
    ClientConfig::new()
        .set("bootstrap.servers", kafka_bootstrap())
        .create()
        .unwrap()
}

/// Deletes the job's consumer group and its committed offsets, as Kafka's offset expiry does
/// to a group with no commit for `offsets.retention.minutes`.
async fn delete_group(job: &Job) {
    let group = job.config.job.group_id();
    let results = admin()
        .delete_groups(
            &[group.as_str()],
            &AdminOptions::new().operation_timeout(Some(TIMEOUT)),
        )
        .await
        .unwrap();
    for result in results {
        result.unwrap_or_else(|(g, e)| panic!("deleting group {g}: {e}"));
    }
}

/// [`delete_group`] for a stopped job, checking the offsets are really gone.
async fn delete_group_of_stopped_job(job: &Job) {
    delete_group(job).await;
    assert!(
        job.committed_offsets().values().all(|offset| *offset < 0),
        "the group's offsets are gone: {:?}",
        job.committed_offsets()
    );
}

/// Commits `offset` for every input partition in the job's group, as a hand-made
/// `kafka-consumer-groups --reset-offsets` would.
fn reset_group(job: &Job, offset: i64) {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", kafka_bootstrap())
        .set("group.id", job.config.job.group_id())
        .create()
        .unwrap();
    let mut offsets = TopicPartitionList::new();
    for partition in 0..PARTITIONS {
        offsets
            .add_partition_offset(
                &job.config.kafka.input_topic,
                partition,
                rdkafka::Offset::Offset(offset),
            )
            .unwrap();
    }
    consumer.commit(&offsets, CommitMode::Sync).unwrap();
}

fn wipe_state(job: &Job) {
    std::fs::remove_dir_all(&job.config.state.dir).unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn lost_or_moved_group_offsets_never_reprocess_what_the_state_holds() {
    let input = input_topic(0..2_000).await;
    let reference = Job::new("position-reference", &input, PARTITIONS, count_processor()).await;
    run_to_completion(&reference);
    let job = Job::new("position", &input, PARTITIONS, count_processor()).await;
    run_to_completion(&job);

    // Offsets expired (or the group deleted): resume from the local state's position.
    delete_group_of_stopped_job(&job).await;
    run_to_completion(&job);
    assert_same_output(&job.output(), &reference.output());
    assert_eq!(job.committed_offsets(), reference.committed_offsets());

    // Offsets gone and the volume lost: the whole changelog says where the input stood.
    delete_group_of_stopped_job(&job).await;
    wipe_state(&job);
    run_to_completion(&job);
    assert_same_output(&job.output(), &reference.output());

    // Offsets reset to the beginning by hand: the state still wins, and Kafka is repaired.
    reset_group(&job, 0);
    let address = format!("127.0.0.1:{}", free_port());
    let mut worker = job.start_listening(&address);
    job.wait_until_caught_up(&mut worker, Duration::from_secs(180));
    assert_eq!(
        metric(&address, "streamkeeper_input_offset_repairs_total"),
        f64::from(PARTITIONS as u32),
        "each task repaired its committed offset once"
    );
    worker.terminate(Duration::from_secs(30));
    assert_same_output(&job.output(), &reference.output());
    assert!(job.local_state() == reference.local_state());
}

#[tokio::test(flavor = "multi_thread")]
async fn committed_input_without_the_state_that_consumed_it_stops_the_task() {
    let input = input_topic(0..800).await;
    let job = Job::new("position-lost-state", &input, PARTITIONS, count_processor()).await;
    run_to_completion(&job);
    let committed = job.committed_offsets();
    // The changelog is emptied and the volume lost: the group says input was consumed, but
    // no state remembers it. Processing on would silently lose it.
    support::recreate_topic(&job.config.kafka.changelog_topic, PARTITIONS, true).await;
    wipe_state(&job);
    let mut worker = job.start(None);
    wait_for("the task to stop with the reason", TIMEOUT * 2, || {
        worker.log().contains("has consumed no input")
    });
    worker.terminate(Duration::from_secs(30));
    assert_eq!(job.committed_offsets(), committed, "nothing was consumed");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_idle_task_commits_its_offsets_again_before_kafka_expires_them() {
    let input = input_topic(0..400).await;
    let mut job = Job::new("position-idle", &input, PARTITIONS, count_processor()).await;
    job.env
        .push(("STREAMKEEPER_OFFSET_REFRESH_SECONDS".into(), "1".into()));
    let mut worker = job.start(None);
    job.wait_until_caught_up(&mut worker, Duration::from_secs(120));
    let ends = job.input_ends();
    // The group's offsets vanish while the worker runs with nothing to consume (the refresh
    // every second may already bring them back before they can be read as gone).
    delete_group(&job).await;
    wait_for(
        "the idle tasks to commit their offsets again",
        Duration::from_secs(30),
        || job.committed_offsets() == ends,
    );
    worker.terminate(Duration::from_secs(30));
}

#[tokio::test(flavor = "multi_thread")]
async fn input_deleted_before_it_was_processed_is_a_reported_recovery_gap() {
    let input = input_topic(0..800).await;
    let job = Job::new("position-gap", &input, PARTITIONS, count_processor()).await;
    run_to_completion(&job);
    let before = job.committed_offsets();
    produce(
        &input,
        PARTITIONS,
        (800..1_600).map(|i| card_event(i, KEYS)),
    );
    // Retention deletes the newer records of every partition before the job sees them, up to
    // halfway through what was added.
    let ends = job.input_ends();
    let cut: BTreeMap<u32, i64> = ends
        .iter()
        .map(|(p, end)| (*p as u32, before[p] + (end - before[p]) / 2))
        .collect();
    delete_records(&input, &cut).await;

    let address = format!("127.0.0.1:{}", free_port());
    let mut worker = job.start_listening(&address);
    job.wait_until_caught_up(&mut worker, Duration::from_secs(120));
    let lost: i64 = cut.iter().map(|(p, to)| to - before[&(*p as i32)]).sum();
    assert_eq!(
        metric(&address, "streamkeeper_input_lost_records_total"),
        lost as f64,
        "every deleted, unprocessed record is counted"
    );
    let (_, body) = http_get(&address, "/v1/tasks").unwrap();
    let reports: serde_json::Value = serde_json::from_str(&body).unwrap();
    for report in reports["tasks"].as_array().unwrap() {
        let task = report["task"].as_u64().unwrap() as u32;
        let gap = &report["inputGap"];
        assert_eq!(gap["fromOffset"], before[&(task as i32)], "task {task}");
        assert_eq!(gap["toOffset"], cut[&task], "task {task}");
    }
    worker.terminate(Duration::from_secs(30));
    assert!(worker.log().contains("recovery gap"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_checkpoint_after_a_full_replay_records_the_input_position() {
    let input = input_topic(0..1_200).await;
    let mut job = Job::new("position-checkpoint", &input, PARTITIONS, count_processor()).await;
    job.enable_checkpoints(Duration::from_secs(3600), 3, None);
    run_to_completion(&job);
    let committed = job.committed_offsets();
    // The volume is lost before any checkpoint: the restore replays the whole changelog, and
    // the input stays idle, so no input commit follows before the checkpoint.
    wipe_state(&job);
    let address = format!("127.0.0.1:{}", free_port());
    let mut worker = job.start_listening(&address);
    wait_ready(&address, &mut worker, Duration::from_secs(120));
    checkpoint_now(&address);
    worker.terminate(Duration::from_secs(30));
    for task in 0..PARTITIONS as u32 {
        let newest = manifests(&job, task).await.into_values().last().unwrap();
        assert_eq!(
            newest.input_offset,
            committed[&(task as i32)],
            "task {task}'s checkpoint records the input the state includes"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_task_idle_past_the_tombstone_retention_restarts_from_its_local_state() {
    let input = input_topic(0..2_000).await;
    let job = Job::new(
        "position-idle-restart",
        &input,
        PARTITIONS,
        count_processor(),
    )
    .await;
    let retention_ms = 2_000;
    let changelog = AlterConfig::new(ResourceSpecifier::Topic(&job.config.kafka.changelog_topic))
        .set("cleanup.policy", "compact")
        .set("delete.retention.ms", "2000");
    for result in admin()
        .alter_configs(
            [&changelog],
            &AdminOptions::new().operation_timeout(Some(TIMEOUT)),
        )
        .await
        .unwrap()
    {
        result.unwrap();
    }
    run_to_completion(&job);
    // Idle past delete.retention.ms: the only thing after the local state is its own commit
    // marker, so waiting is the condition itself.
    std::thread::sleep(Duration::from_millis(retention_ms + 1_000));
    let address = format!("127.0.0.1:{}", free_port());
    let mut worker = job.start_listening(&address);
    wait_ready(&address, &mut worker, Duration::from_secs(60));
    let (_, body) = http_get(&address, "/v1/tasks").unwrap();
    worker.terminate(Duration::from_secs(30));
    let reports: serde_json::Value = serde_json::from_str(&body).unwrap();
    for report in reports["tasks"].as_array().unwrap() {
        assert_eq!(report["restore"]["source"], "local", "{report}");
    }
    let log = worker.log();
    assert_eq!(
        restored_tasks(&log),
        all_tasks(PARTITIONS),
        "a restore for every task:\n{log}"
    );
    assert_eq!(replayed_records(&log), 0, "nothing replayed:\n{log}");
    assert!(!log.contains("local state unusable"), "{log}");
}

/// librdkafka's consumer can stop fetching after a broker restart and say nothing (see the
/// worker's `consumer_watch`). The `input-stops` failpoint pauses one task's consumer after 300
/// records, a stall the broker does not see; the task must replace its consumer, catch up and
/// produce exactly what an undisturbed run produces. Without the watch it never catches up.
#[tokio::test(flavor = "multi_thread")]
async fn an_input_consumer_that_stops_delivering_is_replaced_and_the_output_is_exact() {
    let input = input_topic(0..2_000).await;
    let mut job = Job::new("position-stall", &input, PARTITIONS, count_processor()).await;
    job.env
        .push(("STREAMKEEPER_CONSUMER_STALL_SECONDS".into(), "2".into()));
    let mut worker = job.start(Some("input-stops:300"));
    job.wait_until_caught_up(&mut worker, Duration::from_secs(90));
    worker.terminate(Duration::from_secs(30));
    let log = worker.log();
    assert_eq!(
        log.matches("a consumer stopped delivering records the broker holds")
            .count(),
        1,
        "one stall, found and replaced once; log:\n{}",
        worker.log_tail()
    );

    let reference = Job::new("position-stall-ref", &input, PARTITIONS, count_processor()).await;
    run_to_completion(&reference);
    assert_same_output(&job.output(), &reference.output());
}
