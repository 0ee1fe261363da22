//! The order in which a join's task processes the records of its two topics.
//!
//! One consumer reads partition `task` of both topics, and librdkafka hands their records over
//! in whatever order its fetches complete. A join's result depends on that order (a table
//! update read before or after a stream record of a later time), so the task keeps a few
//! records of each side and takes the one with the earlier Kafka timestamp, as Kafka Streams
//! does. While one side has nothing buffered, the other goes on once the consumer has nothing
//! more for it right now (Kafka Streams' `max.task.idle.ms` of 0): a quiet table never holds
//! the stream up. Whatever the order, each transaction commits both positions with the state
//! and output it produced, so a replay after a crash goes on from a consistent point.

use crate::processor::Side;
use rdkafka::Message;
use rdkafka::consumer::BaseConsumer;
use rdkafka::error::KafkaError;
use rdkafka::message::OwnedMessage;
use std::collections::VecDeque;
use std::time::Duration;

/// Records kept per task before the earlier one is processed anyway.
const MAX_BUFFERED: usize = 1_000;

/// The records read and not yet processed, per side.
#[derive(Default)]
pub struct Merge {
    left: VecDeque<OwnedMessage>,
    right: VecDeque<OwnedMessage>,
}

impl Merge {
    /// The next record to process, polling `consumer` (waiting up to `wait` only when nothing
    /// is buffered). `right_topic` tells the sides apart.
    pub fn next(
        &mut self,
        consumer: &BaseConsumer,
        right_topic: &str,
        wait: Duration,
    ) -> Result<Option<(Side, OwnedMessage)>, KafkaError> {
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
                    let queue = if message.topic() == right_topic {
                        &mut self.right
                    } else {
                        &mut self.left
                    };
                    queue.push_back(message.detach());
                }
            }
        }
        let front_time = |queue: &VecDeque<OwnedMessage>| {
            queue
                .front()
                .map(|message| message.timestamp().to_millis().unwrap_or(i64::MIN))
        };
        let side = earlier(front_time(&self.left), front_time(&self.right));
        Ok(side.and_then(|side| {
            let queue = match side {
                Side::Left => &mut self.left,
                Side::Right => &mut self.right,
            };
            queue.pop_front().map(|message| (side, message))
        }))
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
