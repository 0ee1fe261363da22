//! The mark an active task's input commits carry: the assignment generation it ran under, in the
//! metadata of the committed offset (written in the same transaction as the output and the
//! changelog records, so it is exactly as durable as the commit it describes).
//!
//! It lets a worker that restarts while no operator leads tell whether its recorded document is
//! still the one in force for a task: a commit under a newer generation proves the assignment
//! moved the task on without this worker, and claiming the task would fence that newer owner
//! (see `Assignments::resume_recorded`).
//!
//! Encoding, version 1: `streamkeeper/1 generation=<u64>`. Metadata in any other form (empty, a
//! tool's own, an older or newer layout) says nothing; a reader never guesses at it.

use crate::kafka_client;
use crate::task::{TaskError, WorkerContext, partition_of};
use rdkafka::TopicPartitionList;
use rdkafka::consumer::{BaseConsumer, Consumer};
use std::collections::BTreeMap;
use std::time::Duration;

const PREFIX_V1: &str = "streamkeeper/1 generation=";

/// The metadata of a commit made under assignment `generation`.
pub(crate) fn encode(generation: u64) -> String {
    format!("{PREFIX_V1}{generation}")
}

/// The generation a commit's metadata names, if it is a mark of this version.
pub(crate) fn decode(metadata: &str) -> Option<u64> {
    let digits = metadata.strip_prefix(PREFIX_V1)?;
    // `u64::from_str` takes a leading '+', which `encode` never writes.
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The generation each of `tasks`' last input commit was made under, for the tasks whose last
/// commit carries a mark (a task never committed, or committed by a build without marks, has
/// none).
pub fn last_commit_generations(
    context: &WorkerContext,
    tasks: &[u32],
    timeout: Duration,
) -> Result<BTreeMap<u32, u64>, TaskError> {
    let config = &context.config;
    let topic = config.kafka.input_topic.as_str();
    let consumer: BaseConsumer =
        kafka_client::consumer_config(&config.kafka, &config.job.group_id())?
            .create()
            .map_err(|e| TaskError::kafka("creating the consumer that reads commit marks", e))?;
    let mut wanted = TopicPartitionList::new();
    for &task in tasks {
        wanted.add_partition(topic, partition_of(task)?);
    }
    let committed = consumer
        .committed_offsets(wanted, timeout)
        .map_err(|e| TaskError::kafka("reading the committed input offsets", e))?;
    let mut generations = BTreeMap::new();
    for &task in tasks {
        let Some(element) = committed.find_partition(topic, partition_of(task)?) else {
            continue;
        };
        // The client's accessor panics on metadata that is not UTF-8 (a foreign tool's): that
        // says nothing about the assignment, like any other foreign metadata.
        let metadata = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            element.metadata().to_string()
        }));
        if let Some(generation) = metadata.ok().as_deref().and_then(decode) {
            generations.insert(task, generation);
        }
    }
    Ok(generations)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mark_round_trips_and_anything_else_says_nothing() {
        for generation in [0, 1, 17, u64::MAX] {
            assert_eq!(decode(&encode(generation)), Some(generation));
        }
        assert_eq!(encode(42), "streamkeeper/1 generation=42");
        for foreign in [
            "",
            "42",
            "streamkeeper/1 generation=",
            "streamkeeper/1 generation=+4",
            "streamkeeper/1 generation=4x",
            "streamkeeper/2 generation=4",
            "streamkeeper/1 generation=99999999999999999999",
        ] {
            assert_eq!(decode(foreign), None, "{foreign:?}");
        }
    }
}
