//! Support for the operator's integration tests: a namespace per test with the CRD installed and
//! an S3 credentials Secret, a unique input topic on the real broker, a job spec pointing at the
//! real Kafka and S3, and a way to run one reconcile in-process.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../support/mod.rs"]
pub mod support;

pub mod cards;
pub mod checkpoints;
pub mod failover;
pub mod owner_records;
pub mod process;

use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::Client;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::events::Reporter;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use streamkeeper::api::StatefulStreamJob;
use streamkeeper::controller::reconcile::reconcile;
use streamkeeper::controller::{Context, ReconcileError, Settings};
use streamkeeper::telemetry::metrics::Metrics;

pub const TIMEOUT: Duration = Duration::from_secs(30);

/// The Prometheus text served on `address` (`/metrics`), read off the async runtime; `None`
/// while nothing answers 200 there.
pub async fn metrics_text(address: &str) -> Option<String> {
    let address = address.to_string();
    let answer = tokio::task::spawn_blocking(move || support::http_get(&address, "/metrics"))
        .await
        .ok()??;
    (answer.0 == 200).then_some(answer.1)
}

/// Merges `spec` into job `name`'s spec.
pub async fn patch_spec(jobs: &Api<StatefulStreamJob>, name: &str, spec: serde_json::Value) {
    jobs.patch(
        name,
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(serde_json::json!({ "spec": spec })),
    )
    .await
    .expect("spec patched");
}

/// The job's condition of `type_`; panics naming the conditions there are when it is missing.
pub fn condition<'a>(
    job: &'a StatefulStreamJob,
    type_: &str,
) -> &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
    let status = job.status.as_ref().expect("status written");
    streamkeeper::controller::judge::conditions::find(&status.conditions, type_)
        .unwrap_or_else(|| panic!("condition {type_} missing: {:#?}", status.conditions))
}
pub const S3_SECRET: &str = "s3-credentials";

pub async fn client() -> Client {
    support::kube_client().await
}

/// A fresh namespace with the CRD installed and the S3 credentials Secret.
pub async fn namespace(client: &Client, prefix: &str) -> String {
    support::install_crd(client).await;
    let name = support::unique_name(prefix);
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let namespace: Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).unwrap();
    namespaces
        .create(&PostParams::default(), &namespace)
        .await
        .expect("namespace created");
    let s3 = support::s3_settings();
    let secret: Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": S3_SECRET},
        "stringData": {"AWS_ACCESS_KEY_ID": s3.access_key, "AWS_SECRET_ACCESS_KEY": s3.secret_key}
    }))
    .unwrap();
    Api::<Secret>::namespaced(client.clone(), &name)
        .create(&PostParams::default(), &secret)
        .await
        .expect("secret created");
    name
}

/// One test's own namespace, input topic and S3 prefix.
pub struct Setup {
    pub client: Client,
    pub namespace: String,
    pub jobs: Api<StatefulStreamJob>,
    pub input: String,
    pub prefix: String,
}

/// A namespace, a 3-partition input topic with `input_config`, and an S3 prefix of their own.
pub async fn setup(prefix: &str, input_config: &[(&str, &str)]) -> Setup {
    let client = client().await;
    let namespace = namespace(&client, prefix).await;
    let input = support::unique_name(&format!("{prefix}-in"));
    create_topic(&input, 3, input_config).await;
    let jobs = Api::namespaced(client.clone(), &namespace);
    Setup {
        client,
        prefix: support::unique_name(prefix),
        namespace,
        jobs,
        input,
    }
}

pub async fn delete_namespace(client: &Client, name: &str) {
    let _ = Api::<Namespace>::all(client.clone())
        .delete(name, &DeleteParams::default())
        .await;
}

pub fn admin() -> AdminClient<DefaultClientContext> {
    ClientConfig::new()
        .set("bootstrap.servers", support::kafka_bootstrap())
        .create()
        .expect("admin client")
}

/// Creates `name` with `partitions` and `config`, retrying while the broker is busy.
pub async fn create_topic(name: &str, partitions: i32, config: &[(&str, &str)]) {
    let mut topic = NewTopic::new(name, partitions, TopicReplication::Fixed(1));
    for (key, value) in config {
        topic = topic.set(key, value);
    }
    let admin = admin();
    for attempt in 0.. {
        let result = admin
            .create_topics(
                [&topic],
                &AdminOptions::new().operation_timeout(Some(TIMEOUT)),
            )
            .await;
        match result {
            Ok(results) => {
                for result in results {
                    result.unwrap_or_else(|(topic, code)| panic!("creating {topic}: {code}"));
                }
                // The controller answers before every broker's metadata shows the topic: a
                // reconcile right after would find its input missing.
                support::wait_until(&format!("{name} in the metadata"), TIMEOUT, async || {
                    let metadata = admin.inner().fetch_metadata(Some(name), TIMEOUT).ok()?;
                    let topic = metadata.topics().iter().find(|t| t.name() == name)?;
                    let listed = i32::try_from(topic.partitions().len()).ok()?;
                    (topic.error().is_none() && listed == partitions).then_some(())
                })
                .await;
                return;
            }
            Err(error) if attempt < 5 => {
                eprintln!("create_topics failed ({error}), retrying");
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
            Err(error) => panic!("create_topics: {error}"),
        }
    }
}

/// Partition count and configs of `topic`, or `None` when it does not exist.
pub async fn describe_topic(topic: &str) -> Option<(usize, BTreeMap<String, String>)> {
    let admin = admin();
    let name = topic.to_string();
    let metadata = tokio::task::spawn_blocking(move || {
        let admin = admin;
        let metadata = admin
            .inner()
            .fetch_metadata(Some(&name), TIMEOUT)
            .expect("metadata");
        (admin, metadata)
    })
    .await
    .unwrap();
    let (admin, metadata) = metadata;
    let found = metadata.topics().iter().find(|t| t.name() == topic)?;
    if found.error().is_some() {
        return None;
    }
    let partitions = found.partitions().len();
    let mut config = BTreeMap::new();
    for entry in support::topic_configs(&admin, topic).await.entries {
        if let Some(value) = entry.value {
            config.insert(entry.name, value);
        }
    }
    Some((partitions, config))
}

pub fn s3_client() -> aws_sdk_s3::Client {
    support::s3_client(&support::s3_settings())
}

/// A job named `name` reading `input_topic`, with checkpoints under `prefix` in the test bucket.
/// [`job`] with `spec.processor` a join keyed by `key_field`, timed by `ts`, of `join` (the
/// `spec.processor.join` object).
pub fn join_job(
    name: &str,
    input_topic: &str,
    prefix: &str,
    key_field: &str,
    join: serde_json::Value,
) -> StatefulStreamJob {
    let mut job = job(name, input_topic, prefix);
    job.spec.processor = serde_json::from_value(serde_json::json!({
        "type": "join",
        "keyField": key_field,
        "timeField": "ts",
        "join": join,
    }))
    .unwrap();
    job
}

pub fn job(name: &str, input_topic: &str, prefix: &str) -> StatefulStreamJob {
    let s3 = support::s3_settings();
    serde_json::from_value(serde_json::json!({
        "apiVersion": "streamkeeper.dev/v1alpha1",
        "kind": "StatefulStreamJob",
        "metadata": {"name": name},
        "spec": {
            "image": "streamkeeper/worker:test",
            "replicas": 2,
            "kafka": {
                "bootstrapServers": support::kafka_bootstrap(),
                "inputTopic": input_topic,
                "outputTopic": format!("{input_topic}-out"),
            },
            "processor": {"type": "count", "keyField": "card"},
            "checkpoint": {
                "interval": "30s",
                "s3": {
                    "bucket": s3.bucket,
                    "prefix": prefix,
                    "endpoint": s3.endpoint,
                    "region": s3.region,
                    "pathStyle": true,
                    "credentialsSecret": {"name": S3_SECRET},
                },
            },
        }
    }))
    .unwrap()
}

/// The cluster id of the in-process operators' contexts (the binary reads kube-system's uid).
pub const TEST_CLUSTER_ID: &str = "streamkeeper-tests";

/// A context like the binary's, for reconciling in-process.
pub fn context(client: &Client) -> Arc<Context> {
    context_in_cluster(client, None)
}

/// [`context`] of an operator started with `--cluster-name <cluster>`.
pub fn context_in_cluster(client: &Client, cluster: Option<&str>) -> Arc<Context> {
    let reporter = Reporter {
        controller: "streamkeeper-operator".into(),
        instance: Some("integration-test".into()),
    };
    Arc::new(Context::new(
        client.clone(),
        reporter,
        Arc::new(Metrics::new()),
        Settings {
            final_checkpoint_timeout: Duration::from_secs(3),
            cluster: cluster.map(str::to_string),
            cluster_id: Some(TEST_CLUSTER_ID.into()),
        },
    ))
}

/// Reads the job fresh and runs one reconcile (twice when the first only adds the finalizer).
pub async fn reconcile_once(
    ctx: &Arc<Context>,
    jobs: &Api<StatefulStreamJob>,
    name: &str,
) -> Result<Action, ReconcileError> {
    let job = jobs.get(name).await.expect("job readable");
    let had_finalizer = !job
        .metadata
        .finalizers
        .clone()
        .unwrap_or_default()
        .is_empty();
    let result = reconcile(Arc::new(job), Arc::clone(ctx)).await;
    if had_finalizer || result.is_err() {
        return result;
    }
    let job = jobs.get(name).await.expect("job readable");
    reconcile(Arc::new(job), Arc::clone(ctx)).await
}

/// How long to wait for the StatefulSet controller (slow when the shared control plane is busy).
pub const CONTROLLER_TIMEOUT: Duration = Duration::from_secs(120);

/// Reconciles until `done` holds for the job, for at most [`CONTROLLER_TIMEOUT`].
pub async fn reconcile_until(
    ctx: &Arc<Context>,
    jobs: &Api<StatefulStreamJob>,
    name: &str,
    what: &str,
    mut done: impl AsyncFnMut() -> bool,
) {
    let deadline = tokio::time::Instant::now() + CONTROLLER_TIMEOUT;
    loop {
        reconcile_once(ctx, jobs, name)
            .await
            .unwrap_or_else(|e| panic!("reconcile failed while waiting for {what}: {e}"));
        if done().await {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
