//! Retention rules: whether a job's checkpoints keep it recoverable given what Kafka retains.
//!
//! Pure functions over facts the caller reads from Kafka and S3 (topic configs, log-start
//! offsets, checkpoint ages); nothing here talks to a broker. The operator turns the results into
//! the `RetentionSafe`, `CheckpointStale`, `RecoveryGap` and `ChangelogReady` conditions.
//!
//! # The rules and their margins
//!
//! A task can always be rebuilt from its newest checkpoint plus the input after the checkpoint's
//! input offset, as long as the input still holds that offset. Kafka may delete a record as soon
//! as it is `retention.ms` old, so:
//!
//! - **Max safe checkpoint age = retention / 2.** A checkpoint older than that is flagged
//!   (`CheckpointStale`) while half the retention is still left to fix what stops checkpoints
//!   (and to run the restore itself, which reads the input from that offset) before the input it
//!   needs can be deleted.
//! - **Checkpoint interval ≤ retention / 4.** A healthy task's newest checkpoint is less than one
//!   interval old; with one missed checkpoint it is less than two intervals, which this rule keeps
//!   at or under the safe age. So `CheckpointStale` fires only after two checkpoints in a row are
//!   missed, never on ordinary jitter, and still leaves half the retention.
//! - **Recovery gap:** the time rules are a forecast; the fact is the offset. A checkpoint whose
//!   input offset is below the partition's log-start offset cannot be replayed from input.
//! - `retention.bytes` has no time of its own: [`effective_retention`] turns it into one from an
//!   observed byte rate, and the offset check catches what a forecast misses.
//!
//! The changelog side: its `cleanup.policy` must include `compact` (a full replay needs each
//! key's newest value), must not also `delete` by time (that drops keys that were never
//! overwritten), and it must have exactly as many partitions as the input (task i ↔ partition i).
//! Its `delete.retention.ms` (how long tombstones stay) bounds how old local state or a
//! checkpoint may be for an exact delta replay, so the operator sets it from
//! [`changelog_delete_retention`].

use std::time::Duration;
use streamkeeper_contract::format_go_duration;

use crate::vocabulary::reasons;

/// Checkpoint interval must be at most retention / this.
pub const INTERVAL_RETENTION_DIVISOR: u32 = 4;
/// Max safe checkpoint age is retention / this.
pub const SAFE_AGE_RETENTION_DIVISOR: u32 = 2;
/// Kafka's own default `delete.retention.ms`; the changelog never keeps tombstones for less.
pub const MIN_CHANGELOG_DELETE_RETENTION: Duration = Duration::from_secs(24 * 60 * 60);
/// Tombstones outlive at least this many checkpoint intervals.
pub const DELETE_RETENTION_INTERVALS: u32 = 10;

/// A rule the job's topics or checkpoints break. `category()` is the condition/Event reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RetentionViolation {
    #[error(
        "checkpoint.interval {} is longer than the input retention {} / {INTERVAL_RETENTION_DIVISOR} = {}: \
         the newest checkpoint must stay within the max safe age (retention / {SAFE_AGE_RETENTION_DIVISOR}) \
         even when one checkpoint is missed; lower checkpoint.interval or raise the input topic's retention.ms",
        go(*interval), go(*retention), go(*max_interval)
    )]
    IntervalTooLong {
        interval: Duration,
        retention: Duration,
        max_interval: Duration,
    },
    #[error(
        "task {task}: newest checkpoint is {} old, over the max safe age {} (input retention / {SAFE_AGE_RETENTION_DIVISOR}); \
         if the input it needs is deleted the task can only be rebuilt from the changelog",
        go(*age), go(*max_safe)
    )]
    CheckpointTooOld {
        task: u32,
        age: Duration,
        max_safe: Duration,
    },
    #[error(
        "task {task}: newest checkpoint resumes input at offset {checkpoint_input_offset} but the partition now \
         starts at {log_start_offset}: {missing} records needed to rebuild from the checkpoint are gone"
    )]
    InputTruncated {
        task: u32,
        checkpoint_input_offset: i64,
        log_start_offset: i64,
        missing: u64,
    },
    #[error(
        "changelog cleanup.policy is `{policy}`; it must include `compact` so a replay finds every key's newest value"
    )]
    NotCompacted { policy: String },
    #[error(
        "changelog cleanup.policy is `{policy}` with retention.ms {}: time-based deletion drops keys that were \
         never overwritten, so a replay would lose state; use `compact` alone or retention.ms -1",
        go(*retention)
    )]
    ChangelogDeletesKeys { policy: String, retention: Duration },
    #[error(
        "changelog has {changelog} partitions but the input has {input}: task i keeps its state in changelog \
         partition i, so the counts must be equal"
    )]
    PartitionMismatch { changelog: i32, input: i32 },
    #[error(
        "changelog topic {topic} is already the changelog of job {owner}{why}: two jobs writing one changelog \
         would fence each other's transactions and mix their state; name another spec.kafka.changelogTopic"
    )]
    ChangelogClaimed {
        topic: String,
        owner: String,
        why: &'static str,
    },
    #[error("topic config {key}={value:?} is not a number of {unit}")]
    InvalidTopicConfig {
        key: &'static str,
        value: String,
        unit: &'static str,
    },
}

impl RetentionViolation {
    /// Stable name used as the condition reason, the Event reason and the metric label.
    pub fn category(&self) -> &'static str {
        match self {
            RetentionViolation::IntervalTooLong { .. } => reasons::INTERVAL_EXCEEDS_RETENTION,
            RetentionViolation::CheckpointTooOld { .. } => reasons::CHECKPOINT_TOO_OLD,
            RetentionViolation::InputTruncated { .. } => reasons::INPUT_TRUNCATED,
            RetentionViolation::NotCompacted { .. } => reasons::NOT_COMPACTED,
            RetentionViolation::ChangelogDeletesKeys { .. } => reasons::CHANGELOG_DELETES_KEYS,
            RetentionViolation::PartitionMismatch { .. } => reasons::PARTITION_MISMATCH,
            RetentionViolation::ChangelogClaimed { .. } => reasons::CHANGELOG_CLAIMED,
            RetentionViolation::InvalidTopicConfig { .. } => reasons::INVALID_TOPIC_CONFIG,
        }
    }
}

fn go(duration: Duration) -> String {
    format_go_duration(duration)
}

/// A topic's `retention.ms` and `retention.bytes`; `None` is unlimited (Kafka's `-1`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TopicRetention {
    pub time: Option<Duration>,
    pub bytes_per_partition: Option<u64>,
}

impl TopicRetention {
    /// Reads the two configs as the Kafka admin API returns them (strings; absent = broker
    /// default already resolved by the caller, or unlimited).
    pub fn from_topic_config(
        retention_ms: Option<&str>,
        retention_bytes: Option<&str>,
    ) -> Result<Self, RetentionViolation> {
        Ok(Self {
            time: parse_limit("retention.ms", "milliseconds", retention_ms)?
                .map(Duration::from_millis),
            bytes_per_partition: parse_limit("retention.bytes", "bytes", retention_bytes)?,
        })
    }

    /// `retention.ms` in milliseconds for the status, `None` when unlimited.
    pub fn time_ms(&self) -> Option<i64> {
        self.time
            .map(|time| i64::try_from(time.as_millis()).unwrap_or(i64::MAX))
    }
}

/// `-1` (or absent) means unlimited; other negatives and non-numbers are refused.
fn parse_limit(
    key: &'static str,
    unit: &'static str,
    value: Option<&str>,
) -> Result<Option<u64>, RetentionViolation> {
    let Some(text) = value else {
        return Ok(None);
    };
    let invalid = || RetentionViolation::InvalidTopicConfig {
        key,
        value: text.to_string(),
        unit,
    };
    match text.trim().parse::<i64>().map_err(|_| invalid())? {
        -1 => Ok(None),
        limit => u64::try_from(limit).map(Some).map_err(|_| invalid()),
    }
}

/// The time the input keeps a record, counting size-based retention when a byte rate is known:
/// `min(retention.ms, retention.bytes / bytes_per_second)`. `None` when both are unlimited (or
/// only bytes are limited and no rate is known yet).
pub fn effective_retention(
    retention: &TopicRetention,
    partition_bytes_per_second: Option<u64>,
) -> Option<Duration> {
    let by_bytes = match (retention.bytes_per_partition, partition_bytes_per_second) {
        (Some(bytes), Some(rate)) if rate > 0 => {
            let millis = u128::from(bytes) * 1_000 / u128::from(rate);
            Some(Duration::from_millis(
                u64::try_from(millis).unwrap_or(u64::MAX),
            ))
        }
        _ => None,
    };
    match (retention.time, by_bytes) {
        (Some(time), Some(bytes)) => Some(time.min(bytes)),
        (time, bytes) => time.or(bytes),
    }
}

/// Largest checkpoint age that leaves a rebuild from input safe: retention / 2. `None` (no bound)
/// when retention is unlimited.
pub fn max_safe_checkpoint_age(retention: Option<Duration>) -> Option<Duration> {
    retention.map(|retention| retention / SAFE_AGE_RETENTION_DIVISOR)
}

/// The checkpoint interval fits: interval ≤ retention / 4 (always, when retention is unlimited).
pub fn check_interval(
    interval: Duration,
    retention: Option<Duration>,
) -> Result<(), RetentionViolation> {
    let Some(retention) = retention else {
        return Ok(());
    };
    let max_interval = retention / INTERVAL_RETENTION_DIVISOR;
    if interval <= max_interval {
        Ok(())
    } else {
        Err(RetentionViolation::IntervalTooLong {
            interval,
            retention,
            max_interval,
        })
    }
}

/// Whether a checkpoint `age` old is over the max safe age (exactly at it is still safe).
pub fn checkpoint_stale(age: Duration, max_safe: Option<Duration>) -> bool {
    max_safe.is_some_and(|max_safe| age > max_safe)
}

/// [`checkpoint_stale`] with the message for task `task`.
pub fn check_checkpoint_age(
    task: u32,
    age: Duration,
    max_safe: Option<Duration>,
) -> Result<(), RetentionViolation> {
    match max_safe {
        Some(max_safe) if checkpoint_stale(age, Some(max_safe)) => {
            Err(RetentionViolation::CheckpointTooOld {
                task,
                age,
                max_safe,
            })
        }
        _ => Ok(()),
    }
}

/// How many input records a rebuild from a checkpoint would miss: the checkpoint resumes at
/// `checkpoint_input_offset` (the next offset to read), the partition starts at
/// `log_start_offset`. `None` when nothing is missing.
pub fn recovery_gap(checkpoint_input_offset: i64, log_start_offset: i64) -> Option<u64> {
    let missing = i128::from(log_start_offset) - i128::from(checkpoint_input_offset);
    u64::try_from(missing).ok().filter(|missing| *missing > 0)
}

/// [`recovery_gap`] with the message for task `task`.
pub fn check_recovery_gap(
    task: u32,
    checkpoint_input_offset: i64,
    log_start_offset: i64,
) -> Result<(), RetentionViolation> {
    match recovery_gap(checkpoint_input_offset, log_start_offset) {
        Some(missing) => Err(RetentionViolation::InputTruncated {
            task,
            checkpoint_input_offset,
            log_start_offset,
            missing,
        }),
        None => Ok(()),
    }
}

/// The changelog's `cleanup.policy` (e.g. `compact`, `compact,delete`) keeps every key: it
/// includes `compact`, and it deletes by time only if the time is unlimited.
pub fn check_changelog_cleanup_policy(
    policy: &str,
    changelog_retention: Option<Duration>,
) -> Result<(), RetentionViolation> {
    let has = |wanted: &str| policy.split(',').any(|part| part.trim() == wanted);
    if !has("compact") {
        return Err(RetentionViolation::NotCompacted {
            policy: policy.to_string(),
        });
    }
    match changelog_retention {
        Some(retention) if has("delete") => Err(RetentionViolation::ChangelogDeletesKeys {
            policy: policy.to_string(),
            retention,
        }),
        _ => Ok(()),
    }
}

/// Task i ↔ input partition i ↔ changelog partition i, so the counts are equal.
pub fn check_changelog_partitions(changelog: i32, input: i32) -> Result<(), RetentionViolation> {
    if changelog == input {
        Ok(())
    } else {
        Err(RetentionViolation::PartitionMismatch { changelog, input })
    }
}

/// The changelog's `delete.retention.ms`: `max(24h, max(10, 2 × retain) × interval)`.
///
/// Local state or a checkpoint older than this is not trusted for a delta replay (a tombstone
/// after it may be gone), so tombstones must outlive: the newest checkpoint even after several
/// missed rounds (10 intervals), and the oldest retained checkpoint a corrupt newest one falls
/// back to (`retain` intervals) with the same 2× margin. Kafka's default of 24h is the floor:
/// tombstones are small, and a pod that was down over a day should still restore by delta.
pub fn changelog_delete_retention(interval: Duration, retain: u32) -> Duration {
    let intervals = DELETE_RETENTION_INTERVALS.max(retain.saturating_mul(2));
    interval
        .saturating_mul(intervals)
        .max(MIN_CHANGELOG_DELETE_RETENTION)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: Duration = Duration::from_secs(3600);

    #[test]
    fn interval_may_be_exactly_a_quarter_of_retention() {
        assert_eq!(check_interval(Duration::from_secs(900), Some(HOUR)), Ok(()));
        let error = check_interval(Duration::from_secs(901), Some(HOUR)).unwrap_err();
        assert_eq!(error.category(), "IntervalExceedsRetention");
        let message = error.to_string();
        for part in ["15m1s", "1h", "15m", "retention / 2"] {
            assert!(message.contains(part), "{message} should mention {part}");
        }
    }

    #[test]
    fn unlimited_retention_accepts_any_interval_and_any_age() {
        assert_eq!(check_interval(Duration::from_secs(u64::MAX), None), Ok(()));
        assert_eq!(max_safe_checkpoint_age(None), None);
        assert!(!checkpoint_stale(Duration::from_secs(u64::MAX), None));
    }

    #[test]
    fn safe_age_is_half_the_retention_and_exactly_half_is_safe() {
        let max_safe = max_safe_checkpoint_age(Some(HOUR));
        assert_eq!(max_safe, Some(Duration::from_secs(1800)));
        assert!(!checkpoint_stale(Duration::from_secs(1800), max_safe));
        assert!(checkpoint_stale(Duration::from_millis(1_800_001), max_safe));
        let error = check_checkpoint_age(2, Duration::from_secs(2000), max_safe).unwrap_err();
        assert_eq!(error.category(), "CheckpointTooOld");
        assert!(error.to_string().starts_with("task 2:"), "{error}");
        assert!(error.to_string().contains("33m20s"), "{error}");
    }

    #[test]
    fn one_missed_checkpoint_never_looks_stale_at_the_largest_allowed_interval() {
        let retention = Duration::from_secs(7 * 24 * 3600);
        let interval = retention / INTERVAL_RETENTION_DIVISOR;
        assert_eq!(check_interval(interval, Some(retention)), Ok(()));
        let max_safe = max_safe_checkpoint_age(Some(retention));
        assert!(!checkpoint_stale(interval * 2, max_safe));
        assert!(checkpoint_stale(
            interval * 2 + Duration::from_millis(1),
            max_safe
        ));
    }

    #[test]
    fn recovery_gap_counts_missing_records() {
        assert_eq!(recovery_gap(100, 0), None);
        assert_eq!(recovery_gap(100, 100), None);
        assert_eq!(recovery_gap(100, 101), Some(1));
        assert_eq!(recovery_gap(0, i64::MAX), Some(i64::MAX as u64));
        assert_eq!(recovery_gap(i64::MIN, i64::MAX), Some(u64::MAX));
        assert_eq!(check_recovery_gap(0, 5, 5), Ok(()));
        let error = check_recovery_gap(3, 40, 50).unwrap_err();
        assert_eq!(error.category(), "InputTruncated");
        assert!(error.to_string().contains("10 records"), "{error}");
    }

    #[test]
    fn changelog_must_compact_and_keep_every_key() {
        assert_eq!(check_changelog_cleanup_policy("compact", None), Ok(()));
        assert_eq!(
            check_changelog_cleanup_policy("compact", Some(HOUR)),
            Ok(())
        );
        assert_eq!(
            check_changelog_cleanup_policy("delete, compact", None),
            Ok(())
        );
        let error = check_changelog_cleanup_policy("delete", None).unwrap_err();
        assert_eq!(error.category(), "NotCompacted");
        assert!(check_changelog_cleanup_policy("compacted", None).is_err());
        assert!(check_changelog_cleanup_policy("", None).is_err());
        let error = check_changelog_cleanup_policy("compact,delete", Some(HOUR)).unwrap_err();
        assert_eq!(error.category(), "ChangelogDeletesKeys");
        assert!(error.to_string().contains("1h"), "{error}");
    }

    #[test]
    fn changelog_partitions_must_equal_input() {
        assert_eq!(check_changelog_partitions(6, 6), Ok(()));
        for (changelog, input) in [(5, 6), (7, 6)] {
            let error = check_changelog_partitions(changelog, input).unwrap_err();
            assert_eq!(error.category(), "PartitionMismatch");
            assert!(
                error
                    .to_string()
                    .contains(&format!("{changelog} partitions"))
            );
        }
    }

    #[test]
    fn topic_config_reads_kafka_values() {
        let retention = TopicRetention::from_topic_config(Some("604800000"), Some("-1")).unwrap();
        assert_eq!(retention.time, Some(Duration::from_secs(604_800)));
        assert_eq!(retention.bytes_per_partition, None);
        assert_eq!(retention.time_ms(), Some(604_800_000));
        assert_eq!(
            TopicRetention::from_topic_config(None, None).unwrap(),
            TopicRetention::default()
        );
        for bad in ["-2", "soon", ""] {
            let error = TopicRetention::from_topic_config(Some(bad), None).unwrap_err();
            assert_eq!(error.category(), "InvalidTopicConfig");
            assert!(error.to_string().contains("retention.ms"), "{error}");
        }
    }

    #[test]
    fn byte_retention_shortens_the_time_when_a_rate_is_known() {
        let retention = TopicRetention {
            time: Some(HOUR),
            bytes_per_partition: Some(1_000_000),
        };
        assert_eq!(effective_retention(&retention, None), Some(HOUR));
        assert_eq!(effective_retention(&retention, Some(0)), Some(HOUR));
        assert_eq!(
            effective_retention(&retention, Some(1_000)),
            Some(Duration::from_secs(1_000))
        );
        assert_eq!(effective_retention(&retention, Some(1)), Some(HOUR));
        let bytes_only = TopicRetention {
            time: None,
            bytes_per_partition: Some(1_000_000),
        };
        assert_eq!(effective_retention(&bytes_only, None), None);
        assert_eq!(
            effective_retention(&bytes_only, Some(500)),
            Some(Duration::from_secs(2_000))
        );
    }

    #[test]
    fn tombstones_outlive_the_checkpoints_a_restore_may_use() {
        assert_eq!(
            changelog_delete_retention(Duration::from_secs(30), 3),
            MIN_CHANGELOG_DELETE_RETENTION
        );
        assert_eq!(
            changelog_delete_retention(Duration::from_secs(3 * 3600), 3),
            Duration::from_secs(30 * 3600)
        );
        assert_eq!(
            changelog_delete_retention(Duration::from_secs(3 * 3600), 20),
            Duration::from_secs(120 * 3600)
        );
        assert_eq!(
            changelog_delete_retention(Duration::MAX, u32::MAX),
            Duration::MAX
        );
    }
}
