//! Telling a real fence from a transaction the coordinator aborted for its timeout.
//!
//! Both reach the producer as the same fatal `_FENCED` error (checked against the real broker:
//! Kafka 4.1 bumps the producer epoch when it aborts a timed-out transaction, exactly as a
//! newer owner's `init_transactions` does). A fenced task must stop for good: claiming the task
//! back would fence its new owner in turn. A timed-out one must retry, or one long pause (a GC,
//! a slow disk) stops a healthy task forever. So a fence counts as a timeout only when both
//! hold:
//! - the open transaction had been open at least `transaction.timeout.ms`, the only way the
//!   coordinator aborts on its own; and
//! - nobody else has committed since this task's state: the changelog, read committed, holds
//!   no record after the state's offset (every transaction that consumes input writes one, the
//!   input position). A new owner that has committed anything is proof of a real fence.
//!
//! A new owner that has not committed anything yet looks like a timeout; the retry then claims
//! the task back, and whichever commits first makes the other stop. Fencing keeps the output
//! exact either way. (The assignment generation of the standby work will settle it earlier.)

use crate::kafka_client;
use crate::metrics::TaskLabel;
use crate::store::RocksStore;
use crate::task::changelog::ChangelogProbe;
use crate::task::stop;
use crate::task::{TaskError, WorkerContext, partition_of};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::producer::{FutureProducer, Producer};
use std::time::Duration;

/// `error` as the supervisor should see it: a [`TaskError::Fenced`] after a transaction open
/// for `open_for` becomes [`TaskError::TransactionTimedOut`] when the rules above say so.
pub(super) fn timed_out_or_fenced(
    context: &WorkerContext,
    task: u32,
    error: TaskError,
    open_for: Option<Duration>,
    store: &RocksStore,
) -> TaskError {
    let TaskError::Fenced(reason) = &error else {
        return error;
    };
    let timeout = context.config.kafka.transaction_timeout;
    let Some(open_for) = open_for.filter(|open_for| *open_for >= timeout) else {
        return error;
    };
    match others_committed(context, task, store) {
        Ok(false) => {
            context
                .metrics
                .transactions_aborted
                .get_or_create(&TaskLabel { task })
                .inc();
            TaskError::TransactionTimedOut(format!(
                "{reason}: the transaction had been open {:.1} s, past transaction.timeout.ms ({} ms), and nobody else has committed since, so the coordinator aborted it",
                open_for.as_secs_f64(),
                timeout.as_millis()
            ))
        }
        Ok(true) => error,
        Err(probe) => {
            tracing::warn!(task, %probe, "cannot tell a transaction timeout from a fence; stopping as fenced");
            error
        }
    }
}

/// Whether the changelog holds a committed record after what `store` includes.
fn others_committed(
    context: &WorkerContext,
    task: u32,
    store: &RocksStore,
) -> Result<bool, TaskError> {
    let config = &context.config;
    let mut client = kafka_client::consumer_config(&config.kafka, &config.job.group_id())?;
    client.set("enable.partition.eof", "true");
    let consumer: BaseConsumer = client
        .create()
        .map_err(|e| TaskError::kafka("creating the changelog consumer", e))?;
    let topic = config.kafka.changelog_topic.as_str();
    let partition = partition_of(task)?;
    let (low, high) = stop::kafka_call(
        context,
        Duration::from_secs(10),
        "reading changelog watermarks",
        |t| consumer.fetch_watermarks(topic, partition, t),
    )?;
    let from = store.metadata().map_or(0, |m| m.next_changelog_offset);
    let probe = ChangelogProbe::new(&consumer, topic, partition, (low, high));
    Ok(!probe.only_control_records_from(from)?)
}

/// A fence can reach the loop as a produce call's plain "fatal error": the produce requests in
/// flight when a new owner bumped the epoch fail first, and the producer is then in a fatal
/// state whose cause only the client knows. Retried as a Kafka error, the task would claim
/// itself back and fence its new owner in turn.
pub(super) fn behind_fatal(producer: &FutureProducer, error: TaskError) -> TaskError {
    let TaskError::Kafka { context, source } = &error else {
        return error;
    };
    if source.rdkafka_error_code() != Some(RDKafkaErrorCode::Fatal) {
        return error;
    }
    match producer.client().fatal_error() {
        Some((
            RDKafkaErrorCode::Fenced
            | RDKafkaErrorCode::ProducerFenced
            | RDKafkaErrorCode::InvalidProducerEpoch,
            reason,
        )) => TaskError::Fenced(format!("{context}: {reason}")),
        _ => error,
    }
}
