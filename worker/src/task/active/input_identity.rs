//! Which input a task's state was built from: the input topic's name and its Kafka topic id,
//! stored in the state itself under `keys::INPUT` (a join's right topic: `keys::RIGHT_INPUT`;
//! a re-keyed side's own topic: `keys::LEFT_SOURCE`, `keys::RIGHT_SOURCE`),
//! so it travels with the changelog and every checkpoint like the processor's identity
//! (`identity`).
//!
//! The state's input position (`input_position`) is an offset, and an offset means something
//! only in the topic incarnation it was read from. Without this, a job deleted with
//! `deletionPolicy: Retain` and created again under the same name with another `inputTopic`
//! adopts the old state and resumes the new topic at the old topic's offset, skipping every
//! record before it; a topic deleted and created again under the same name (a new topic id)
//! does the same. Now either one stops the task, naming both identities. Moving a job to
//! another topic on purpose is a restore request that adopts the input
//! (`spec.restore.adoptInput`): it keeps the state, forgets the old identity and position, and
//! the task starts the new topic from its beginning.
//!
//! A state with no input identity (new, written before this rule, or just adopted) gets this
//! job's when its task starts.

use super::identity::Verdict;
use super::processing_loop::{ActiveLoop, KAFKA_TIMEOUT};
use super::sources::{self, Positions, Source};
use crate::store::{ChangeSet, RocksStore, StateStore};
use crate::task::{TaskError, stop};
use rdkafka::consumer::Consumer;
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};
use streamkeeper_kafka_topic_id::{TopicIdError, topic_id};

/// The encoding version of the stored input identity: a version byte, then JSON.
const INPUT_IDENTITY_FORMAT_VERSION: u8 = 1;
/// One DescribeTopics call's bound: the stop flag is checked between calls.
const DESCRIBE_SLICE: Duration = Duration::from_millis(500);

/// The input a state was built from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InputIdentity {
    pub topic: String,
    /// Kafka's id of the topic (KIP-516), as its tools print it.
    pub topic_id: String,
}

pub fn encode(identity: &InputIdentity) -> Result<Vec<u8>, TaskError> {
    let json = serde_json::to_vec(identity)
        .map_err(|e| TaskError::Internal(format!("encoding the input identity: {e}")))?;
    Ok([&[INPUT_IDENTITY_FORMAT_VERSION][..], &json].concat())
}

fn decode(raw: &[u8]) -> Option<InputIdentity> {
    let (&version, json) = raw.split_first()?;
    (version == INPUT_IDENTITY_FORMAT_VERSION)
        .then(|| serde_json::from_slice(json).ok())
        .flatten()
}

/// Compares the stored identity `stored` with `ours` (pure).
pub fn judge(task: u32, stored: Option<&[u8]>, ours: &InputIdentity) -> Verdict {
    let Some(stored) = stored else {
        return Verdict::Unmarked;
    };
    let way_on = "To move the job to this input on purpose, keeping its state, apply a restore \
                  request with `adoptInput: true` (spec.restore); to start over, delete the old \
                  job's data or give this job other topic names and S3 prefix";
    let reason = match decode(stored) {
        Some(theirs) if theirs == *ours => return Verdict::Same,
        Some(theirs) if theirs.topic == ours.topic => format!(
            "task {task}'s state was built from input topic {} with id {}, but the topic now has id {}: it was deleted and created again, and the state's input position means nothing in the new one. {way_on}",
            theirs.topic, theirs.topic_id, ours.topic_id
        ),
        Some(theirs) => format!(
            "task {task}'s state was built from input topic {} (id {}), but this job reads {} (id {}): the state's input position means nothing in another topic. {way_on}",
            theirs.topic, theirs.topic_id, ours.topic, ours.topic_id
        ),
        None => format!(
            "task {task}'s state holds an unreadable input identity, and this job reads {} (id {}). {way_on}",
            ours.topic, ours.topic_id
        ),
    };
    Verdict::Other(reason)
}

impl ActiveLoop<'_> {
    /// Checks the state in `store` against the topic this job reads `source` from, writing
    /// this job's identity into a state that has none (in its own transaction, so it reaches
    /// the changelog).
    pub(super) fn check_input_identity(
        &self,
        store: &mut RocksStore,
        source: Source,
    ) -> Result<(), TaskError> {
        let (topic, _) = self.locate(source);
        let ours = InputIdentity {
            topic: topic.to_string(),
            topic_id: self.input_topic_id(topic)?,
        };
        let key = sources::identity_key(source);
        let stored = store.get(key)?;
        match judge(self.task, stored.as_deref(), &ours) {
            Verdict::Same => Ok(()),
            Verdict::Unmarked => {
                tracing::info!(task = self.task, topic = %ours.topic, topic_id = %ours.topic_id, "the state has no input identity yet: recording this job's");
                let mut changes = ChangeSet::new();
                changes.put(key, encode(&ours)?);
                self.commit_changes(store, changes, Positions::default())
            }
            Verdict::Other(reason) => Err(TaskError::InputMismatch(reason)),
        }
    }

    /// An input topic's id, asked in slices so a stop request ends the wait.
    fn input_topic_id(&self, topic: &str) -> Result<String, TaskError> {
        let deadline = Instant::now() + KAFKA_TIMEOUT;
        loop {
            stop::check(self.context, "reading the input topic's id")?;
            match topic_id(self.input.client(), topic, DESCRIBE_SLICE) {
                Ok(id) => return Ok(id.to_string()),
                Err(TopicIdError::Timeout { .. }) if Instant::now() < deadline => {}
                Err(error) => return Err(TaskError::InputTopicId(error)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(topic: &str, id: &str) -> InputIdentity {
        InputIdentity {
            topic: topic.into(),
            topic_id: id.into(),
        }
    }

    #[test]
    fn the_same_input_is_the_same_and_another_topic_or_incarnation_is_named() {
        let stored = encode(&input("payments", "AAAA")).unwrap();
        assert_eq!(
            decode(&stored),
            Some(input("payments", "AAAA")),
            "round trip"
        );
        assert_eq!(
            judge(0, Some(&stored), &input("payments", "AAAA")),
            Verdict::Same
        );
        assert_eq!(
            judge(0, None, &input("payments", "AAAA")),
            Verdict::Unmarked
        );

        let Verdict::Other(reason) = judge(3, Some(&stored), &input("refunds", "BBBB")) else {
            panic!("another topic must differ");
        };
        for part in [
            "task 3",
            "payments",
            "AAAA",
            "refunds",
            "BBBB",
            "adoptInput",
        ] {
            assert!(reason.contains(part), "{part} in {reason}");
        }

        let Verdict::Other(reason) = judge(1, Some(&stored), &input("payments", "CCCC")) else {
            panic!("a re-created topic must differ");
        };
        assert!(
            reason.contains("deleted and created again") && reason.contains("CCCC"),
            "{reason}"
        );

        let Verdict::Other(reason) = judge(0, Some(b"\x09junk"), &input("payments", "AAAA")) else {
            panic!("an unknown version is not ours");
        };
        assert!(reason.contains("unreadable"), "{reason}");
    }
}
