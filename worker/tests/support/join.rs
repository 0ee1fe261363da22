//! The join tests' helpers: records placed in the partition a partitioner gives their key, the
//! join processor, waiting until the job consumed its topics, and its output as compared.

use super::*;
use rdkafka::TopicPartitionList;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseRecord, Producer};
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use streamkeeper_contract::Versioned;
use streamkeeper_contract::co_partitioning::Partitioner;
use streamkeeper_contract::task_report::{TaskReport, TaskReportsDocument};
use streamkeeper_contract::worker_config::{
    JoinKind, JoinLeft, JoinMode, JoinRight, JoinWindowConfig, ProcessorConfig, ProcessorKind,
};

/// Partitions of every topic of the join tests.
pub const PARTITIONS: i32 = 4;

/// A record as produced: its Kafka key, its value (`None`: a tombstone) and its timestamp,
/// which is also its event time.
#[derive(Clone, Debug)]
pub struct Produced {
    pub key: String,
    pub value: Option<Value>,
    pub time: i64,
}

/// One output record as compared: key, left and right sides.
pub type Joined = (String, Value, Value);

/// An hour ago: recent enough for the topics' retention, with room for the records' times.
pub fn base_time() -> i64 {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    i64::try_from(now.as_millis()).unwrap() - 3_600_000
}

/// Produces `records` to `topic`, each in the partition murmur2 (the Java client's default)
/// gives its key, with its time as the Kafka timestamp.
pub fn produce_placed(topic: &str, records: &[Produced]) {
    produce_placed_by(topic, records, Partitioner::Murmur2);
}

/// [`produce_placed`] by `partitioner`.
pub fn produce_placed_by(topic: &str, records: &[Produced], partitioner: Partitioner) {
    let raw = records.iter().map(|record| {
        let payload = record.value.as_ref().map(Value::to_string);
        (record.key.clone(), payload, record.time)
    });
    produce_raw_placed_by(topic, PARTITIONS, partitioner, raw);
}

/// Produces `(key, payload, time)` records (a `None` payload: a tombstone) to `topic` of
/// `partitions`, each in the partition `partitioner` gives its key, with `time` as its Kafka
/// timestamp.
pub fn produce_raw_placed_by(
    topic: &str,
    partitions: i32,
    partitioner: Partitioner,
    records: impl IntoIterator<Item = (String, Option<String>, i64)>,
) {
    let place = |key: &str| {
        let partition = partitioner.partition(key.as_bytes(), partitions as u32);
        i32::try_from(partition).unwrap()
    };
    produce_raw_to(topic, place, records);
}

/// Produces `(key, payload, time)` records to `topic`, each in the partition `place` gives its
/// key, with `time` as its Kafka timestamp.
pub fn produce_raw_to(
    topic: &str,
    place: impl Fn(&str) -> i32,
    records: impl IntoIterator<Item = (String, Option<String>, i64)>,
) {
    let producer = producer();
    for (key, payload, time) in records {
        let mut message = BaseRecord::<String, String>::to(topic)
            .key(&key)
            .partition(place(&key))
            .timestamp(time);
        if let Some(payload) = &payload {
            message = message.payload(payload);
        }
        loop {
            match producer.send(message) {
                Ok(()) => break,
                Err((_, back)) => {
                    message = back;
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
        }
    }
    producer.flush(TIMEOUT).unwrap();
}

pub async fn topic(name: &str) -> String {
    let topic = unique_name(name);
    create_topic(&topic, PARTITIONS, false).await;
    topic
}

pub fn join_processor(
    join: JoinKind,
    mode: JoinMode,
    right: JoinRight,
    window: Option<JoinWindowConfig>,
    history: Option<Duration>,
) -> ProcessorConfig {
    ProcessorConfig {
        key_field: "card".into(),
        time_field: Some("ts".into()),
        kind: ProcessorKind::Join {
            join,
            mode,
            left: JoinLeft::default(),
            right,
            window,
            history,
            partitioner: Partitioner::Murmur2,
        },
    }
}

/// Waits until the job has committed every record of `topics` (or the worker exits).
pub fn wait_consumed(job: &Job, worker: &mut Worker, topics: &[&str]) {
    let topics: Vec<_> = topics.iter().map(|topic| (*topic, PARTITIONS)).collect();
    wait_consumed_of(job, worker, &topics);
}

/// [`wait_consumed`] of topics of other partition counts than [`PARTITIONS`].
pub fn wait_consumed_of(job: &Job, worker: &mut Worker, topics: &[(&str, i32)]) {
    for (topic, partitions) in topics {
        let ends = end_offsets(topic, *partitions);
        wait_while_running(worker, Duration::from_secs(180), || {
            let committed = committed_offsets(&job.config.job.group_id(), topic, *partitions);
            if committed == ends {
                return Ok(());
            }
            Err(format!(
                "{topic} not consumed: committed {committed:?}, ends {ends:?}"
            ))
        });
    }
}

/// Waits until `done` says so, for at most `limit`, failing with `done`'s last reason (and the
/// worker's log) then, or as soon as the worker exits.
pub fn wait_while_running(
    worker: &mut Worker,
    limit: Duration,
    mut done: impl FnMut() -> Result<(), String>,
) {
    let deadline = Instant::now() + limit;
    loop {
        let why = match done() {
            Ok(()) => return,
            Err(why) => why,
        };
        if let Some(status) = worker.child.try_wait().unwrap() {
            panic!("worker exited with {status}; log:\n{}", worker.log_tail());
        }
        assert!(
            Instant::now() < deadline,
            "{why}; log:\n{}",
            worker.log_tail()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Waits until the job's committed output holds `count` joined records.
pub fn wait_joined(job: &Job, worker: &mut Worker, count: usize) {
    wait_while_running(worker, Duration::from_secs(180), || {
        let joined = joined_output(job).len();
        if joined >= count {
            return Ok(());
        }
        Err(format!("{joined} of {count} joined"))
    });
}

/// A left table join of the transactions' `card` with the `cards` table (versions timed by
/// `ts`, a day of history), of `kind` (`table` or `globalTable`), the transactions re-keyed
/// through `left_repartition` when given.
pub fn card_table_join(
    kind: JoinKind,
    cards: &str,
    left_repartition: Option<String>,
) -> ProcessorConfig {
    ProcessorConfig {
        key_field: "card".into(),
        time_field: Some("ts".into()),
        kind: ProcessorKind::Join {
            join: kind,
            mode: JoinMode::Left,
            left: JoinLeft {
                repartition_topic: left_repartition,
            },
            right: JoinRight {
                topic: cards.into(),
                repartition_topic: None,
                key_field: None,
                time_field: Some("ts".into()),
            },
            window: None,
            history: Some(Duration::from_secs(24 * 3600)),
            partitioner: Partitioner::Murmur2,
        },
    }
}

/// The job's committed output, as (key, left, right), sorted.
pub fn joined_output(job: &Job) -> Vec<Joined> {
    let mut joined: Vec<Joined> = job
        .output()
        .into_values()
        .flatten()
        .map(|(key, value)| {
            let value: Value = serde_json::from_str(&value).unwrap();
            (key, value["left"].clone(), value["right"].clone())
        })
        .collect();
    joined.sort_by_key(|entry| format!("{entry:?}"));
    joined
}

pub fn sorted(mut joined: Vec<Joined>) -> Vec<Joined> {
    joined.sort_by_key(|entry| format!("{entry:?}"));
    joined
}

/// Asserts a crashed job's output is `want` with each of `transactions` joined once, and so is
/// the uninterrupted `reference` job's.
pub fn assert_joined_once(crashy: &Job, reference: &Job, want: &[Joined], transactions: usize) {
    let got = joined_output(crashy);
    assert_eq!(got.len(), transactions, "each transaction joined once");
    assert_eq!(got, want);
    assert_eq!(joined_output(reference), want);
}

/// A version of each of `cards` cards per round of `rounds`, in time order: key `card-<i>`,
/// at `base + round * 100 s + i`, with `limit` 100 × (round + 1).
pub fn card_versions(base: i64, cards: u32, rounds: std::ops::Range<i64>) -> Vec<Produced> {
    let mut table = Vec::new();
    for round in rounds {
        for i in 0..cards {
            let time = base + round * 100_000 + i64::from(i);
            table.push(Produced {
                key: card(i),
                value: Some(
                    serde_json::json!({"card": card(i), "limit": 100 * (round + 1), "ts": time}),
                ),
                time,
            });
        }
    }
    table
}

pub fn card(index: u32) -> String {
    format!("card-{index}")
}

/// The partition murmur2 gives `key`: each partition is one task with its own stream time.
pub fn partition_of_key(key: &str) -> u32 {
    Partitioner::Murmur2.partition(key.as_bytes(), PARTITIONS as u32)
}

/// The expected table join: a left record at `t` meets the version of its key with the greatest
/// time at or before `t` (a tombstone: none); a record older than the partition's table time
/// minus `history` is late and dropped.
pub fn expected_table_join(
    table: &[Produced],
    stream: &[Produced],
    mode: JoinMode,
    history_ms: i64,
) -> Vec<Joined> {
    let mut table_time: BTreeMap<u32, i64> = BTreeMap::new();
    for version in table {
        let time = table_time
            .entry(partition_of_key(&version.key))
            .or_insert(i64::MIN);
        *time = (*time).max(version.time);
    }
    let mut joined = Vec::new();
    for record in stream {
        let table_time = table_time
            .get(&partition_of_key(&record.key))
            .copied()
            .unwrap_or(i64::MIN);
        if record.time < table_time.saturating_sub(history_ms) {
            continue;
        }
        let version = table
            .iter()
            .filter(|version| version.key == record.key && version.time <= record.time)
            .max_by_key(|version| version.time);
        let left = record.value.clone().unwrap();
        match (version.and_then(|version| version.value.clone()), mode) {
            (Some(right), _) => joined.push((record.key.clone(), left, right)),
            (None, JoinMode::Left) => joined.push((record.key.clone(), left, Value::Null)),
            (None, _) => {}
        }
    }
    sorted(joined)
}

/// Starts the job at `point` and waits for the abort, wiping the job's volume first at a
/// `mid-restore` point (every task then rebuilds from the changelog); `false` when the worker
/// ran out of input first (it is stopped then: a stop, not a crash).
pub fn crash_at(job: &Job, point: &str) -> bool {
    if point.starts_with("mid-restore") {
        for task in 0..job.partitions {
            let _ = std::fs::remove_dir_all(job.config.state.dir.join(format!("task-{task}")));
        }
    }
    let mut worker = job.start(Some(point));
    if worker.wait_for_crash(Duration::from_secs(120)) {
        return true;
    }
    worker.kill9();
    false
}

/// [`crash_at`] each of `points` in turn, then a kill -9 from outside after each of
/// `delays_ms`; how many failpoints were reached.
pub fn crash_sweep(job: &Job, points: &[&str], delays_ms: &[u64]) -> usize {
    let crashes = points.iter().filter(|point| crash_at(job, point)).count();
    for delay_ms in delays_ms {
        let mut worker = job.start(None);
        std::thread::sleep(Duration::from_millis(*delay_ms));
        worker.kill9();
    }
    crashes
}

/// The worker's task reports, as `GET /v1/tasks` answers (empty while it does not answer).
pub fn task_reports(address: &str) -> Vec<TaskReport> {
    http_get(address, "/v1/tasks")
        .filter(|(status, _)| *status == 200)
        .and_then(|(_, body)| TaskReportsDocument::from_json(body.as_bytes()).ok())
        .map(|document| document.tasks)
        .unwrap_or_default()
}
