//! Telling a stalled consumer from an idle partition.
//!
//! librdkafka's consumer can stop fetching an assigned partition after a broker restart and
//! never say so: `poll` keeps returning nothing, no error, while the broker holds records past
//! the consumer's position (librdkafka issue 5153, rust-rdkafka issue 597; seen here on 2.12.1
//! by `worker_survives_a_broker_restart`). Only a new consumer fetches again. An active task
//! whose input consumer stalls stops processing for good while looking healthy, and a standby
//! whose changelog consumer stalls falls behind, so both roles watch their consumer.
//!
//! The rule: a consumer is stalled when the broker answers (its last stable offset is known),
//! records lie between the consumer's position and that offset, and `poll` has returned nothing
//! for `stall_after`. A healthy consumer prefetches in the background and delivers within
//! `fetch.wait.max.ms` (500 ms) of records becoming readable. The position is the consumer's
//! own: it moves past transaction markers, which a position taken from the records would not,
//! so an idle transactional topic is never taken for a stalled one. While the broker does not
//! answer, the clock starts over: an outage is not a stall, and the consumer gets its reconnect
//! backoff once the broker is back.

use super::WorkerContext;
use crate::metrics::TaskLabel;
use rdkafka::consumer::{BaseConsumer, Consumer};
use std::time::{Duration, Instant};

/// How long a consumer may return nothing while the broker holds records for it.
/// `STREAMKEEPER_CONSUMER_STALL_SECONDS` overrides it (tests use seconds).
const STALL_AFTER: Duration = Duration::from_secs(15);

pub(crate) fn stall_after() -> Duration {
    super::seconds_from_env("STREAMKEEPER_CONSUMER_STALL_SECONDS", STALL_AFTER)
}

/// A consumer found stalled: where it stands, what the broker holds, for how long nothing came.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ConsumerStall {
    pub position: i64,
    pub stable_end: i64,
    pub silent_for: Duration,
}

impl std::fmt::Display for ConsumerStall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the consumer returned no record for {:.1} s at offset {} while the broker holds records up to {}",
            self.silent_for.as_secs_f64(),
            self.position,
            self.stable_end
        )
    }
}

/// The watch over one consumer: fed every poll's outcome and, now and then, the broker's view.
#[derive(Debug)]
pub(crate) struct ConsumerWatch {
    stall_after: Duration,
    /// Since when every poll returned nothing; `None` after a record, or while the clock is
    /// reset by an unanswered broker.
    empty_since: Option<Instant>,
}

impl ConsumerWatch {
    pub fn new(stall_after: Duration) -> Self {
        Self {
            stall_after,
            empty_since: None,
        }
    }

    /// Records a poll's outcome.
    pub fn polled(&mut self, got_record: bool, now: Instant) {
        if got_record {
            self.empty_since = None;
        } else {
            self.empty_since.get_or_insert(now);
        }
    }

    /// Judges the consumer at `position` against the broker's last stable offset
    /// (`None`: the broker did not answer).
    pub fn judge(
        &mut self,
        position: i64,
        stable_end: Option<i64>,
        now: Instant,
    ) -> Option<ConsumerStall> {
        let Some(stable_end) = stable_end else {
            self.empty_since = None;
            return None;
        };
        if position >= stable_end {
            return None;
        }
        let silent_for = now.saturating_duration_since(self.empty_since?);
        (silent_for >= self.stall_after).then_some(ConsumerStall {
            position,
            stable_end,
            silent_for,
        })
    }
}

/// The watches over the partitions of one consumer that reads several (an active task's input,
/// a join's topics, a re-keyed or global table's partitions): a record of any partition would
/// hide a stall of another, so each partition has its own [`ConsumerWatch`], fed at each look
/// with whether the consumer's position there moved since the last look (for one partition,
/// the same as whether a poll returned a record of it).
#[derive(Debug)]
pub(crate) struct PartitionWatches<K: Ord> {
    stall_after: Duration,
    /// Each partition's watch and the position seen at the last look.
    watches: std::collections::BTreeMap<K, (ConsumerWatch, Option<i64>)>,
}

impl<K: Ord> PartitionWatches<K> {
    pub fn new(stall_after: Duration) -> Self {
        Self {
            stall_after,
            watches: std::collections::BTreeMap::new(),
        }
    }

    /// Judges `partition` at `position`, the broker holding records up to `stable_end`.
    pub fn judge(
        &mut self,
        partition: K,
        position: i64,
        stable_end: Option<i64>,
        now: Instant,
    ) -> Option<ConsumerStall> {
        let stall_after = self.stall_after;
        let (watch, last) = self
            .watches
            .entry(partition)
            .or_insert_with(|| (ConsumerWatch::new(stall_after), None));
        watch.polled(*last != Some(position), now);
        *last = Some(position);
        watch.judge(position, stable_end, now)
    }
}

/// The consumer's own position in `topic`/`partition`: past the last record or transaction
/// marker it returned; `None` before it returned anything.
pub(crate) fn position_of(consumer: &BaseConsumer, topic: &str, partition: i32) -> Option<i64> {
    let list = consumer.position().ok()?;
    list.find_partition(topic, partition)
        .and_then(|entry| entry.offset().to_raw())
        .filter(|offset| *offset >= 0)
}

/// Counts and logs a stall of task `task`'s `which` consumer ("input", "changelog"), which the
/// role then replaces by restarting.
pub(crate) fn report(context: &WorkerContext, task: u32, which: &str, stall: &ConsumerStall) {
    context
        .metrics
        .consumer_stalls
        .get_or_create(&TaskLabel { task })
        .inc();
    tracing::warn!(
        task,
        consumer = which,
        position = stall.position,
        stable_end = stall.stable_end,
        silent_seconds = stall.silent_for.as_secs_f64(),
        "a consumer stopped delivering records the broker holds; replacing it"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    const AFTER: Duration = Duration::from_secs(15);

    fn silent_for(watch: &mut ConsumerWatch, start: Instant, seconds: u64) -> Instant {
        watch.polled(false, start);
        let now = start + Duration::from_secs(seconds);
        watch.polled(false, now);
        now
    }

    #[test]
    fn a_consumer_silent_past_the_bound_with_records_to_read_is_stalled() {
        let mut watch = ConsumerWatch::new(AFTER);
        let start = Instant::now();
        let now = silent_for(&mut watch, start, 15);
        let stall = watch.judge(100, Some(250), now).unwrap();
        assert_eq!((stall.position, stall.stable_end), (100, 250));
        assert_eq!(stall.silent_for, AFTER);
        assert!(stall.to_string().contains("offset 100"), "{stall}");
    }

    #[test]
    fn a_partition_with_nothing_past_the_position_is_idle_however_long() {
        let mut watch = ConsumerWatch::new(AFTER);
        let start = Instant::now();
        let now = silent_for(&mut watch, start, 3600);
        assert_eq!(watch.judge(250, Some(250), now), None);
    }

    #[test]
    fn a_silence_shorter_than_the_bound_is_not_a_stall() {
        let mut watch = ConsumerWatch::new(AFTER);
        let start = Instant::now();
        let now = silent_for(&mut watch, start, 14);
        assert_eq!(watch.judge(100, Some(250), now), None);
    }

    #[test]
    fn a_record_starts_the_clock_over() {
        let mut watch = ConsumerWatch::new(AFTER);
        let start = Instant::now();
        watch.polled(false, start);
        watch.polled(true, start + Duration::from_secs(10));
        let now = silent_for(&mut watch, start + Duration::from_secs(11), 10);
        assert_eq!(watch.judge(100, Some(250), now), None);
    }

    #[test]
    fn an_unanswered_broker_is_an_outage_and_starts_the_clock_over() {
        let mut watch = ConsumerWatch::new(AFTER);
        let start = Instant::now();
        let during = silent_for(&mut watch, start, 14);
        assert_eq!(watch.judge(100, None, during), None);
        // The broker answers again 2 s later: the consumer gets its own bound from there.
        let back = during + Duration::from_secs(2);
        watch.polled(false, back);
        assert_eq!(watch.judge(100, Some(250), back), None);
        let later = back + AFTER;
        watch.polled(false, later);
        assert!(watch.judge(100, Some(250), later).is_some());
    }

    #[test]
    fn one_partition_stalled_is_found_while_another_moves() {
        let mut watches = PartitionWatches::new(AFTER);
        let start = Instant::now();
        let mut moving = 0;
        for second in (0..=20).step_by(2) {
            let now = start + Duration::from_secs(second);
            moving += 500;
            assert_eq!(watches.judge("left", moving, Some(1_000_000), now), None);
            let stalled = watches.judge("table", 100, Some(250), now);
            if second < 17 {
                assert_eq!(stalled, None, "at {second} s");
            } else {
                let stall = stalled.expect("the table partition is stalled");
                assert_eq!((stall.position, stall.stable_end), (100, 250));
            }
            // A partition read to its end is idle, however long.
            assert_eq!(watches.judge("idle", 250, Some(250), now), None);
        }
    }

    #[test]
    fn no_poll_yet_is_no_stall() {
        let mut watch = ConsumerWatch::new(AFTER);
        assert_eq!(watch.judge(0, Some(250), Instant::now()), None);
    }
}
