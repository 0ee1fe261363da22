use super::*;
use streamkeeper_contract::parse_go_duration;

fn example(name: &str) -> StatefulStreamJob {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap();
    serde_yaml_ng::from_str(&text).unwrap()
}

#[test]
fn card_count_example_reads_with_defaults() {
    let job = example("card-count.yaml");
    assert_eq!(job.spec.processor.type_, ProcessorType::Count);
    assert_eq!(job.spec.kafka.commit_interval, "100ms");
    assert_eq!(job.spec.kafka.commit_max_records, 10_000);
    assert_eq!(job.spec.deletion_policy, DeletionPolicy::Retain);
    assert_eq!(job.spec.state.storage_size.0, "10Gi");
    assert_eq!(job.spec.checkpoint.s3.prefix, "streamkeeper");
    assert!(job.spec.checkpoint.s3.path_style);
    let secret = job.spec.checkpoint.s3.credentials_secret.unwrap();
    assert_eq!(secret.access_key_id_key, "AWS_ACCESS_KEY_ID");
}

#[test]
fn windowed_example_durations_parse_the_way_cel_reads_them() {
    let job = example("device-hourly-mean.yaml");
    let window = job.spec.processor.aggregate.unwrap().window.unwrap();
    assert_eq!(window.type_, WindowType::Tumbling);
    assert_eq!(parse_go_duration(&window.size).unwrap().as_secs(), 3600);
    assert_eq!(parse_go_duration(&window.grace).unwrap().as_secs(), 300);
    assert_eq!(job.spec.state.rocksdb.compression, Compression::Zstd);
}

#[test]
fn dedup_example_reads() {
    let job = example("dedup.yaml");
    assert_eq!(job.spec.processor.dedup.unwrap().ttl, "24h");
    assert_eq!(
        job.spec.kafka.dead_letter_topic.as_deref(),
        Some("payment-notifications-bad")
    );
}

#[test]
fn spec_round_trips_through_json() {
    for name in ["card-count.yaml", "device-hourly-mean.yaml", "dedup.yaml"] {
        let job = example(name);
        let back: StatefulStreamJob =
            serde_json::from_value(serde_json::to_value(&job).unwrap()).unwrap();
        assert_eq!(back, job, "{name}");
    }
}

#[test]
fn crd_patterns_accept_exactly_what_the_parsers_accept() {
    let crd =
        serde_json::to_string(&<StatefulStreamJob as kube::CustomResourceExt>::crd()).unwrap();
    let escaped = serde_json::to_string(DURATION_PATTERN).unwrap();
    assert!(
        crd.contains(&escaped),
        "the CRD must use the contract's duration pattern"
    );
    let names = <StatefulStreamJob as kube::CustomResourceExt>::crd()
        .spec
        .names;
    assert_eq!(names.short_names, Some(vec!["ssj".to_string()]));
}

#[test]
fn crd_rules_and_descriptions_carry_the_contracts_limits() {
    use streamkeeper_contract::rules::{MAX_JOB_NAME_LEN, MAX_WINDOWS_PER_RECORD};
    let crd =
        serde_json::to_string(&<StatefulStreamJob as kube::CustomResourceExt>::crd()).unwrap();
    for expected in [
        format!("self.metadata.name.size() <= {MAX_JOB_NAME_LEN}"),
        format!("at most {MAX_WINDOWS_PER_RECORD} windows"),
        serde_json::to_string(S3_BUCKET_PATTERN).unwrap(),
        "168h".to_string(),
    ] {
        let expected = expected.trim_matches('"').to_string();
        assert!(crd.contains(&expected), "the CRD must carry {expected:?}");
    }
}
