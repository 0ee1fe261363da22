//! The [`WorkerConfig`] of a job: everything the worker needs, already validated, with the file
//! paths where the pod template mounts secrets. The worker never sees the custom resource.

use crate::controller::valid_job::ValidatedJob;
use crate::k8s::names;
use std::path::{Path, PathBuf};
use streamkeeper_contract::Versioned;
use streamkeeper_contract::worker_config::{
    CheckpointConfig, HttpConfig, KafkaConfig, KafkaSaslFiles, KafkaSecurity, KafkaTlsFiles,
    RecoveryConfig, S3Config, StateConfig, WorkerConfig,
};

/// Renders the worker config of `job`.
pub fn render(job: &ValidatedJob) -> WorkerConfig {
    let kafka = &job.kafka;
    let checkpoint = &job.checkpoint;
    WorkerConfig {
        version: WorkerConfig::VERSION,
        job: job.identity(),
        kafka: KafkaConfig {
            bootstrap_servers: kafka.bootstrap_servers.clone(),
            input_topic: kafka.input_topic.clone(),
            output_topic: kafka.output_topic.clone(),
            changelog_topic: kafka.changelog_topic.clone(),
            dead_letter_topic: kafka.dead_letter_topic.clone(),
            security: KafkaSecurity {
                tls: kafka.tls.as_ref().map(|tls| KafkaTlsFiles {
                    ca_file: tls
                        .ca
                        .as_ref()
                        .map(|_| file(names::KAFKA_TLS_DIR, names::KAFKA_TLS_CA_FILE)),
                    cert_file: tls
                        .certificate
                        .as_ref()
                        .map(|_| file(names::KAFKA_TLS_DIR, names::KAFKA_TLS_CERT_FILE)),
                    key_file: tls
                        .private_key
                        .as_ref()
                        .map(|_| file(names::KAFKA_TLS_DIR, names::KAFKA_TLS_KEY_FILE)),
                }),
                sasl: kafka.sasl.as_ref().map(|sasl| KafkaSaslFiles {
                    mechanism: sasl.mechanism.librdkafka_name().to_string(),
                    username_file: file(names::KAFKA_SASL_DIR, names::KAFKA_SASL_USERNAME_FILE),
                    password_file: file(names::KAFKA_SASL_DIR, names::KAFKA_SASL_PASSWORD_FILE),
                }),
            },
            commit_interval: kafka.commit_interval,
            commit_max_records: kafka.commit_max_records,
            transaction_timeout: streamkeeper_contract::worker_config::TRANSACTION_TIMEOUT,
        },
        processor: job.processor.clone(),
        state: StateConfig {
            dir: PathBuf::from(names::STATE_DIR),
            rocksdb: job.state.rocksdb.clone(),
        },
        checkpoint: CheckpointConfig {
            interval: checkpoint.interval,
            retain: checkpoint.retain,
            s3: Some(S3Config {
                bucket: checkpoint.bucket.clone(),
                prefix: checkpoint.prefix.clone(),
                endpoint: checkpoint.endpoint.clone(),
                region: checkpoint.region.clone(),
                path_style: checkpoint.path_style,
                credentials_dir: checkpoint
                    .credentials
                    .as_ref()
                    .map(|_| PathBuf::from(names::S3_CREDENTIALS_DIR)),
            }),
        },
        recovery: RecoveryConfig {
            acceptable_recovery_lag: job.acceptable_recovery_lag,
        },
        http: HttpConfig {
            listen: names::HTTP_LISTEN.to_string(),
            token_file: Some(PathBuf::from(names::WORKER_TOKEN_FILE)),
        },
    }
}

fn file(dir: &str, name: &str) -> PathBuf {
    Path::new(dir).join(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::test_support;
    use std::time::Duration;
    use streamkeeper_contract::worker_config::{ProcessorKind, WindowConfig};

    #[test]
    fn renders_names_paths_and_defaults() {
        let config = render(&test_support::validated());
        assert_eq!(config.job.transactional_id(0), "payments.card-count.task-0");
        assert_eq!(
            config.kafka.changelog_topic,
            "payments.card-count.changelog"
        );
        assert_eq!(config.kafka.dead_letter_topic, "payments.card-count.dlq");
        assert_eq!(config.state.dir, Path::new("/var/lib/streamkeeper/state"));
        assert_eq!(config.http.listen, "0.0.0.0:8080");
        assert_eq!(
            config.http.token_file.as_deref(),
            Some(Path::new("/etc/streamkeeper/http/token"))
        );
        let s3 = config.checkpoint.s3.unwrap();
        assert_eq!(
            s3.credentials_dir.as_deref(),
            Some(Path::new("/etc/streamkeeper/s3"))
        );
        assert_eq!(config.kafka.security, KafkaSecurity::default());
        assert_eq!(config.checkpoint.interval, Duration::from_secs(30));
    }

    #[test]
    fn secret_files_are_where_the_pod_mounts_them() {
        let config = render(&test_support::validated_with(
            test_support::with_kafka_security,
        ));
        let tls = config.kafka.security.tls.unwrap();
        assert_eq!(
            tls.ca_file.as_deref(),
            Some(Path::new("/etc/streamkeeper/kafka/tls/ca.crt"))
        );
        assert_eq!(
            tls.cert_file.as_deref(),
            Some(Path::new("/etc/streamkeeper/kafka/tls/tls.crt"))
        );
        assert_eq!(
            tls.key_file.as_deref(),
            Some(Path::new("/etc/streamkeeper/kafka/tls/tls.key"))
        );
        let sasl = config.kafka.security.sasl.unwrap();
        assert_eq!(sasl.mechanism, "SCRAM-SHA-512");
        assert_eq!(
            sasl.username_file,
            Path::new("/etc/streamkeeper/kafka/sasl/username")
        );
        assert_eq!(
            sasl.password_file,
            Path::new("/etc/streamkeeper/kafka/sasl/password")
        );

        let without = render(&test_support::validated_with(|job| {
            job.spec.checkpoint.s3.credentials_secret = None;
        }));
        assert_eq!(without.checkpoint.s3.unwrap().credentials_dir, None);
    }

    #[test]
    fn round_trips_through_yaml_and_passes_the_worker_check() {
        for job in [
            test_support::validated(),
            test_support::validated_with(test_support::with_kafka_security),
            test_support::validated_with(test_support::with_hopping_window),
            test_support::validated_with(test_support::with_dedup),
        ] {
            let config = render(&job);
            config.check().unwrap();
            let back = WorkerConfig::from_yaml(&config.to_yaml()).unwrap();
            assert_eq!(back, config);
        }
        let hopping = render(&test_support::validated_with(
            test_support::with_hopping_window,
        ));
        assert_eq!(
            hopping.processor.kind,
            ProcessorKind::Aggregate {
                value_field: "amount".into(),
                window: Some(WindowConfig {
                    size: Duration::from_secs(3600),
                    advance: Some(Duration::from_secs(600)),
                    grace: Duration::from_secs(30),
                }),
            }
        );
    }
}
