//! The rules a job's settings follow, applied by both sides: the operator checks a spec with
//! them before it creates anything (a refusal becomes the `Invalid` condition), and the worker
//! checks its config with them before it starts a task (`check-config` and `run`). So a setting
//! the operator accepts is a setting the worker runs, and never a pod that loops on a refusal.
//! The CRD's CEL rules are written from the same constants (`src/api/cel.rs` in the operator).
//!
//! Each rule names the [`Field`] it judges; a field knows its path in the custom resource and in
//! the worker config, so each side names it the way its reader writes it.

use crate::duration::format_go_duration;
use crate::version::{FormatError, Versioned};
use crate::worker_config::{
    KafkaSecurity, ProcessorConfig, ProcessorKind, RocksDbTuning, S3Config, TRANSACTION_TIMEOUT,
    WindowConfig, WorkerConfig,
};
use std::time::Duration;

/// The StatefulSet controller labels each pod `controller-revision-hash: <name>-<hash>` with a
/// hash of up to 10 characters, and a label value is at most 63: so 52 for the job name.
pub const MAX_JOB_NAME_LEN: usize = 52;

/// Event time is epoch milliseconds, and so is every window and TTL the worker computes with. A
/// duration that is not a whole number of milliseconds would be cut to one the user did not
/// write (`500us` to 0, `1500us` to 1ms), so it is refused instead.
pub const TIME_RESOLUTION: Duration = Duration::from_millis(1);

/// Each record updates size / advance hopping windows in one transaction; beyond this one record
/// costs more state writes than any sane window layout needs (a day advancing every 90s is 960).
pub const MAX_WINDOWS_PER_RECORD: u64 = 1000;

/// Windows stay in state until their end plus the grace: a grace beyond a week keeps that many
/// windows per key alive for data that late, which is a reprocessing job, not a grace period.
pub const MAX_WINDOW_GRACE: Duration = Duration::from_secs(7 * 24 * 60 * 60);

/// Checkpoints more often than this spend the task's time uploading rather than processing.
pub const MIN_CHECKPOINT_INTERVAL: Duration = Duration::from_secs(1);

pub const MIN_COMMIT_INTERVAL: Duration = Duration::from_millis(1);
pub const MAX_COMMIT_INTERVAL: Duration = Duration::from_secs(30);

/// RocksDB clamps `write_buffer_size` into this range silently; refuse instead.
pub const MIN_WRITE_BUFFER_BYTES: u64 = 64 << 10;
pub const MAX_WRITE_BUFFER_BYTES: u64 = 64 << 30;

/// The SASL mechanisms the worker and the operator's client speak.
pub const SASL_MECHANISMS: [&str; 3] = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"];
/// The mechanism that sends the password itself: only inside TLS.
pub const SASL_PLAIN: &str = "PLAIN";

/// S3 bucket names (AWS's rules, which S3-compatible servers follow): 3-63 of lowercase letters,
/// digits, `.` and `-`, starting and ending with a letter or digit, no `..`. The CRD uses this
/// pattern; [`s3_bucket`] checks the rest.
pub const S3_BUCKET_PATTERN: &str = r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$";

/// A setting a rule judges, with its path on each side.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Field {
    JobNamespace,
    JobName,
    BootstrapServers,
    InputTopic,
    OutputTopic,
    ChangelogTopic,
    DeadLetterTopic,
    CommitInterval,
    CommitMaxRecords,
    TransactionTimeout,
    SaslMechanism,
    KeyField,
    TimeField,
    ValueField,
    WindowSize,
    WindowAdvance,
    WindowGrace,
    DedupTtl,
    JoinMode,
    JoinRightTopic,
    JoinRightKeyField,
    JoinRightTimeField,
    JoinRightRepartition,
    JoinWindow,
    JoinWindowBefore,
    JoinWindowAfter,
    JoinWindowGrace,
    JoinHistory,
    CustomName,
    WasmModuleKey,
    WasmModuleSha256,
    WasmFuelPerRecord,
    WasmMemoryBytes,
    WasmReadsStateOf,
    WriteBufferSize,
    CheckpointInterval,
    CheckpointRetain,
    S3Bucket,
    S3Prefix,
}

impl Field {
    /// The path in the `StatefulStreamJob`, as `kubectl explain` spells it.
    pub fn spec_path(self) -> &'static str {
        match self {
            Field::JobNamespace => "metadata.namespace",
            Field::JobName => "metadata.name",
            Field::BootstrapServers => "spec.kafka.bootstrapServers",
            Field::InputTopic => "spec.kafka.inputTopic",
            Field::OutputTopic => "spec.kafka.outputTopic",
            Field::ChangelogTopic => "spec.kafka.changelogTopic",
            Field::DeadLetterTopic => "spec.kafka.deadLetterTopic",
            Field::CommitInterval => "spec.kafka.commitInterval",
            Field::CommitMaxRecords => "spec.kafka.commitMaxRecords",
            // Not in the spec: the operator always renders the default.
            Field::TransactionTimeout => "(worker config) kafka.transactionTimeout",
            Field::SaslMechanism => "spec.kafka.sasl.mechanism",
            Field::KeyField => "spec.processor.keyField",
            Field::TimeField => "spec.processor.timeField",
            Field::ValueField => "spec.processor.aggregate.valueField",
            Field::WindowSize => "spec.processor.aggregate.window.size",
            Field::WindowAdvance => "spec.processor.aggregate.window.advance",
            Field::WindowGrace => "spec.processor.aggregate.window.grace",
            Field::DedupTtl => "spec.processor.dedup.ttl",
            Field::JoinMode => "spec.processor.join.mode",
            Field::JoinRightTopic => "spec.processor.join.right.topic",
            Field::JoinRightKeyField => "spec.processor.join.right.keyField",
            Field::JoinRightTimeField => "spec.processor.join.right.timeField",
            Field::JoinRightRepartition => "spec.processor.join.right.repartition",
            Field::JoinWindow => "spec.processor.join.window",
            Field::JoinWindowBefore => "spec.processor.join.window.before",
            Field::JoinWindowAfter => "spec.processor.join.window.after",
            Field::JoinWindowGrace => "spec.processor.join.window.grace",
            Field::JoinHistory => "spec.processor.join.history",
            Field::CustomName => "spec.processor.custom.name",
            Field::WasmModuleKey => "spec.processor.wasm.module.key",
            Field::WasmModuleSha256 => "spec.processor.wasm.module.sha256",
            Field::WasmFuelPerRecord => "spec.processor.wasm.limits.fuelPerRecord",
            Field::WasmMemoryBytes => "spec.processor.wasm.limits.memoryBytes",
            Field::WasmReadsStateOf => "spec.processor.wasm.readsStateOf",
            Field::WriteBufferSize => "spec.state.rocksdb.writeBufferSize",
            Field::CheckpointInterval => "spec.checkpoint.interval",
            Field::CheckpointRetain => "spec.checkpoint.retain",
            Field::S3Bucket => "spec.checkpoint.s3.bucket",
            Field::S3Prefix => "spec.checkpoint.s3.prefix",
        }
    }

    /// The path in the worker config.
    pub fn config_path(self) -> &'static str {
        match self {
            Field::JobNamespace => "job.namespace",
            Field::JobName => "job.name",
            Field::BootstrapServers => "kafka.bootstrapServers",
            Field::InputTopic => "kafka.inputTopic",
            Field::OutputTopic => "kafka.outputTopic",
            Field::ChangelogTopic => "kafka.changelogTopic",
            Field::DeadLetterTopic => "kafka.deadLetterTopic",
            Field::CommitInterval => "kafka.commitInterval",
            Field::CommitMaxRecords => "kafka.commitMaxRecords",
            Field::TransactionTimeout => "kafka.transactionTimeout",
            Field::SaslMechanism => "kafka.security.sasl.mechanism",
            Field::KeyField => "processor.keyField",
            Field::TimeField => "processor.timeField",
            Field::ValueField => "processor.valueField",
            Field::WindowSize => "processor.window.size",
            Field::WindowAdvance => "processor.window.advance",
            Field::WindowGrace => "processor.window.grace",
            Field::DedupTtl => "processor.ttl",
            Field::JoinMode => "processor.mode",
            Field::JoinRightTopic => "processor.right.topic",
            Field::JoinRightKeyField => "processor.right.keyField",
            Field::JoinRightTimeField => "processor.right.timeField",
            Field::JoinRightRepartition => "processor.right.repartitionTopic",
            Field::JoinWindow => "processor.window",
            Field::JoinWindowBefore => "processor.window.before",
            Field::JoinWindowAfter => "processor.window.after",
            Field::JoinWindowGrace => "processor.window.grace",
            Field::JoinHistory => "processor.history",
            Field::CustomName => "processor.name",
            Field::WasmModuleKey => "processor.module.key",
            Field::WasmModuleSha256 => "processor.module.sha256",
            Field::WasmFuelPerRecord => "processor.limits.fuelPerRecord",
            Field::WasmMemoryBytes => "processor.limits.memoryBytes",
            Field::WasmReadsStateOf => "processor.readsStateOf",
            Field::WriteBufferSize => "state.rocksdb.writeBufferBytes",
            Field::CheckpointInterval => "checkpoint.interval",
            Field::CheckpointRetain => "checkpoint.retain",
            Field::S3Bucket => "checkpoint.s3.bucket",
            Field::S3Prefix => "checkpoint.s3.prefix",
        }
    }
}

/// A broken rule: which field, and why (the message names the value and the limit; the caller
/// puts the field's path in front).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct Violation {
    pub field: Field,
    pub reason: String,
}

mod custom;
mod join;

pub use custom::{
    MAX_CUSTOM_NAME_LEN, MAX_WASM_FUEL_PER_RECORD, MAX_WASM_READS_STATE_OF, WASM_MEMORY_BYTES,
    custom_name, wasm, wasm_reads_state_of,
};

fn violation(field: Field, reason: impl Into<String>) -> Violation {
    Violation {
        field,
        reason: reason.into(),
    }
}

/// Every rule over a worker config, in the order a user fixes them. The operator runs this on
/// the config it renders, the worker on the config it reads.
pub fn worker_config(config: &WorkerConfig) -> Result<(), Violation> {
    let kafka = &config.kafka;
    let required = [
        (Field::JobNamespace, &config.job.namespace),
        (Field::JobName, &config.job.name),
        (Field::BootstrapServers, &kafka.bootstrap_servers),
    ];
    if let Some((field, _)) = required.iter().find(|(_, value)| value.trim().is_empty()) {
        return Err(violation(*field, "must not be empty"));
    }
    let mut job_topics = vec![
        (Field::InputTopic, kafka.input_topic.as_str()),
        (Field::OutputTopic, &kafka.output_topic),
        (Field::ChangelogTopic, &kafka.changelog_topic),
        (Field::DeadLetterTopic, &kafka.dead_letter_topic),
    ];
    if let Some(right) = config.processor.right_topic() {
        job_topics.push((Field::JoinRightTopic, right));
    }
    topics(&job_topics)?;
    commit(kafka.commit_interval, kafka.commit_max_records)?;
    if kafka.transaction_timeout <= kafka.commit_interval {
        return Err(violation(
            Field::TransactionTimeout,
            format!(
                "{} must be longer than kafka.commitInterval ({}), or every transaction times out",
                format_go_duration(kafka.transaction_timeout),
                format_go_duration(kafka.commit_interval)
            ),
        ));
    }
    security(&kafka.security)?;
    processor(&config.processor)?;
    rocksdb(&config.state.rocksdb)?;
    checkpoint(config.checkpoint.interval, config.checkpoint.retain)?;
    if let Some(s3) = &config.checkpoint.s3 {
        s3_location(s3)?;
    }
    Ok(())
}

/// A job name the StatefulSet's pods can carry: an RFC 1035 label of at most
/// [`MAX_JOB_NAME_LEN`] characters (it also names the Service).
pub fn job_name(name: &str) -> Result<(), Violation> {
    let bytes = name.as_bytes();
    let label = bytes.first().is_some_and(u8::is_ascii_lowercase)
        && bytes.last().is_some_and(u8::is_ascii_alphanumeric)
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-');
    if name.len() > MAX_JOB_NAME_LEN || !label {
        return Err(violation(
            Field::JobName,
            format!(
                "`{name}` must be a DNS label of at most {MAX_JOB_NAME_LEN} characters (lowercase letters, digits, '-', \
                 starting with a letter): it names the Service and the StatefulSet, whose pods carry `<name>-<hash>` labels \
                 of at most 63"
            ),
        ));
    }
    Ok(())
}

/// Legal Kafka topic names, one role each: sharing a topic between roles corrupts one with the
/// other (a job reading its own output, state read as input, ...).
pub fn topics(topics: &[(Field, &str)]) -> Result<(), Violation> {
    for (index, (field, topic)) in topics.iter().enumerate() {
        let legal = topic
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
        if topic.is_empty() || topic.len() > 249 || !legal || *topic == "." || *topic == ".." {
            return Err(violation(
                *field,
                format!(
                    "`{topic}` is not a Kafka topic name (1-249 of a-z A-Z 0-9 . _ -, not `.` or `..`)"
                ),
            ));
        }
        if let Some((other, _)) = topics[..index].iter().find(|(_, t)| t == topic) {
            return Err(violation(
                *field,
                format!(
                    "`{topic}` is also {}; every topic of a job has one role",
                    other.spec_path()
                ),
            ));
        }
    }
    Ok(())
}

/// The transaction cadence: commits well inside the broker's transaction timeout.
pub fn commit(interval: Duration, max_records: u32) -> Result<(), Violation> {
    if !(MIN_COMMIT_INTERVAL..=MAX_COMMIT_INTERVAL).contains(&interval) {
        return Err(violation(
            Field::CommitInterval,
            format!(
                "{} must be between {} and {}: the worker's transactions time out after {}",
                format_go_duration(interval),
                format_go_duration(MIN_COMMIT_INTERVAL),
                format_go_duration(MAX_COMMIT_INTERVAL),
                format_go_duration(TRANSACTION_TIMEOUT)
            ),
        ));
    }
    if max_records == 0 {
        return Err(violation(Field::CommitMaxRecords, "must be at least 1"));
    }
    Ok(())
}

/// A known SASL mechanism, and PLAIN only over TLS.
pub fn sasl(mechanism: &str, tls: bool) -> Result<(), Violation> {
    if !SASL_MECHANISMS.contains(&mechanism) {
        return Err(violation(
            Field::SaslMechanism,
            format!("`{mechanism}` is not one of {}", SASL_MECHANISMS.join(", ")),
        ));
    }
    if mechanism == SASL_PLAIN && !tls {
        return Err(violation(
            Field::SaslMechanism,
            "PLAIN sends the password as it is: it needs TLS (set spec.kafka.tls) or a SCRAM mechanism",
        ));
    }
    Ok(())
}

fn security(security: &KafkaSecurity) -> Result<(), Violation> {
    match &security.sasl {
        Some(files) => sasl(&files.mechanism, security.tls.is_some()),
        None => Ok(()),
    }
}

/// The processor's fields and durations: what the worker's processors are built from.
pub fn processor(config: &ProcessorConfig) -> Result<(), Violation> {
    if config.key_field.trim().is_empty() {
        return Err(violation(Field::KeyField, "must not be empty"));
    }
    if config
        .time_field
        .as_deref()
        .is_some_and(|f| f.trim().is_empty())
    {
        return Err(violation(Field::TimeField, "must not be empty"));
    }
    let needs_time = match &config.kind {
        ProcessorKind::Count => false,
        ProcessorKind::Aggregate {
            value_field,
            window,
        } => {
            if value_field.trim().is_empty() {
                return Err(violation(Field::ValueField, "must not be empty"));
            }
            window.as_ref().map(self::window).transpose()?;
            window.is_some()
        }
        ProcessorKind::Dedup { ttl } => {
            event_duration(Field::DedupTtl, *ttl)?;
            true
        }
        ProcessorKind::Join { .. } => {
            join::join(&config.kind)?;
            true
        }
        ProcessorKind::Custom { name, .. } => {
            custom_name(name)?;
            false
        }
        ProcessorKind::Wasm {
            module,
            limits,
            reads_state_of,
            ..
        } => {
            wasm(module, limits)?;
            wasm_reads_state_of(module, reads_state_of)?;
            false
        }
    };
    if needs_time && config.time_field.is_none() {
        return Err(violation(
            Field::TimeField,
            "is required by windows, dedup and joins: they run on event time, never the wall clock",
        ));
    }
    Ok(())
}

/// A tumbling (no advance) or hopping window whose windows line up, in whole milliseconds.
pub fn window(window: &WindowConfig) -> Result<(), Violation> {
    let size_ms = event_duration(Field::WindowSize, window.size)?;
    if !window.grace.is_zero() {
        event_duration(Field::WindowGrace, window.grace)?;
    }
    if window.grace > MAX_WINDOW_GRACE {
        return Err(violation(
            Field::WindowGrace,
            format!(
                "{} is longer than {}: every window of every key stays in state until its end plus the grace",
                format_go_duration(window.grace),
                format_go_duration(MAX_WINDOW_GRACE)
            ),
        ));
    }
    let Some(advance) = window.advance else {
        return Ok(());
    };
    let advance_ms = event_duration(Field::WindowAdvance, advance)?;
    let (size_text, advance_text) = (format_go_duration(window.size), format_go_duration(advance));
    if advance_ms > size_ms {
        return Err(violation(
            Field::WindowAdvance,
            format!("{advance_text} must be at most window.size ({size_text})"),
        ));
    }
    if !size_ms.is_multiple_of(advance_ms) {
        return Err(violation(
            Field::WindowAdvance,
            format!(
                "window.size {size_text} is not a multiple of window.advance {advance_text}: every record must fall in \
                 the same number of windows, and window ends must line up with window starts"
            ),
        ));
    }
    let per_record = size_ms / advance_ms;
    if per_record > MAX_WINDOWS_PER_RECORD {
        return Err(violation(
            Field::WindowAdvance,
            format!(
                "window.size {size_text} / window.advance {advance_text} puts each record in {per_record} windows, \
                 more than {MAX_WINDOWS_PER_RECORD}"
            ),
        ));
    }
    Ok(())
}

/// A positive whole number of milliseconds (see [`TIME_RESOLUTION`]), returned as milliseconds.
pub fn event_duration(field: Field, duration: Duration) -> Result<u64, Violation> {
    let text = format_go_duration(duration);
    if duration < TIME_RESOLUTION {
        return Err(violation(field, format!("{text} must be at least 1ms")));
    }
    if !duration.subsec_nanos().is_multiple_of(1_000_000) {
        return Err(violation(
            field,
            format!("{text} is not a whole number of milliseconds, the resolution of event time"),
        ));
    }
    u64::try_from(duration.as_millis())
        .map_err(|_| violation(field, format!("{text} is out of range")))
}

/// A RocksDB memtable size RocksDB takes as written.
pub fn rocksdb(tuning: &RocksDbTuning) -> Result<(), Violation> {
    if !(MIN_WRITE_BUFFER_BYTES..=MAX_WRITE_BUFFER_BYTES).contains(&tuning.write_buffer_bytes) {
        return Err(violation(
            Field::WriteBufferSize,
            format!(
                "{} bytes must be between 64Ki and 64Gi (RocksDB would silently clamp it)",
                tuning.write_buffer_bytes
            ),
        ));
    }
    Ok(())
}

/// The checkpoint cadence and how many are kept.
pub fn checkpoint(interval: Duration, retain: u32) -> Result<(), Violation> {
    if interval < MIN_CHECKPOINT_INTERVAL {
        return Err(violation(
            Field::CheckpointInterval,
            format!(
                "{} must be at least {}",
                format_go_duration(interval),
                format_go_duration(MIN_CHECKPOINT_INTERVAL)
            ),
        ));
    }
    if retain == 0 {
        return Err(violation(Field::CheckpointRetain, "must be at least 1"));
    }
    Ok(())
}

fn s3_location(s3: &S3Config) -> Result<(), Violation> {
    s3_bucket(&s3.bucket)?;
    s3_prefix(&s3.prefix)
}

/// A bucket name S3 accepts (see [`S3_BUCKET_PATTERN`]).
pub fn s3_bucket(bucket: &str) -> Result<(), Violation> {
    let bytes = bucket.as_bytes();
    let shaped = (3..=63).contains(&bytes.len())
        && bytes
            .first()
            .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        && bytes
            .last()
            .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-.".contains(b));
    if !shaped || bucket.contains("..") {
        return Err(violation(
            Field::S3Bucket,
            format!(
                "`{bucket}` is not an S3 bucket name (3-63 of lowercase letters, digits, '.' and '-', starting and \
                 ending with a letter or digit, no '..')"
            ),
        ));
    }
    Ok(())
}

/// A key prefix without a leading or trailing '/': keys are `<prefix>/<namespace>/<job>/...`.
pub fn s3_prefix(prefix: &str) -> Result<(), Violation> {
    if prefix.starts_with('/') || prefix.ends_with('/') {
        return Err(violation(
            Field::S3Prefix,
            format!("`{prefix}` must not start or end with '/'"),
        ));
    }
    Ok(())
}

/// A worker config is read through the rules: its reader (`Versioned::from_json`/`from_yaml`)
/// refuses a config that breaks one, naming the field as the worker config spells it.
impl Versioned for WorkerConfig {
    const FORMAT: &'static str = "worker config";
    const VERSION: u32 = 1;

    fn version(&self) -> u32 {
        self.version
    }

    /// The shared rules, the same the operator checks a spec with.
    fn check(&self) -> Result<(), FormatError> {
        worker_config(self).map_err(|violation| FormatError::InvalidField {
            format: Self::FORMAT,
            field: violation.field.config_path().into(),
            reason: violation.reason,
        })
    }
}

#[cfg(test)]
#[path = "rules_tests.rs"]
mod tests;
