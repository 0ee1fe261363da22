//! The worker against the real broker's secured listeners (`tests/services/kafka.sh` starts
//! them): SASL/SCRAM-SHA-512 over TLS, and mutual TLS with a client certificate. Credentials
//! come from files, as the operator mounts them from Secrets. The test's own checks read
//! through the plaintext listener of the same broker.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

mod support;

use std::path::PathBuf;
use std::time::Duration;
use streamkeeper_contract::worker_config::{KafkaSaslFiles, KafkaSecurity, KafkaTlsFiles};
use support::*;

const RECORDS: u32 = 3_000;
const KEYS: u32 = 50;
const PARTITIONS: i32 = 2;

fn env(name: &str) -> String {
    match std::env::var(name) {
        Ok(value) if !value.is_empty() => value,
        _ => panic!("{name} is not set: start the broker with `tests/services/kafka.sh start`"),
    }
}

async fn job(name: &str) -> Job {
    let input = unique_name("secure-in");
    create_topic(&input, PARTITIONS, false).await;
    produce(
        &input,
        PARTITIONS,
        (0..RECORDS).map(|i| card_event(i, KEYS)),
    );
    Job::new(name, &input, PARTITIONS, count_processor()).await
}

/// Runs the job to the end of its input and checks one output record per input record.
fn run_and_check(job: &Job) {
    let mut worker = job.start(None);
    job.wait_until_caught_up(&mut worker, Duration::from_secs(120));
    worker.terminate(Duration::from_secs(30));
    let output: usize = job.output().values().map(Vec::len).sum();
    assert_eq!(
        output, RECORDS as usize,
        "one output record per input record"
    );
    let log = worker.log();
    assert!(!log.contains("Authentication failed"), "{log}");
}

fn secret_file(job: &Job, name: &str, value: &str) -> PathBuf {
    let path = job.dir.path().join(name);
    std::fs::write(&path, format!("{value}\n")).unwrap();
    path
}

/// Points `job` at the SASL_SSL listener, logging in with SCRAM-SHA-512 and `password`.
fn use_scram_over_tls(job: &mut Job, password: &str) {
    job.config.kafka.bootstrap_servers = env("SK_KAFKA_SASL_SSL_BOOTSTRAP");
    job.config.kafka.security = KafkaSecurity {
        tls: Some(KafkaTlsFiles {
            ca_file: Some(env("SK_KAFKA_CA_PEM").into()),
            cert_file: None,
            key_file: None,
        }),
        sasl: Some(KafkaSaslFiles {
            mechanism: "SCRAM-SHA-512".into(),
            username_file: secret_file(job, "username", &env("SK_KAFKA_SASL_USERNAME")),
            password_file: secret_file(job, "password", password),
        }),
    };
}

#[tokio::test(flavor = "multi_thread")]
async fn sasl_scram_over_tls() {
    let mut job = job("sasl-ssl").await;
    use_scram_over_tls(&mut job, &env("SK_KAFKA_SASL_PASSWORD"));
    run_and_check(&job);
}

#[tokio::test(flavor = "multi_thread")]
async fn mutual_tls_with_a_client_certificate() {
    let mut job = job("mtls").await;
    job.config.kafka.bootstrap_servers = env("SK_KAFKA_MTLS_BOOTSTRAP");
    job.config.kafka.security = KafkaSecurity {
        tls: Some(KafkaTlsFiles {
            ca_file: Some(env("SK_KAFKA_CA_PEM").into()),
            cert_file: Some(env("SK_KAFKA_CLIENT_CERT_PEM").into()),
            key_file: Some(env("SK_KAFKA_CLIENT_KEY_PEM").into()),
        }),
        sasl: None,
    };
    run_and_check(&job);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_wrong_password_keeps_the_worker_unready_and_says_why() {
    let mut job = job("sasl-wrong").await;
    use_scram_over_tls(&mut job, "not-the-password");
    let address = format!("127.0.0.1:{}", free_port());
    let mut worker = job.start_listening(&address);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !worker
        .log()
        .to_lowercase()
        .contains("authentication failed")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "no authentication failure logged:\n{}",
            worker.log()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    assert_eq!(http_get(&address, "/healthz").map(|(s, _)| s), Some(200));
    assert_ne!(http_get(&address, "/readyz").map(|(s, _)| s), Some(200));
    assert!(job.committed_offsets().values().all(|o| *o <= 0));
    worker.kill9();
}
