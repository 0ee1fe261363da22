//! The state knows which input it was built from, against the real broker: a job that reads
//! another topic, or a topic deleted and created again under the same name, stops its tasks
//! naming both identities and consumes nothing; a restore request that adopts the input keeps
//! the state and reads the new topic from its first record, exactly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

mod support;

use std::time::Duration;
use support::checkpoints::*;
use support::*;

const PARTITIONS: i32 = 2;
const KEYS: u32 = 40;
const RUN_LIMIT: Duration = Duration::from_secs(180);

async fn topic_with(prefix: &str, events: std::ops::Range<u32>) -> String {
    let topic = unique_name(prefix);
    create_topic(&topic, PARTITIONS, false).await;
    produce(&topic, PARTITIONS, events.map(|i| card_event(i, KEYS)));
    topic
}

fn run_to_completion(job: &Job) {
    let mut worker = job.start(None);
    job.wait_until_caught_up(&mut worker, RUN_LIMIT);
    worker.terminate(Duration::from_secs(30));
}

/// Starts the job's worker and waits until its log holds every one of `parts` on a line that
/// stops a task; the worker is stopped again.
fn stops_with(job: &Job, parts: &[&str]) -> String {
    let mut worker = job.start(None);
    let mut stopped = String::new();
    wait_for("the tasks to stop naming both inputs", RUN_LIMIT, || {
        let log = worker.log();
        let line = log.lines().find(|line| {
            line.contains("task stopped: its state does not fit this job")
                && parts.iter().all(|part| line.contains(part))
        });
        stopped = line.unwrap_or_default().to_string();
        !stopped.is_empty()
    });
    worker.terminate(Duration::from_secs(30));
    stopped
}

#[tokio::test(flavor = "multi_thread")]
async fn another_input_topic_or_a_re_created_one_stops_the_task_naming_both() {
    let first = topic_with("identity-first", 0..400).await;
    let mut job = Job::new("identity", &first, PARTITIONS, count_processor()).await;
    run_to_completion(&job);

    // The job is pointed at another topic: its state's offsets belong to the first one.
    let second = topic_with("identity-second", 400..800).await;
    job.config.kafka.input_topic = second.clone();
    let stopped = stops_with(&job, &["input mismatch", &first, &second]);
    assert!(stopped.contains("adoptInput"), "the way on: {stopped}");
    assert!(
        job.committed_offsets().values().all(|offset| *offset < 0),
        "nothing of {second} was consumed: {:?}",
        job.committed_offsets()
    );

    // The first topic deleted and created again with as many records: same name, new id.
    job.config.kafka.input_topic = first.clone();
    recreate_topic(&first, PARTITIONS, false).await;
    produce(&first, PARTITIONS, (0..400).map(|i| card_event(i, KEYS)));
    let stopped = stops_with(&job, &["deleted and created again", &first]);
    assert!(stopped.contains("input mismatch"), "{stopped}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_restore_that_adopts_the_input_keeps_the_state_and_reads_the_new_topic_from_its_start() {
    let old = topic_with("adopt-old", 0..600).await;
    let mut job = Job::new("adopt", &old, PARTITIONS, count_processor()).await;
    job.enable_checkpoints(Duration::from_secs(3600), 3, None);
    let address = format!("127.0.0.1:{}", free_port());
    let mut worker = job.start_listening(&address);
    job.wait_until_caught_up(&mut worker, RUN_LIMIT);
    checkpoint_now(&address);
    worker.terminate(Duration::from_secs(30));

    // The job moves to a new topic on purpose, keeping its counts.
    let new = topic_with("adopt-new", 600..1_000).await;
    job.config.kafka.input_topic = new.clone();
    let request = serde_json::json!({
        "version": 1, "id": "move-1", "checkpoint": "latest", "source": "changelog",
        "adoptInput": true,
    });
    job.env
        .push(("STREAMKEEPER_RESTORE_REQUEST".into(), request.to_string()));
    run_to_completion(&job);
    // Started again: the request is not applied twice, and the state now names the new topic
    // (each task resumes its input, none stops).
    let mut worker = job.start(None);
    wait_for("each task resumes its input", RUN_LIMIT, || {
        let log = worker.log();
        log.matches("restore request already applied to this state")
            .count()
            == PARTITIONS as usize
            && log.matches("resuming input").count() == PARTITIONS as usize
    });
    worker.terminate(Duration::from_secs(30));
    assert!(
        !worker.log().contains("input mismatch"),
        "{}",
        worker.log_tail()
    );

    // What one job reading the old topic's records and then the new one's outputs.
    let both = unique_name("adopt-both");
    create_topic(&both, PARTITIONS, false).await;
    produce(&both, PARTITIONS, (0..1_000).map(|i| card_event(i, KEYS)));
    let reference = Job::new("adopt-reference", &both, PARTITIONS, count_processor()).await;
    run_to_completion(&reference);
    assert_same_output(&job.output(), &reference.output());
    assert_eq!(
        job.committed_offsets(),
        job.input_ends(),
        "the new topic was read to its end"
    );
}
