//! The worker config: rendered by the operator into a ConfigMap, read by the worker at start.
//! The worker never sees the custom resource; everything it needs is here, already validated.

mod processor;

pub use crate::co_partitioning::Partitioner;
use crate::duration::serde_go;
pub use processor::{
    JoinKind, JoinLeft, JoinMode, JoinRight, JoinWindowConfig, ProcessorConfig, ProcessorKind,
    WasmLimitsConfig, WasmModuleSource, WindowConfig,
};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WorkerConfig {
    pub version: u32,
    pub job: JobIdentity,
    pub kafka: KafkaConfig,
    pub processor: ProcessorConfig,
    pub state: StateConfig,
    pub checkpoint: CheckpointConfig,
    #[serde(default)]
    pub recovery: RecoveryConfig,
    #[serde(default)]
    pub http: HttpConfig,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JobIdentity {
    /// The operator's cluster name (`--cluster-name`, the chart's `clusterName`), when set: two
    /// clusters sharing one Kafka and one S3 with jobs of the same namespace and name then share
    /// no identifier. Absent (the default), the ids are those of a single cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    pub namespace: String,
    pub name: String,
}

/// Every name derived from a job's identity comes from here: the operator and the worker must
/// agree on each one, and a cluster name must reach all of them.
impl JobIdentity {
    /// `[<cluster>.]<namespace>.<name>`: the stem of every Kafka id and default topic.
    fn stem(&self) -> String {
        match &self.cluster {
            Some(cluster) => format!("{cluster}.{}.{}", self.namespace, self.name),
            None => format!("{}.{}", self.namespace, self.name),
        }
    }

    /// The `transactional.id` of task `task`: a newer owner of the same task fences an older one.
    pub fn transactional_id(&self, task: u32) -> String {
        format!("{}.task-{task}", self.stem())
    }

    /// The consumer group used only to store committed input offsets (never for rebalancing).
    pub fn group_id(&self) -> String {
        self.stem()
    }

    /// The changelog topic when the spec names none.
    pub fn default_changelog_topic(&self) -> String {
        format!("{}.changelog", self.stem())
    }

    /// The dead-letter topic when the spec names none.
    pub fn default_dead_letter_topic(&self) -> String {
        format!("{}.dlq", self.stem())
    }

    /// The internal topic a re-keyed join side (`left` or `right`) is written to and read
    /// back from.
    pub fn repartition_topic(&self, side: &str) -> String {
        format!("{}.{side}-repartition", self.stem())
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KafkaConfig {
    pub bootstrap_servers: String,
    pub input_topic: String,
    pub output_topic: String,
    pub changelog_topic: String,
    pub dead_letter_topic: String,
    #[serde(default)]
    pub security: KafkaSecurity,
    /// A transaction commits when this much time has passed since it began...
    #[serde(with = "serde_go", default = "default_commit_interval")]
    pub commit_interval: Duration,
    /// ...or when it holds this many input records, whichever comes first.
    #[serde(default = "default_commit_max_records")]
    pub commit_max_records: u32,
    /// The producer's `transaction.timeout.ms`: the coordinator aborts a transaction open
    /// longer than this. A task whose transaction was aborted so retries from its committed
    /// state; it is not fenced.
    #[serde(with = "serde_go", default = "default_transaction_timeout")]
    pub transaction_timeout: Duration,
}

fn default_commit_interval() -> Duration {
    Duration::from_millis(100)
}

fn default_commit_max_records() -> u32 {
    10_000
}

/// The exit status of a worker that refuses its config before it runs a task (a processor
/// its binary does not offer, a config the processor refuses): `EX_CONFIG` of `sysexits.h`. The
/// worker prints the reason as its last line, which the kubelet keeps as the container's
/// termination message (`terminationMessagePolicy: FallbackToLogsOnError`), and the operator
/// shows it in the job's `Invalid` condition.
pub const CONFIG_REFUSED_EXIT_CODE: i32 = 78;

/// The worker's default `transaction.timeout.ms` (the operator always renders it): a
/// transaction left open longer is aborted by the broker, so commits come at most every half
/// of it.
pub const TRANSACTION_TIMEOUT: Duration = Duration::from_secs(60);

fn default_transaction_timeout() -> Duration {
    TRANSACTION_TIMEOUT
}

/// TLS and SASL settings; secrets are files mounted from Kubernetes Secrets, never inline.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KafkaSecurity {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<KafkaTlsFiles>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sasl: Option<KafkaSaslFiles>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KafkaTlsFiles {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_file: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_file: Option<PathBuf>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KafkaSaslFiles {
    /// PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512.
    pub mechanism: String,
    pub username_file: PathBuf,
    pub password_file: PathBuf,
}

impl WorkerConfig {
    /// The topic whose partition count is the job's task count (task `i` joins partition `i`):
    /// the input, or the repartition topic of a re-keyed input, which the operator creates with
    /// the right topic's count.
    pub fn tasks_topic(&self) -> &str {
        self.processor
            .left_repartition_topic()
            .unwrap_or(&self.kafka.input_topic)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StateConfig {
    /// Directory on the persistent volume; one RocksDB per task lives below it.
    pub dir: PathBuf,
    #[serde(default)]
    pub rocksdb: RocksDbTuning,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RocksDbTuning {
    pub block_cache_bytes: u64,
    pub write_buffer_bytes: u64,
    pub compression: Compression,
}

impl Default for RocksDbTuning {
    fn default() -> Self {
        Self {
            block_cache_bytes: 64 << 20,
            write_buffer_bytes: 32 << 20,
            compression: Compression::Lz4,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Compression {
    None,
    Lz4,
    Zstd,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CheckpointConfig {
    #[serde(with = "serde_go")]
    pub interval: Duration,
    pub retain: u32,
    /// No S3 settings: checkpoints are off and restore relies on the changelog alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s3: Option<S3Config>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct S3Config {
    pub bucket: String,
    pub prefix: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    pub region: String,
    #[serde(default)]
    pub path_style: bool,
    /// Directory holding the mounted credentials Secret (files `accessKeyId`, `secretAccessKey`);
    /// absent means the standard AWS environment and instance credentials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_dir: Option<PathBuf>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RecoveryConfig {
    /// A standby this close to the changelog end may take over a task without a warm-up.
    pub acceptable_recovery_lag: u64,
}

impl Default for RecoveryConfig {
    fn default() -> Self {
        Self {
            acceptable_recovery_lag: 10_000,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HttpConfig {
    pub listen: String,
    /// The file holding the job's worker token (the mounted Secret `<job>-worker-token`). A
    /// request that changes something (`POST /v1/checkpoints`) must carry it as
    /// `Authorization: Bearer <token>`; without a token file every such request is refused (see
    /// [`crate::worker_http`]). Read on each such request, so a rotated Secret takes effect
    /// once the kubelet has updated the file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_file: Option<PathBuf>,
}

impl Default for HttpConfig {
    fn default() -> Self {
        Self {
            listen: "0.0.0.0:8080".into(),
            token_file: None,
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::version::{FormatError, Versioned};

    pub(crate) fn sample() -> WorkerConfig {
        WorkerConfig {
            version: WorkerConfig::VERSION,
            job: JobIdentity {
                cluster: None,
                namespace: "payments".into(),
                name: "card-counts".into(),
            },
            kafka: KafkaConfig {
                bootstrap_servers: "127.0.0.1:9092".into(),
                input_topic: "card-events".into(),
                output_topic: "card-counts".into(),
                changelog_topic: "payments.card-counts.changelog".into(),
                dead_letter_topic: "card-counts-dlq".into(),
                security: KafkaSecurity::default(),
                commit_interval: Duration::from_millis(100),
                commit_max_records: 10_000,
                transaction_timeout: Duration::from_secs(60),
            },
            processor: ProcessorConfig {
                key_field: "card".into(),
                time_field: Some("ts".into()),
                kind: ProcessorKind::Aggregate {
                    value_field: "amount".into(),
                    window: Some(WindowConfig {
                        size: Duration::from_secs(3600),
                        advance: Some(Duration::from_secs(600)),
                        grace: Duration::from_secs(30),
                    }),
                },
            },
            state: StateConfig {
                dir: "/var/lib/streamkeeper".into(),
                rocksdb: RocksDbTuning::default(),
            },
            checkpoint: CheckpointConfig {
                interval: Duration::from_secs(30),
                retain: 3,
                s3: Some(S3Config {
                    bucket: "checkpoints".into(),
                    prefix: "streamkeeper".into(),
                    endpoint: Some("http://127.0.0.1:8333".into()),
                    region: "us-east-1".into(),
                    path_style: true,
                    credentials_dir: Some("/etc/streamkeeper/s3".into()),
                }),
            },
            recovery: RecoveryConfig::default(),
            http: HttpConfig {
                listen: "0.0.0.0:8080".into(),
                token_file: Some("/etc/streamkeeper/http/token".into()),
            },
        }
    }

    #[test]
    fn a_cluster_name_reaches_every_derived_id_and_none_keeps_them() {
        let mut job = JobIdentity {
            cluster: None,
            namespace: "payments".into(),
            name: "card-count".into(),
        };
        assert_eq!(job.transactional_id(3), "payments.card-count.task-3");
        assert_eq!(job.group_id(), "payments.card-count");
        assert_eq!(
            job.default_changelog_topic(),
            "payments.card-count.changelog"
        );
        assert_eq!(job.default_dead_letter_topic(), "payments.card-count.dlq");
        job.cluster = Some("east".into());
        assert_eq!(job.transactional_id(3), "east.payments.card-count.task-3");
        assert_eq!(job.group_id(), "east.payments.card-count");
        assert_eq!(
            job.default_changelog_topic(),
            "east.payments.card-count.changelog"
        );
        assert_eq!(
            job.default_dead_letter_topic(),
            "east.payments.card-count.dlq"
        );
        let text = serde_json::to_string(&job).unwrap();
        assert_eq!(serde_json::from_str::<JobIdentity>(&text).unwrap(), job);
        assert_eq!(
            job.repartition_topic("left"),
            "east.payments.card-count.left-repartition"
        );
        job.cluster = None;
        assert!(!serde_json::to_string(&job).unwrap().contains("cluster"));
    }

    #[test]
    fn a_re_keyed_join_round_trips_and_a_plain_one_names_no_repartition_topic() {
        let mut config = sample();
        config.processor.kind = ProcessorKind::Join {
            join: JoinKind::Stream,
            mode: JoinMode::Inner,
            left: JoinLeft {
                repartition_topic: Some("payments.card-counts.left-repartition".into()),
            },
            right: JoinRight {
                topic: "cards".into(),
                repartition_topic: Some("payments.card-counts.right-repartition".into()),
                key_field: Some("card".into()),
                time_field: Some("ts".into()),
            },
            window: Some(JoinWindowConfig {
                before: Duration::from_secs(5),
                after: Duration::from_secs(5),
                grace: Duration::ZERO,
            }),
            history: None,
            partitioner: Partitioner::Murmur2,
        };
        assert_eq!(WorkerConfig::from_yaml(&config.to_yaml()).unwrap(), config);
        assert_eq!(
            config.tasks_topic(),
            "payments.card-counts.left-repartition"
        );
        assert_eq!(
            config.processor.left_repartition_topic(),
            Some("payments.card-counts.left-repartition")
        );
        assert_eq!(
            config.processor.right_repartition_topic(),
            Some("payments.card-counts.right-repartition")
        );
        let ProcessorKind::Join { left, right, .. } = &mut config.processor.kind else {
            unreachable!()
        };
        *left = JoinLeft::default();
        right.repartition_topic = None;
        let yaml = config.to_yaml();
        assert!(!yaml.contains("repartition"), "{yaml}");
        assert_eq!(WorkerConfig::from_yaml(&yaml).unwrap(), config);
        assert_eq!(config.processor.left_repartition_topic(), None);
        assert_eq!(config.tasks_topic(), "card-events");
    }

    #[test]
    fn round_trips_through_yaml_and_json() {
        let config = sample();
        assert_eq!(WorkerConfig::from_yaml(&config.to_yaml()).unwrap(), config);
        assert_eq!(WorkerConfig::from_json(&config.to_json()).unwrap(), config);
    }

    #[test]
    fn a_custom_processor_round_trips_with_its_free_config() {
        let mut config = sample();
        config.processor.kind = ProcessorKind::Custom {
            name: "velocity-check".into(),
            config: serde_json::json!({"maxTransactions": 3, "within": "10m", "tags": ["a", 1.5, null]}),
        };
        let yaml = config.to_yaml();
        assert!(yaml.contains("kind: custom"), "{yaml}");
        assert_eq!(WorkerConfig::from_yaml(&yaml).unwrap(), config);
        assert_eq!(WorkerConfig::from_json(&config.to_json()).unwrap(), config);
        config.processor.kind = ProcessorKind::Custom {
            name: "velocity-check".into(),
            config: serde_json::Value::Null,
        };
        assert!(!config.to_yaml().contains("config:"));
        assert_eq!(WorkerConfig::from_yaml(&config.to_yaml()).unwrap(), config);
    }

    #[test]
    fn a_wasm_processor_round_trips_with_its_module_and_limits() {
        let mut config = sample();
        config.processor.kind = ProcessorKind::Wasm {
            module: WasmModuleSource {
                bucket: Some("guests".into()),
                key: "velocity/python.wasm".into(),
                file: None,
                credentials_dir: None,
                sha256: "0f".repeat(32),
            },
            config: serde_json::json!({"maxTransactions": 3, "windowMinutes": 10}),
            limits: WasmLimitsConfig {
                fuel_per_record: 5_000_000,
                memory_bytes: 64 << 20,
            },
            reads_state_of: vec!["1e".repeat(32)],
        };
        let yaml = config.to_yaml();
        assert!(yaml.contains("kind: wasm"), "{yaml}");
        assert!(yaml.contains("readsStateOf"), "{yaml}");
        assert_eq!(WorkerConfig::from_yaml(&yaml).unwrap(), config);
        assert_eq!(WorkerConfig::from_json(&config.to_json()).unwrap(), config);
    }

    #[test]
    fn refuses_an_unknown_version() {
        let text = sample().to_yaml().replace("version: 1", "version: 2");
        let error = WorkerConfig::from_yaml(&text).unwrap_err();
        assert!(
            matches!(
                error,
                FormatError::UnsupportedVersion {
                    found: 2,
                    supported: 1,
                    ..
                }
            ),
            "{error}"
        );
    }

    #[test]
    fn names_the_field_that_is_wrong() {
        let mut config = sample();
        config.processor.time_field = None;
        let error = WorkerConfig::from_yaml(&config.to_yaml()).unwrap_err();
        assert!(error.to_string().contains("processor.timeField"), "{error}");

        let text = sample()
            .to_yaml()
            .replace("interval: 30s", "interval: soon");
        let error = WorkerConfig::from_yaml(&text).unwrap_err();
        assert!(error.to_string().contains("soon"), "{error}");

        let text = sample()
            .to_yaml()
            .replace("retain: 3", "retain: 3\n  retian: 4");
        let error = WorkerConfig::from_yaml(&text).unwrap_err();
        assert!(error.to_string().contains("retian"), "{error}");
    }

    #[test]
    fn transactional_id_is_per_task() {
        assert_eq!(
            sample().job.transactional_id(3),
            "payments.card-counts.task-3"
        );
    }
}
