//! Test support shared by the integration tests: where the real services are.
//! The services are started by the scripts in `tests/services/`; `tests/run.sh` starts them and
//! exports these variables. A missing variable fails the test with the command that fixes it:
//! a test against a real service is never silently skipped.
#![allow(dead_code, clippy::panic, clippy::expect_used)]

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

/// A client of the test apiserver named by `KUBECONFIG`.
pub async fn kube_client() -> kube::Client {
    kubeconfig();
    kube::Client::try_default()
        .await
        .expect("a client from KUBECONFIG")
}

/// Applies the StatefulStreamJob CRD generated from the types and waits until it is Established.
pub async fn install_crd(client: &kube::Client) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::CustomResourceExt;
    use kube::api::{Api, Patch, PatchParams};
    use kube::runtime::wait::{await_condition, conditions};

    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = streamkeeper::api::StatefulStreamJob::crd();
    let name = crd.metadata.name.clone().expect("the CRD has a name");
    crds.patch(
        &name,
        &PatchParams::apply("streamkeeper-tests").force(),
        &Patch::Apply(&crd),
    )
    .await
    .expect("the apiserver accepts the generated CRD");
    tokio::time::timeout(
        std::time::Duration::from_secs(30),
        await_condition(crds, &name, conditions::is_crd_established()),
    )
    .await
    .expect("the CRD becomes established within 30 s")
    .expect("watching the CRD works");
}

/// An S3 client for the test server, path-style, with the test credentials.
pub fn s3_client(settings: &S3Settings) -> aws_sdk_s3::Client {
    use aws_sdk_s3::config::{BehaviorVersion, Credentials, Region};
    let config = aws_sdk_s3::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .endpoint_url(&settings.endpoint)
        .region(Region::new(settings.region.clone()))
        .force_path_style(true)
        .credentials_provider(Credentials::new(
            &settings.access_key,
            &settings.secret_key,
            None,
            None,
            "streamkeeper-tests",
        ))
        .build();
    aws_sdk_s3::Client::from_conf(config)
}

/// The configs of `topic`, asked for until the broker's metadata shows the topic: before
/// that, the broker answers with an error for it, which rust-rdkafka drops, leaving a resource
/// with no config at all (a known topic lists every config, defaults included).
pub async fn topic_configs(
    admin: &rdkafka::admin::AdminClient<rdkafka::client::DefaultClientContext>,
    topic: &str,
) -> rdkafka::admin::ConfigResource {
    use rdkafka::admin::{AdminOptions, ResourceSpecifier};
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    loop {
        let resource = admin
            .describe_configs(
                [&ResourceSpecifier::Topic(topic)],
                &AdminOptions::new().request_timeout(Some(std::time::Duration::from_secs(10))),
            )
            .await
            .expect("describe_configs")
            .into_iter()
            .next()
            .expect("one resource asked, one answered")
            .expect("topic config");
        if !resource.entries.is_empty() {
            return resource;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the broker lists no configs for {topic} after 15 s"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}
