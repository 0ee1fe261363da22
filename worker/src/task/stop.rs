//! Ending a role's long waits in bounded time.
//!
//! A role is asked to stop when the assignment changes it (a copy dropped from this pod, a
//! promotion, a handoff) or the worker shuts down. A restore, a warm-up, a checkpoint download
//! or a claim can take minutes, and neither the pod's next document nor the task's next role
//! may wait for it. So every long wait is made of short slices with the stop checked between
//! them: a stopped role ends within about a slice, and says where it was
//! ([`TaskError::Stopped`]).

use super::{TaskError, WorkerContext};
use rdkafka::error::{KafkaError, KafkaResult, RDKafkaErrorCode};
use std::future::Future;
use std::time::{Duration, Instant};
use tokio::runtime::Handle;

/// How often a wait on the async runtime checks the stop.
const WAIT_SLICE: Duration = Duration::from_millis(100);
/// How long one slice of a blocking Kafka call may take. Far above a request's round trip
/// here (milliseconds), so a slow but answering broker still answers within one.
const KAFKA_SLICE: Duration = Duration::from_millis(500);

/// `Err(Stopped)` once the role is asked to stop.
pub(crate) fn check(context: &WorkerContext, during: &str) -> Result<(), TaskError> {
    if context.shutting_down() {
        Err(TaskError::Stopped(during.to_string()))
    } else {
        Ok(())
    }
}

/// Runs `future` on `runtime` and waits for it on this (task) thread, calling `each` between
/// checks of the stop (to publish progress). A stop aborts the future.
pub(crate) fn on_runtime<T: Send + 'static>(
    context: &WorkerContext,
    runtime: &Handle,
    during: &str,
    future: impl Future<Output = T> + Send + 'static,
    mut each: impl FnMut(),
) -> Result<T, TaskError> {
    let job = runtime.spawn(future);
    while !job.is_finished() {
        if context.shutting_down() {
            job.abort();
            return Err(TaskError::Stopped(during.to_string()));
        }
        std::thread::sleep(WAIT_SLICE);
        each();
    }
    // Finished: this returns at once, it never waits on the runtime.
    runtime
        .block_on(job)
        .map_err(|error| TaskError::Internal(format!("{during}: {error}")))
}

/// A blocking Kafka call taking a timeout, made in slices until it answers, `timeout` has
/// passed, or the role is asked to stop. Only a slice that timed out is made again: these calls
/// (watermarks, committed offsets) are queries, and asking again is harmless.
pub(crate) fn kafka_call<T>(
    context: &WorkerContext,
    timeout: Duration,
    during: &'static str,
    mut call: impl FnMut(Duration) -> KafkaResult<T>,
) -> Result<T, TaskError> {
    let deadline = Instant::now() + timeout;
    loop {
        check(context, during)?;
        let left = deadline.saturating_duration_since(Instant::now());
        match call(KAFKA_SLICE.min(left)) {
            Err(error) if timed_out(&error) && !left.is_zero() => {}
            answer => return answer.map_err(|error| TaskError::kafka(during, error)),
        }
    }
}

fn timed_out(error: &KafkaError) -> bool {
    error.rdkafka_error_code() == Some(RDKafkaErrorCode::OperationTimedOut)
}
