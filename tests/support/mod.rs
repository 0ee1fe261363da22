//! Test support shared by the integration tests: where the real services are.
//! The services are started by the scripts in `tests/services/`; `tests/run.sh` starts them and
//! exports these variables. A missing variable fails the test with the command that fixes it:
//! a test against a real service is never silently skipped.
#![allow(dead_code, clippy::panic)]

pub fn required_env(name: &str, started_by: &str) -> String {
    match std::env::var(name) {
        Ok(value) if !value.is_empty() => value,
        _ => panic!(
            "{name} is not set: this test needs the real service started by `{started_by} start` \
             (or run every test through `tests/run.sh`, which starts and stops the services)"
        ),
    }
}

pub fn kafka_bootstrap() -> String {
    required_env("SK_KAFKA_BOOTSTRAP", "tests/services/kafka.sh")
}

pub struct S3Settings {
    pub endpoint: String,
    pub bucket: String,
    pub region: String,
    pub access_key: String,
    pub secret_key: String,
}

pub fn s3_settings() -> S3Settings {
    let script = "tests/services/s3.sh";
    S3Settings {
        endpoint: required_env("SK_S3_ENDPOINT", script),
        bucket: required_env("SK_S3_BUCKET", script),
        region: required_env("SK_S3_REGION", script),
        access_key: required_env("SK_S3_ACCESS_KEY", script),
        secret_key: required_env("SK_S3_SECRET_KEY", script),
    }
}

pub fn kubeconfig() -> String {
    required_env("KUBECONFIG", "tests/services/kube.sh")
}

/// A name unique to this test run, for topics, namespaces and keys.
pub fn unique_name(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    format!("{prefix}-{}-{:x}", std::process::id(), nanos & 0xffff_ffff)
}
