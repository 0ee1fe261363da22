//! The changelog topic's `delete.retention.ms`, which the restore plan's tombstone rule needs:
//! read from the broker at most once per restore, and only when the plan asks for it. Also the
//! wall clock the rule compares with.

use crate::task::{TaskError, WorkerContext};
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(30);

pub(super) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// The changelog's `delete.retention.ms`, asked of the broker at most once per restore and
/// only when a delta replay needs the tombstone rule.
pub(super) struct RetentionLookup<'a> {
    context: &'a WorkerContext,
    topic: &'a str,
    value: Option<i64>,
}

impl<'a> RetentionLookup<'a> {
    pub(super) fn new(context: &'a WorkerContext, topic: &'a str) -> Self {
        Self {
            context,
            topic,
            value: None,
        }
    }

    pub(super) fn get(&mut self) -> Result<i64, TaskError> {
        if let Some(value) = self.value {
            return Ok(value);
        }
        let value = changelog_delete_retention_ms(self.context, self.topic)?;
        self.value = Some(value);
        Ok(value)
    }
}

/// The changelog topic's `delete.retention.ms`, read from the broker.
fn changelog_delete_retention_ms(context: &WorkerContext, topic: &str) -> Result<i64, TaskError> {
    use rdkafka::admin::{AdminOptions, ResourceSpecifier};
    let admin = context
        .admin
        .get(&context.config.kafka)
        .map_err(|e| TaskError::Changelog(format!("reading {topic}'s delete.retention.ms: {e}")))?;
    let options = AdminOptions::new().request_timeout(Some(TIMEOUT));
    // A broker whose metadata does not show the topic yet answers with an error for it, which
    // rust-rdkafka drops: the answer then lists no config at all. Ask again for a few seconds.
    for _ in 0..CONFIG_VISIBILITY_ATTEMPTS {
        let results = futures::executor::block_on(
            admin.describe_configs([&ResourceSpecifier::Topic(topic)], &options),
        )
        .map_err(|e| TaskError::kafka("describing the changelog topic", e))?;
        let config = results
            .into_iter()
            .next()
            .ok_or_else(|| TaskError::Changelog(format!("no configuration returned for {topic}")))?
            .map_err(|code| TaskError::Changelog(format!("describing {topic}: {code}")))?;
        if config.entries.is_empty() {
            std::thread::sleep(CONFIG_VISIBILITY_PAUSE);
            continue;
        }
        return config
            .get("delete.retention.ms")
            .and_then(|entry| entry.value.as_deref())
            .and_then(|value| value.parse().ok())
            .ok_or_else(|| {
                TaskError::Changelog(format!("{topic} has no readable delete.retention.ms"))
            });
    }
    Err(TaskError::Changelog(format!(
        "the broker lists no configs for {topic} yet (its metadata is catching up)"
    )))
}

const CONFIG_VISIBILITY_ATTEMPTS: u32 = 20;
const CONFIG_VISIBILITY_PAUSE: Duration = Duration::from_millis(250);
