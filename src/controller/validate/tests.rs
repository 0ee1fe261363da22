use super::*;
use crate::api::{StatefulStreamJob, WindowSpec, WindowType};
use crate::controller::test_support::{self, job_with};
use std::time::Duration;
use streamkeeper_contract::worker_config::{Compression, ProcessorKind, WindowConfig};

fn refusal(edit: impl FnOnce(&mut StatefulStreamJob)) -> InvalidSpec {
    validate(&job_with(edit), None).unwrap_err()
}

/// Asserts the error names `field` and its message mentions every part of `mentions`.
fn assert_refused(edit: impl FnOnce(&mut StatefulStreamJob), field: &str, mentions: &[&str]) {
    let error = refusal(edit);
    assert_eq!(error.field(), field, "{error}");
    assert_eq!(error.category(), "InvalidSpec");
    let message = error.to_string();
    assert!(message.starts_with(field), "{message}");
    for part in mentions {
        assert!(
            message.contains(part),
            "{message:?} should mention {part:?}"
        );
    }
}

fn window(type_: WindowType, size: &str, advance: Option<&str>, grace: &str) -> WindowSpec {
    WindowSpec {
        type_,
        size: size.into(),
        advance: advance.map(Into::into),
        grace: grace.into(),
    }
}

fn set_window(job: &mut StatefulStreamJob, window: WindowSpec) {
    if let Some(aggregate) = job.spec.processor.aggregate.as_mut() {
        aggregate.window = Some(window);
    }
}

#[test]
fn resolves_names_durations_and_sizes() {
    let job = test_support::validated();
    assert_eq!(
        (job.namespace.as_str(), job.name.as_str()),
        ("payments", "card-count")
    );
    assert_eq!(job.generation, Some(3));
    assert_eq!(job.owner.uid, test_support::UID);
    assert_eq!(job.owner.controller, Some(true));
    assert_eq!(job.owner.block_owner_deletion, Some(true));
    assert_eq!(job.kafka.changelog_topic, "payments.card-count.changelog");
    assert_eq!(job.kafka.dead_letter_topic, "payments.card-count.dlq");
    assert_eq!(job.kafka.commit_interval, Duration::from_millis(100));
    assert_eq!(job.kafka.commit_max_records, 10_000);
    assert_eq!(job.checkpoint.interval, Duration::from_secs(30));
    assert_eq!(job.checkpoint.retain, 3);
    assert_eq!(job.state.storage_bytes, 20 << 30);
    assert_eq!(job.state.rocksdb.block_cache_bytes, 256 << 20);
    assert_eq!(job.state.rocksdb.write_buffer_bytes, 64 << 20);
    assert_eq!(job.state.rocksdb.compression, Compression::Lz4);
    assert_eq!(job.workers.standby_replicas, 1);
    assert_eq!(job.workers.service_account, None);
    assert_eq!(job.acceptable_recovery_lag, 10_000);
    assert_eq!(job.restore, None);
    assert_eq!(
        job.processor.kind,
        ProcessorKind::Aggregate {
            value_field: "amount".into(),
            window: None
        }
    );
}

#[test]
fn the_shipped_examples_validate_and_the_invalid_one_does_not() {
    let read = |name: &str| {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("examples")
            .join(name);
        let mut job: StatefulStreamJob =
            serde_yaml_ng::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        job.metadata.namespace = Some("demo".into());
        job.metadata.uid = Some(test_support::UID.into());
        job
    };
    for name in [
        "card-count.yaml",
        "dedup.yaml",
        "device-hourly-mean.yaml",
        "enrich-transactions.yaml",
    ] {
        validate(&read(name), None).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    let enrich = validate(&read("enrich-transactions.yaml"), None).unwrap();
    assert_eq!(
        enrich.processor.left_repartition_topic(),
        Some("demo.enrich-transactions.left-repartition")
    );
    assert_eq!(enrich.processor.right_topic(), Some("cards"));
    assert_eq!(enrich.processor.right_repartition_topic(), None);
    let hourly = validate(&read("device-hourly-mean.yaml"), None).unwrap();
    assert_eq!(
        hourly.processor.kind,
        ProcessorKind::Aggregate {
            value_field: "temperature".into(),
            window: Some(WindowConfig {
                size: Duration::from_secs(3600),
                advance: None,
                grace: Duration::from_secs(300),
            }),
        }
    );
    let dedup = validate(&read("dedup.yaml"), None).unwrap();
    assert_eq!(dedup.kafka.dead_letter_topic, "payment-notifications-bad");
    assert_eq!(
        validate(&read("invalid.yaml"), None).unwrap_err().field(),
        "spec.standbyReplicas"
    );
}

#[test]
fn identity_comes_from_the_apiserver() {
    assert_refused(
        |job| job.metadata.namespace = None,
        "metadata.namespace",
        &["required"],
    );
    assert_refused(|job| job.metadata.uid = None, "metadata.uid", &["uid"]);
    assert_refused(
        |job| job.metadata.name = None,
        "metadata.name",
        &["required"],
    );
    for name in [
        "card.count",
        "Card-count",
        "9lives",
        "card-",
        &"a".repeat(53),
    ] {
        let name = name.to_string();
        assert_refused(
            |job| job.metadata.name = Some(name),
            "metadata.name",
            &["DNS label", "52"],
        );
    }
    let longest = "a".repeat(52);
    validate(&job_with(|job| job.metadata.name = Some(longest)), None).unwrap();
}

#[test]
fn replicas_and_standbys() {
    assert_refused(|job| job.spec.replicas = 0, "spec.replicas", &["suspend"]);
    assert_refused(
        |job| job.spec.standby_replicas = 3,
        "spec.standbyReplicas",
        &["3", "less than spec.replicas (3)"],
    );
    assert_refused(
        |job| job.spec.standby_replicas = -1,
        "spec.standbyReplicas",
        &["negative"],
    );
    let job = test_support::validated_with(|job| job.spec.standby_replicas = 2);
    assert_eq!(job.workers.standby_replicas, 2);
}

#[test]
fn hopping_window_size_must_be_a_multiple_of_advance() {
    assert_refused(
        |job| set_window(job, window(WindowType::Hopping, "1h", Some("7m"), "0s")),
        "spec.processor.aggregate.window.advance",
        &["1h", "7m", "multiple"],
    );
    assert_refused(
        |job| set_window(job, window(WindowType::Hopping, "10m", Some("1h"), "0s")),
        "spec.processor.aggregate.window.advance",
        &["at most window.size"],
    );
    assert_refused(
        |job| set_window(job, window(WindowType::Hopping, "1h", None, "0s")),
        "spec.processor.aggregate.window.advance",
        &["required", "hopping"],
    );
    assert_refused(
        |job| set_window(job, window(WindowType::Tumbling, "1h", Some("1h"), "0s")),
        "spec.processor.aggregate.window.advance",
        &["tumbling"],
    );
    assert_refused(
        |job| set_window(job, window(WindowType::Hopping, "1h", Some("100ms"), "0s")),
        "spec.processor.aggregate.window.advance",
        &["36000 windows"],
    );
    // The worker's bound (1,000), not the 10,000 this check used to allow.
    assert_refused(
        |job| set_window(job, window(WindowType::Hopping, "1h", Some("1800ms"), "0s")),
        "spec.processor.aggregate.window.advance",
        &["2000 windows", "1000"],
    );
    let job = test_support::validated_with(|job| {
        set_window(job, window(WindowType::Hopping, "1h", Some("3600ms"), "0s"));
    });
    assert!(matches!(
        job.processor.kind,
        ProcessorKind::Aggregate { window: Some(WindowConfig { advance: Some(a), .. }), .. } if a == Duration::from_millis(3600)
    ));
}

#[test]
fn event_time_durations_are_whole_milliseconds() {
    assert_refused(
        |job| set_window(job, window(WindowType::Hopping, "1h", Some("500us"), "0s")),
        "spec.processor.aggregate.window.advance",
        &["500us", "at least 1ms"],
    );
    assert_refused(
        |job| set_window(job, window(WindowType::Tumbling, "1500us", None, "0s")),
        "spec.processor.aggregate.window.size",
        &["1ms500us", "whole number of milliseconds"],
    );
    assert_refused(
        |job| set_window(job, window(WindowType::Tumbling, "1h", None, "1.0005s")),
        "spec.processor.aggregate.window.grace",
        &["whole number of milliseconds"],
    );
    assert_refused(
        |job| {
            test_support::with_dedup(job);
            if let Some(dedup) = job.spec.processor.dedup.as_mut() {
                dedup.ttl = "999us".into();
            }
        },
        "spec.processor.dedup.ttl",
        &["at least 1ms"],
    );
}

#[test]
fn grace_has_a_bound_and_the_bound_itself_is_allowed() {
    assert_refused(
        |job| set_window(job, window(WindowType::Tumbling, "1h", None, "168h1s")),
        "spec.processor.aggregate.window.grace",
        &["168h1s", "168h"],
    );
    test_support::validated_with(|job| {
        set_window(job, window(WindowType::Tumbling, "1h", None, "168h"))
    });
    assert_refused(
        |job| set_window(job, window(WindowType::Tumbling, "1 hour", None, "0s")),
        "spec.processor.aggregate.window.size",
        &["1 hour"],
    );
}

#[test]
fn processor_settings_match_its_type() {
    assert_refused(
        |job| {
            set_window(job, window(WindowType::Tumbling, "1h", None, "0s"));
            job.spec.processor.time_field = None;
        },
        "spec.processor.timeField",
        &["event time"],
    );
    assert_refused(
        |job| {
            test_support::with_dedup(job);
            job.spec.processor.time_field = None;
        },
        "spec.processor.timeField",
        &["required"],
    );
    assert_refused(
        |job| job.spec.processor.type_ = crate::api::ProcessorType::Count,
        "spec.processor.aggregate",
        &["only allowed", "aggregate"],
    );
    assert_refused(
        |job| job.spec.processor.aggregate = None,
        "spec.processor.aggregate",
        &["required"],
    );
    let dedup = test_support::validated_with(test_support::with_dedup);
    assert_eq!(
        dedup.processor.kind,
        ProcessorKind::Dedup {
            ttl: Duration::from_secs(86_400)
        }
    );
}

#[test]
fn sizes_must_be_bytes_rocksdb_accepts() {
    let error = refusal(|job| job.spec.state.rocksdb.block_cache_size.0 = "lots".into());
    assert_eq!(error.field(), "spec.state.rocksdb.blockCacheSize");
    assert!(
        matches!(
            error,
            InvalidSpec::Quantity {
                source: QuantityError::Malformed(_),
                ..
            }
        ),
        "{error}"
    );
    let error = refusal(|job| job.spec.state.rocksdb.block_cache_size.0 = "100m".into());
    assert!(error.to_string().contains("Mi"), "{error}");
    assert_refused(
        |job| job.spec.state.rocksdb.write_buffer_size.0 = "32Ki".into(),
        "spec.state.rocksdb.writeBufferSize",
        &["64Ki"],
    );
    assert_refused(
        |job| job.spec.state.storage_size.0 = "0".into(),
        "spec.state.storageSize",
        &["more than 0"],
    );
    let job = test_support::validated_with(|job| {
        job.spec.state.rocksdb.write_buffer_size.0 = "64Ki".into()
    });
    assert_eq!(job.state.rocksdb.write_buffer_bytes, 65_536);
}

#[test]
fn durations_parse_and_fit_their_ranges() {
    let error = refusal(|job| job.spec.checkpoint.interval = "soon".into());
    assert_eq!(error.field(), "spec.checkpoint.interval");
    assert!(matches!(error, InvalidSpec::Duration { .. }));
    assert_refused(
        |job| job.spec.checkpoint.interval = "500ms".into(),
        "spec.checkpoint.interval",
        &["at least 1s"],
    );
    assert_refused(
        |job| job.spec.kafka.commit_interval = "1m".into(),
        "spec.kafka.commitInterval",
        &["30s", "time out"],
    );
    test_support::validated_with(|job| job.spec.kafka.commit_interval = "30s".into());
    assert_refused(
        |job| job.spec.checkpoint.retain = 0,
        "spec.checkpoint.retain",
        &["at least 1"],
    );
}

#[test]
fn every_topic_has_one_role() {
    assert_refused(
        |job| job.spec.kafka.changelog_topic = Some("card-transactions".into()),
        "spec.kafka.changelogTopic",
        &["spec.kafka.inputTopic"],
    );
    assert_refused(
        |job| job.spec.kafka.output_topic = "card-transactions".into(),
        "spec.kafka.outputTopic",
        &["spec.kafka.inputTopic"],
    );
    assert_refused(
        |job| job.spec.kafka.dead_letter_topic = Some("payments.card-count.changelog".into()),
        "spec.kafka.deadLetterTopic",
        &["spec.kafka.changelogTopic"],
    );
    assert_refused(
        |job| job.spec.kafka.input_topic = "..".into(),
        "spec.kafka.inputTopic",
        &["topic name"],
    );
}

#[test]
fn kafka_settings_that_cannot_work() {
    assert_refused(
        |job| job.spec.kafka.min_insync_replicas = Some(4),
        "spec.kafka.minInsyncReplicas",
        &["4", "replicationFactor (3)"],
    );
    assert_refused(
        |job| job.spec.kafka.bootstrap_servers = "kafka:9092,kafka-1".into(),
        "spec.kafka.bootstrapServers",
        &["kafka-1"],
    );
    test_support::validated_with(|job| job.spec.kafka.bootstrap_servers = "[::1]:9092".into());
    assert_refused(
        |job| {
            test_support::with_kafka_security(job);
            if let Some(tls) = job.spec.kafka.tls.as_mut() {
                tls.private_key = None;
            }
        },
        "spec.kafka.tls",
        &["together"],
    );
}

#[test]
fn reserved_pod_metadata_is_refused() {
    assert_refused(
        |job| {
            job.spec
                .pod
                .labels
                .insert("app.kubernetes.io/instance".into(), "x".into());
        },
        "spec.pod.labels[\"app.kubernetes.io/instance\"]",
        &["selector"],
    );
    assert_refused(
        |job| {
            job.spec
                .pod
                .annotations
                .insert("streamkeeper.dev/config-hash".into(), "x".into());
        },
        "spec.pod.annotations[\"streamkeeper.dev/config-hash\"]",
        &["operator"],
    );
    assert_refused(
        |job| job.spec.pod.service_account_name = Some("Bad_Name".into()),
        "spec.pod.serviceAccountName",
        &["Bad_Name"],
    );
}

#[test]
fn restore_requests_and_recovery_lag() {
    let restore = |checkpoint: &str| {
        let checkpoint = checkpoint.to_string();
        job_with(|job| {
            job.spec.restore = Some(crate::api::RestoreSpec {
                id: "r1".into(),
                checkpoint,
                source: crate::api::RestoreSource::Input,
                adopt_input: false,
            });
        })
    };
    let latest = validate(&restore("latest"), None).unwrap().restore.unwrap();
    assert_eq!(latest.checkpoint, RestorePoint::Latest);
    assert_eq!(latest.source, crate::api::RestoreSource::Input);
    assert_eq!(
        validate(&restore("42"), None)
            .unwrap()
            .restore
            .unwrap()
            .checkpoint,
        RestorePoint::Sequence(42)
    );
    for bad in ["-1", "+1", "newest", "99999999999999999999"] {
        let error = validate(&restore(bad), None).unwrap_err();
        assert_eq!(error.field(), "spec.restore.checkpoint", "{bad}");
    }
    // Adopting the input discards the old topic's offsets, which a replay from the input reads.
    let adopting = |source| {
        job_with(|job| {
            job.spec.restore = Some(crate::api::RestoreSpec {
                id: "move".into(),
                checkpoint: "latest".into(),
                source,
                adopt_input: true,
            });
        })
    };
    let adopted = validate(&adopting(crate::api::RestoreSource::Changelog), None).unwrap();
    assert!(adopted.restore.unwrap().adopt_input);
    let error = validate(&adopting(crate::api::RestoreSource::Input), None).unwrap_err();
    assert_eq!(error.field(), "spec.restore.adoptInput");
    assert!(error.to_string().contains("source: changelog"), "{error}");
    assert_refused(
        |job| job.spec.recovery.acceptable_recovery_lag = -1,
        "spec.recovery.acceptableRecoveryLag",
        &["negative"],
    );
}

#[test]
fn the_heartbeat_timeout_defaults_to_2s_and_stays_within_1s_to_60s() {
    let default = validate(&job_with(|_| {}), None).unwrap();
    assert_eq!(default.heartbeat_timeout, Duration::from_secs(2));
    let short = job_with(|job| job.spec.recovery.heartbeat_timeout = "1s".into());
    assert_eq!(
        validate(&short, None).unwrap().heartbeat_timeout,
        Duration::from_secs(1)
    );
    for bad in ["500ms", "61s"] {
        assert_refused(
            |job| job.spec.recovery.heartbeat_timeout = bad.into(),
            "spec.recovery.heartbeatTimeout",
            &["between 1s and 60s"],
        );
    }
    let error = refusal(|job| job.spec.recovery.heartbeat_timeout = "soon".into());
    assert_eq!(error.field(), "spec.recovery.heartbeatTimeout");
}

#[test]
fn sasl_plain_needs_tls() {
    let plain = |job: &mut StatefulStreamJob| {
        test_support::with_kafka_security(job);
        if let Some(sasl) = job.spec.kafka.sasl.as_mut() {
            sasl.mechanism = crate::api::SaslMechanism::Plain;
        }
    };
    test_support::validated_with(plain);
    assert_refused(
        |job| {
            plain(job);
            job.spec.kafka.tls = None;
        },
        "spec.kafka.sasl.mechanism",
        &["PLAIN", "TLS"],
    );
    test_support::validated_with(|job| {
        test_support::with_kafka_security(job);
        job.spec.kafka.tls = None;
    });
}

#[test]
fn s3_bucket_names_follow_s3() {
    for bad in ["UPPER_case", "a..b", "-bucket"] {
        let bad = bad.to_string();
        assert_refused(
            |job| job.spec.checkpoint.s3.bucket = bad,
            "spec.checkpoint.s3.bucket",
            &["S3 bucket name"],
        );
    }
}

#[test]
fn s3_credentials_keys_must_differ() {
    assert_refused(
        |job| {
            if let Some(secret) = job.spec.checkpoint.s3.credentials_secret.as_mut() {
                secret.secret_access_key_key = secret.access_key_id_key.clone();
            }
        },
        "spec.checkpoint.s3.credentialsSecret.secretAccessKeyKey",
        &["same key"],
    );
}

#[test]
fn a_table_cannot_be_re_keyed_and_a_stream_side_can() {
    fn join(right: &'static str) -> impl FnOnce(&mut StatefulStreamJob) {
        move |job: &mut StatefulStreamJob| {
            job.spec.processor = serde_yaml_ng::from_str(&format!(
                "type: join\nkeyField: card\ntimeField: ts\njoin:\n  {right}\n"
            ))
            .unwrap();
        }
    }
    assert_refused(
        join("kind: table\n  history: 1h\n  right: {topic: cards, repartition: true}"),
        "spec.processor.join.right.repartition",
        &["table", "Kafka key"],
    );
    let stream = test_support::validated_with(join(
        "kind: stream\n  window: {before: 1s, after: 1s}\n  right: {topic: cards, keyField: card, timeField: ts, repartition: true}",
    ));
    assert_eq!(
        stream.processor.right_repartition_topic(),
        Some("payments.card-count.right-repartition")
    );
    assert_eq!(stream.processor.left_repartition_topic(), None);
}

#[test]
fn a_global_table_is_a_table_join_read_whole() {
    fn join(spec: &'static str) -> impl FnOnce(&mut StatefulStreamJob) {
        move |job: &mut StatefulStreamJob| {
            job.spec.processor = serde_yaml_ng::from_str(&format!(
                "type: join\nkeyField: currency\ntimeField: ts\njoin:\n  {spec}\n"
            ))
            .unwrap();
        }
    }
    let global = test_support::validated_with(join(
        "kind: globalTable\n  history: 1h\n  right: {topic: currencies}",
    ));
    assert!(global.processor.right_read_whole());
    assert_refused(
        join("kind: globalTable\n  right: {topic: currencies}"),
        "spec.processor.join.history",
        &["table join"],
    );
    assert_refused(
        join("kind: globalTable\n  history: 1h\n  mode: outer\n  right: {topic: currencies}"),
        "spec.processor.join.mode",
        &["outer"],
    );
}
