//! The card-count scenario the end-to-end tests share: child processes (the node agent, the
//! operator) stopped when a test ends, the binaries cargo built, card events produced to the
//! input, and the committed output checked to be exactly 1, 2, …, n per card (or, for a join
//! of the events with a card table, every event joined exactly once).

use super::{TIMEOUT, support};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use streamkeeper_contract::co_partitioning::Partitioner;

/// A child process stopped when the test ends (SIGTERM first: the node agent stops its pods'
/// processes on the way out); its log is printed if the test failed.
pub struct Process {
    name: &'static str,
    pub child: Child,
    log: PathBuf,
}

impl Process {
    pub fn spawn(name: &'static str, command: &mut Command, log: PathBuf) -> Self {
        let file = std::fs::File::create(&log).unwrap();
        let child = command
            .stdout(Stdio::from(file.try_clone().unwrap()))
            .stderr(Stdio::from(file))
            .spawn()
            .unwrap_or_else(|e| panic!("{name} starts: {e}"));
        Self { name, child, log }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline && matches!(self.child.try_wait(), Ok(None)) {
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            eprintln!(
                "--- {} log (tail) ---\n{}",
                self.name,
                lines[lines.len().saturating_sub(80)..].join("\n")
            );
        }
    }
}

/// A binary cargo built next to the operator's.
pub fn sibling_binary(name: &str) -> PathBuf {
    let operator = Path::new(env!("CARGO_BIN_EXE_streamkeeper-operator"));
    let path = operator.with_file_name(name);
    assert!(
        path.exists(),
        "{} is missing: build it with `cargo build --workspace --all-targets` (tests/run.sh does)",
        path.display()
    );
    path
}

/// Events `range` as the card-count job reads them: key and `card` field `card-<i*7 mod cards>`.
pub fn produce_cards(topic: &str, cards: u32, range: std::ops::Range<u32>) {
    let producer = card_producer();
    send_cards(&producer, topic, cards, range);
}

fn card_producer() -> ThreadedProducer<DefaultProducerContext> {
    ClientConfig::new()
        .set("bootstrap.servers", support::kafka_bootstrap())
        .set("enable.idempotence", "true")
        .create()
        .unwrap()
}

/// Sends the events of `range` and waits until every one is acknowledged.
fn send_cards(
    producer: &ThreadedProducer<DefaultProducerContext>,
    topic: &str,
    cards: u32,
    range: std::ops::Range<u32>,
) {
    for index in range {
        let card = format!("card-{}", (index * 7) % cards);
        // `n` names the event and `ts` is its event time, for a join of the events (a count
        // reads neither).
        let value = format!(
            r#"{{"card":"{card}","amount":{},"n":{index},"ts":{}}}"#,
            index % 97 + 1,
            now_ms()
        );
        let mut record = BaseRecord::to(topic).key(&card).payload(&value);
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((_, back)) => {
                    record = back;
                    producer.poll(Duration::from_millis(10));
                }
            }
        }
    }
    // A busy broker can take longer than one flush timeout; the records stay queued meanwhile.
    let deadline = Instant::now() + Duration::from_secs(300);
    while let Err(error) = producer.flush(TIMEOUT) {
        assert!(Instant::now() < deadline, "producing to {topic}: {error}");
    }
}

fn now_ms() -> u64 {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    now.map_or(0, |elapsed| {
        u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX)
    })
}

/// A table of the `cards` cards, one version each, for the events to be joined with: key
/// `card-<i>`, value `{"card": …, "limit": …, "ts": now}`, placed by `partitioner` among
/// `partitions` (the events are placed by the client's default, crc32).
pub fn produce_card_table(topic: &str, cards: u32, partitioner: Partitioner, partitions: i32) {
    let producer = card_producer();
    for index in 0..cards {
        let card = format!("card-{index}");
        let value = format!(
            r#"{{"card":"{card}","limit":{},"ts":{}}}"#,
            100 + index,
            now_ms()
        );
        let partition = partitioner.partition(card.as_bytes(), partitions.unsigned_abs());
        let record = BaseRecord::to(topic)
            .key(&card)
            .payload(&value)
            .partition(i32::try_from(partition).unwrap());
        producer
            .send(record)
            .unwrap_or_else(|(error, _)| panic!("producing to {topic}: {error}"));
    }
    producer.flush(TIMEOUT).unwrap();
}

/// Waits until the join's active tasks have read every one of the `cards` records of `table`
/// (as their co-partitioning evidence counts them). A task reads its two topics in timestamp
/// order only while both have records fetched: events produced before the table is read may be
/// processed before the cards they should meet (docs/joins.md), so the join's tests produce
/// their events after this.
pub async fn table_read(system: &super::failover::System, table: &str, cards: u32) {
    super::failover::wait_until(
        "the join's tasks have read the whole card table",
        async || {
            let checked: u64 = system
                .reports()
                .await
                .values()
                .flatten()
                .filter(|report| {
                    report.role == streamkeeper_contract::task_report::TaskRole::Active
                })
                .flat_map(|report| &report.placement)
                .filter(|evidence| evidence.topic == table)
                .map(|evidence| evidence.checked)
                .sum();
            (checked >= u64::from(cards)).then_some(())
        },
    )
    .await;
}

/// A left stream-table join of the events with a new table of the `cards` cards placed by
/// `table_placed_by`: the table's name, and the join as `spec.processor` (each event meets its
/// card once; the spec names crc32, the events' partitioner).
pub async fn card_table_join(
    cards: u32,
    table_placed_by: Partitioner,
) -> (String, serde_json::Value) {
    let partitions = super::failover::PARTITIONS;
    let table = support::unique_name("card-table");
    super::create_topic(&table, partitions, &[("cleanup.policy", "compact")]).await;
    produce_card_table(&table, cards, table_placed_by, partitions);
    let processor = serde_json::json!({
        "type": "join",
        "keyField": "card",
        "timeField": "ts",
        "join": {
            "kind": "table",
            "mode": "left",
            "right": { "topic": table, "timeField": "ts" },
            "history": "24h",
            "partitioner": "crc32",
        },
    });
    (table, processor)
}

/// Input flowing on a thread: events from `from` on, 100 every 100 ms through one producer,
/// for `chunks` chunks or until stopped.
pub struct Producing {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<u32>,
}

impl Producing {
    pub fn start(topic: &str, cards: u32, from: u32, chunks: u32) -> Self {
        use std::sync::atomic::{AtomicBool, Ordering};
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let stopped = std::sync::Arc::clone(&stop);
        let topic = topic.to_string();
        let thread = std::thread::spawn(move || {
            let producer = card_producer();
            let mut next = from;
            for _ in 0..chunks {
                if stopped.load(Ordering::SeqCst) {
                    break;
                }
                send_cards(&producer, &topic, cards, next..next + 100);
                next += 100;
                std::thread::sleep(Duration::from_millis(100));
            }
            next
        });
        Self { stop, thread }
    }

    /// Waits for every chunk; the first event number after the last one produced.
    pub fn finish(self) -> u32 {
        self.thread.join().unwrap()
    }

    /// Stops after the chunk being sent; the first event number after the last one produced.
    pub fn stop(self) -> u32 {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        self.finish()
    }
}

/// Every committed record's value of `topic`, as JSON, in order per partition
/// (read_committed from the start).
pub fn committed_values(topic: &str, partitions: i32) -> Vec<serde_json::Value> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", support::kafka_bootstrap())
        .set("group.id", support::unique_name("check"))
        .set("isolation.level", "read_committed")
        .set("enable.partition.eof", "true")
        .create()
        .unwrap();
    let mut values = Vec::new();
    let mut assignment = TopicPartitionList::new();
    let mut open = 0;
    for partition in 0..partitions {
        let (low, high) = consumer
            .fetch_watermarks(topic, partition, TIMEOUT)
            .unwrap();
        if high > low {
            assignment
                .add_partition_offset(topic, partition, Offset::Beginning)
                .unwrap();
            open += 1;
        }
    }
    if open == 0 {
        return values;
    }
    consumer.assign(&assignment).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while open > 0 {
        assert!(Instant::now() < deadline, "reading {topic} took too long");
        match consumer.poll(Duration::from_millis(500)) {
            Some(Err(rdkafka::error::KafkaError::PartitionEOF(_))) => open -= 1,
            Some(Err(error)) => panic!("reading {topic}: {error}"),
            Some(Ok(message)) => {
                values.push(serde_json::from_slice(message.payload().unwrap()).unwrap());
            }
            None => {}
        }
    }
    values
}

/// Every committed output record's `count`, per card, in order (read_committed from the start).
pub fn committed_counts(topic: &str, partitions: i32) -> BTreeMap<String, Vec<u64>> {
    let mut counts: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for value in committed_values(topic, partitions) {
        counts
            .entry(value["key"].as_str().unwrap().to_string())
            .or_default()
            .push(value["count"].as_u64().unwrap());
    }
    counts
}

/// `Some` once every card's committed output is exactly 1, 2, …, n and the n add up to
/// `events`; `None` while output is still missing. A count out of order or too many records
/// fail at once.
pub fn exact_output(topic: &str, partitions: i32, events: u32) -> Option<()> {
    let counts = committed_counts(topic, partitions);
    let total: usize = counts.values().map(Vec::len).sum();
    for (card, values) in &counts {
        let want: Vec<u64> = (1..=values.len() as u64).collect();
        assert_eq!(values, &want, "{card}: output is not exactly 1..n");
    }
    assert!(
        total <= events as usize,
        "{total} output records for {events} events"
    );
    (total == events as usize).then_some(())
}

/// `Some` once the committed output of a left join of the events holds every event exactly
/// once (`left.n` from 0 to `events` − 1) and each met its card; `None` while output is still
/// missing. An event joined twice fails at once.
pub fn exact_join_output(topic: &str, partitions: i32, events: u32) -> Option<()> {
    let mut seen = vec![false; events as usize];
    for value in committed_values(topic, partitions) {
        let n = value["left"]["n"].as_u64().unwrap() as usize;
        assert!(!seen[n], "event {n} joined twice");
        assert!(
            value["right"]["limit"].is_u64(),
            "event {n} missed its card: {value}"
        );
        seen[n] = true;
    }
    seen.iter().all(|joined| *joined).then_some(())
}
