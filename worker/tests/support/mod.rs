//! Support for the worker's integration tests against the real Kafka broker started by
//! `tests/services/kafka.sh`: topics, deterministic input, the worker as a child process that
//! can be killed at any point, and readers for the output and the local state.
// Each test crate uses some of these helpers and re-exports, none all of them.
#![allow(
    dead_code,
    unused_imports,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Headers;
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::{Message, Offset, TopicPartitionList};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use streamkeeper_contract::worker_config::*;
use streamkeeper_contract::{Versioned, WorkerConfig};
use streamkeeper_worker::store::{OpenOutcome, RocksStore, StateStore};

pub mod checkpoints;
pub mod join;
pub mod rates;
pub mod standby;
pub mod topics;
pub mod wasm;

pub use topics::*;

pub use streamkeeper_test_support::{
    S3Settings, free_port, http_get, http_request, kafka_bootstrap, s3_settings, unique_name,
    wait_for, wait_for_or,
};

pub const TIMEOUT: Duration = Duration::from_secs(30);

fn admin() -> AdminClient<DefaultClientContext> {
    ClientConfig::new()
        .set("bootstrap.servers", kafka_bootstrap())
        .create()
        .unwrap()
}

pub async fn create_topic(name: &str, partitions: i32, compacted: bool) {
    let mut topic = NewTopic::new(name, partitions, TopicReplication::Fixed(1));
    if compacted {
        topic = topic.set("cleanup.policy", "compact");
    }
    for result in admin()
        .create_topics(
            [&topic],
            &AdminOptions::new().operation_timeout(Some(TIMEOUT)),
        )
        .await
        .unwrap()
    {
        result.unwrap_or_else(|(t, e)| panic!("creating {t}: {e}"));
    }
}

/// Deletes `name` and creates it again, empty (as after an accident with a changelog topic).
pub async fn recreate_topic(name: &str, partitions: i32, compacted: bool) {
    for result in admin()
        .delete_topics(
            &[name],
            &AdminOptions::new().operation_timeout(Some(TIMEOUT)),
        )
        .await
        .unwrap()
    {
        result.unwrap_or_else(|(t, e)| panic!("deleting {t}: {e}"));
    }
    // Deletion finishes in the background; creating again succeeds once it has.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut topic = NewTopic::new(name, partitions, TopicReplication::Fixed(1));
        if compacted {
            topic = topic.set("cleanup.policy", "compact");
        }
        let results = admin()
            .create_topics(
                [&topic],
                &AdminOptions::new().operation_timeout(Some(TIMEOUT)),
            )
            .await
            .unwrap();
        match results.into_iter().next().unwrap() {
            Ok(_) => return,
            Err((_, error)) if Instant::now() < deadline => {
                eprintln!("{name} not re-created yet: {error}");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err((topic, error)) => panic!("re-creating {topic}: {error}"),
        }
    }
}

/// The `STREAMKEEPER_RESTORE_REQUEST` document the operator hands to the workers.
pub fn restore_request(id: &str, checkpoint: &str, source: &str) -> (String, String) {
    let checkpoint = match checkpoint.parse::<u64>() {
        Ok(sequence) => serde_json::json!({ "sequence": sequence }),
        Err(_) => serde_json::json!(checkpoint),
    };
    let document = serde_json::json!({
        "version": 1, "id": id, "checkpoint": checkpoint, "source": source,
    });
    ("STREAMKEEPER_RESTORE_REQUEST".into(), document.to_string())
}

/// The applied-restore marker's key in the state (see the worker's `processor::keys`).
pub const APPLIED_RESTORE_KEY: &[u8] = b"mapplied_restore";

/// The state key naming a rebuilt changelog's incarnation (`keys::CHANGELOG_INCARNATION`).
pub const CHANGELOG_INCARNATION_KEY: &[u8] = b"\x01changelog_incarnation";

pub fn producer() -> ThreadedProducer<DefaultProducerContext> {
    ClientConfig::new()
        .set("bootstrap.servers", kafka_bootstrap())
        .set("enable.idempotence", "true")
        .set("linger.ms", "20")
        .create()
        .unwrap()
}

/// A card-payment event; partition chosen from the key so the input is the same every run.
pub fn card_event(index: u32, keys: u32) -> (String, String) {
    let key = format!("card-{}", (index.wrapping_mul(2_654_435_761)) % keys);
    let value = format!(
        r#"{{"card":"{key}","amount":{},"ts":{}}}"#,
        (index % 97) + 1,
        1_764_000_000_000u64 + u64::from(index) * 10
    );
    (key, value)
}

pub fn partition_of(key: &str, partitions: i32) -> i32 {
    let hash = key
        .bytes()
        .fold(7u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)));
    (hash % partitions as u32) as i32
}

/// Produces `records` (key, value) pairs, each to its key's partition; waits until all are acked.
pub fn produce(topic: &str, partitions: i32, records: impl IntoIterator<Item = (String, String)>) {
    let producer = producer();
    for (key, value) in records {
        let partition = partition_of(&key, partitions);
        let mut record = BaseRecord::to(topic)
            .key(&key)
            .payload(&value)
            .partition(partition);
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((_, back)) => {
                    record = back;
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
        }
    }
    producer.flush(TIMEOUT).unwrap();
}

/// A job's topics and its worker config.
pub struct Job {
    pub name: String,
    pub partitions: i32,
    pub config: WorkerConfig,
    pub dir: tempfile::TempDir,
    /// Extra environment for the worker process (e.g. a shorter checkpoint GC grace).
    pub env: Vec<(String, String)>,
}

impl Job {
    /// A job reading `input` (already created) with fresh output, changelog and DLQ topics.
    pub async fn new(name: &str, input: &str, partitions: i32, processor: ProcessorConfig) -> Self {
        let name = unique_name(name);
        let output = format!("{name}.out");
        let changelog = format!("{name}.changelog");
        let dead_letter = format!("{name}.dlq");
        create_topic(&output, partitions, false).await;
        create_topic(&changelog, partitions, true).await;
        create_topic(&dead_letter, 1, false).await;
        let dir = tempfile::tempdir().unwrap();
        // As the operator's mounted Secret holds it: the token `POST /v1/checkpoints` needs.
        let token_file = dir.path().join("worker-token");
        std::fs::write(&token_file, HTTP_TOKEN).unwrap();
        let config = WorkerConfig {
            version: WorkerConfig::VERSION,
            job: JobIdentity {
                cluster: None,
                namespace: "tests".into(),
                name: name.clone(),
            },
            kafka: KafkaConfig {
                bootstrap_servers: kafka_bootstrap(),
                input_topic: input.into(),
                output_topic: output,
                changelog_topic: changelog,
                dead_letter_topic: dead_letter,
                security: KafkaSecurity::default(),
                commit_interval: Duration::from_millis(100),
                commit_max_records: 1_000,
                transaction_timeout: Duration::from_secs(60),
            },
            processor,
            state: StateConfig {
                dir: dir.path().join("state"),
                rocksdb: RocksDbTuning::default(),
            },
            checkpoint: CheckpointConfig {
                interval: Duration::from_secs(30),
                retain: 3,
                s3: None,
            },
            recovery: RecoveryConfig::default(),
            http: HttpConfig {
                listen: "127.0.0.1:0".into(),
                token_file: Some(token_file),
            },
        };
        Self {
            name,
            partitions,
            config,
            dir,
            env: Vec::new(),
        }
    }

    /// Turns checkpoints on, to the real S3 server (or `endpoint`, e.g. a proxy in front of
    /// it), under a prefix unique to this job; credentials as a mounted Secret would hold them.
    pub fn enable_checkpoints(&mut self, interval: Duration, retain: u32, endpoint: Option<&str>) {
        let settings = s3_settings();
        let credentials = self.dir.path().join("s3-credentials");
        std::fs::create_dir_all(&credentials).unwrap();
        std::fs::write(credentials.join("accessKeyId"), &settings.access_key).unwrap();
        std::fs::write(credentials.join("secretAccessKey"), &settings.secret_key).unwrap();
        self.config.checkpoint = CheckpointConfig {
            interval,
            retain,
            s3: Some(S3Config {
                bucket: settings.bucket,
                prefix: unique_name("ckpt"),
                endpoint: Some(endpoint.map_or(settings.endpoint, str::to_string)),
                region: settings.region,
                path_style: true,
                credentials_dir: Some(credentials),
            }),
        };
    }

    pub fn config_path(&self) -> PathBuf {
        let path = self.dir.path().join("worker.yaml");
        std::fs::write(&path, self.config.to_yaml()).unwrap();
        path
    }

    pub fn start(&self, failpoint: Option<&str>) -> Worker {
        self.start_with_state(&self.config.state.dir, failpoint)
    }

    /// Starts the worker with its HTTP port on `listen` (e.g. from [`free_port`]).
    pub fn start_listening(&self, listen: &str) -> Worker {
        self.spawn_with(&self.config.state.dir, None, Some(listen))
    }

    /// Starts the worker with a failpoint and its HTTP port on `listen`.
    pub fn start_listening_with(&self, listen: &str, failpoint: Option<&str>) -> Worker {
        self.spawn_with(&self.config.state.dir, failpoint, Some(listen))
    }

    pub fn start_with_state(&self, state_dir: &Path, failpoint: Option<&str>) -> Worker {
        self.spawn_with(state_dir, failpoint, None)
    }

    pub fn spawn_with(
        &self,
        state_dir: &Path,
        failpoint: Option<&str>,
        listen: Option<&str>,
    ) -> Worker {
        let log_path = self
            .dir
            .path()
            .join(format!("worker-{}.log", unique_name("run")));
        let log = std::fs::File::create(&log_path).unwrap();
        let mut command = Command::new(worker_binary());
        command
            .args(["run", "--config"])
            .arg(self.config_path())
            .arg("--state-dir")
            .arg(state_dir)
            .env("RUST_LOG", "info,librdkafka=warn")
            .env_remove("STREAMKEEPER_FAILPOINT")
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdout(Stdio::null())
            .stderr(log);
        if let Some(point) = failpoint {
            command.env("STREAMKEEPER_FAILPOINT", point);
        }
        if let Some(listen) = listen {
            command.args(["--http-listen", listen]);
        }
        Worker {
            child: command.spawn().unwrap(),
            log_path,
        }
    }

    /// The input offsets committed in the job's transactions, per partition.
    /// The job group's committed offsets of its input, per partition (-1: none).
    pub fn committed_offsets(&self) -> BTreeMap<i32, i64> {
        self.committed_offsets_in(&self.config.kafka.input_topic)
    }

    /// The job group's committed offsets of `topic` (the input, or a join's right topic), per
    /// partition (-1: none).
    pub fn committed_offsets_in(&self, topic: &str) -> BTreeMap<i32, i64> {
        committed_offsets(&self.config.job.group_id(), topic, self.partitions)
    }

    pub fn input_ends(&self) -> BTreeMap<i32, i64> {
        end_offsets(&self.config.kafka.input_topic, self.partitions)
    }

    /// Waits until every input record is committed by the job (or the worker exits).
    pub fn wait_until_caught_up(&self, worker: &mut Worker, limit: Duration) {
        let ends = self.input_ends();
        let deadline = Instant::now() + limit;
        loop {
            if self.committed_offsets() == ends {
                return;
            }
            if let Some(status) = worker.child.try_wait().unwrap() {
                panic!(
                    "worker exited with {status} before catching up; log:\n{}",
                    worker.log_tail()
                );
            }
            assert!(
                Instant::now() < deadline,
                "not caught up within {limit:?}: committed {:?}, input ends {ends:?}; log:\n{}",
                self.committed_offsets(),
                worker.log_tail()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The job's local state, every task, every key (opened after the worker stopped).
    pub fn local_state(&self) -> BTreeMap<u32, BTreeMap<Vec<u8>, Vec<u8>>> {
        (0..self.partitions as u32)
            .map(|task| {
                let opened =
                    RocksStore::open(&self.config.state.dir, task, &RocksDbTuning::default())
                        .unwrap();
                assert!(
                    matches!(opened.outcome, OpenOutcome::Valid(_)),
                    "task {task}: {:?}",
                    opened.outcome
                );
                let entries = opened.store.scan(&[0x01], &[0xff, 0xff]).unwrap();
                (task, entries.into_iter().collect())
            })
            .collect()
    }

    pub fn output(&self) -> BTreeMap<i32, Vec<(String, String)>> {
        read_committed(&self.config.kafka.output_topic, self.partitions)
            .into_iter()
            .map(|(p, records)| {
                (
                    p,
                    records
                        .into_iter()
                        .map(|r| (r.key, r.value.unwrap_or_default()))
                        .collect(),
                )
            })
            .collect()
    }
}

/// The worker binary: `STREAMKEEPER_WORKER_BIN` when set, else the one cargo built. (The shared
/// target directory's binary can be replaced by a build of another worktree mid-run; a private
/// copy named by the variable cannot.)
pub fn worker_binary() -> PathBuf {
    std::env::var_os("STREAMKEEPER_WORKER_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_streamkeeper-worker")))
}

pub struct Worker {
    pub child: Child,
    pub log_path: PathBuf,
}

impl Worker {
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, as Kubernetes sends it; waits for a clean exit.
    pub fn terminate(&mut self, limit: Duration) {
        let pid = self.child.id().to_string();
        Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        let deadline = Instant::now() + limit;
        while self.child.try_wait().unwrap().is_none() {
            assert!(
                Instant::now() < deadline,
                "worker did not stop within {limit:?} of SIGTERM:\n{}",
                self.log_tail()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let status = self.child.wait().unwrap();
        assert!(
            status.success(),
            "graceful stop must exit 0, got {status}:\n{}",
            self.log_tail()
        );
    }

    /// Waits for the worker to die at its failpoint.
    pub fn wait_for_crash(&mut self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                return !status.success();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    pub fn log_tail(&self) -> String {
        let log = self.log();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn count_processor() -> ProcessorConfig {
    ProcessorConfig {
        key_field: "card".into(),
        time_field: None,
        kind: ProcessorKind::Count,
    }
}

pub fn aggregate_processor() -> ProcessorConfig {
    ProcessorConfig {
        key_field: "card".into(),
        time_field: Some("ts".into()),
        kind: ProcessorKind::Aggregate {
            value_field: "amount".into(),
            window: Some(WindowConfig {
                size: Duration::from_secs(60),
                advance: None,
                grace: Duration::from_secs(5),
            }),
        },
    }
}

/// The tasks whose restore a run finished, from the worker's "restore finished" log lines (a
/// task retried after a transient error logs its restore again).
pub fn restored_tasks(log: &str) -> std::collections::BTreeSet<u32> {
    log.lines()
        .filter_map(|l| l.split_once("restore finished").map(|(_, fields)| fields))
        .filter_map(|fields| fields.split("task=").nth(1))
        .filter_map(|rest| rest.split_whitespace().next()?.parse().ok())
        .collect()
}

/// Every task of a job with `partitions` tasks.
pub fn all_tasks(partitions: i32) -> std::collections::BTreeSet<u32> {
    (0..partitions as u32).collect()
}

/// Number of changelog records a run replayed, from the worker's restore log lines.
pub fn replayed_records(log: &str) -> u64 {
    log.lines()
        .filter(|l| l.contains("restore finished"))
        .filter_map(|l| l.split("replayed=").nth(1))
        .filter_map(|rest| rest.split_whitespace().next())
        .filter_map(|n| n.parse::<u64>().ok())
        .sum()
}

/// Asserts two outputs are equal: per output partition and key, the same values in the same
/// order. (Output partitions are chosen by key hash, so records of different tasks interleave
/// differently from run to run; per key the order is the processing order and must match.)
pub fn assert_same_output(
    got: &BTreeMap<i32, Vec<(String, String)>>,
    want: &BTreeMap<i32, Vec<(String, String)>>,
) {
    let by_key = |output: &BTreeMap<i32, Vec<(String, String)>>| {
        let mut grouped: BTreeMap<(i32, String), Vec<String>> = BTreeMap::new();
        for (p, records) in output {
            for (key, value) in records {
                grouped
                    .entry((*p, key.clone()))
                    .or_default()
                    .push(value.clone());
            }
        }
        grouped
    };
    let (got_total, want_total): (usize, usize) = (
        got.values().map(Vec::len).sum(),
        want.values().map(Vec::len).sum(),
    );
    let (got, want) = (by_key(got), by_key(want));
    for (key, want_values) in &want {
        let got_values = got.get(key).map(Vec::as_slice).unwrap_or_default();
        if got_values != want_values.as_slice() {
            let first = (0..want_values.len().min(got_values.len()))
                .find(|&i| got_values[i] != want_values[i]);
            panic!(
                "output for {key:?} differs (first at {first:?}): {} records vs {} expected; got {:?}, want {:?}",
                got_values.len(),
                want_values.len(),
                &got_values[..got_values.len().min(5)],
                &want_values[..want_values.len().min(5)]
            );
        }
    }
    assert_eq!(got.len(), want.len(), "the same keys appear in the output");
    assert_eq!(
        got_total, want_total,
        "the same number of output records (no loss, no duplicate)"
    );
}

/// The worker token of every test job (in the file its config's `http.tokenFile` names).
pub const HTTP_TOKEN: &str = "streamkeeper-worker-tests-token-0123456789abcdef";

/// A plain HTTP request without body on loopback: (status, body). A request that is not a read
/// carries the test jobs' worker token, as the operator's does.
pub fn worker_request(
    address: &str,
    method: &str,
    path: &str,
    limit: Duration,
) -> Option<(u16, String)> {
    let authorization = format!("Bearer {HTTP_TOKEN}");
    let headers: &[(&str, &str)] = if method == "GET" {
        &[]
    } else {
        &[("Authorization", authorization.as_str())]
    };
    http_request(address, method, path, headers, "", limit)
}
