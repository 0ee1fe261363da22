//! Validation against the real kube-apiserver: what the CRD refuses at `kubectl apply` (the
//! operator's own check refuses the same, naming the same field), which fields are immutable,
//! and a spec only the operator can judge, which gets the `Invalid` condition and starts nothing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

mod operator_support;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use operator_support::{support, *};
use streamkeeper::api::{KafkaSaslSpec, KafkaTlsSpec, SaslMechanism, StatefulStreamJob};
use streamkeeper::controller::judge::conditions;
use streamkeeper::controller::validate;

type Edit = Box<dyn Fn(&mut StatefulStreamJob)>;

/// A valid job (the shared test job) in `namespace`, changed by `edit`.
fn job_with(namespace: &str, edit: impl Fn(&mut StatefulStreamJob)) -> StatefulStreamJob {
    let mut job = job("valid", "cards", "validation");
    job.metadata.namespace = Some(namespace.into());
    edit(&mut job);
    job
}

fn hopping(job: &mut StatefulStreamJob, size: &str, advance: &str, grace: &str) {
    job.spec.processor = serde_json::from_value(serde_json::json!({
        "type": "aggregate",
        "keyField": "card",
        "timeField": "ts",
        "aggregate": {
            "valueField": "amount",
            "window": {"type": "hopping", "size": size, "advance": advance, "grace": grace},
        },
    }))
    .unwrap();
}

/// A join of the test job's input with `cards`, `join` being the spec's `processor.join`.
fn joined(job: &mut StatefulStreamJob, join: serde_json::Value) {
    job.spec.processor = serde_json::from_value(serde_json::json!({
        "type": "join",
        "keyField": "card",
        "timeField": "ts",
        "join": join,
    }))
    .unwrap();
}

fn plain_sasl() -> KafkaSaslSpec {
    KafkaSaslSpec {
        mechanism: SaslMechanism::Plain,
        secret_name: "kafka-user".into(),
        username_key: "username".into(),
        password_key: "password".into(),
    }
}

/// The apiserver's answer to creating `job`: the refusal's message, or `None` when created.
async fn create(jobs: &Api<StatefulStreamJob>, job: &StatefulStreamJob) -> Option<String> {
    match jobs.create(&PostParams::default(), job).await {
        Ok(_) => None,
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 422, "{status:?}");
            Some(status.message)
        }
        Err(error) => panic!("expected an API answer, got {error:?}"),
    }
}

#[tokio::test]
async fn the_apiserver_refuses_what_the_operator_and_worker_refuse_naming_the_field() {
    let client = client().await;
    let namespace = namespace(&client, "crd-rules").await;
    let jobs: Api<StatefulStreamJob> = Api::namespaced(client.clone(), &namespace);
    let cases: Vec<(&str, Edit)> = vec![
        (
            "metadata.name",
            Box::new(|job| job.metadata.name = Some(format!("a{}", "b".repeat(59)))),
        ),
        (
            "spec.kafka.outputTopic",
            Box::new(|job| job.spec.kafka.output_topic = job.spec.kafka.input_topic.clone()),
        ),
        (
            "spec.kafka.changelogTopic",
            Box::new(|job| {
                job.spec.kafka.changelog_topic = Some(job.spec.kafka.output_topic.clone())
            }),
        ),
        (
            "spec.checkpoint.s3.bucket",
            Box::new(|job| job.spec.checkpoint.s3.bucket = "UPPER_case".into()),
        ),
        (
            "spec.checkpoint.s3.bucket",
            Box::new(|job| job.spec.checkpoint.s3.bucket = "two..dots".into()),
        ),
        (
            "spec.kafka.sasl.mechanism",
            Box::new(|job| job.spec.kafka.sasl = Some(plain_sasl())),
        ),
        (
            "spec.processor.aggregate.window.advance",
            Box::new(|job| hopping(job, "1h", "500us", "0s")),
        ),
        (
            "spec.processor.aggregate.window.size",
            Box::new(|job| hopping(job, "1500us", "1500us", "0s")),
        ),
        (
            "spec.processor.aggregate.window.grace",
            Box::new(|job| hopping(job, "1h", "10m", "168h1ms")),
        ),
        (
            "spec.processor.aggregate.window.grace",
            Box::new(|job| hopping(job, "1h", "10m", "1.0005s")),
        ),
        (
            "spec.processor.join.window",
            Box::new(|job| {
                joined(
                    job,
                    serde_json::json!({
                        "kind": "table", "right": {"topic": "cards-table"}, "history": "1h",
                        "window": {"before": "1s", "after": "1s"},
                    }),
                )
            }),
        ),
        (
            "spec.processor.join.mode",
            Box::new(|job| {
                joined(
                    job,
                    serde_json::json!({
                        "kind": "table", "mode": "outer", "right": {"topic": "cards-table"},
                        "history": "1h",
                    }),
                )
            }),
        ),
        (
            "spec.processor.join.window",
            Box::new(|job| {
                joined(
                    job,
                    serde_json::json!({
                        "kind": "stream",
                        "right": {"topic": "clicks", "keyField": "card", "timeField": "ts"},
                    }),
                )
            }),
        ),
        (
            "spec.processor.join.window.grace",
            Box::new(|job| {
                joined(
                    job,
                    serde_json::json!({
                        "kind": "stream",
                        "right": {"topic": "clicks", "keyField": "card", "timeField": "ts"},
                        "window": {"before": "1s", "after": "0s", "grace": "168h1ms"},
                    }),
                )
            }),
        ),
    ];
    for (index, (field, edit)) in cases.iter().enumerate() {
        let mut job = job_with(&namespace, edit);
        if *field != "metadata.name" {
            job.metadata.name = Some(format!("refused-{index}"));
        }
        let message = create(&jobs, &job)
            .await
            .unwrap_or_else(|| panic!("the apiserver must refuse case {index} ({field})"));
        assert!(message.contains(field), "case {index}: {message}");
        // The operator's check (the contract's rules) refuses it too, naming the same field.
        job.metadata.uid = Some("00000000-0000-0000-0000-000000000000".into());
        let error = validate::validate(&job, None).expect_err("the operator refuses it too");
        assert_eq!(error.field(), *field, "case {index}: {error}");
    }

    // The limits themselves are accepted: a 52-character name, whole milliseconds, PLAIN in TLS.
    let accepted: Vec<Edit> = vec![
        Box::new(|job| job.metadata.name = Some(format!("a{}", "b".repeat(51)))),
        Box::new(|job| {
            job.metadata.name = Some("plain-in-tls".into());
            job.spec.kafka.sasl = Some(plain_sasl());
            job.spec.kafka.tls = Some(KafkaTlsSpec {
                ca: None,
                certificate: None,
                private_key: None,
            });
        }),
        Box::new(|job| {
            job.metadata.name = Some("windowed".into());
            hopping(job, "1h", "3600ms", "1500ms");
        }),
        Box::new(|job| {
            job.metadata.name = Some("table-join".into());
            joined(
                job,
                serde_json::json!({
                    "kind": "table", "mode": "left", "right": {"topic": "cards-table"},
                    "history": "720h",
                }),
            );
        }),
        Box::new(|job| {
            job.metadata.name = Some("stream-join".into());
            joined(
                job,
                serde_json::json!({
                    "kind": "stream", "mode": "outer",
                    "right": {"topic": "clicks", "keyField": "card", "timeField": "ts"},
                    "window": {"before": "0s", "after": "5m", "grace": "168h"},
                    "partitioner": "crc32",
                }),
            );
        }),
    ];
    for edit in accepted {
        let job = job_with(&namespace, edit);
        if let Some(message) = create(&jobs, &job).await {
            panic!("{:?} must be accepted: {message}", job.metadata.name);
        }
    }
    delete_namespace(&client, &namespace).await;
}

#[tokio::test]
async fn storage_topics_and_checkpoint_location_are_immutable() {
    let client = client().await;
    let namespace = namespace(&client, "crd-immutable").await;
    let jobs: Api<StatefulStreamJob> = Api::namespaced(client.clone(), &namespace);
    let name = "valid";
    jobs.create(&PostParams::default(), &job_with(&namespace, |_| {}))
        .await
        .expect("the job is created");
    let changes = [
        (
            "spec.state.storageSize",
            serde_json::json!({"state": {"storageSize": "20Gi"}}),
        ),
        (
            "spec.state.storageClassName",
            serde_json::json!({"state": {"storageClassName": "fast"}}),
        ),
        (
            "spec.kafka.changelogTopic",
            serde_json::json!({"kafka": {"changelogTopic": "renamed"}}),
        ),
        (
            "spec.kafka.deadLetterTopic",
            serde_json::json!({"kafka": {"deadLetterTopic": "renamed"}}),
        ),
        (
            "spec.checkpoint.s3.bucket",
            serde_json::json!({"checkpoint": {"s3": {"bucket": "other-bucket"}}}),
        ),
        (
            "spec.checkpoint.s3.prefix",
            serde_json::json!({"checkpoint": {"s3": {"prefix": "elsewhere"}}}),
        ),
    ];
    for (field, spec) in changes {
        let error = jobs
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({ "spec": spec })),
            )
            .await
            .expect_err("an immutable field must not change");
        let message = error.to_string();
        assert!(
            message.contains(&format!("{field} is immutable")),
            "{message}"
        );
    }
    // What the operator neither owns nor keeps state in may change.
    let patched = jobs
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(
                serde_json::json!({"spec": {"replicas": 3, "kafka": {"outputTopic": "cards-v2"}}}),
            ),
        )
        .await
        .expect("replicas and the output topic may change");
    assert_eq!(patched.spec.kafka.output_topic, "cards-v2");
    delete_namespace(&client, &namespace).await;
}

#[tokio::test]
async fn a_spec_the_worker_would_refuse_is_invalid_and_starts_nothing() {
    let client = client().await;
    let namespace = namespace(&client, "op-worker-refuses").await;
    let jobs: Api<StatefulStreamJob> = Api::namespaced(client.clone(), &namespace);
    let input = support::unique_name("op-worker-refuses-in");
    create_topic(&input, 2, &[]).await;
    let name = "windows";
    // One-hour windows every 1.8 s: each record falls in 2000 windows. The CRD leaves window
    // layout to the operator; it used to allow 10,000 while the worker refuses more than 1,000.
    let mut spec = job(name, &input, &support::unique_name("op-worker-refuses"));
    hopping(&mut spec, "1h", "1800ms", "0s");
    jobs.create(&PostParams::default(), &spec).await.unwrap();
    let ctx = context(&client);
    reconcile_once(&ctx, &jobs, name).await.unwrap();

    let refused = jobs.get(name).await.unwrap();
    let status = refused.status.as_ref().expect("status written");
    let invalid = conditions::find(&status.conditions, "Invalid").expect("an Invalid condition");
    assert_eq!(invalid.status, "True", "{invalid:?}");
    assert_eq!(invalid.reason, "InvalidSpec");
    for part in [
        "spec.processor.aggregate.window.advance",
        "2000 windows",
        "1000",
    ] {
        assert!(invalid.message.contains(part), "{}", invalid.message);
    }
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), &namespace);
    assert!(
        sets.get_opt(name).await.unwrap().is_none(),
        "no StatefulSet may exist"
    );
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &namespace);
    let config_map = format!("{name}-worker-config");
    assert!(config_maps.get_opt(&config_map).await.unwrap().is_none());
    let changelog = format!("{namespace}.{name}.changelog");
    assert!(
        describe_topic(&changelog).await.is_none(),
        "no changelog may be created"
    );

    // The fix is a new job (the processor is immutable): 1000 windows per record starts.
    let fixed_name = "windows-fixed";
    let mut fixed = job(
        fixed_name,
        &input,
        &support::unique_name("op-worker-refuses"),
    );
    hopping(&mut fixed, "1h", "3600ms", "0s");
    jobs.create(&PostParams::default(), &fixed).await.unwrap();
    reconcile_once(&ctx, &jobs, fixed_name).await.unwrap();
    let started = jobs.get(fixed_name).await.unwrap();
    let invalid =
        conditions::find(&started.status.as_ref().unwrap().conditions, "Invalid").unwrap();
    assert_eq!(invalid.status, "False", "{invalid:?}");
    assert!(sets.get_opt(fixed_name).await.unwrap().is_some());
    delete_namespace(&client, &namespace).await;
}
