//! The Kafka side of a job through the admin API: facts about the input topic (partitions,
//! retention, log-start offsets) and the changelog (its offset range), and the changelog and
//! dead-letter topics the operator creates.
//!
//! Reads and creates only; whether a topic is acceptable is decided by the pure rules in
//! [`crate::retention`]. librdkafka's metadata and watermark calls block, so they run on the
//! blocking pool with a timeout and never stall the reconcile runtime.

use crate::adapters::kafka_offsets::{EARLIEST, LATEST, offsets_at};
use crate::adapters::kafka_security::KafkaClientSecurity;
use crate::leader::{Leadership, NotLeading};
use crate::vocabulary::reasons;
use rdkafka::admin::{
    AdminClient, AdminOptions, ConfigEntry, NewTopic, ResourceSpecifier, TopicReplication,
};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError as RdKafkaError;
use rdkafka::types::RDKafkaErrorCode;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A topic to create (or whose config to keep as listed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DesiredTopic {
    pub name: String,
    pub partitions: i32,
    /// `None`: the broker's `default.replication.factor`.
    pub replication_factor: Option<i32>,
    /// Topic configs the operator owns; others are left as the broker or a user set them.
    pub config: BTreeMap<String, String>,
}

/// How long one admin request may take before the broker counts as unreachable.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Topic configs the operator reads: retention of the input, compaction of the changelog.
const READ_CONFIGS: [&str; 4] = [
    "cleanup.policy",
    "retention.ms",
    "retention.bytes",
    "delete.retention.ms",
];

/// How often, and how far apart, a topic's configs are asked for before giving up.
const CONFIG_VISIBILITY_ATTEMPTS: u32 = 20;
const CONFIG_VISIBILITY_PAUSE: Duration = Duration::from_millis(250);

/// A failed admin request. `category()` is the condition reason and the metric label.
#[derive(Debug, thiserror::Error)]
pub enum KafkaAdminError {
    #[error("could not create a Kafka admin client for {bootstrap}: {source}")]
    Client {
        bootstrap: String,
        #[source]
        source: Box<RdKafkaError>,
    },
    #[error("Kafka at {bootstrap} did not answer {operation} for topic {topic}: {source}{}", client_error.as_deref().map(|e| format!(" (the client reports: {e})")).unwrap_or_default())]
    Unavailable {
        bootstrap: String,
        operation: &'static str,
        topic: String,
        #[source]
        source: Box<RdKafkaError>,
        /// The newest error the client reported on its own (refused credentials, a
        /// certificate that does not verify), which the request's error does not say.
        client_error: Option<String>,
    },
    #[error("the input topic {topic} does not exist on {bootstrap}")]
    InputTopicMissing { bootstrap: String, topic: String },
    #[error("Kafka at {bootstrap} refused to {operation} topic {topic}: {code}")]
    Refused {
        bootstrap: String,
        operation: &'static str,
        topic: String,
        code: RDKafkaErrorCode,
    },
    #[error("a blocking Kafka call for topic {topic} did not finish: {source}")]
    Blocking {
        topic: String,
        #[source]
        source: tokio::task::JoinError,
    },
    #[error("the broker says topic {topic} exists but its metadata does not show it yet")]
    NotVisible { topic: String },
    #[error(
        "topic {topic} exists, but the broker lists no configs for it (its metadata may still be catching up, or this client may not describe its configs)"
    )]
    ConfigsNotVisible { topic: String },
    #[error("{operation} topic {topic}: {source}")]
    NotLeading {
        operation: &'static str,
        topic: String,
        #[source]
        source: NotLeading,
    },
}

impl KafkaAdminError {
    pub fn category(&self) -> &'static str {
        match self {
            KafkaAdminError::InputTopicMissing { .. } => reasons::INPUT_TOPIC_MISSING,
            KafkaAdminError::Refused { .. } => reasons::KAFKA_REFUSED,
            KafkaAdminError::NotLeading { .. } => reasons::NOT_LEADING,
            KafkaAdminError::Client { .. }
            | KafkaAdminError::Unavailable { .. }
            | KafkaAdminError::Blocking { .. }
            | KafkaAdminError::NotVisible { .. }
            | KafkaAdminError::ConfigsNotVisible { .. } => reasons::KAFKA_UNAVAILABLE,
        }
    }
}

/// The [`READ_CONFIGS`] among a topic's listed configs, or `None` when the broker listed none
/// at all: it does not know the topic (yet), since a known topic lists every config.
fn read_configs(entries: Vec<ConfigEntry>) -> Option<BTreeMap<String, String>> {
    if entries.is_empty() {
        return None;
    }
    Some(
        entries
            .into_iter()
            .filter(|entry| READ_CONFIGS.contains(&entry.name.as_str()))
            .filter_map(|entry| Some((entry.name, entry.value?)))
            .collect(),
    )
}

/// What the broker says about an existing topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicFacts {
    pub partitions: i32,
    /// The configs in `READ_CONFIGS` with their effective values (broker defaults resolved).
    pub config: BTreeMap<String, String>,
}

/// Admin clients by bootstrap list and credentials: jobs on one cluster with the same
/// credentials share one client (and its connections). At most [`MAX_ADMIN_CLIENTS`] are kept:
/// the bootstrap lists and credentials are the job authors', and each client holds threads,
/// connections and buffers, so one tenant naming ever new ones must not grow the operator
/// without end. The least recently used goes first (a job still using it connects again).
pub struct KafkaAdmins {
    clients: Mutex<HashMap<(String, u64), (KafkaAdmin, std::time::Instant)>>,
    leadership: Leadership,
}

/// The most admin clients kept at once.
pub const MAX_ADMIN_CLIENTS: usize = 32;

impl Default for KafkaAdmins {
    fn default() -> Self {
        Self::new(Leadership::unconditional())
    }
}

impl KafkaAdmins {
    /// Clients whose topic creates and deletes are sent only while `leadership` allows.
    pub fn new(leadership: Leadership) -> Self {
        Self {
            clients: Mutex::new(HashMap::new()),
            leadership,
        }
    }

    pub fn for_cluster(
        &self,
        bootstrap: &str,
        security: Option<&KafkaClientSecurity>,
    ) -> Result<KafkaAdmin, KafkaAdminError> {
        let key = (
            bootstrap.to_string(),
            security.map_or(0, KafkaClientSecurity::fingerprint),
        );
        let mut clients = self
            .clients
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = std::time::Instant::now();
        if let Some((admin, used)) = clients.get_mut(&key) {
            *used = now;
            return Ok(admin.clone());
        }
        let mut admin = KafkaAdmin::connect(bootstrap, security)?;
        admin.leadership = self.leadership.clone();
        while clients.len() >= MAX_ADMIN_CLIENTS {
            let oldest = clients
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(key, _)| key.clone());
            let Some(oldest) = oldest else { break };
            clients.remove(&oldest);
        }
        clients.insert(key, (admin.clone(), now));
        Ok(admin)
    }
}

/// One Kafka cluster's admin API.
#[derive(Clone)]
pub struct KafkaAdmin {
    bootstrap: String,
    /// The bootstrap servers and security settings, for the short-lived clients of
    /// [`super::changelog_owner`].
    config: ClientConfig,
    client: Arc<AdminClient<DefaultClientContext>>,
    /// Metadata and offsets go through a plain consumer: unlike the admin client, whose main
    /// queue nobody reads, it hands over the errors librdkafka reports outside any request
    /// (refused credentials, a certificate that does not verify), which explain a failure.
    metadata: Arc<BaseConsumer<ErrorRecordingContext>>,
    /// Checked right before each create or delete.
    leadership: Leadership,
}

/// Keeps the errors librdkafka reports outside any request (error events, and log lines at
/// error level such as a refused SASL login) until they are read; logs them as well.
#[derive(Default)]
pub struct ErrorRecordingContext {
    errors: Mutex<Vec<String>>,
}

impl ErrorRecordingContext {
    fn record(&self, text: &str) {
        let mut errors = self
            .errors
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if errors.len() < 16 && !errors.iter().any(|known| known == text) {
            errors.push(text.to_string());
        }
    }
}

impl rdkafka::client::ClientContext for ErrorRecordingContext {
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, facility: &str, message: &str) {
        use rdkafka::config::RDKafkaLogLevel::{Alert, Critical, Emerg, Error};
        if matches!(level, Emerg | Alert | Critical | Error) {
            tracing::warn!(facility, message, "Kafka client error");
            self.record(message);
        } else {
            tracing::debug!(facility, message, "Kafka client");
        }
    }

    fn error(&self, error: RdKafkaError, reason: &str) {
        tracing::warn!(%error, reason, "Kafka client error");
        self.record(reason);
    }
}

impl rdkafka::consumer::ConsumerContext for ErrorRecordingContext {}

impl KafkaAdmin {
    pub fn connect(
        bootstrap: &str,
        security: Option<&KafkaClientSecurity>,
    ) -> Result<Self, KafkaAdminError> {
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", bootstrap)
            .set("client.id", "streamkeeper-operator");
        if let Some(security) = security {
            security.apply(&mut config);
        }
        // A group id routes the client's errors to the consumer queue `poll` reads; this
        // consumer never subscribes, so it never joins the group or commits.
        let metadata: BaseConsumer<ErrorRecordingContext> = config
            .clone()
            .set("group.id", "streamkeeper-operator-metadata")
            .create_with_context(ErrorRecordingContext::default())
            .map_err(|source| KafkaAdminError::Client {
                bootstrap: bootstrap.to_string(),
                source: Box::new(source),
            })?;
        let client = config.create().map_err(|source| KafkaAdminError::Client {
            bootstrap: bootstrap.to_string(),
            source: Box::new(source),
        })?;
        Ok(Self {
            bootstrap: bootstrap.to_string(),
            config,
            client: Arc::new(client),
            metadata: Arc::new(metadata),
            leadership: Leadership::unconditional(),
        })
    }

    pub fn bootstrap(&self) -> &str {
        &self.bootstrap
    }

    /// The settings every client of this cluster starts from.
    pub(super) fn client_config(&self) -> ClientConfig {
        self.config.clone()
    }

    pub(super) fn client_error(&self, source: RdKafkaError) -> KafkaAdminError {
        KafkaAdminError::Client {
            bootstrap: self.bootstrap.clone(),
            source: Box::new(source),
        }
    }

    pub(super) fn may_write(
        &self,
        operation: &'static str,
        topic: &str,
    ) -> Result<(), KafkaAdminError> {
        self.leadership
            .check()
            .map_err(|source| KafkaAdminError::NotLeading {
                operation,
                topic: topic.to_string(),
                source,
            })
    }

    fn options() -> AdminOptions {
        AdminOptions::new()
            .request_timeout(Some(REQUEST_TIMEOUT))
            .operation_timeout(Some(REQUEST_TIMEOUT))
    }

    /// The errors the client reported since the last look, joined.
    fn client_errors(&self) -> Option<String> {
        // Polling hands the queued log lines and error events to the context.
        let mut errors: Vec<String> = std::iter::from_fn(|| self.metadata.poll(Duration::ZERO))
            .take(16)
            .filter_map(Result::err)
            .map(|error| error.to_string())
            .collect();
        errors.append(
            &mut self
                .metadata
                .context()
                .errors
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        (!errors.is_empty()).then(|| errors.join("; "))
    }

    pub(super) fn unavailable(
        &self,
        operation: &'static str,
        topic: &str,
        source: RdKafkaError,
    ) -> KafkaAdminError {
        KafkaAdminError::Unavailable {
            bootstrap: self.bootstrap.clone(),
            operation,
            topic: topic.to_string(),
            source: Box::new(source),
            client_error: self.client_errors(),
        }
    }

    /// Partitions and configs of `topic`, or `None` when it does not exist.
    pub async fn topic(&self, topic: &str) -> Result<Option<TopicFacts>, KafkaAdminError> {
        let Some(partitions) = self.partition_count(topic).await? else {
            return Ok(None);
        };
        let config = self.topic_config(topic).await?;
        Ok(Some(TopicFacts { partitions, config }))
    }

    /// Whether `topic` exists: one Metadata request, no configs read.
    pub async fn exists(&self, topic: &str) -> Result<bool, KafkaAdminError> {
        Ok(self.partition_count(topic).await?.is_some())
    }

    /// The configs [`READ_CONFIGS`] of an existing `topic`. A broker whose metadata does not
    /// show the topic yet answers with an error for it, which rust-rdkafka drops: the answer
    /// then lists no config at all (a known topic lists every config, defaults included), and
    /// the broker is asked again for a few seconds.
    async fn topic_config(&self, topic: &str) -> Result<BTreeMap<String, String>, KafkaAdminError> {
        for _ in 0..CONFIG_VISIBILITY_ATTEMPTS {
            let results = self
                .client
                .describe_configs([&ResourceSpecifier::Topic(topic)], &Self::options())
                .await
                .map_err(|source| self.unavailable("DescribeConfigs", topic, source))?;
            let mut entries = Vec::new();
            for result in results {
                let resource = result.map_err(|code| KafkaAdminError::Refused {
                    bootstrap: self.bootstrap.clone(),
                    operation: "describe the configs of",
                    topic: topic.to_string(),
                    code,
                })?;
                entries.extend(resource.entries);
            }
            if let Some(config) = read_configs(entries) {
                return Ok(config);
            }
            tokio::time::sleep(CONFIG_VISIBILITY_PAUSE).await;
        }
        Err(KafkaAdminError::ConfigsNotVisible {
            topic: topic.to_string(),
        })
    }

    async fn partition_count(&self, topic: &str) -> Result<Option<i32>, KafkaAdminError> {
        let client = Arc::clone(&self.metadata);
        let name = topic.to_string();
        let metadata = tokio::task::spawn_blocking(move || {
            client.fetch_metadata(Some(&name), REQUEST_TIMEOUT)
        })
        .await
        .map_err(|source| KafkaAdminError::Blocking {
            topic: topic.to_string(),
            source,
        })?
        .map_err(|source| self.unavailable("Metadata", topic, source))?;
        let Some(found) = metadata.topics().iter().find(|t| t.name() == topic) else {
            return Ok(None);
        };
        match found.error() {
            None => Ok(Some(
                i32::try_from(found.partitions().len()).unwrap_or(i32::MAX),
            )),
            Some(error) => match RDKafkaErrorCode::from(error) {
                RDKafkaErrorCode::UnknownTopicOrPartition => Ok(None),
                code => Err(KafkaAdminError::Refused {
                    bootstrap: self.bootstrap.clone(),
                    operation: "read the metadata of",
                    topic: topic.to_string(),
                    code,
                }),
            },
        }
    }

    /// Creates `topic` with its partitions, replication and configs. A topic that exists already
    /// is left alone and reported as such: metadata can lag a creation by someone else, so the
    /// caller re-reads it and checks it against the rules.
    pub async fn create(&self, topic: &DesiredTopic) -> Result<Creation, KafkaAdminError> {
        self.may_write("create", &topic.name)?;
        let replication = TopicReplication::Fixed(topic.replication_factor.unwrap_or(-1));
        let mut new_topic = NewTopic::new(&topic.name, topic.partitions, replication);
        for (key, value) in &topic.config {
            new_topic = new_topic.set(key, value);
        }
        let results = self
            .client
            .create_topics([&new_topic], &Self::options())
            .await
            .map_err(|source| self.unavailable("CreateTopics", &topic.name, source))?;
        let mut creation = Creation::Created;
        for result in results {
            match result {
                Ok(_) => {}
                Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {
                    creation = Creation::AlreadyExisted
                }
                Err((name, code)) => {
                    return Err(KafkaAdminError::Refused {
                        bootstrap: self.bootstrap.clone(),
                        operation: "create",
                        topic: name,
                        code,
                    });
                }
            }
        }
        Ok(creation)
    }

    /// Deletes `topics`; one that is already gone counts as deleted.
    pub async fn delete(&self, topics: &[&str]) -> Result<(), KafkaAdminError> {
        self.may_write("delete", &topics.join(","))?;
        let results = self
            .client
            .delete_topics(topics, &Self::options())
            .await
            .map_err(|source| self.unavailable("DeleteTopics", &topics.join(","), source))?;
        for result in results {
            match result {
                Ok(_) | Err((_, RDKafkaErrorCode::UnknownTopicOrPartition)) => {}
                Err((name, code)) => {
                    return Err(KafkaAdminError::Refused {
                        bootstrap: self.bootstrap.clone(),
                        operation: "delete",
                        topic: name,
                        code,
                    });
                }
            }
        }
        Ok(())
    }

    /// The log-start offset (low watermark) of partitions `0..partitions` of `topic`.
    pub async fn log_start_offsets(
        &self,
        topic: &str,
        partitions: i32,
    ) -> Result<Vec<i64>, KafkaAdminError> {
        let watermarks = self.watermarks(topic, partitions).await?;
        Ok(watermarks.into_iter().map(|(low, _high)| low).collect())
    }

    /// The `(low, high)` watermarks of partitions `0..partitions` of `topic`: partition `i`
    /// holds offsets `[low, high)`. Two ListOffsets requests for the whole topic (its earliest
    /// and its latest offsets, per partition leader), not two per partition.
    pub async fn watermarks(
        &self,
        topic: &str,
        partitions: i32,
    ) -> Result<Vec<(i64, i64)>, KafkaAdminError> {
        let client = Arc::clone(&self.metadata);
        let name = topic.to_string();
        let answered = tokio::task::spawn_blocking(move || {
            let low = offsets_at(&client, (&name, partitions), EARLIEST, REQUEST_TIMEOUT)?;
            let high = offsets_at(&client, (&name, partitions), LATEST, REQUEST_TIMEOUT)?;
            Ok::<_, RdKafkaError>(low.into_iter().zip(high).collect())
        })
        .await
        .map_err(|source| KafkaAdminError::Blocking {
            topic: topic.to_string(),
            source,
        })?;
        answered.map_err(|source| self.unavailable("ListOffsets", topic, source))
    }
}

/// What [`KafkaAdmin::create`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Creation {
    Created,
    AlreadyExisted,
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::admin::ConfigSource;

    fn entry(name: &str, value: Option<&str>) -> ConfigEntry {
        ConfigEntry {
            name: name.into(),
            value: value.map(Into::into),
            source: ConfigSource::Default,
            is_read_only: false,
            is_default: true,
            is_sensitive: false,
        }
    }

    #[test]
    fn the_admin_client_cache_keeps_at_most_its_bound_and_drops_the_least_recently_used() {
        let admins = KafkaAdmins::default();
        let first = "127.0.0.1:1";
        admins.for_cluster(first, None).unwrap();
        for port in 2..=u16::try_from(MAX_ADMIN_CLIENTS).unwrap() + 8 {
            admins
                .for_cluster(&format!("127.0.0.1:{port}"), None)
                .unwrap();
            // The first one stays in use, so it is never the least recently used.
            admins.for_cluster(first, None).unwrap();
        }
        let clients = admins.clients.lock().unwrap();
        assert_eq!(clients.len(), MAX_ADMIN_CLIENTS);
        assert!(clients.contains_key(&(first.to_string(), 0)));
        assert!(!clients.contains_key(&("127.0.0.1:2".to_string(), 0)));
    }

    #[test]
    fn a_topic_the_broker_does_not_know_yet_lists_no_configs() {
        assert_eq!(read_configs(Vec::new()), None);
    }

    #[test]
    fn only_the_configs_the_operator_reads_are_kept() {
        let config = read_configs(vec![
            entry("cleanup.policy", Some("compact")),
            entry("retention.ms", Some("604800000")),
            entry("retention.bytes", None),
            entry("segment.ms", Some("100")),
        ])
        .unwrap();
        assert_eq!(
            config,
            BTreeMap::from([
                ("cleanup.policy".to_string(), "compact".to_string()),
                ("retention.ms".to_string(), "604800000".to_string()),
            ])
        );
    }
}
