//! Kafka client settings built from the worker config: the common connection and security
//! settings, and the settings each client role needs for exactly-once.

use rdkafka::config::ClientConfig;
use std::path::Path;
use streamkeeper_contract::worker_config::KafkaConfig;

/// Why a Kafka client could not be configured.
#[derive(Debug, thiserror::Error)]
pub enum KafkaSetupError {
    #[error("cannot read {what} from {path}: {source}")]
    SecretFile {
        what: &'static str,
        path: String,
        #[source]
        source: std::io::Error,
    },
}

fn read_secret(what: &'static str, path: &Path) -> Result<String, KafkaSetupError> {
    std::fs::read_to_string(path)
        .map(|text| text.trim().to_string())
        .map_err(|source| KafkaSetupError::SecretFile {
            what,
            path: path.display().to_string(),
            source,
        })
}

/// Connection and security settings shared by every client.
pub fn base_config(kafka: &KafkaConfig) -> Result<ClientConfig, KafkaSetupError> {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", &kafka.bootstrap_servers)
        .set("reconnect.backoff.ms", "100")
        .set("reconnect.backoff.max.ms", "2000")
        .set("log_level", "4");
    let tls = kafka.security.tls.as_ref();
    let sasl = kafka.security.sasl.as_ref();
    let protocol = match (tls.is_some(), sasl.is_some()) {
        (false, false) => "plaintext",
        (true, false) => "ssl",
        (false, true) => "sasl_plaintext",
        (true, true) => "sasl_ssl",
    };
    config.set("security.protocol", protocol);
    if let Some(tls) = tls {
        if let Some(ca) = &tls.ca_file {
            config.set("ssl.ca.location", ca.display().to_string());
        }
        if let Some(cert) = &tls.cert_file {
            config.set("ssl.certificate.location", cert.display().to_string());
        }
        if let Some(key) = &tls.key_file {
            config.set("ssl.key.location", key.display().to_string());
        }
    }
    if let Some(sasl) = sasl {
        config
            .set("sasl.mechanism", &sasl.mechanism)
            .set(
                "sasl.username",
                read_secret("the SASL username", &sasl.username_file)?,
            )
            .set(
                "sasl.password",
                read_secret("the SASL password", &sasl.password_file)?,
            );
    }
    Ok(config)
}

/// A consumer that reads only committed records and never commits by itself: offsets are
/// committed inside the producer's transaction.
pub fn consumer_config(
    kafka: &KafkaConfig,
    group_id: &str,
) -> Result<ClientConfig, KafkaSetupError> {
    let mut config = base_config(kafka)?;
    config
        .set("group.id", group_id)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "earliest")
        .set("isolation.level", "read_committed")
        .set("enable.partition.eof", "false")
        .set("fetch.max.bytes", "52428800")
        .set("max.partition.fetch.bytes", "10485760")
        .set("fetch.wait.max.ms", "50");
    Ok(config)
}

/// A transactional producer: a newer producer with the same `transactional.id` fences this one.
pub fn transactional_producer_config(
    kafka: &KafkaConfig,
    transactional_id: &str,
) -> Result<ClientConfig, KafkaSetupError> {
    let mut config = base_config(kafka)?;
    config
        .set("transactional.id", transactional_id)
        .set("enable.idempotence", "true")
        .set(
            "transaction.timeout.ms",
            kafka.transaction_timeout.as_millis().to_string(),
        )
        // Set, not left to the default, because the loop checks every record against it
        // before producing (`task::record_size`).
        .set(
            "message.max.bytes",
            crate::task::MAX_RECORD_BYTES.to_string(),
        )
        .set("linger.ms", "5")
        .set("batch.size", "1000000")
        .set("compression.type", "lz4")
        .set("queue.buffering.max.messages", "1000000");
    Ok(config)
}
