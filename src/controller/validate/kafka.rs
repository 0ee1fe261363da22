//! The Kafka part of [`super::validate`]: brokers, topic names (defaults resolved, one role per
//! topic), replication, the transaction cadence, and TLS/SASL references. The rules the worker
//! applies too (topics, cadence, SASL) are the contract's ([`rules`]).

use super::rules::{duration, non_empty};
use super::{InvalidSpec, KafkaSettings};
use crate::api::KafkaSpec;
use streamkeeper_contract::rules::{self, Field};
use streamkeeper_contract::worker_config::JobIdentity;

pub(super) fn settings(spec: &KafkaSpec, job: &JobIdentity) -> Result<KafkaSettings, InvalidSpec> {
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
        .unwrap_or_else(|| job.default_changelog_topic());
    let dead_letter = spec
        .dead_letter_topic
        .clone()
        .unwrap_or_else(|| job.default_dead_letter_topic());
    rules::topics(&[
        (Field::InputTopic, &spec.input_topic),
        (Field::OutputTopic, &spec.output_topic),
        (Field::ChangelogTopic, &changelog),
        (Field::DeadLetterTopic, &dead_letter),
    ])?;
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
    let commit_max_records = u32::try_from(spec.commit_max_records)
        .map_err(|_| InvalidSpec::rule("spec.kafka.commitMaxRecords", "must be at least 1"))?;
    rules::commit(commit_interval, commit_max_records)?;
    if let Some(tls) = &spec.tls
        && tls.certificate.is_some() != tls.private_key.is_some()
    {
        return Err(InvalidSpec::rule(
            "spec.kafka.tls",
            "certificate and privateKey are given together (client authentication) or not at all",
        ));
    }
    if let Some(sasl) = &spec.sasl {
        rules::sasl(sasl.mechanism.librdkafka_name(), spec.tls.is_some())?;
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

fn is_host_port(entry: &str) -> bool {
    entry
        .rsplit_once(':')
        .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0))
}
