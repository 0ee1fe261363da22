//! Checkpoints to the real S3 server (SeaweedFS) and restores from them, with the real Kafka
//! broker: the delta replay after a checkpoint, the fallback from a corrupt checkpoint,
//! retention, an S3 outage mid-run, and kill -9 during uploads, manifest writes and downloads.
//! Each test uses its own S3 prefix; the shared S3 server is never stopped.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};
use support::checkpoints::*;
use support::*;

const KEYS: u32 = 400;

async fn input_topic(partitions: i32, range: std::ops::Range<u32>) -> String {
    let topic = unique_name("ckpt-input");
    create_topic(&topic, partitions, false).await;
    produce(&topic, partitions, range.map(|i| card_event(i, KEYS)));
    topic
}

fn more_input(job: &Job, range: std::ops::Range<u32>) {
    produce(
        &job.config.kafka.input_topic,
        job.partitions,
        range.map(|i| card_event(i, KEYS)),
    );
}

fn run_to_completion(job: &Job) {
    let mut worker = job.start(None);
    job.wait_until_caught_up(&mut worker, Duration::from_secs(300));
    // Earlier runs may have committed all the input already: the input is then caught up at
    // once, and a task still restoring (a download after its state was wiped) must finish
    // before the stop, or its local state is left empty (seen in CI: "task 1: Empty").
    wait_for(
        "every task's restore in the last run",
        Duration::from_secs(120),
        || restored_tasks(&worker.log()) == all_tasks(job.partitions),
    );
    worker.terminate(Duration::from_secs(30));
}

fn wipe_state(job: &Job) {
    std::fs::remove_dir_all(&job.config.state.dir).unwrap();
}

/// Runs the input (all of it, produced up front) through a job without checkpoints.
async fn reference(input: &str, partitions: i32) -> Job {
    let job = Job::new("ckpt-reference", input, partitions, aggregate_processor()).await;
    run_to_completion(&job);
    job
}

fn assert_same_state(got: &Job, want: &Job) {
    let (got, want) = (got.local_state(), want.local_state());
    for (task, entries) in &want {
        assert!(!entries.is_empty(), "task {task} has state");
        assert!(
            got[task] == *entries,
            "task {task}: state differs key by key"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn restore_from_a_checkpoint_replays_only_the_delta_after_it() {
    const PARTITIONS: i32 = 2;
    let input = input_topic(PARTITIONS, 0..20_000).await;
    let mut job = Job::new("ckpt-delta", &input, PARTITIONS, aggregate_processor()).await;
    job.enable_checkpoints(Duration::from_secs(3600), 3, None);
    let address = format!("127.0.0.1:{}", free_port());
    let mut worker = job.start_listening(&address);
    job.wait_until_caught_up(&mut worker, Duration::from_secs(180));
    let checkpoints = checkpoint_now(&address);
    assert_eq!(checkpoints.len(), PARTITIONS as usize);
    more_input(&job, 20_000..26_000);
    job.wait_until_caught_up(&mut worker, Duration::from_secs(180));
    worker.terminate(Duration::from_secs(30));

    // The changelog loses everything before the checkpoints: a full replay is impossible now,
    // so a correct state can only come from the checkpoints plus the delta.
    let offsets: BTreeMap<u32, i64> = checkpoints
        .iter()
        .map(|(task, (_, offset))| (*task, *offset))
        .collect();
    delete_changelog_head(&job, &offsets).await;
    let delta: u64 = offsets
        .iter()
        .map(|(task, offset)| changelog_records_from(&job, *task, *offset))
        .sum();
    assert!(delta > 0, "the second batch of input changed state");

    wipe_state(&job);
    let mut worker = job.start_listening(&address);
    wait_ready(&address, &mut worker, Duration::from_secs(120));
    let downloaded = metric(&address, "streamkeeper_restore_download_bytes_total");
    // No new checkpoint for an hour, yet the age of the newest durable one is known at once.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while metric(
        &address,
        "streamkeeper_checkpoint_last_success_timestamp_seconds",
    ) <= 0.0
    {
        assert!(
            std::time::Instant::now() < deadline,
            "a restarted worker reports its newest existing checkpoint"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    worker.terminate(Duration::from_secs(30));
    let log = worker.log();
    assert_eq!(
        replayed_records(&log),
        delta,
        "only the changelog records after the checkpoints are replayed"
    );
    assert!(downloaded > 0.0, "the checkpoints were downloaded");
    assert_eq!(
        log.matches("restore: checkpoint installed").count(),
        PARTITIONS as usize
    );

    let reference = reference(&input, PARTITIONS).await;
    assert_same_state(&job, &reference);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_corrupt_object_falls_back_to_the_previous_checkpoint() {
    let input = input_topic(1, 0..10_000).await;
    let mut job = Job::new("ckpt-corrupt", &input, 1, aggregate_processor()).await;
    job.enable_checkpoints(Duration::from_secs(3600), 5, None);
    let address = format!("127.0.0.1:{}", free_port());
    let mut worker = job.start_listening(&address);
    job.wait_until_caught_up(&mut worker, Duration::from_secs(180));
    let first = checkpoint_now(&address)[&0].0;
    more_input(&job, 10_000..14_000);
    job.wait_until_caught_up(&mut worker, Duration::from_secs(180));
    let second = checkpoint_now(&address)[&0].0;
    worker.terminate(Duration::from_secs(30));

    let manifests = manifests(&job, 0).await;
    let older: BTreeSet<&str> = manifests[&first]
        .files
        .iter()
        .map(|f| f.object_key.as_str())
        .collect();
    let only_newest = manifests[&second]
        .files
        .iter()
        .find(|f| f.name.ends_with(".sst") && !older.contains(f.object_key.as_str()))
        .expect("the newest checkpoint has an SST of its own");
    corrupt_object(&job, &only_newest.object_key).await;

    wipe_state(&job);
    let mut worker = job.start_listening(&address);
    wait_ready(&address, &mut worker, Duration::from_secs(120));
    let fallbacks = metric(&address, "streamkeeper_checkpoint_fallbacks_total");
    worker.terminate(Duration::from_secs(30));
    let log = worker.log();
    assert_eq!(fallbacks, 1.0, "one fallback counted; log:\n{log}");
    assert!(
        log.contains("checkpoint unusable; falling back"),
        "the fallback is logged"
    );
    let installed = log
        .lines()
        .find(|l| l.contains("restore: checkpoint installed"))
        .expect("a checkpoint was installed");
    assert!(
        installed.contains(&format!("sequence={first}")),
        "the previous checkpoint was installed: {installed}"
    );
    let reference = reference(&input, 1).await;
    assert_same_state(&job, &reference);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_restore_request_replaces_valid_local_state_once() {
    let input = input_topic(1, 0..6_000).await;
    let mut job = Job::new("ckpt-chosen", &input, 1, count_processor()).await;
    job.enable_checkpoints(Duration::from_secs(3600), 5, None);
    let address = format!("127.0.0.1:{}", free_port());
    let mut worker = job.start_listening(&address);
    job.wait_until_caught_up(&mut worker, Duration::from_secs(180));
    let (chosen, chosen_offset) = checkpoint_now(&address)[&0];
    more_input(&job, 6_000..9_000);
    job.wait_until_caught_up(&mut worker, Duration::from_secs(180));
    checkpoint_now(&address);
    worker.terminate(Duration::from_secs(30));
    let before = job.local_state();

    // Valid local state is there, yet the operator asks for the older checkpoint.
    job.env
        .push(restore_request("r1", &chosen.to_string(), "changelog"));
    let mut worker = job.start_listening(&address);
    wait_ready(&address, &mut worker, Duration::from_secs(120));
    let applied = applied_restore_ids(&address);
    worker.terminate(Duration::from_secs(30));
    let log = worker.log();
    let installed = log
        .lines()
        .find(|l| l.contains("restore: checkpoint installed"))
        .expect("the chosen checkpoint was installed");
    assert!(
        installed.contains(&format!("sequence={chosen}")),
        "{installed}"
    );
    assert_eq!(
        replayed_records(&log),
        changelog_records_from(&job, 0, chosen_offset) - 1,
        "the changelog after the chosen checkpoint is replayed (all but the marker written after)"
    );
    assert_eq!(
        applied,
        vec![Some("r1".to_string())],
        "/v1/tasks reports it"
    );
    let mut after = job.local_state();
    let marker = after.get_mut(&0).unwrap().remove(APPLIED_RESTORE_KEY);
    assert_eq!(
        marker.as_deref(),
        Some(&b"r1"[..]),
        "the state records the request"
    );
    assert!(after == before, "the state ends where it was");

    // The same request again, even onto a wiped volume, is not applied a second time.
    wipe_state(&job);
    let mut worker = job.start_listening(&address);
    wait_ready(&address, &mut worker, Duration::from_secs(120));
    worker.terminate(Duration::from_secs(30));
    let log = worker.log();
    assert!(log.contains("restore request already applied"), "{log}");
    assert!(!log.contains("applying restore request"), "{log}");

    // A checkpoint that does not exist stops the task with the reason, never a silent downgrade.
    job.env.pop();
    job.env.push(restore_request("r2", "999", "changelog"));
    assert_task_stops_with(
        &job,
        &address,
        "checkpoint 999 was asked for but is missing",
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lost_changelog_stops_the_task_and_a_restore_from_the_input_rebuilds_it() {
    const PARTITIONS: i32 = 2;
    let input = input_topic(PARTITIONS, 0..8_000).await;
    let mut job = Job::new("ckpt-input", &input, PARTITIONS, count_processor()).await;
    job.enable_checkpoints(Duration::from_secs(3600), 5, None);
    let address = format!("127.0.0.1:{}", free_port());
    let mut worker = job.start_listening(&address);
    job.wait_until_caught_up(&mut worker, Duration::from_secs(180));
    let checkpoints = checkpoint_now(&address);
    let at_checkpoint = job.committed_offsets();
    more_input(&job, 8_000..12_000);
    job.wait_until_caught_up(&mut worker, Duration::from_secs(180));
    let before_loss = job.committed_offsets();
    worker.terminate(Duration::from_secs(30));
    let output_before = job.output();

    recreate_topic(&job.config.kafka.changelog_topic, PARTITIONS, true).await;

    // Local state ahead of the changelog: the task stops and says why, it does not guess.
    let mut worker = job.start_listening(&address);
    wait_for("the tasks to stop", Duration::from_secs(60), || {
        task_reports(&address).iter().all(|t| {
            t["phase"] == "Failed"
                && t["reason"]
                    .as_str()
                    .unwrap_or("")
                    .contains("changelog lost")
        })
    });
    assert_ne!(http_get(&address, "/readyz").map(|(s, _)| s), Some(200));
    worker.kill9();

    // The same with the volume gone: the newest checkpoint is ahead of the changelog.
    wipe_state(&job);
    let mut worker = job.start_listening(&address);
    wait_for("the tasks to stop", Duration::from_secs(60), || {
        worker.log().contains("task stopped: its changelog is gone")
    });
    worker.kill9();

    job.env
        .push(restore_request("rebuild-1", "latest", "input"));
    let mut worker = job.start_listening(&address);
    wait_ready(&address, &mut worker, Duration::from_secs(120));
    job.wait_until_caught_up(&mut worker, Duration::from_secs(180));
    let reports = task_reports(&address);
    let mut reprocessed = 0;
    for report in &reports {
        assert_eq!(report["appliedRestoreId"], "rebuild-1", "{report}");
        assert_eq!(report["restore"]["source"], "input", "{report}");
        let task = report["task"].as_i64().unwrap() as i32;
        let want = before_loss[&task] - at_checkpoint[&task];
        assert_eq!(
            report["restore"]["reprocessedInputRecords"].as_i64(),
            Some(want),
            "task {task}: the status says how much input is processed again"
        );
        reprocessed += want;
    }
    worker.terminate(Duration::from_secs(30));
    assert_eq!(checkpoints.len(), PARTITIONS as usize);

    // The state equals a run that never lost anything; the reprocessed input's output is there
    // twice (the documented price of `source: input`).
    let reference = Job::new("ckpt-input-ref", &input, PARTITIONS, count_processor()).await;
    run_to_completion(&reference);
    let mut got = job.local_state();
    for entries in got.values_mut() {
        assert_eq!(
            entries.remove(APPLIED_RESTORE_KEY).as_deref(),
            Some(&b"rebuild-1"[..])
        );
        assert!(
            entries.remove(CHANGELOG_INCARNATION_KEY).is_some(),
            "the rebuilt changelog is a new incarnation"
        );
    }
    assert!(
        got == reference.local_state(),
        "state differs from the reference"
    );
    let count = |output: &BTreeMap<i32, Vec<(String, String)>>| -> i64 {
        output.values().map(|records| records.len() as i64).sum()
    };
    assert_eq!(
        count(&job.output()),
        count(&output_before) + reprocessed,
        "the reprocessed input's output is emitted again, and nothing else"
    );
    let last_per_key = |output: BTreeMap<i32, Vec<(String, String)>>| -> BTreeMap<String, String> {
        output.into_values().flatten().collect()
    };
    assert_eq!(
        last_per_key(job.output()),
        last_per_key(reference.output()),
        "every key's newest output equals the reference's"
    );

    // The rebuilt changelog alone restores the same state, and the request is not applied again.
    wipe_state(&job);
    job.enable_checkpoints(Duration::from_secs(3600), 5, None);
    let mut worker = job.start_listening(&address);
    wait_ready(&address, &mut worker, Duration::from_secs(120));
    worker.terminate(Duration::from_secs(30));
    let log = worker.log();
    assert!(log.contains("restore request already applied"), "{log}");
    assert!(!log.contains("applying restore request"), "{log}");
    let mut again = job.local_state();
    for entries in again.values_mut() {
        entries.remove(APPLIED_RESTORE_KEY);
        entries.remove(CHANGELOG_INCARNATION_KEY);
    }
    assert!(
        again == reference.local_state(),
        "state after a second restore differs"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn checkpoints_of_a_lost_changelog_never_restore_onto_its_rebuilt_successor() {
    const PARTITIONS: i32 = 1;
    let input = input_topic(PARTITIONS, 0..8_000).await;
    let mut job = Job::new("ckpt-incarnation", &input, PARTITIONS, count_processor()).await;
    job.enable_checkpoints(Duration::from_secs(3600), 5, None);
    let address = format!("127.0.0.1:{}", free_port());
    let mut worker = job.start_listening(&address);
    job.wait_until_caught_up(&mut worker, Duration::from_secs(180));
    let old_offset = checkpoint_now(&address)[&0].1;
    worker.terminate(Duration::from_secs(30));

    // The changelog is lost and rebuilt from that checkpoint and the input.
    recreate_topic(&job.config.kafka.changelog_topic, PARTITIONS, true).await;
    job.env
        .push(restore_request("rebuild-2", "latest", "input"));
    let mut worker = job.start_listening(&address);
    wait_ready(&address, &mut worker, Duration::from_secs(120));
    // Until the new topic's offsets pass the old checkpoint's, nothing could confuse them.
    let mut next = 8_000;
    while end_offsets(&job.config.kafka.changelog_topic, PARTITIONS)[&0] <= old_offset + 100 {
        more_input(&job, next..next + 4_000);
        next += 4_000;
        job.wait_until_caught_up(&mut worker, Duration::from_secs(180));
    }
    worker.terminate(Duration::from_secs(30));

    // The volume is lost: the old checkpoint now lies inside the new topic's range, and has
    // the highest changelog offset. It belongs to another history and must not be used.
    wipe_state(&job);
    let mut worker = job.start_listening(&address);
    wait_ready(&address, &mut worker, Duration::from_secs(120));
    worker.terminate(Duration::from_secs(30));
    let log = worker.log();
    assert!(
        !log.contains("applying restore request"),
        "applied once: {log}"
    );

    let reference = Job::new(
        "ckpt-incarnation-ref",
        &input,
        PARTITIONS,
        count_processor(),
    )
    .await;
    run_to_completion(&reference);
    let mut got = job.local_state();
    for entries in got.values_mut() {
        entries.remove(APPLIED_RESTORE_KEY);
        entries.remove(CHANGELOG_INCARNATION_KEY);
    }
    assert!(
        got == reference.local_state(),
        "state differs from the reference"
    );
    assert!(
        log.contains("ignoring checkpoints of another changelog incarnation"),
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_restore_from_the_input_rewinds_an_intact_changelog_to_the_checkpoint() {
    let input = input_topic(1, 0..6_000).await;
    let mut job = Job::new("ckpt-rewind", &input, 1, count_processor()).await;
    job.enable_checkpoints(Duration::from_secs(3600), 5, None);
    let address = format!("127.0.0.1:{}", free_port());
    let mut worker = job.start_listening(&address);
    job.wait_until_caught_up(&mut worker, Duration::from_secs(180));
    checkpoint_now(&address);
    worker.terminate(Duration::from_secs(30));
    let at_checkpoint = job.local_state().remove(&0).unwrap();

    // Keys the checkpoint never saw: the rewrite must tombstone them, not keep their values.
    const FRESH: u32 = 500;
    let fresh = (0..FRESH).map(|n| {
        let key = format!("fresh-{n}");
        let value = format!(r#"{{"card":"{key}","amount":1,"ts":1764000000000}}"#);
        (key, value)
    });
    produce(&input, 1, fresh);
    let mut worker = job.start_listening(&address);
    job.wait_until_caught_up(&mut worker, Duration::from_secs(180));
    worker.terminate(Duration::from_secs(30));
    let before_rewind = job.local_state();
    let fresh_keys = before_rewind[&0]
        .keys()
        .filter(|k| k.starts_with(b"cfresh-"))
        .count();
    assert_eq!(
        fresh_keys, FRESH as usize,
        "the fresh keys are in the state"
    );

    job.env.push(restore_request("rewind-1", "latest", "input"));
    let mut worker = job.start_listening(&address);
    wait_ready(&address, &mut worker, Duration::from_secs(120));
    job.wait_until_caught_up(&mut worker, Duration::from_secs(180));
    let report = task_reports(&address).remove(0);
    worker.terminate(Duration::from_secs(30));
    assert_eq!(report["appliedRestoreId"], "rewind-1", "{report}");
    assert_eq!(report["restore"]["source"], "input", "{report}");
    assert_eq!(
        report["restore"]["reprocessedInputRecords"].as_u64(),
        Some(u64::from(FRESH)),
        "{report}"
    );

    // The changelog up to the request's marker reads as exactly the checkpoint's state.
    let changelog = changelog_entries_from(&job, 0, 0);
    let marker_at = changelog
        .iter()
        .position(|(key, value)| {
            key.as_slice() == APPLIED_RESTORE_KEY && value.as_deref() == Some(&b"rewind-1"[..])
        })
        .expect("the marker is in the changelog");
    let mut view: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    for (key, value) in &changelog[..marker_at] {
        match value {
            Some(value) => view.insert(key.clone(), value.clone()),
            None => view.remove(key),
        };
    }
    let fresh_in_view = view.keys().filter(|k| k.starts_with(b"cfresh-")).count();
    assert_eq!(
        fresh_in_view, 0,
        "keys newer than the checkpoint are tombstoned"
    );
    assert!(
        view == at_checkpoint,
        "the rewritten changelog differs from the checkpoint's state"
    );

    // Reprocessing the same input after the checkpoint ends where the job was.
    let mut after = job.local_state();
    assert_eq!(
        after
            .get_mut(&0)
            .unwrap()
            .remove(APPLIED_RESTORE_KEY)
            .as_deref(),
        Some(&b"rewind-1"[..])
    );
    assert!(after == before_rewind, "the reprocessed state differs");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_restore_from_the_input_refuses_a_checkpoint_whose_input_is_gone() {
    let input = input_topic(1, 0..4_000).await;
    let mut job = Job::new("ckpt-input-gone", &input, 1, count_processor()).await;
    job.enable_checkpoints(Duration::from_secs(3600), 5, None);
    let address = format!("127.0.0.1:{}", free_port());
    let mut worker = job.start_listening(&address);
    job.wait_until_caught_up(&mut worker, Duration::from_secs(180));
    checkpoint_now(&address);
    more_input(&job, 4_000..6_000);
    job.wait_until_caught_up(&mut worker, Duration::from_secs(180));
    worker.terminate(Duration::from_secs(30));
    let committed = job.committed_offsets();
    delete_input_head(&job, 5_000).await;

    job.env.push(restore_request("too-late", "latest", "input"));
    assert_task_stops_with(
        &job,
        &address,
        "the records in between are gone, so the input cannot rebuild the state",
    );
    assert_eq!(job.committed_offsets(), committed, "nothing was rewound");
}

/// Starts the worker and waits until it logs `reason`; it must not turn ready meanwhile.
fn assert_task_stops_with(job: &Job, address: &str, reason: &str) {
    let mut worker = job.start_listening(address);
    wait_for(
        "the task to give the reason",
        Duration::from_secs(60),
        || worker.log().contains(reason),
    );
    assert_ne!(http_get(address, "/readyz").map(|(s, _)| s), Some(200));
    worker.kill9();
}

fn task_reports(address: &str) -> Vec<serde_json::Value> {
    let Some((200, body)) = http_get(address, "/v1/tasks") else {
        return Vec::new();
    };
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    json["tasks"].as_array().cloned().unwrap_or_default()
}

fn applied_restore_ids(address: &str) -> Vec<Option<String>> {
    task_reports(address)
        .iter()
        .map(|t| t["appliedRestoreId"].as_str().map(str::to_string))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn after_garbage_collection_s3_holds_exactly_what_the_retained_manifests_reference() {
    let input = input_topic(1, 0..4_000).await;
    let mut job = Job::new("ckpt-gc", &input, 1, count_processor()).await;
    job.enable_checkpoints(Duration::from_secs(3600), 2, None);
    job.env.push((
        "STREAMKEEPER_CHECKPOINT_GC_GRACE_SECONDS".into(),
        "0".into(),
    ));
    let address = format!("127.0.0.1:{}", free_port());
    let mut worker = job.start_listening(&address);
    let mut sequences = Vec::new();
    for round in 1..=5u32 {
        job.wait_until_caught_up(&mut worker, Duration::from_secs(120));
        sequences.push(checkpoint_now(&address)[&0].0);
        more_input(&job, round * 4_000..(round + 1) * 4_000);
    }
    // Retention runs right after each checkpoint; wait for the last run to settle.
    let newest: BTreeSet<u64> = sequences[sequences.len() - 2..].iter().copied().collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let retained = manifests(&job, 0).await;
        let referenced: BTreeSet<String> = retained
            .values()
            .flat_map(|m| m.files.iter().map(|f| f.object_key.clone()))
            .collect();
        let objects = object_keys(&job, 0).await;
        if retained.keys().copied().collect::<BTreeSet<_>>() == newest && objects == referenced {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "after retention: manifests {:?} (want {newest:?}); objects not referenced: {:?}; referenced but missing: {:?}",
            retained.keys().collect::<Vec<_>>(),
            objects.difference(&referenced).collect::<Vec<_>>(),
            referenced.difference(&objects).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(
        metric(&address, "streamkeeper_checkpoint_gc_deleted_objects_total") > 0.0,
        "deletions are counted"
    );
    worker.terminate(Duration::from_secs(30));
}

#[tokio::test(flavor = "multi_thread")]
async fn an_s3_outage_does_not_stop_processing_and_checkpoints_resume() {
    let settings = s3_settings();
    let proxy = Proxy::start(settings.endpoint.trim_start_matches("http://"));
    let input = input_topic(2, 0..8_000).await;
    let mut job = Job::new("ckpt-outage", &input, 2, aggregate_processor()).await;
    job.enable_checkpoints(Duration::from_secs(1), 3, Some(&proxy.endpoint()));
    let address = format!("127.0.0.1:{}", free_port());
    let mut worker = job.start_listening(&address);
    job.wait_until_caught_up(&mut worker, Duration::from_secs(180));
    wait_for("a first checkpoint", Duration::from_secs(60), || {
        metric(&address, "streamkeeper_checkpoints_total") >= 2.0
    });

    proxy.close();
    let failures_at_close = metric(&address, "streamkeeper_checkpoint_failures_total");
    more_input(&job, 8_000..16_000);
    // A checkpoint whose last upload was answered just before the close may still be
    // counted; once an attempt has failed, nothing started before the close is in flight.
    wait_for("a failed attempt", Duration::from_secs(60), || {
        metric(&address, "streamkeeper_checkpoint_failures_total") > failures_at_close
    });
    let before = metric(&address, "streamkeeper_checkpoints_total");
    job.wait_until_caught_up(&mut worker, Duration::from_secs(180));
    // Several attempts with backoff fail while S3 stays away (0.5 s, 1 s, 2 s, ...).
    wait_for(
        "checkpoint failures counted",
        Duration::from_secs(60),
        || metric(&address, "streamkeeper_checkpoint_failures_total") >= 6.0,
    );
    assert_eq!(
        metric(&address, "streamkeeper_checkpoints_total"),
        before,
        "no checkpoint counts while S3 is away"
    );
    assert!(
        worker.child.try_wait().unwrap().is_none(),
        "the worker lives"
    );
    assert!(
        metric(&address, "streamkeeper_checkpoint_age_seconds") > 0.0,
        "the newest durable checkpoint ages"
    );

    proxy.open();
    let wanted = task_changelog_offsets(&address);
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let mut newest = BTreeMap::new();
        for task in 0..2 {
            let offsets = manifests(&job, task).await;
            let best = offsets
                .values()
                .map(|m| m.changelog_offset)
                .max()
                .unwrap_or(-1);
            newest.insert(task, best);
        }
        if newest == wanted {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "checkpoints did not catch up: {newest:?}, want {wanted:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(metric(&address, "streamkeeper_checkpoints_total") > before);
    worker.terminate(Duration::from_secs(30));

    let reference = reference(&input, 2).await;
    assert_same_output(&job.output(), &reference.output());
    assert_same_state(&job, &reference);
}

/// The next changelog offset of every task's committed state, from `/v1/tasks`.
fn task_changelog_offsets(address: &str) -> BTreeMap<u32, i64> {
    let (_, body) = http_get(address, "/v1/tasks").unwrap();
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    json["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["task"].as_u64().unwrap() as u32,
                t["nextChangelogOffset"].as_i64().unwrap(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn crashes_during_uploads_manifest_writes_and_downloads_end_like_an_uninterrupted_run() {
    const PARTITIONS: i32 = 4;
    let input = input_topic(PARTITIONS, 0..40_000).await;
    let reference = reference(&input, PARTITIONS).await;

    let mut job = Job::new("ckpt-crashy", &input, PARTITIONS, aggregate_processor()).await;
    job.enable_checkpoints(Duration::from_secs(1), 2, None);
    job.env.push((
        "STREAMKEEPER_CHECKPOINT_GC_GRACE_SECONDS".into(),
        "0".into(),
    ));
    let sweep = [
        "mid-upload:1",
        "after-manifest-write:1",
        "mid-upload:5",
        "after-manifest-write:3",
        "mid-download:1",
        "mid-upload:2",
        "after-manifest-write:2",
        "mid-download:2",
    ];
    let mut crashes = 0;
    for point in sweep {
        // A download needs a task without local state (and a checkpoint to download).
        if point.starts_with("mid-download") {
            let _ = std::fs::remove_dir_all(job.config.state.dir.join("task-1"));
        }
        let mut worker = job.start(Some(point));
        if worker.wait_for_crash(Duration::from_secs(90)) {
            crashes += 1;
        } else {
            worker.kill9();
        }
    }
    assert!(
        crashes >= 6,
        "only {crashes} of the swept failpoints were reached"
    );
    assert!(
        !manifests(&job, 1).await.is_empty(),
        "checkpoints were written"
    );
    run_to_completion(&job);

    assert_eq!(job.committed_offsets(), reference.committed_offsets());
    assert_same_output(&job.output(), &reference.output());
    assert_same_state(&job, &reference);
}
