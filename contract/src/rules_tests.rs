use super::*;
use crate::Versioned;
use crate::duration::{EVENT_DURATION_PATTERN, parse_go_duration};
use crate::worker_config::{KafkaSaslFiles, KafkaTlsFiles};
use proptest::prelude::*;

fn window_of(size: Duration, advance: Option<Duration>, grace: Duration) -> WindowConfig {
    WindowConfig {
        size,
        advance,
        grace,
    }
}

fn refused_field(result: Result<impl std::fmt::Debug, Violation>) -> Field {
    result.expect_err("the rule must refuse it").field
}

const MS: Duration = Duration::from_millis(1);
const HOUR: Duration = Duration::from_secs(3600);

#[test]
fn durations_below_or_between_milliseconds_are_refused_not_truncated() {
    let us = Duration::from_micros;
    assert_eq!(
        refused_field(window(&window_of(us(1500), None, Duration::ZERO))),
        Field::WindowSize
    );
    assert_eq!(
        refused_field(window(&window_of(HOUR, Some(us(500)), Duration::ZERO))),
        Field::WindowAdvance
    );
    assert_eq!(
        refused_field(window(&window_of(HOUR, None, us(500)))),
        Field::WindowGrace
    );
    let error = event_duration(Field::DedupTtl, Duration::from_nanos(1_000_001)).unwrap_err();
    assert!(
        error.reason.contains("whole number of milliseconds"),
        "{error}"
    );
    assert_eq!(event_duration(Field::DedupTtl, us(2000)), Ok(2));
    assert!(window(&window_of(MS, None, Duration::ZERO)).is_ok());
}

#[test]
fn a_record_falls_in_at_most_a_thousand_windows() {
    let thousand = window_of(HOUR, Some(Duration::from_millis(3600)), Duration::ZERO);
    assert!(window(&thousand).is_ok());
    let error = window(&window_of(
        HOUR,
        Some(Duration::from_secs(1)),
        Duration::ZERO,
    ))
    .unwrap_err();
    assert_eq!(error.field, Field::WindowAdvance);
    assert!(error.reason.contains("3600 windows"), "{error}");
    // 2000 windows: the operator used to allow up to 10,000, the worker 1,000.
    let two_thousand = window_of(HOUR, Some(Duration::from_millis(1800)), Duration::ZERO);
    assert_eq!(refused_field(window(&two_thousand)), Field::WindowAdvance);
}

#[test]
fn hopping_windows_line_up_and_grace_is_bounded() {
    let seven_minutes = Duration::from_secs(420);
    let error = window(&window_of(HOUR, Some(seven_minutes), Duration::ZERO)).unwrap_err();
    assert!(error.reason.contains("multiple"), "{error}");
    let error = window(&window_of(seven_minutes, Some(HOUR), Duration::ZERO)).unwrap_err();
    assert!(error.reason.contains("at most window.size"), "{error}");
    assert!(window(&window_of(HOUR, None, MAX_WINDOW_GRACE)).is_ok());
    assert_eq!(
        refused_field(window(&window_of(HOUR, None, MAX_WINDOW_GRACE + MS))),
        Field::WindowGrace
    );
}

#[test]
fn sasl_plain_needs_tls() {
    assert_eq!(refused_field(sasl("PLAIN", false)), Field::SaslMechanism);
    assert!(sasl("PLAIN", true).is_ok());
    assert!(sasl("SCRAM-SHA-512", false).is_ok());
    assert!(sasl("GSSAPI", true).is_err());
}

#[test]
fn bucket_names_follow_s3() {
    for bad in [
        "UPPER_case",
        "ab",
        "-bucket",
        "bucket-",
        "a..b",
        "has space",
    ] {
        assert_eq!(refused_field(s3_bucket(bad)), Field::S3Bucket, "{bad}");
    }
    for good in ["abc", "my-bucket.2026", &"a".repeat(63)] {
        assert!(s3_bucket(good).is_ok(), "{good}");
    }
    assert!(s3_bucket(&"a".repeat(64)).is_err());
}

#[test]
fn every_topic_has_one_role() {
    let error = topics(&[(Field::InputTopic, "cards"), (Field::OutputTopic, "cards")]).unwrap_err();
    assert_eq!(error.field, Field::OutputTopic);
    assert!(error.reason.contains("spec.kafka.inputTopic"), "{error}");
    assert_eq!(
        refused_field(topics(&[(Field::InputTopic, "..")])),
        Field::InputTopic
    );
}

#[test]
fn job_names_fit_the_pods_labels() {
    assert!(job_name(&"a".repeat(MAX_JOB_NAME_LEN)).is_ok());
    assert_eq!(
        refused_field(job_name(&"a".repeat(MAX_JOB_NAME_LEN + 1))),
        Field::JobName
    );
    assert!(job_name("9lives").is_err());
    assert!(job_name("has.dot").is_err());
}

#[test]
fn the_worker_config_check_names_the_config_path() {
    let mut config = crate::worker_config::tests::sample();
    config.kafka.security.sasl = Some(KafkaSaslFiles {
        mechanism: "PLAIN".into(),
        username_file: "/u".into(),
        password_file: "/p".into(),
    });
    let error = config.check().unwrap_err();
    assert!(
        error.to_string().contains("kafka.security.sasl.mechanism"),
        "{error}"
    );
    config.kafka.security.tls = Some(KafkaTlsFiles {
        ca_file: None,
        cert_file: None,
        key_file: None,
    });
    config.check().unwrap();
    config.checkpoint.s3.as_mut().unwrap().bucket = "UPPER_case".into();
    let error = config.check().unwrap_err();
    assert!(
        error.to_string().contains("checkpoint.s3.bucket"),
        "{error}"
    );
}

/// [`EVENT_DURATION_PATTERN`] with its numbers and repetitions bounded (so generated durations
/// stay in range) and without anchors (which the generator does not take).
fn bounded_event_duration_pattern() -> String {
    let bounded = EVENT_DURATION_PATTERN
        .replace("[0-9]+", "[0-9]{1,6}")
        .replace(")+$", "){1,4}$");
    assert!(
        !bounded.contains('+'),
        "the pattern changed shape: {bounded}"
    );
    bounded
        .trim_start_matches('^')
        .trim_end_matches('$')
        .to_string()
}

proptest! {
    /// The CRD's pattern for event-time durations admits only whole milliseconds: whatever it
    /// lets through, the contract's rule accepts (or refuses as below 1ms, as the CEL rule does).
    #[test]
    fn the_crd_pattern_admits_only_whole_milliseconds(
        text in proptest::string::string_regex(&bounded_event_duration_pattern()).unwrap()
    ) {
        let duration = parse_go_duration(&text).unwrap();
        prop_assert!(duration.subsec_nanos().is_multiple_of(1_000_000), "{} is {:?}", text, duration);
        if duration >= TIME_RESOLUTION {
            prop_assert!(event_duration(Field::WindowSize, duration).is_ok(), "{}", text);
        }
    }
}

#[test]
fn a_transaction_timeout_not_above_the_commit_interval_is_refused() {
    let mut config = crate::worker_config::tests::sample();
    config.check().unwrap();
    config.kafka.transaction_timeout = config.kafka.commit_interval;
    let error = worker_config(&config).unwrap_err();
    assert_eq!(error.field, Field::TransactionTimeout);
    assert!(
        error.reason.contains("every transaction times out"),
        "{error}"
    );
}

#[test]
fn a_custom_processor_is_named_by_a_plain_lowercase_word() {
    for name in ["velocity-check", "fraud2", "a"] {
        assert_eq!(custom_name(name), Ok(()), "{name}");
    }
    let too_long = "a".repeat(MAX_CUSTOM_NAME_LEN + 1);
    for name in [
        "",
        "Velocity",
        "2fast",
        "-x",
        "fraud score",
        "fraud_score",
        &too_long,
    ] {
        let refusal = custom_name(name).expect_err(name);
        assert_eq!(refusal.field, Field::CustomName);
        assert!(refusal.reason.contains(&format!("`{name}`")), "{refusal}");
    }
    let config = ProcessorConfig {
        key_field: "card".into(),
        time_field: None,
        kind: ProcessorKind::Custom {
            name: "Fraud".into(),
            config: serde_json::json!({"threshold": 3}),
        },
    };
    assert_eq!(refused_field(processor(&config)), Field::CustomName);
}

#[test]
fn a_wasm_module_is_pinned_by_its_digest_and_its_limits_are_bounded() {
    use crate::worker_config::{WasmLimitsConfig, WasmModuleSource};
    let module = |key: &str, sha256: &str| WasmModuleSource {
        bucket: None,
        key: key.into(),
        file: None,
        credentials_dir: None,
        sha256: sha256.into(),
    };
    let digest = "a".repeat(64);
    let limits = WasmLimitsConfig::default();
    assert_eq!(
        wasm(&module("guests/velocity.wasm", &digest), &limits),
        Ok(())
    );
    assert_eq!(
        refused_field(wasm(&module(" ", &digest), &limits)),
        Field::WasmModuleKey
    );
    for bad in [
        "A".repeat(64),
        "a".repeat(63),
        "g".repeat(64),
        String::new(),
    ] {
        assert_eq!(
            refused_field(wasm(&module("k", &bad), &limits)),
            Field::WasmModuleSha256,
            "{bad}"
        );
    }
    let with = |fuel_per_record, memory_bytes| WasmLimitsConfig {
        fuel_per_record,
        memory_bytes,
    };
    let ok = module("k", &digest);
    assert_eq!(
        refused_field(wasm(&ok, &with(0, 64 << 20))),
        Field::WasmFuelPerRecord
    );
    assert_eq!(
        refused_field(wasm(&ok, &with(MAX_WASM_FUEL_PER_RECORD + 1, 64 << 20))),
        Field::WasmFuelPerRecord
    );
    assert_eq!(
        refused_field(wasm(&ok, &with(1000, 1 << 20))),
        Field::WasmMemoryBytes
    );
    assert_eq!(wasm(&ok, &with(1000, 16 << 20)), Ok(()));
}

#[test]
fn a_wasm_module_is_an_s3_key_or_a_file_never_both() {
    use crate::worker_config::{WasmLimitsConfig, WasmModuleSource};
    let limits = WasmLimitsConfig::default();
    let module = |bucket: Option<&str>, key: &str, file: Option<&str>| WasmModuleSource {
        bucket: bucket.map(Into::into),
        key: key.into(),
        file: file.map(Into::into),
        credentials_dir: None,
        sha256: "a".repeat(64),
    };
    let file = Some("/etc/streamkeeper/module/module.wasm");
    assert_eq!(wasm(&module(None, "", file), &limits), Ok(()));
    assert_eq!(wasm(&module(Some("b"), "k", None), &limits), Ok(()));
    for bad in [
        module(None, "k", file),
        module(Some("b"), "", file),
        module(None, "", Some(" ")),
        module(None, "", None),
    ] {
        assert_eq!(
            refused_field(wasm(&bad, &limits)),
            Field::WasmModuleKey,
            "{bad:?}"
        );
    }
}

#[test]
fn a_wasm_module_reads_the_state_of_earlier_builds_named_by_digest() {
    use crate::worker_config::WasmModuleSource;
    let module = WasmModuleSource {
        bucket: None,
        key: "guests/velocity.wasm".into(),
        file: None,
        credentials_dir: None,
        sha256: "a".repeat(64),
    };
    assert_eq!(wasm_reads_state_of(&module, &[]), Ok(()));
    assert_eq!(
        wasm_reads_state_of(&module, &["b".repeat(64), "c".repeat(64)]),
        Ok(())
    );
    for bad in [
        vec!["B".repeat(64)],
        vec!["b".repeat(63)],
        vec!["a".repeat(64)],
    ] {
        assert_eq!(
            refused_field(wasm_reads_state_of(&module, &bad)),
            Field::WasmReadsStateOf,
            "{bad:?}"
        );
    }
    let many: Vec<String> = (0..=MAX_WASM_READS_STATE_OF)
        .map(|i| format!("{i:064x}"))
        .collect();
    assert_eq!(
        refused_field(wasm_reads_state_of(&module, &many)),
        Field::WasmReadsStateOf
    );
}
