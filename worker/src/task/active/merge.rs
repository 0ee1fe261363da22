//! The order in which a join's task processes the records of its two topics.
//!
//! One consumer reads partition `task` of both topics (and the partitions a re-keyed side's
//! records come from, which go on at once: see `sources`), and librdkafka hands their records
//! over in whatever order its fetches complete. A join's result depends on that order (a table
//! update read before or after a stream record of a later time), so the task keeps a few
//! records of each side and takes the one with the earlier Kafka timestamp, as Kafka Streams
//! does. While one side has nothing buffered, the other goes on once the consumer has nothing
//! more for it right now (Kafka Streams' `max.task.idle.ms` of 0): a quiet table never holds
//! the stream up. Whatever the order, each transaction commits both positions with the state
//! and output it produced, so a replay after a crash goes on from a consistent point.

use super::sources::Source;
use crate::processor::RawInput;
use crate::processor::Side;
use rdkafka::Message;
use rdkafka::consumer::BaseConsumer;
use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedMessage, Headers, OwnedMessage};
use std::collections::VecDeque;
use std::time::Duration;

/// Records kept per task before the earlier one is processed anyway.
const MAX_BUFFERED: usize = 1_000;

/// The records read and not yet processed, per side, each with its source.
#[derive(Default)]
pub struct Merge {
    left: VecDeque<(Source, OwnedMessage)>,
    right: VecDeque<(Source, OwnedMessage)>,
}

impl Merge {
    /// The next record to process and its source, polling `consumer` (waiting up to `wait`
    /// only when nothing is buffered). `source_of` tells a record's source by its topic and
    /// partition. A record to re-key goes first, at once: its order against the join's records
    /// is fixed later, when the join reads it back from the repartition topic.
    pub fn next(
        &mut self,
        consumer: &BaseConsumer,
        source_of: impl Fn(&str, i32) -> Option<Source>,
        wait: Duration,
    ) -> Result<Option<(Source, OwnedMessage)>, KafkaError> {
        while self.left.is_empty() || self.right.is_empty() {
            if self.left.len() + self.right.len() >= MAX_BUFFERED {
                break;
            }
            let nothing_buffered = self.left.is_empty() && self.right.is_empty();
            let timeout = if nothing_buffered {
                wait
            } else {
                Duration::ZERO
            };
            match consumer.poll(timeout) {
                None => break,
                Some(Err(error)) => return Err(error),
                Some(Ok(message)) => {
                    // Only assigned partitions deliver records: one found nowhere is the input's.
                    let source = source_of(message.topic(), message.partition())
                        .unwrap_or(Source::Joined(Side::Left));
                    let queue = match source {
                        Source::Rekeyed(..) => return Ok(Some((source, message.detach()))),
                        _ if source.side() == Side::Right => &mut self.right,
                        _ => &mut self.left,
                    };
                    queue.push_back((source, message.detach()));
                }
            }
        }
        let front_time = |queue: &VecDeque<(Source, OwnedMessage)>| {
            queue
                .front()
                .map(|(_, message)| message.timestamp().to_millis().unwrap_or(i64::MIN))
        };
        let side = earlier(front_time(&self.left), front_time(&self.right));
        Ok(side.and_then(|side| match side {
            Side::Left => self.left.pop_front(),
            Side::Right => self.right.pop_front(),
        }))
    }
}

/// A record the loop polled: the input's, borrowed from the consumer, or one of a join's
/// topics, taken out of the consumer by [`Merge`].
pub(super) enum Polled<'c> {
    Input(BorrowedMessage<'c>),
    Merged(Source, OwnedMessage),
}

impl Polled<'_> {
    pub(super) fn source(&self) -> Source {
        match self {
            Polled::Input(_) => Source::Joined(Side::Left),
            Polled::Merged(source, _) => *source,
        }
    }

    /// The record as the pipeline reads it.
    pub(super) fn raw(&self) -> RawInput<'_> {
        let side = self.source().side();
        match self {
            Polled::Input(message) => raw_input(side, message),
            Polled::Merged(_, message) => raw_input(side, message),
        }
    }
}

fn raw_input<M: Message>(side: Side, message: &M) -> RawInput<'_> {
    RawInput {
        side,
        kafka_key: message.key(),
        payload: message.payload(),
        partition: message.partition(),
        offset: message.offset(),
        timestamp_ms: message.timestamp().to_millis(),
        headers: message.headers().map_or_else(Vec::new, |headers| {
            headers
                .iter()
                .map(|header| (header.key, header.value))
                .collect()
        }),
    }
}

/// Which side's next record goes first, by Kafka timestamp (the right on a tie: a table
/// version is valid from its own time on, so a stream record of the same millisecond sees it);
/// `None` when neither side has one.
fn earlier(left: Option<i64>, right: Option<i64>) -> Option<Side> {
    match (left, right) {
        (Some(left), Some(right)) if right <= left => Some(Side::Right),
        (Some(_), _) => Some(Side::Left),
        (None, Some(_)) => Some(Side::Right),
        (None, None) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_earlier_record_goes_first_and_a_tie_goes_to_the_right() {
        assert_eq!(earlier(Some(5), Some(7)), Some(Side::Left));
        assert_eq!(earlier(Some(7), Some(5)), Some(Side::Right));
        assert_eq!(earlier(Some(5), Some(5)), Some(Side::Right));
        assert_eq!(earlier(None, Some(5)), Some(Side::Right));
        assert_eq!(earlier(Some(5), None), Some(Side::Left));
        assert_eq!(earlier(None, None), None);
    }
}
