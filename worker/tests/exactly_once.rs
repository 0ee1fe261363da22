//! The worker's exactly-once guarantees against the real Kafka broker: crashes at swept points,
//! graceful restarts, corrupt local state and bad input all end in the same state and the same
//! committed output as an uninterrupted run, and the operator's owner record in the changelog
//! never becomes state.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

mod support;

use std::time::Duration;
use support::*;

const PARTITIONS: i32 = 4;
const RECORDS: u32 = 50_000;
const KEYS: u32 = 400;

async fn input_topic(records: u32) -> String {
    let topic = unique_name("input");
    create_topic(&topic, PARTITIONS, false).await;
    produce(
        &topic,
        PARTITIONS,
        (0..records).map(|i| card_event(i, KEYS)),
    );
    topic
}

/// Runs `job` without interruption until it has committed all input, then stops it gracefully.
fn run_to_completion(job: &Job) {
    let mut worker = job.start(None);
    job.wait_until_caught_up(&mut worker, Duration::from_secs(300));
    worker.terminate(Duration::from_secs(30));
}

#[tokio::test(flavor = "multi_thread")]
async fn crash_sweep_ends_exactly_like_an_uninterrupted_run() {
    let input = input_topic(RECORDS).await;
    let reference = Job::new("reference", &input, PARTITIONS, aggregate_processor()).await;
    run_to_completion(&reference);

    let crashy = Job::new("crashy", &input, PARTITIONS, aggregate_processor()).await;
    // Each entry: the point to abort at and how many times it must be passed first. Counts are
    // per process and spread the crashes over the run.
    let sweep = [
        "mid-transaction:1",
        "after-kafka-commit:1",
        "mid-transaction:3000",
        "after-store-commit:3",
        "after-kafka-commit:5",
        "mid-transaction:7777",
        "mid-restore:1",
        "after-store-commit:9",
        "mid-transaction:12001",
        "after-kafka-commit:14",
        "mid-restore:1",
        "mid-transaction:15000",
    ];
    let mut crashes = 0;
    for point in sweep {
        // mid-restore needs something to restore: wipe every task's local state first. (One
        // fixed task is not enough: on a fast run it may not have committed anything yet, and
        // the point is then never reached while that worker runs the whole input.)
        if point.starts_with("mid-restore") {
            for task in 0..PARTITIONS {
                let db = crashy.config.state.dir.join(format!("task-{task}"));
                let _ = std::fs::remove_dir_all(&db);
            }
        }
        let mut worker = crashy.start(Some(point));
        if worker.wait_for_crash(Duration::from_secs(120)) {
            crashes += 1;
        } else {
            // The point was not reached (the input ran out first): that is a stop, not a crash.
            worker.kill9();
        }
    }
    // kill -9 from outside, at arbitrary moments.
    for delay_ms in [700, 1500] {
        let mut worker = crashy.start(None);
        std::thread::sleep(Duration::from_millis(delay_ms));
        worker.kill9();
    }
    assert!(
        crashes >= 10,
        "only {crashes} of the swept failpoints were reached"
    );
    run_to_completion(&crashy);

    assert_eq!(crashy.committed_offsets(), reference.committed_offsets());
    assert_same_output(&crashy.output(), &reference.output());
    let (expected_state, actual_state) = (reference.local_state(), crashy.local_state());
    for task in 0..PARTITIONS as u32 {
        assert!(!expected_state[&task].is_empty());
        assert!(
            actual_state[&task] == expected_state[&task],
            "task {task}: state differs key by key"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn graceful_restart_replays_nothing() {
    let input = input_topic(8_000).await;
    let job = Job::new("graceful", &input, PARTITIONS, count_processor()).await;
    let mut worker = job.start(None);
    // Stop it part-way: once some input is committed, before all of it is.
    support::wait_for("a first commit", Duration::from_secs(60), || {
        job.committed_offsets().values().any(|offset| *offset > 0)
    });
    worker.terminate(Duration::from_secs(30));

    let mut worker = job.start(None);
    job.wait_until_caught_up(&mut worker, Duration::from_secs(120));
    // The first worker may have committed everything before it stopped: then the input is
    // caught up at once, and the restarted one must still be given the time to open its tasks.
    support::wait_for(
        "the restarted worker's restores",
        Duration::from_secs(60),
        || restored_tasks(&worker.log()) == all_tasks(PARTITIONS),
    );
    worker.terminate(Duration::from_secs(30));
    let log = worker.log();
    assert_eq!(
        restored_tasks(&log),
        all_tasks(PARTITIONS),
        "a finished restore for every task:\n{log}"
    );
    assert_eq!(
        replayed_records(&log),
        0,
        "a restart after SIGTERM must replay no changelog record"
    );

    let reference = Job::new("graceful-reference", &input, PARTITIONS, count_processor()).await;
    run_to_completion(&reference);
    assert_same_output(&job.output(), &reference.output());
    assert!(job.local_state() == reference.local_state());
}

#[tokio::test(flavor = "multi_thread")]
async fn corrupt_local_state_is_rebuilt_from_the_changelog() {
    let input = input_topic(6_000).await;
    let job = Job::new("corrupt", &input, PARTITIONS, count_processor()).await;
    run_to_completion(&job);
    let before = job.local_state();

    // Damage task 2's RocksDB while stopped: truncate every SST and remove CURRENT.
    let db = job.config.state.dir.join("task-2").join("db");
    let mut damaged = 0;
    for entry in std::fs::read_dir(&db).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if name.ends_with(".sst") || name == "CURRENT" || name.ends_with(".log") {
            std::fs::write(&path, b"garbage").unwrap();
            damaged += 1;
        }
    }
    assert!(damaged > 0, "nothing to damage in {}", db.display());

    let mut worker = job.start(None);
    job.wait_until_caught_up(&mut worker, Duration::from_secs(120));
    // Committed offsets were already at the end, so wait for every task's restore itself.
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while restored_tasks(&worker.log()) != all_tasks(PARTITIONS) {
        assert!(
            std::time::Instant::now() < deadline,
            "every task restored: not within 120s; log:\n{}",
            worker.log()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    worker.terminate(Duration::from_secs(30));
    let log = worker.log();
    assert!(
        replayed_records(&log) > 0,
        "task 2 must have been rebuilt from the changelog:\n{log}"
    );
    assert!(
        job.local_state() == before,
        "the rebuilt state equals the state before the damage"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_records_go_to_the_dead_letter_topic_and_the_task_goes_on() {
    let topic = unique_name("mixed-input");
    create_topic(&topic, 1, false).await;
    let mut records = Vec::new();
    let mut expected_bad = Vec::new();
    for i in 0..300u32 {
        let (key, value) = card_event(i, 20);
        records.push((key.clone(), value));
        let bad = match i % 50 {
            7 => Some(("not json at all".to_string(), "not_json")),
            19 => Some((r#"{"amount":3}"#.to_string(), "missing_field")),
            33 => Some((r#"["card","x"]"#.to_string(), "not_an_object")),
            41 => Some((r#"{"card":{"nested":1}}"#.to_string(), "wrong_type")),
            _ => None,
        };
        if let Some((value, reason)) = bad {
            records.push((key, value.clone()));
            expected_bad.push((value, reason));
        }
    }
    produce(&topic, 1, records.clone());
    let job = Job::new("badinput", &topic, 1, count_processor()).await;
    run_to_completion(&job);

    let dead = read_committed(&job.config.kafka.dead_letter_topic, 1)
        .remove(&0)
        .unwrap();
    let got: Vec<(String, String)> = dead
        .iter()
        .map(|r| {
            (
                r.value.clone().unwrap_or_default(),
                r.headers["streamkeeper.reason"].clone(),
            )
        })
        .collect();
    let want: Vec<(String, String)> = expected_bad
        .iter()
        .map(|(v, r)| (v.clone(), r.to_string()))
        .collect();
    assert_eq!(
        got, want,
        "exactly the malformed records, in order, with their reasons"
    );
    for record in &dead {
        assert_eq!(record.headers["streamkeeper.source.partition"], "0");
        assert!(
            record.headers["streamkeeper.source.offset"]
                .parse::<i64>()
                .is_ok()
        );
    }

    // The state counts exactly the valid records.
    let output = job.output().remove(&0).unwrap();
    let mut last_count = std::collections::BTreeMap::new();
    for (key, value) in output {
        let json: serde_json::Value = serde_json::from_str(&value).unwrap();
        last_count.insert(key, json["count"].as_u64().unwrap());
    }
    assert_eq!(
        last_count.values().sum::<u64>(),
        300,
        "only the 300 valid records are counted"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_record_whose_output_cannot_be_produced_is_dead_lettered_and_the_task_goes_on() {
    let topic = unique_name("big-key-input");
    create_topic(&topic, 1, false).await;
    // A valid record whose 600 KB card is repeated in its output (key and value): 1.2 MB, over
    // any producer's limit. Its changelog record alone (600 KB) would fit.
    let big_card = "x".repeat(600_000);
    let big = (
        "big".to_string(),
        format!(r#"{{"card":"{big_card}","amount":1,"ts":1764000000000}}"#),
    );
    let mut records: Vec<(String, String)> = (0..1_000).map(|i| card_event(i, 20)).collect();
    records.push(big.clone());
    records.extend((1_000..2_000).map(|i| card_event(i, 20)));
    produce(&topic, 1, records);
    let job = Job::new("big-key", &topic, 1, count_processor()).await;
    let mut worker = job.start(None);
    job.wait_until_caught_up(&mut worker, Duration::from_secs(60));
    worker.terminate(Duration::from_secs(30));

    let dead = read_committed(&job.config.kafka.dead_letter_topic, 1)
        .remove(&0)
        .unwrap_or_default();
    assert_eq!(dead.len(), 1, "exactly the big record is dead-lettered");
    assert_eq!(
        dead[0].headers["streamkeeper.reason"],
        "derived-record-too-large"
    );
    assert_eq!(dead[0].headers["streamkeeper.source.offset"], "1000");
    assert_eq!(
        dead[0].value.as_deref(),
        Some(big.1.as_str()),
        "its payload"
    );
    let output = job.output().remove(&0).unwrap();
    assert_eq!(output.len(), 2_000, "one output per normal record");
    let state = job.local_state().remove(&0).unwrap();
    assert!(
        state.keys().all(|key| key.len() < 1_000),
        "the refused record changed no state"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_far_future_event_time_is_dead_lettered_and_does_not_close_every_window() {
    let normal: Vec<(String, String)> = (0..600).map(|i| card_event(i, 20)).collect();
    let far = (
        normal[0].0.clone(),
        r#"{"card":"card-0","amount":5,"ts":"9999-12-31T23:59:59Z"}"#.to_string(),
    );
    let with_far = unique_name("far-future-input");
    create_topic(&with_far, 1, false).await;
    let mut records = normal[..300].to_vec();
    records.push(far.clone());
    records.extend_from_slice(&normal[300..]);
    produce(&with_far, 1, records);
    let job = Job::new("far-future", &with_far, 1, aggregate_processor()).await;
    run_to_completion(&job);

    let without = unique_name("far-future-reference-input");
    create_topic(&without, 1, false).await;
    produce(&without, 1, normal);
    let reference = Job::new("far-future-reference", &without, 1, aggregate_processor()).await;
    run_to_completion(&reference);

    let dead = read_committed(&job.config.kafka.dead_letter_topic, 1)
        .remove(&0)
        .unwrap_or_default();
    assert_eq!(
        dead.len(),
        1,
        "exactly the far-future record is dead-lettered"
    );
    assert_eq!(
        dead[0].headers["streamkeeper.reason"],
        "event_time_too_far_ahead"
    );
    assert_eq!(dead[0].headers["streamkeeper.source.offset"], "300");
    // Every record after it still lands in its window: the output is the reference's.
    assert_same_output(&job.output(), &reference.output());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_state_built_by_another_processor_stops_the_task_with_both_named() {
    let input = input_topic(2_000).await;
    let mut job = Job::new("other-processor", &input, PARTITIONS, count_processor()).await;
    run_to_completion(&job);
    let committed = job.committed_offsets();
    // The job is recreated under the same names with another key field: same volumes,
    // changelog and offsets, state it cannot read. From local state, then from the changelog.
    job.config.processor.key_field = "amount".into();
    for wipe in [false, true] {
        if wipe {
            std::fs::remove_dir_all(&job.config.state.dir).unwrap();
        }
        let mut worker = job.start(None);
        support::wait_for("every task to refuse", TIMEOUT * 2, || {
            let log = worker.log();
            log.lines()
                .filter(|l| l.contains("processor mismatch"))
                .count()
                >= PARTITIONS as usize
        });
        worker.terminate(Duration::from_secs(30));
        let log = worker.log();
        assert!(
            log.contains(r#""keyField":"card""#),
            "names the state's processor:\n{log}"
        );
        assert!(
            log.contains(r#""keyField":"amount""#),
            "names the job's processor:\n{log}"
        );
        assert_eq!(job.committed_offsets(), committed, "nothing was consumed");
    }
}

/// The operator writes an owner record first into changelog partition 0
/// (`streamkeeper_contract::owner_marker`). A restore passes over it: a run that replayed it,
/// and task 0 rebuilt from that changelog alone, hold the state of a changelog without it.
#[tokio::test(flavor = "multi_thread")]
async fn the_changelogs_owner_record_is_never_state() {
    use rdkafka::producer::{BaseRecord, Producer};
    use streamkeeper_contract::{OwnerMarker, Versioned, owner_marker};

    let input = input_topic(2_000).await;
    let job = Job::new("owner-record", &input, PARTITIONS, count_processor()).await;
    let marker = OwnerMarker {
        version: OwnerMarker::VERSION,
        cluster: None,
        cluster_id: Some("this-cluster".into()),
        namespace: "payments".into(),
        name: "owner-record".into(),
        uid: "uid-1".into(),
    };
    let key = owner_marker::changelog_owner_key(&marker);
    let value = marker.to_json();
    let records = producer();
    records
        .send(
            BaseRecord::to(&job.config.kafka.changelog_topic)
                .partition(0)
                .key(key.as_slice())
                .payload(value.as_slice()),
        )
        .map_err(|(error, _)| error)
        .unwrap();
    records.flush(Duration::from_secs(30)).unwrap();
    run_to_completion(&job);
    let reference = Job::new("owner-record-ref", &input, PARTITIONS, count_processor()).await;
    run_to_completion(&reference);
    assert!(job.local_state() == reference.local_state(), "after a run");

    // Task 0 on an empty volume: rebuilt from its changelog, owner record first.
    std::fs::remove_dir_all(job.config.state.dir.join("task-0")).unwrap();
    let mut worker = job.start(None);
    wait_for("task 0 restored", Duration::from_secs(120), || {
        restored_tasks(&worker.log()).contains(&0)
    });
    worker.terminate(Duration::from_secs(30));
    assert!(
        job.local_state() == reference.local_state(),
        "after a rebuild from the changelog"
    );
}
