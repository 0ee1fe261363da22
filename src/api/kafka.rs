//! Kafka connection, topics and security of a job.

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

/// Kafka connection and topics.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = crate::api::cel::output_is_not_input())]
#[x_kube(validation = crate::api::cel::changelog_has_one_role())]
#[x_kube(validation = crate::api::cel::dead_letter_has_one_role())]
#[x_kube(validation = crate::api::cel::plain_needs_tls())]
#[x_kube(validation = crate::api::cel::optional_immutable("changelogTopic", "spec.kafka.changelogTopic", crate::api::cel::CHANGELOG_IMMUTABLE))]
#[x_kube(validation = crate::api::cel::optional_immutable("deadLetterTopic", "spec.kafka.deadLetterTopic", crate::api::cel::DEAD_LETTER_IMMUTABLE))]
pub struct KafkaSpec {
    /// Comma-separated `host:port` list of Kafka brokers.
    #[schemars(length(min = 1, max = 2048))]
    pub bootstrap_servers: String,

    /// Topic to read. Task i processes its partition i. Immutable: the committed offsets and
    /// the state belong to this topic.
    #[schemars(pattern(crate::api::TOPIC_PATTERN))]
    #[x_kube(validation = kube::core::Rule::new("self == oldSelf").message("spec.kafka.inputTopic is immutable: the committed offsets and the state belong to the topic they were read from"))]
    pub input_topic: String,

    /// Topic the results are written to, exactly once. Not the input topic. May change: the
    /// operator neither creates nor deletes it, and each transaction writes to one output.
    #[schemars(pattern(crate::api::TOPIC_PATTERN))]
    pub output_topic: String,

    /// Topic for records that cannot be processed (the reason is in a header).
    /// Defaults to `<namespace>.<job>.dlq`. Immutable, like its absence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(crate::api::TOPIC_PATTERN))]
    pub dead_letter_topic: Option<String>,

    /// Compacted changelog topic holding every state change. Defaults to
    /// `<namespace>.<job>.changelog`; created by the operator with as many partitions as the input.
    /// Immutable, like its absence: the state lives in it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(crate::api::TOPIC_PATTERN))]
    pub changelog_topic: Option<String>,

    /// Replication factor of the topics the operator creates; the broker default when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 32))]
    pub replication_factor: Option<i32>,

    /// `min.insync.replicas` of the topics the operator creates; the broker default when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 32))]
    pub min_insync_replicas: Option<i32>,

    /// A transaction commits after this long (Go duration, e.g. `100ms`)...
    #[serde(default = "default_commit_interval")]
    #[schemars(length(max = 64), pattern(crate::api::DURATION_PATTERN))]
    #[x_kube(validation = kube::core::Rule::new("duration(self) >= duration('1ms') && duration(self) <= duration('30s')").message("kafka.commitInterval must be between 1ms and 30s (a transaction must commit well inside the 60s transaction timeout)"))]
    pub commit_interval: String,

    /// ...or once it holds this many input records, whichever comes first.
    #[serde(default = "default_commit_max_records")]
    #[schemars(range(min = 1, max = 1_000_000))]
    pub commit_max_records: i32,

    /// TLS to the brokers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<KafkaTlsSpec>,

    /// SASL authentication to the brokers. PLAIN only together with `tls`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sasl: Option<KafkaSaslSpec>,
}

fn default_commit_interval() -> String {
    "100ms".into()
}

fn default_commit_max_records() -> i32 {
    10_000
}

/// A key in a Secret in the job's namespace.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyRef {
    /// Secret name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Key inside the Secret.
    #[schemars(length(min = 1, max = 253))]
    pub key: String,
}

/// TLS settings; certificates come from Secrets and are mounted as files.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = kube::core::Rule::new("has(self.certificate) == has(self.privateKey)").message("tls.certificate and tls.privateKey are given together (client authentication) or not at all"))]
pub struct KafkaTlsSpec {
    /// CA certificate (PEM) that signed the brokers' certificates; system roots when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca: Option<SecretKeyRef>,
    /// Client certificate (PEM) for mutual TLS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificate: Option<SecretKeyRef>,
    /// Client private key (PEM) for mutual TLS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private_key: Option<SecretKeyRef>,
}

/// SASL mechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, schemars::JsonSchema)]
pub enum SaslMechanism {
    #[serde(rename = "PLAIN")]
    Plain,
    #[serde(rename = "SCRAM-SHA-256")]
    ScramSha256,
    #[serde(rename = "SCRAM-SHA-512")]
    ScramSha512,
}

impl SaslMechanism {
    /// The name the worker and librdkafka use for it (`sasl.mechanism`).
    pub fn librdkafka_name(self) -> &'static str {
        match self {
            SaslMechanism::Plain => "PLAIN",
            SaslMechanism::ScramSha256 => "SCRAM-SHA-256",
            SaslMechanism::ScramSha512 => "SCRAM-SHA-512",
        }
    }
}

/// SASL authentication; the username and password come from a Secret.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct KafkaSaslSpec {
    /// SASL mechanism.
    pub mechanism: SaslMechanism,
    /// Secret holding the credentials.
    #[schemars(length(min = 1, max = 253))]
    pub secret_name: String,
    /// Key of the username in the Secret.
    #[serde(default = "default_username_key")]
    pub username_key: String,
    /// Key of the password in the Secret.
    #[serde(default = "default_password_key")]
    pub password_key: String,
}

fn default_username_key() -> String {
    "username".into()
}

fn default_password_key() -> String {
    "password".into()
}
