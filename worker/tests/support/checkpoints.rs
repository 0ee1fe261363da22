//! Support for the checkpoint tests: the job's S3 objects (through the real S3 server), the
//! worker's checkpoint endpoint and metrics, changelog surgery, and a TCP proxy in front of S3
//! that a test can close and reopen (the shared S3 server itself is never stopped).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::{Job, TIMEOUT, http_get, kafka_bootstrap, retrying, worker_request};
use rdkafka::admin::{AdminClient, AdminOptions, AlterConfig, ResourceSpecifier};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Message, Offset, TopicPartitionList};
use std::collections::{BTreeMap, BTreeSet};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use streamkeeper_contract::checkpoint_layout::TaskPrefix;
use streamkeeper_contract::{CheckpointManifest, Versioned};
use streamkeeper_worker::checkpoint::s3::S3Storage;

/// The job's checkpoint bucket, through the real S3 server (never through a test proxy).
pub async fn storage(job: &Job) -> S3Storage {
    let mut s3 = job
        .config
        .checkpoint
        .s3
        .clone()
        .expect("checkpoints enabled");
    s3.endpoint = Some(super::s3_settings().endpoint);
    S3Storage::connect(&s3).await.unwrap()
}

pub fn task_prefix(job: &Job, task: u32) -> TaskPrefix {
    let s3 = job
        .config
        .checkpoint
        .s3
        .as_ref()
        .expect("checkpoints enabled");
    TaskPrefix::new(
        &s3.prefix,
        &job.config.job.namespace,
        &job.config.job.name,
        task,
    )
}

/// Every manifest of task `task`, by sequence.
pub async fn manifests(job: &Job, task: u32) -> BTreeMap<u64, CheckpointManifest> {
    let storage = storage(job).await;
    let prefix = task_prefix(job, task);
    let mut found = BTreeMap::new();
    for object in storage.list(&prefix.manifests()).await.unwrap() {
        let sequence = prefix.sequence_of(&object.key).unwrap();
        let bytes = storage.get_bytes(&object.key).await.unwrap();
        found.insert(sequence, CheckpointManifest::from_json(&bytes).unwrap());
    }
    found
}

/// Every object key of task `task`.
pub async fn object_keys(job: &Job, task: u32) -> BTreeSet<String> {
    let storage = storage(job).await;
    let prefix = task_prefix(job, task);
    storage
        .list(&prefix.objects())
        .await
        .unwrap()
        .into_iter()
        .map(|o| o.key)
        .collect()
}

/// Overwrites an object with other bytes (a corrupted upload or bit rot).
pub async fn corrupt_object(job: &Job, key: &str) {
    let storage = storage(job).await;
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), b"this is not the SST the manifest describes").unwrap();
    storage.put_file(key, file.path(), 43).await.unwrap();
}

/// `POST /v1/checkpoints`: the durable checkpoint of each task, as (sequence, changelog offset).
pub fn checkpoint_now(address: &str) -> BTreeMap<u32, (u64, i64)> {
    let (status, body) =
        worker_request(address, "POST", "/v1/checkpoints", Duration::from_secs(150))
            .expect("the worker answers");
    assert_eq!(status, 200, "checkpoint request failed: {body}");
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    json["checkpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|entry| {
            let checkpoint = &entry["checkpoint"];
            (
                entry["task"].as_u64().unwrap() as u32,
                (
                    checkpoint["sequence"].as_u64().unwrap(),
                    checkpoint["changelogOffset"].as_i64().unwrap(),
                ),
            )
        })
        .collect()
}

/// Sum of a metric over every label set, from `/metrics` (0 when absent).
pub fn metric(address: &str, name: &str) -> f64 {
    let Some((200, body)) = http_get(address, "/metrics") else {
        return 0.0;
    };
    body.lines()
        .filter(|line| {
            line.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Waits until `/readyz` says every task is Running.
pub fn wait_ready(address: &str, worker: &mut super::Worker, limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        if let Some((200, _)) = http_get(address, "/readyz") {
            return;
        }
        if let Some(status) = worker.child.try_wait().unwrap() {
            panic!("worker exited with {status}; log:\n{}", worker.log_tail());
        }
        assert!(
            Instant::now() < deadline,
            "not ready within {limit:?}; log:\n{}",
            worker.log_tail()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Deletes every changelog record before `offsets[partition]` (the broker's DeleteRecords;
/// Kafka allows it only with a `delete` cleanup policy, so the topic becomes `compact,delete`
/// with the default week of retention): afterwards a full replay is impossible and only a
/// checkpoint can restore the state.
pub async fn delete_changelog_head(job: &Job, offsets: &BTreeMap<u32, i64>) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", kafka_bootstrap())
        .create()
        .unwrap();
    let topic = &job.config.kafka.changelog_topic;
    let policy =
        AlterConfig::new(ResourceSpecifier::Topic(topic)).set("cleanup.policy", "compact,delete");
    for result in admin
        .alter_configs(
            [&policy],
            &AdminOptions::new().operation_timeout(Some(TIMEOUT)),
        )
        .await
        .unwrap()
    {
        result.unwrap_or_else(|(_, e)| panic!("altering {topic}: {e}"));
    }
    delete_records(topic, offsets).await;
}

/// Deletes the records of `topic` before `offsets[partition]` (the broker's DeleteRecords).
pub async fn delete_records(topic: &str, offsets: &BTreeMap<u32, i64>) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", kafka_bootstrap())
        .create()
        .unwrap();
    let mut list = TopicPartitionList::new();
    for (partition, offset) in offsets {
        list.add_partition_offset(topic, *partition as i32, Offset::Offset(*offset))
            .unwrap();
    }
    let result = admin
        .delete_records(&list, &AdminOptions::new().operation_timeout(Some(TIMEOUT)))
        .await
        .unwrap();
    for element in result.elements() {
        assert!(
            element.error().is_ok(),
            "delete records: {:?}",
            element.error()
        );
    }
}

/// Deletes input partition 0's records before `offset` (as retention would).
pub async fn delete_input_head(job: &Job, offset: i64) {
    delete_records(
        &job.config.kafka.input_topic,
        &BTreeMap::from([(0, offset)]),
    )
    .await;
}

/// How many committed data records changelog partition `task` holds from `from` to the end.
pub fn changelog_records_from(job: &Job, task: u32, from: i64) -> u64 {
    changelog_entries_from(job, task, from).len() as u64
}

/// The committed data records (key, value or `None` for a tombstone) of changelog partition
/// `task` from `from` to the end, in offset order.
pub fn changelog_entries_from(job: &Job, task: u32, from: i64) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
    let topic = &job.config.kafka.changelog_topic;
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", kafka_bootstrap())
        .set("group.id", super::unique_name("count"))
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .set("enable.partition.eof", "true")
        .create()
        .unwrap();
    let (_, high) = retrying("watermarks", || {
        consumer.fetch_watermarks(topic, task as i32, TIMEOUT)
    });
    let mut entries = Vec::new();
    if from >= high {
        return entries;
    }
    let mut list = TopicPartitionList::new();
    list.add_partition_offset(topic, task as i32, Offset::Offset(from))
        .unwrap();
    consumer.assign(&list).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        assert!(Instant::now() < deadline, "reading {topic} timed out");
        match consumer.poll(Duration::from_millis(200)) {
            None => {}
            Some(Err(rdkafka::error::KafkaError::PartitionEOF(_))) => return entries,
            Some(Err(e)) => panic!("reading {topic}: {e}"),
            Some(Ok(m)) => {
                assert!(m.offset() >= from);
                entries.push((
                    m.key().unwrap_or_default().to_vec(),
                    m.payload().map(<[u8]>::to_vec),
                ));
            }
        }
    }
}

/// A TCP proxy on loopback in front of `upstream`. `close()` refuses new connections and
/// cuts open ones (as if S3 went away); `open()` lets traffic through again; `throttle()` slows
/// every byte through it to a rate (a slow link: a download that takes its time).
pub struct Proxy {
    pub address: String,
    up: Arc<AtomicBool>,
    open_streams: Arc<Mutex<Vec<TcpStream>>>,
    /// Bytes per second through each direction of each connection; 0: unlimited.
    rate: Arc<std::sync::atomic::AtomicU64>,
}

impl Proxy {
    pub fn start(upstream: &str) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let up = Arc::new(AtomicBool::new(true));
        let open_streams: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let rate: Arc<std::sync::atomic::AtomicU64> = Arc::default();
        let upstream = upstream.to_string();
        {
            let up = Arc::clone(&up);
            let open_streams = Arc::clone(&open_streams);
            let rate = Arc::clone(&rate);
            std::thread::spawn(move || {
                for client in listener.incoming() {
                    let Ok(client) = client else { continue };
                    if !up.load(Ordering::SeqCst) {
                        let _ = client.shutdown(std::net::Shutdown::Both);
                        continue;
                    }
                    let Ok(server) = TcpStream::connect(&upstream) else {
                        continue;
                    };
                    {
                        // `close()` may have run while we connected upstream; checking again
                        // under the lock it holds keeps a connection from outliving it.
                        let mut streams = open_streams.lock().unwrap();
                        if !up.load(Ordering::SeqCst) {
                            let _ = client.shutdown(std::net::Shutdown::Both);
                            let _ = server.shutdown(std::net::Shutdown::Both);
                            continue;
                        }
                        streams.push(client.try_clone().unwrap());
                        streams.push(server.try_clone().unwrap());
                    }
                    pipe(
                        client.try_clone().unwrap(),
                        server.try_clone().unwrap(),
                        &rate,
                    );
                    pipe(server, client, &rate);
                }
            });
        }
        Self {
            address,
            up,
            open_streams,
            rate,
        }
    }

    /// Limits every connection's each direction to `bytes_per_second` (0: no limit).
    pub fn throttle(&self, bytes_per_second: u64) {
        self.rate.store(bytes_per_second, Ordering::SeqCst);
    }

    pub fn endpoint(&self) -> String {
        format!("http://{}", self.address)
    }

    pub fn close(&self) {
        let mut streams = self.open_streams.lock().unwrap();
        self.up.store(false, Ordering::SeqCst);
        for stream in streams.drain(..) {
            let _ = stream.shutdown(std::net::Shutdown::Both);
        }
    }

    pub fn open(&self) {
        self.up.store(true, Ordering::SeqCst);
    }
}

fn pipe(mut from: TcpStream, mut to: TcpStream, rate: &Arc<std::sync::atomic::AtomicU64>) {
    use std::io::{Read, Write};
    let rate = Arc::clone(rate);
    std::thread::spawn(move || {
        let mut buffer = [0u8; 4096];
        loop {
            let read = match from.read(&mut buffer) {
                Ok(0) | Err(_) => break,
                Ok(read) => read,
            };
            if to.write_all(&buffer[..read]).is_err() {
                break;
            }
            let limit = rate.load(Ordering::SeqCst);
            if limit > 0 {
                std::thread::sleep(Duration::from_secs_f64(read as f64 / limit as f64));
            }
        }
        let _ = to.shutdown(std::net::Shutdown::Write);
    });
}
