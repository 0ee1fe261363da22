//! A Kafka topic's id: the UUID the broker gives a topic when it is created (KIP-516). A topic
//! deleted and created again under the same name gets another id, so the id, not the name, says
//! whether a job still reads the input its state was built from.
//!
//! rust-rdkafka exposes neither the id nor the DescribeTopics admin call that returns it;
//! librdkafka (2.3 and later) has both. `describe.rs` calls it through `rdkafka-sys` and is the
//! only unsafe code of the workspace.

mod describe;

use std::time::Duration;

/// A topic's id, as Kafka's tools print it (URL-safe base64 of the 16 bytes, no padding).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicId(String);

impl TopicId {
    /// An id as Kafka prints it, read back (from stored state, say).
    pub fn from_printed(text: impl Into<String>) -> Self {
        Self(text.into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for TopicId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TopicIdError {
    #[error("topic {topic}: {reason}")]
    Broker { topic: String, reason: String },
    #[error("topic {topic}: the broker gave no id (a broker older than Kafka 2.8?)")]
    NoId { topic: String },
    #[error("topic {topic}: no answer from the broker within {limit:?}")]
    Timeout { topic: String, limit: Duration },
    #[error("topic {topic}: the name holds a NUL byte")]
    BadName { topic: String },
}

/// The id of `topic`, asked of the brokers `client` is connected to (any rdkafka client: its
/// configuration, security included, is used as it is). Blocks for at most `limit`.
pub fn topic_id<C: rdkafka::ClientContext>(
    client: &rdkafka::client::Client<C>,
    topic: &str,
    limit: Duration,
) -> Result<TopicId, TopicIdError> {
    describe::topic_id(client.native_ptr(), topic, limit)
}
