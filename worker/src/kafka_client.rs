//! Kafka client settings built from the worker config: the common connection and security
//! settings, and the settings each client role needs for exactly-once.

use rdkafka::admin::AdminClient;
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use streamkeeper_contract::worker_config::KafkaConfig;

/// The producer's `message.max.bytes`: the largest record the worker ever sends. The active
/// loop checks every record against it before producing (`task::active::record_size`).
pub const MAX_RECORD_BYTES: usize = 1_000_000;

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
        // before producing (`task::active::record_size`).
        .set("message.max.bytes", MAX_RECORD_BYTES.to_string())
        .set("linger.ms", "5")
        .set("batch.size", "1000000")
        .set("compression.type", "lz4")
        .set("queue.buffering.max.messages", "1000000");
    Ok(config)
}

/// One admin client per worker, created on first use and kept: creating and closing one costs
/// about 100 ms of connection set-up, and a promotion's restore asks the broker for the
/// changelog's `delete.retention.ms` on its hot path.
#[derive(Clone, Default)]
pub struct SharedAdmin {
    client: Arc<OnceLock<AdminClient<DefaultClientContext>>>,
}

impl std::fmt::Debug for SharedAdmin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedAdmin")
            .field("created", &self.client.get().is_some())
            .finish()
    }
}

impl SharedAdmin {
    /// The worker's admin client, created with `kafka`'s settings the first time.
    pub fn get(
        &self,
        kafka: &KafkaConfig,
    ) -> Result<&AdminClient<DefaultClientContext>, SharedAdminError> {
        if let Some(client) = self.client.get() {
            return Ok(client);
        }
        let created = base_config(kafka)?.create()?;
        // Two tasks may create one at once; the first one set is kept, the other dropped.
        Ok(self.client.get_or_init(|| created))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SharedAdminError {
    #[error(transparent)]
    Setup(#[from] KafkaSetupError),
    #[error("creating the admin client: {0}")]
    Kafka(#[from] rdkafka::error::KafkaError),
}

/// How long a consumer closed aside may poll for its latest assignment to deliver something.
const SETTLE_BEFORE_CLOSE: Duration = Duration::from_secs(2);

/// A consumer closed on a thread of its own when dropped: closing waits for its broker threads
/// (about 100 ms), which a promotion's hot path should not.
///
/// Before closing, it polls until its latest assignment has delivered something (a record, an
/// end of partition, an error), for at most 2 s. librdkafka 2.12.1 aborts
/// the process (`rd_kafka_assignment_partition_stopped: Assertion rktp->rktp_started failed`)
/// when a consumer is unassigned, as closing does, while the stop of an assignment it replaced
/// is still in flight: the stop is sent twice (librdkafka issue 5573, fixed after 2.15.0). A
/// restore re-assigns its consumer (the probe, then the replay), and a stop request can end it
/// right after. A new assignment starts only once the old one's stop is done, so anything it
/// delivers proves there is no stop left in flight.
pub struct ClosedAside(Option<rdkafka::consumer::BaseConsumer>);

impl ClosedAside {
    pub fn new(consumer: rdkafka::consumer::BaseConsumer) -> Self {
        Self(Some(consumer))
    }
}

impl std::ops::Deref for ClosedAside {
    type Target = rdkafka::consumer::BaseConsumer;
    fn deref(&self) -> &Self::Target {
        // Set in `new`, taken only in `drop`.
        self.0
            .as_ref()
            .unwrap_or_else(|| unreachable!("a ClosedAside is never empty"))
    }
}

/// Polls `consumer` until its latest assignment delivers something, for at most
/// 2 s, then closes it (see [`ClosedAside`], which does this aside).
pub fn close_settled(consumer: rdkafka::consumer::BaseConsumer) {
    let deadline = std::time::Instant::now() + SETTLE_BEFORE_CLOSE;
    while std::time::Instant::now() < deadline {
        if consumer.poll(Duration::from_millis(50)).is_some() {
            break;
        }
    }
    drop(consumer);
}

impl Drop for ClosedAside {
    fn drop(&mut self) {
        if let Some(consumer) = self.0.take() {
            let closing = std::thread::Builder::new()
                .name("kafka-close".into())
                .spawn(move || close_settled(consumer));
            if let Err(error) = closing {
                tracing::warn!(%error, "cannot close a Kafka client aside; it closes when the thread ends");
            }
        }
    }
}
