//! The benches' throughput figures: a job's committed input progress, sampled until it has
//! committed everything, and the steady rate between two fractions of it (start-up and the tail
//! left out).

use super::{Job, TIMEOUT, Worker, kafka_bootstrap, retrying};
use rdkafka::TopicPartitionList;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use std::time::{Duration, Instant};

/// A bench's size setting: the environment variable `name`, or `default`.
pub fn setting(name: &str, default: u32) -> u32 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Produces `records` card events over `keys` keys into `input`, printing what it does; the
/// records produced per second.
pub fn produce_card_events(input: &str, partitions: i32, records: u32, keys: u32) -> f64 {
    println!("producing {records} records over {keys} keys into {partitions} partitions");
    let started = Instant::now();
    super::produce(
        input,
        partitions,
        (0..records).map(|i| super::card_event(i, keys)),
    );
    f64::from(records) / started.elapsed().as_secs_f64()
}

/// Committed input progress sampled until everything is committed: (seconds, records). One
/// consumer asks for the job group's offsets again and again (a new one per sample would spend
/// most of each sample finding the group coordinator), and a sample is timed at the middle of
/// its request.
pub fn sample_commits(job: &Job, worker: &mut Worker, total: u64) -> Vec<(f64, u64)> {
    sample_commits_in(job, worker, &job.config.kafka.input_topic, total)
}

/// [`sample_commits`] of the job's committed offsets in `topic` (a re-keyed join's repartition
/// topic, say, whose offsets also count its transaction markers).
pub fn sample_commits_in(
    job: &Job,
    worker: &mut Worker,
    topic: &str,
    total: u64,
) -> Vec<(f64, u64)> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", kafka_bootstrap())
        .set("group.id", job.config.job.group_id())
        // librdkafka asks for stable offsets under read_committed: while a transaction holding
        // offsets is open the broker answers UNSTABLE_OFFSET_COMMIT and the client retries, for
        // seconds. The offsets committed so far are what a sample wants.
        .set("isolation.level", "read_uncommitted")
        .create()
        .unwrap();
    let mut wanted = TopicPartitionList::new();
    for partition in 0..job.partitions {
        wanted.add_partition(topic, partition);
    }
    let started = Instant::now();
    let mut samples = Vec::new();
    loop {
        let asked = started.elapsed().as_secs_f64();
        let offsets = retrying("reading committed offsets", || {
            consumer.committed_offsets(wanted.clone(), TIMEOUT)
        });
        let answered = started.elapsed().as_secs_f64();
        let committed: u64 = offsets
            .elements()
            .iter()
            .filter_map(|element| element.offset().to_raw())
            .map(|offset| offset.max(0) as u64)
            .sum();
        samples.push(((asked + answered) / 2.0, committed));
        if committed >= total {
            return samples;
        }
        if let Some(status) = worker.child.try_wait().unwrap() {
            panic!("worker exited with {status}:\n{}", worker.log_tail());
        }
        assert!(
            started.elapsed() < Duration::from_secs(1800),
            "throughput run did not finish in 30 min"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Rate between the first samples at or past `from` and `to` of `total`.
pub fn steady_rate(samples: &[(f64, u64)], total: u64, from: f64, to: f64) -> f64 {
    let at = |fraction: f64| {
        samples
            .iter()
            .find(|(_, done)| *done as f64 >= fraction * total as f64)
            .copied()
            .unwrap()
    };
    let ((t0, n0), (t1, n1)) = (at(from), at(to));
    assert!(
        t1 - t0 >= 1.0,
        "the run was too short to measure a steady rate ({:.2} s between {from} and {to} of the input); give it more records",
        t1 - t0
    );
    (n1 - n0) as f64 / (t1 - t0)
}
