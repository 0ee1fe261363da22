//! The Kafka rules behind [`super::validate`]: brokers, topic names (defaults resolved, one role
//! per topic), replication, the transaction cadence, and TLS/SASL references.

use super::rules::{duration, non_empty};
use super::{InvalidSpec, KafkaSettings};
use crate::api::KafkaSpec;
use crate::controller::names;
use std::time::Duration;
use streamkeeper_contract::format_go_duration;

/// The worker's `transaction.timeout.ms` (worker/src/kafka_client.rs). A transaction left open
/// longer is aborted by the broker, so commits come at most every half of it.
pub const WORKER_TRANSACTION_TIMEOUT: Duration = Duration::from_secs(60);
pub const MAX_COMMIT_INTERVAL: Duration = Duration::from_secs(30);

pub(super) fn settings(
    spec: &KafkaSpec,
    namespace: &str,
    job: &str,
) -> Result<KafkaSettings, InvalidSpec> {
    let servers = non_empty(
        "spec.kafka.bootstrapServers",
        Some(spec.bootstrap_servers.as_str()),
        "where the brokers are",
    )?;
    if let Some(bad) = servers.split(',').map(str::trim).find(|s| !is_host_port(s)) {
        return Err(InvalidSpec::rule(
            "spec.kafka.bootstrapServers",
            format!("`{bad}` is not host:port"),
        ));
    }
    let changelog = spec
        .changelog_topic
        .clone()
        .unwrap_or_else(|| names::default_changelog_topic(namespace, job));
    let dead_letter = spec
        .dead_letter_topic
        .clone()
        .unwrap_or_else(|| names::default_dead_letter_topic(namespace, job));
    let topics = [
        ("spec.kafka.inputTopic", &spec.input_topic),
        ("spec.kafka.outputTopic", &spec.output_topic),
        ("spec.kafka.changelogTopic", &changelog),
        ("spec.kafka.deadLetterTopic", &dead_letter),
    ];
    for (index, (field, topic)) in topics.iter().enumerate() {
        check_topic(field, topic)?;
        // Sharing a topic between roles corrupts one with the other (state read as input, ...).
        if let Some((other, _)) = topics[..index].iter().find(|(_, t)| t == topic) {
            return Err(InvalidSpec::rule(
                *field,
                format!("`{topic}` is also {other}; every topic of a job has one role"),
            ));
        }
    }
    let replication_factor = bounded_opt("spec.kafka.replicationFactor", spec.replication_factor)?;
    let min_insync_replicas =
        bounded_opt("spec.kafka.minInsyncReplicas", spec.min_insync_replicas)?;
    if let (Some(rf), Some(min_isr)) = (replication_factor, min_insync_replicas)
        && min_isr > rf
    {
        return Err(InvalidSpec::rule(
            "spec.kafka.minInsyncReplicas",
            format!(
                "{min_isr} is more than spec.kafka.replicationFactor ({rf}): no write could ever commit"
            ),
        ));
    }
    let commit_interval = duration("spec.kafka.commitInterval", &spec.commit_interval)?;
    if commit_interval < Duration::from_millis(1) || commit_interval > MAX_COMMIT_INTERVAL {
        return Err(InvalidSpec::rule(
            "spec.kafka.commitInterval",
            format!(
                "{} must be between 1ms and {}: the worker's transactions time out after {}",
                spec.commit_interval,
                format_go_duration(MAX_COMMIT_INTERVAL),
                format_go_duration(WORKER_TRANSACTION_TIMEOUT)
            ),
        ));
    }
    let commit_max_records = u32::try_from(spec.commit_max_records)
        .ok()
        .filter(|n| *n >= 1)
        .ok_or_else(|| InvalidSpec::rule("spec.kafka.commitMaxRecords", "must be at least 1"))?;
    if let Some(tls) = &spec.tls
        && tls.certificate.is_some() != tls.private_key.is_some()
    {
        return Err(InvalidSpec::rule(
            "spec.kafka.tls",
            "certificate and privateKey are given together (client authentication) or not at all",
        ));
    }
    if let Some(sasl) = &spec.sasl {
        non_empty(
            "spec.kafka.sasl.secretName",
            Some(sasl.secret_name.as_str()),
            "the credentials Secret",
        )?;
        non_empty(
            "spec.kafka.sasl.usernameKey",
            Some(sasl.username_key.as_str()),
            "a key of the Secret",
        )?;
        non_empty(
            "spec.kafka.sasl.passwordKey",
            Some(sasl.password_key.as_str()),
            "a key of the Secret",
        )?;
    }
    Ok(KafkaSettings {
        bootstrap_servers: servers,
        input_topic: spec.input_topic.clone(),
        output_topic: spec.output_topic.clone(),
        changelog_topic: changelog,
        dead_letter_topic: dead_letter,
        replication_factor,
        min_insync_replicas,
        commit_interval,
        commit_max_records,
        tls: spec.tls.clone(),
        sasl: spec.sasl.clone(),
    })
}

fn bounded_opt(field: &str, value: Option<i32>) -> Result<Option<i32>, InvalidSpec> {
    match value {
        Some(n) if !(1..=32).contains(&n) => Err(InvalidSpec::rule(
            field,
            format!("{n} is not between 1 and 32"),
        )),
        other => Ok(other),
    }
}

fn check_topic(field: &str, topic: &str) -> Result<(), InvalidSpec> {
    let legal = topic
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    if topic.is_empty() || topic.len() > 249 || !legal || topic == "." || topic == ".." {
        return Err(InvalidSpec::rule(
            field,
            format!(
                "`{topic}` is not a Kafka topic name (1-249 of a-z A-Z 0-9 . _ -, not `.` or `..`)"
            ),
        ));
    }
    Ok(())
}

fn is_host_port(entry: &str) -> bool {
    entry
        .rsplit_once(':')
        .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0))
}
