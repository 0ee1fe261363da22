//! WebAssembly jobs against the real broker and S3: worker processes fetch the velocity guest
//! (`examples/wasm`, built by `examples/wasm/build.sh`) from S3 by its digest and run it.
//!
//! - Determinism across copies (the Python guest): two pods, each the active of one task and the standby of the
//!   other; input flows while one is killed with kill -9 (its standby is promoted) and comes
//!   back on a wiped volume (it fetches the module again and rebuilds its copies). Once the
//!   input is done, every task's active and standby hold the same state, key by key, and every
//!   transaction is answered exactly once with the answer the card's earlier transactions give.
//! - The whole record (the Python `describe` guest): a record's Kafka key, headers and
//!   timestamp reach the guest as they were produced.
//! - Poison among normal records (the C guest): a record that loops, allocates without end, traps
//!   or sleeps is dead-lettered with its reason, the others are answered as if it never was,
//!   and the task catches up with its input.
//! - Upgrading the logic (the C guest): a new build of the module (other bytes, another digest) stops on the
//!   old build's state, naming both digests and how to declare it; declared in the job
//!   (`readsStateOf`), it goes on from that state and records its own digest.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

mod support;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;
use streamkeeper_contract::task_report::{TaskPhase, TaskRole};
use streamkeeper_contract::worker_config::{
    ProcessorConfig, ProcessorKind, RocksDbTuning, WasmLimitsConfig, WasmModuleSource,
};
use streamkeeper_worker::store::{OpenOutcome, RocksStore, StateStore};
use support::standby::*;
use support::wasm::{guest_bytes, upload};
use support::*;

const PARTITIONS: i32 = 2;
const CARDS: u32 = 50;
const MAX_TRANSACTIONS: u64 = 3;
/// One minute, and [`card_event`]s are 10 ms apart: a card's recent transactions vary.
const WINDOW_MS: i64 = 60_000;
/// The same component with a custom section appended: the same logic, other bytes, another
/// digest (what a rebuild of a bug fix looks like to the worker).
fn rebuilt(component: &[u8]) -> Vec<u8> {
    let name = b"streamkeeper-test-build";
    let payload = b"2";
    let size = u8::try_from(1 + name.len() + payload.len()).unwrap();
    assert!(size < 0x80, "one LEB128 byte");
    let mut bytes = component.to_vec();
    bytes.extend([0x00, size, u8::try_from(name.len()).unwrap()]);
    bytes.extend(name);
    bytes.extend(payload);
    bytes
}

fn velocity(module: WasmModuleSource, reads_state_of: Vec<String>) -> ProcessorConfig {
    ProcessorConfig {
        key_field: "card".into(),
        time_field: Some("ts".into()),
        kind: ProcessorKind::Wasm {
            module,
            config: serde_json::json!({"maxTransactions": MAX_TRANSACTIONS, "windowMinutes": WINDOW_MS / 60_000}),
            limits: WasmLimitsConfig::default(),
            reads_state_of,
        },
    }
}

/// A WebAssembly job with checkpoints on: the module is read with the job's S3 settings.
async fn wasm_job(name: &str, input: &str, partitions: i32) -> Job {
    let mut job = Job::new(name, input, partitions, support::count_processor()).await;
    job.enable_checkpoints(Duration::from_secs(5), 3, None);
    job
}

/// Checks every committed answer against the card's earlier transactions (each partition in
/// order) and that no transaction is answered twice; the number answered.
fn checked_answers(job: &Job) -> usize {
    let mut answered = std::collections::BTreeSet::new();
    for records in job.output().into_values() {
        let mut kept: BTreeMap<String, Vec<i64>> = BTreeMap::new();
        for (_, value) in records {
            let answer: serde_json::Value = serde_json::from_str(&value).unwrap();
            let card = answer["transaction"]["card"].as_str().unwrap().to_string();
            let at = answer["transaction"]["ts"].as_i64().unwrap();
            assert!(answered.insert(at), "transaction at {at} answered twice");
            let times = kept.entry(card.clone()).or_default();
            let recent = times.iter().filter(|&&t| t > at - WINDOW_MS).count() as u64 + 1;
            assert_eq!(answer["recent"].as_u64(), Some(recent), "{card}: {answer}");
            assert_eq!(
                answer["flagged"].as_bool(),
                Some(recent > MAX_TRANSACTIONS),
                "{answer}"
            );
            times.push(at);
            let excess = times.len().saturating_sub(MAX_TRANSACTIONS as usize);
            times.drain(..excess);
        }
    }
    answered.len()
}

fn produce_cards(input: &str, from: u32, to: u32) {
    produce(input, PARTITIONS, (from..to).map(|i| card_event(i, CARDS)));
}

/// Every key of `task`'s copy on a stopped pod's volume.
fn copy_on(volume: &std::path::Path, task: u32) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let opened = RocksStore::open(volume, task, &RocksDbTuning::default()).unwrap();
    assert!(
        matches!(opened.outcome, OpenOutcome::Valid(_)),
        "task {task} on {}: {:?}",
        volume.display(),
        opened.outcome
    );
    opened
        .store
        .scan(&[0x01], &[0xff, 0xff])
        .unwrap()
        .into_iter()
        .collect()
}

fn state_dir(pod: &Pod) -> PathBuf {
    pod.state.clone()
}

#[tokio::test(flavor = "multi_thread")]
async fn standbys_hold_the_actives_state_key_by_key_through_a_kill_and_a_wiped_volume() {
    let input = unique_name("wasm-standby-input");
    create_topic(&input, PARTITIONS, false).await;
    let mut job = wasm_job("wasm-standby", &input, PARTITIONS).await;
    // The Python guest: the slowest to fetch and compile, on every pod and after the wipe.
    let module = upload(&job, "python-velocity", guest_bytes("python-velocity")).await;
    job.config.processor = velocity(module, Vec::new());
    let mut a = Pod::start(&mut job, "wasm-0", 2);
    let b = Pod::start(&mut job, "wasm-1", 2);
    let crossed = |generation| {
        document(
            generation,
            &[("wasm-0", &["wasm-1"]), ("wasm-1", &["wasm-0"])],
        )
    };
    assign_all(&[&a, &b], &crossed(1));
    wait_for_or(
        "both standbys warm",
        Duration::from_secs(120),
        || warm_standby(&a, 1, 1) && warm_standby(&b, 0, 1),
        || pods_story(&[&a, &b]),
    );

    let producer = std::thread::spawn({
        let input = input.clone();
        move || {
            for chunk in 0..40 {
                produce_cards(&input, chunk * 100, chunk * 100 + 100);
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    });
    wait_for("task 0 commits on wasm-0", Duration::from_secs(60), || {
        active_with_commits(&a, 0, 3)
    });
    a.worker.kill9();
    assign_all(&[&b], &document(2, &[("wasm-1", &[]), ("wasm-1", &[])]));
    let took = wait_for(
        "task 0 commits on its standby",
        Duration::from_secs(30),
        || active_with_commits(&b, 0, 1),
    );
    eprintln!(
        "kill -9 → task 0 committed on wasm-1 {:.3} s after the document",
        took.as_secs_f64()
    );

    // wasm-0 comes back on an empty volume: the module fetched again, both copies rebuilt.
    std::fs::remove_dir_all(&a.state).unwrap();
    a.restart(&mut job, 2);
    assign_all(
        &[&a, &b],
        &document(3, &[("wasm-1", &["wasm-0"]), ("wasm-1", &["wasm-0"])]),
    );
    producer.join().unwrap();
    wait_for_or(
        "the rebuilt copies are warm",
        Duration::from_secs(120),
        || warm_standby(&a, 0, 50) && warm_standby(&a, 1, 50),
        || pods_story(&[&a, &b]),
    );
    assign_all(&[&a, &b], &crossed(4));
    wait_for("the input is done", Duration::from_secs(120), || {
        job.committed_offsets() == job.input_ends()
    });
    wait_for_or(
        "each standby has applied everything its active wrote",
        Duration::from_secs(60),
        || in_step(&a, &b, 0) && in_step(&b, &a, 1),
        || pods_story(&[&a, &b]),
    );
    assert_eq!(checked_answers(&job), 4_000, "every transaction answered");
    assert!(
        a.worker
            .log()
            .contains("WebAssembly module fetched and its digest checked"),
        "the wiped pod fetched the module again"
    );

    let mut b = b;
    a.worker.terminate(Duration::from_secs(30));
    b.worker.terminate(Duration::from_secs(30));
    for task in 0..PARTITIONS as u32 {
        let (on_a, on_b) = (copy_on(&state_dir(&a), task), copy_on(&state_dir(&b), task));
        let guest_keys = on_a.keys().filter(|k| k.starts_with(b"g/")).count();
        assert!(guest_keys > 0, "task {task}'s guest state is there");
        let differing: Vec<_> = on_a
            .keys()
            .chain(on_b.keys())
            .filter(|key| on_a.get(*key) != on_b.get(*key))
            .map(|key| String::from_utf8_lossy(key).into_owned())
            .collect();
        assert!(
            differing.is_empty(),
            "task {task}: the active's and the standby's state differ at {differing:?}"
        );
        eprintln!("task {task}: {} keys, the same on both pods", on_a.len());
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_new_module_goes_on_from_the_old_ones_state_only_when_the_job_declares_it() {
    let input = unique_name("wasm-upgrade-input");
    create_topic(&input, PARTITIONS, false).await;
    let mut job = wasm_job("wasm-upgrade", &input, PARTITIONS).await;
    let guest = guest_bytes("c-velocity");
    let old = upload(&job, "c-velocity", guest.clone()).await;
    let new = upload(&job, "c-velocity-2", rebuilt(&guest)).await;
    assert_ne!(old.sha256, new.sha256);
    job.config.processor = velocity(old.clone(), Vec::new());
    produce_cards(&input, 0, 1_000);
    let mut worker = job.start(None);
    job.wait_until_caught_up(&mut worker, Duration::from_secs(120));
    worker.terminate(Duration::from_secs(30));

    // Another build, undeclared: each task stops on the state the old one built.
    job.config.processor = velocity(new.clone(), Vec::new());
    produce_cards(&input, 1_000, 2_000);
    let listen = format!("127.0.0.1:{}", free_port());
    let mut worker = job.start_listening(&listen);
    wait_for("both tasks stop", Duration::from_secs(60), || {
        let reports = active_reports(&listen);
        reports.len() == PARTITIONS as usize && reports.iter().all(|r| r.phase == TaskPhase::Failed)
    });
    let reason = active_reports(&listen)[0]
        .reason
        .clone()
        .unwrap_or_default();
    let declare = format!("spec.processor.wasm.readsStateOf: [\"{}\"]", old.sha256);
    assert!(
        reason.contains(&old.sha256) && reason.contains(&new.sha256) && reason.contains(&declare),
        "{reason}"
    );
    assert_eq!(
        job.committed_offsets().values().sum::<i64>(),
        1_000,
        "nothing more ran"
    );
    worker.terminate(Duration::from_secs(30));

    // Declared: it goes on from the old state (the answers to the new transactions count the
    // old ones) and records its own digest.
    job.config.processor = velocity(new.clone(), vec![old.sha256.clone()]);
    let mut worker = job.start(None);
    job.wait_until_caught_up(&mut worker, Duration::from_secs(120));
    assert!(
        worker
            .log()
            .contains("going on from it, recording this build"),
        "{}",
        worker.log_tail()
    );
    worker.terminate(Duration::from_secs(30));
    assert_eq!(checked_answers(&job), 2_000);
    for (task, state) in job.local_state() {
        let identity =
            String::from_utf8_lossy(&state[streamkeeper_worker::processor::keys::PROCESSOR])
                .into_owned();
        assert!(
            identity.contains(&new.sha256) && !identity.contains(&old.sha256),
            "task {task} records the new build: {identity}"
        );
    }
}

/// `task`'s standby on `standby` has applied the changelog up to where its active on `active`
/// wrote it.
fn in_step(active: &Pod, standby: &Pod, task: u32) -> bool {
    let (Some(active), Some(standby)) = (active.report(task), standby.report(task)) else {
        return false;
    };
    active.role == TaskRole::Active
        && standby.role == TaskRole::Standby
        && active.next_changelog_offset.is_some()
        && standby.next_changelog_offset == active.next_changelog_offset
}

/// The reports of the active tasks of the worker listening on `address`.
fn active_reports(address: &str) -> Vec<streamkeeper_contract::TaskReport> {
    reports_at(address)
        .into_iter()
        .filter(|r| r.role == TaskRole::Active)
        .collect()
}

/// Each pod's reports and log tail, for a failed wait.
fn pods_story(pods: &[&Pod]) -> String {
    pods.iter()
        .map(|pod| {
            format!(
                "{}: {:?}\n{}",
                pod.name,
                pod.reports(),
                pod.worker.log_tail()
            )
        })
        .collect::<Vec<_>>()
        .join("\n\n")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_guest_sees_each_records_kafka_key_headers_and_timestamp() {
    use rdkafka::message::{Header, OwnedHeaders};
    use rdkafka::producer::{BaseRecord, Producer};
    let input = unique_name("wasm-describe-input");
    create_topic(&input, 1, false).await;
    let mut job = wasm_job("wasm-describe", &input, 1).await;
    let module = upload(&job, "python-describe", guest_bytes("python-describe")).await;
    let mut processor = velocity(module, Vec::new());
    if let ProcessorKind::Wasm { config, .. } = &mut processor.kind {
        *config = serde_json::Value::Null;
    }
    job.config.processor = processor;

    let producer = producer();
    let value = r#"{"card":"c-1","ts":1764000000000}"#;
    let headers = OwnedHeaders::new()
        .insert(Header {
            key: "trace",
            value: Some("abc"),
        })
        .insert(Header {
            key: "empty",
            value: None::<&[u8]>,
        })
        .insert(Header {
            key: "binary",
            value: Some(&[0xff_u8, 0x00][..]),
        });
    producer
        .send(
            BaseRecord::to(&input)
                .partition(0)
                .key("kafka-key-1")
                .payload(value)
                .headers(headers)
                .timestamp(1_764_000_000_123),
        )
        .map_err(|(error, _)| error)
        .unwrap();
    producer
        .send(BaseRecord::<(), _>::to(&input).partition(0).payload(value))
        .map_err(|(error, _)| error)
        .unwrap();
    producer.flush(Duration::from_secs(30)).unwrap();

    let mut worker = job.start(None);
    job.wait_until_caught_up(&mut worker, Duration::from_secs(120));
    worker.terminate(Duration::from_secs(30));
    let described: Vec<serde_json::Value> = job.output()[&0]
        .iter()
        .map(|(_, value)| serde_json::from_str(value).unwrap())
        .collect();
    assert_eq!(described.len(), 2, "{described:?}");
    let first = &described[0];
    assert_eq!(first["key"], "c-1");
    assert_eq!(first["value"]["card"], "c-1");
    assert_eq!(first["kafkaKey"], "kafka-key-1");
    assert_eq!(
        first["headers"],
        serde_json::json!([["trace", "abc"], ["empty", null], ["binary", [255, 0]]])
    );
    assert_eq!(first["timestampMs"], 1_764_000_000_123_i64);
    assert_eq!(first["partition"], 0);
    assert_eq!(first["offset"], 0);
    assert_eq!(first["eventTimeMs"], 1_764_000_000_000_i64);
    let second = &described[1];
    assert_eq!(second["kafkaKey"], serde_json::Value::Null);
    assert_eq!(second["headers"], serde_json::json!([]));
    assert_eq!(second["offset"], 1);
    assert!(second["timestampMs"].as_i64().is_some(), "{second}");
}

#[tokio::test(flavor = "multi_thread")]
async fn poisoned_records_among_normal_ones_are_dead_lettered_and_the_task_catches_up() {
    let input = unique_name("wasm-poison-input");
    create_topic(&input, 1, false).await;
    let mut job = wasm_job("wasm-poison", &input, 1).await;
    let module = upload(&job, "c-velocity", guest_bytes("c-velocity")).await;
    let mut processor = velocity(module, Vec::new());
    if let ProcessorKind::Wasm { limits, .. } = &mut processor.kind {
        // A small budget: the endless loop's and the endless sleep's fuel run out soon.
        limits.fuel_per_record = 20_000_000;
        limits.memory_bytes = 64 << 20;
    }
    job.config.processor = processor;
    let poisons = ["loop", "allocate", "trap", "sleep"];
    let records: Vec<(String, String)> = (0..200u32)
        .map(|i| {
            let poison = (i % 50 == 25).then(|| poisons[(i / 50) as usize]);
            let value = match poison {
                Some(poison) => format!(
                    r#"{{"card":"c{}","ts":{},"poison":"{poison}"}}"#,
                    i % 7,
                    i * 1000
                ),
                None => format!(r#"{{"card":"c{}","ts":{}}}"#, i % 7, i * 1000),
            };
            (format!("c{}", i % 7), value)
        })
        .collect();
    produce(&input, 1, records);

    let mut worker = job.start(None);
    job.wait_until_caught_up(&mut worker, Duration::from_secs(120));
    worker.terminate(Duration::from_secs(30));
    let dead: Vec<(String, String)> = read_committed(&job.config.kafka.dead_letter_topic, 1)
        .remove(&0)
        .unwrap_or_default()
        .into_iter()
        .map(|record| {
            let value: serde_json::Value =
                serde_json::from_str(&record.value.unwrap_or_default()).unwrap();
            (
                value["poison"].as_str().unwrap().to_string(),
                record.headers["streamkeeper.reason"].clone(),
            )
        })
        .collect();
    let reasons = |pairs: &[(&str, &str)]| {
        pairs
            .iter()
            .map(|(p, r)| (p.to_string(), r.to_string()))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        dead,
        reasons(&[
            ("loop", "guest_out_of_fuel"),
            ("allocate", "guest_out_of_memory"),
            ("trap", "guest_trapped"),
            ("sleep", "guest_out_of_fuel"),
        ])
    );
    // Every other record answered once, as if the poisoned ones had never been: each card's
    // answers count only its normal transactions.
    let answers = job.output().remove(&0).unwrap_or_default();
    assert_eq!(answers.len(), 196);
    let mut seen: BTreeMap<String, u64> = BTreeMap::new();
    for (_, value) in answers {
        let answer: serde_json::Value = serde_json::from_str(&value).unwrap();
        assert!(answer["transaction"].get("poison").is_none(), "{answer}");
        let card = answer["transaction"]["card"].as_str().unwrap().to_string();
        let count = seen.entry(card).or_default();
        *count += 1;
        // 7 cards, 7 s apart per card, a 60 s window: the 9 latest count (capped at 3 kept).
        let expected = (*count).min(MAX_TRANSACTIONS + 1);
        assert_eq!(answer["recent"].as_u64(), Some(expected), "{answer}");
    }
}
