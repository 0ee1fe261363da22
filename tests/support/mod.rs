//! Support for the operator's integration tests: what they share with the worker's tests
//! (where the real services are, unique names, plain HTTP) comes from the test-support crate
//! (`test-tools/test-support`); what only the operator's need (the apiserver client, the CRD,
//! topic configs) is here.
// Each test crate uses some of these re-exports and helpers, none all of them.
#![allow(dead_code, unused_imports, clippy::panic, clippy::expect_used)]

pub use streamkeeper_test_support::{
    S3Settings, free_port, http_get, http_request, kafka_bootstrap, kubeconfig, required_env,
    s3_client, s3_settings, unique_name, wait_for, wait_for_or, wait_until,
};

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
