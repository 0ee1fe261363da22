//! Claiming a task: a transactional producer whose `init_transactions` has fenced every older
//! owner of the task and finished the transaction it left open.
//!
//! A busy task always has a transaction open, so a new owner after a crash, a freeze or a
//! handoff that raced the old owner's last commit usually finds one. The coordinator then
//! answers the first InitProducerId with CONCURRENT_TRANSACTIONS while it aborts that
//! transaction, which takes milliseconds, and librdkafka asks again only after a fixed 500 ms
//! (`rd_kafka_idemp_pid_timer_restart`; `retry.backoff.ms` does not apply). That wait was most
//! of a promotion's claim (measured: 0.6 s of a 1.3 s handoff).
//!
//! So the claim calls `init_transactions` in short slices. librdkafka lets a timed-out call be
//! made again, and a call made after a failed request asks the coordinator at once
//! (`rd_kafka_txn_op_init_transactions` restarts the PID request immediately; while a request
//! is outstanding it only waits on), so the claim asks again within a slice of the abort's end.

use crate::kafka_client;
use crate::task::TaskError;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{FutureProducer, Producer};
use std::time::{Duration, Instant};
use streamkeeper_contract::worker_config::KafkaConfig;

/// How long one `init_transactions` call waits before it is made again.
const SLICE: Duration = Duration::from_millis(25);

/// A producer that owns `transactional_id`, ready for its first transaction.
pub(super) fn claim(
    kafka: &KafkaConfig,
    transactional_id: &str,
    timeout: Duration,
    stopped: impl Fn() -> bool,
) -> Result<FutureProducer, TaskError> {
    let deadline = Instant::now() + timeout;
    let producer: FutureProducer =
        kafka_client::transactional_producer_config(kafka, transactional_id)?
            .create()
            .map_err(|e| TaskError::kafka("creating the producer", e))?;
    let mut asked = 0u32;
    loop {
        if stopped() {
            return Err(TaskError::Stopped(format!("claiming {transactional_id}")));
        }
        asked += 1;
        let left = deadline.saturating_duration_since(Instant::now());
        match producer.init_transactions(SLICE.min(left)) {
            Ok(()) => {
                tracing::debug!(transactional_id, asked, "task claimed");
                return Ok(producer);
            }
            Err(error) if still_waiting(&error) && !left.is_zero() => {}
            Err(error) => return Err(TaskError::kafka("init_transactions", error)),
        }
    }
}

/// The call ran out of its slice while librdkafka keeps trying (the coordinator was still
/// ending the old owner's transaction, or had not answered yet): not a refusal.
fn still_waiting(error: &KafkaError) -> bool {
    match error {
        KafkaError::Transaction(inner) => {
            inner.is_retriable() || inner.code() == RDKafkaErrorCode::OperationTimedOut
        }
        _ => false,
    }
}
