//! Smoke test of the real Kubernetes control plane (tests/services/kube.sh): the CRD installs,
//! the apiserver refuses the invalid example naming every bad field and accepts the valid ones,
//! and the StatefulSet controller creates Pods and PVCs from a StatefulSet.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

mod support;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Namespace, PersistentVolumeClaim, Pod};
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use std::time::Duration;
use streamkeeper::api::StatefulStreamJob;

async fn temporary_namespace(client: &Client, prefix: &str) -> String {
    let name = support::unique_name(prefix);
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let namespace: Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).unwrap();
    namespaces
        .create(&PostParams::default(), &namespace)
        .await
        .expect("namespace created");
    name
}

fn example(name: &str) -> StatefulStreamJob {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples")
        .join(name);
    serde_yaml_ng::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[tokio::test]
async fn apiserver_validates_stateful_stream_jobs() {
    let client = support::kube_client().await;
    support::install_crd(&client).await;
    let namespace = temporary_namespace(&client, "crd-validation").await;
    let jobs: Api<StatefulStreamJob> = Api::namespaced(client.clone(), &namespace);

    for name in ["card-count.yaml", "device-hourly-mean.yaml", "dedup.yaml"] {
        let created = jobs
            .create(&PostParams::default(), &example(name))
            .await
            .unwrap_or_else(|e| panic!("{name} must be accepted: {e}"));
        // Defaults are applied by the apiserver from the schema.
        assert_eq!(created.spec.kafka.commit_max_records, 10_000, "{name}");
    }

    let error = jobs
        .create(&PostParams::default(), &example("invalid.yaml"))
        .await
        .expect_err("the invalid example must be refused");
    let kube::Error::Api(status) = error else {
        panic!("expected an API refusal, got {error:?}");
    };
    assert_eq!(status.code, 422, "{status:?}");
    for field in [
        "spec.standbyReplicas",
        "spec.checkpoint.interval",
        "spec.processor.timeField",
        "spec.processor.aggregate.window.advance",
    ] {
        assert!(
            status.message.contains(field),
            "the refusal names {field}: {}",
            status.message
        );
    }

    // A single bad field is refused on its own, with the rule's message.
    let mut bad_topic = example("card-count.yaml");
    bad_topic.metadata.name = Some("bad-topic".into());
    bad_topic.spec.kafka.input_topic = "not a topic!".into();
    let error = jobs
        .create(&PostParams::default(), &bad_topic)
        .await
        .expect_err("a topic name with spaces must be refused");
    assert!(
        error.to_string().contains("spec.kafka.inputTopic"),
        "{error}"
    );

    // The processor and the input topic are immutable; other fields stay editable.
    let mut job = jobs.get("card-count").await.unwrap();
    job.spec.replicas += 1;
    let job = jobs
        .replace("card-count", &PostParams::default(), &job)
        .await
        .expect("replicas may change");
    for (field, change) in [
        (
            "spec.processor is immutable",
            Box::new(|job: &mut StatefulStreamJob| job.spec.processor.key_field = "other".into())
                as Box<dyn Fn(&mut StatefulStreamJob)>,
        ),
        (
            "spec.kafka.inputTopic is immutable",
            Box::new(|job: &mut StatefulStreamJob| {
                job.spec.kafka.input_topic = "other-input".into()
            }),
        ),
    ] {
        let mut changed = job.clone();
        change(&mut changed);
        let error = jobs
            .replace("card-count", &PostParams::default(), &changed)
            .await
            .expect_err("an immutable field must not change");
        assert!(error.to_string().contains(field), "{error}");
    }
    wasm_module_is_the_processor_change_allowed(&jobs).await;

    Api::<Namespace>::all(client)
        .delete(&namespace, &DeleteParams::default())
        .await
        .expect("namespace deleted");
}

/// A WebAssembly processor's module, limits and `readsStateOf` may change (a new build the
/// worker judges against the state); its config and key field may not.
async fn wasm_module_is_the_processor_change_allowed(jobs: &Api<StatefulStreamJob>) {
    let mut job = example("card-count.yaml");
    job.metadata.name = Some("velocity".into());
    job.spec.processor = serde_json::from_value(serde_json::json!({
        "type": "wasm",
        "keyField": "card",
        "timeField": "ts",
        "wasm": {
            "module": {"key": "guests/velocity.wasm", "sha256": "a".repeat(64)},
            "config": {"maxTransactions": 3, "windowMinutes": 10}
        }
    }))
    .unwrap();
    let mut both = job.clone();
    both.metadata.name = Some("velocity-both".into());
    both.spec.processor.wasm.as_mut().unwrap().module.config_map =
        serde_json::from_value(serde_json::json!({"name": "guests", "key": "velocity.wasm"}))
            .unwrap();
    let error = jobs
        .create(&PostParams::default(), &both)
        .await
        .expect_err("a module is an S3 key or a ConfigMap's");
    assert!(
        error.to_string().contains("an S3 key or a configMap"),
        "{error}"
    );
    let job = jobs
        .create(&PostParams::default(), &job)
        .await
        .expect("a wasm job is accepted");
    let mut upgraded = job.clone();
    let wasm = upgraded.spec.processor.wasm.as_mut().unwrap();
    wasm.module.sha256 = "b".repeat(64);
    wasm.module.key = Some("guests/velocity-2.wasm".into());
    wasm.reads_state_of = Some(vec!["a".repeat(64)]);
    let upgraded = jobs
        .replace("velocity", &PostParams::default(), &upgraded)
        .await
        .expect("a new build of the module may replace the old");
    let bad_digest = {
        let mut changed = upgraded.clone();
        changed.spec.processor.wasm.as_mut().unwrap().reads_state_of = Some(vec!["B".into()]);
        changed
    };
    let error = jobs
        .replace("velocity", &PostParams::default(), &bad_digest)
        .await
        .expect_err("readsStateOf holds digests");
    assert!(error.to_string().contains("readsStateOf"), "{error}");
    for change in [
        Box::new(|job: &mut StatefulStreamJob| {
            job.spec.processor.wasm.as_mut().unwrap().config =
                serde_json::from_value(serde_json::json!({"maxTransactions": 4})).unwrap()
        }) as Box<dyn Fn(&mut StatefulStreamJob)>,
        Box::new(|job: &mut StatefulStreamJob| job.spec.processor.key_field = "user".into()),
        Box::new(|job: &mut StatefulStreamJob| job.spec.processor.time_field = None),
    ] {
        let mut changed = upgraded.clone();
        change(&mut changed);
        let error = jobs
            .replace("velocity", &PostParams::default(), &changed)
            .await
            .expect_err("a wasm processor's config and fields are immutable");
        assert!(
            error.to_string().contains("spec.processor is immutable"),
            "{error}"
        );
    }
}

#[tokio::test]
async fn statefulset_controller_creates_pods_and_claims() {
    let client = support::kube_client().await;
    let namespace = temporary_namespace(&client, "sts-smoke").await;
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), &namespace);
    let set: StatefulSet = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "smoke"},
        "spec": {
            "replicas": 2,
            "serviceName": "smoke",
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": {"app": "smoke"}},
            "template": {
                "metadata": {"labels": {"app": "smoke"}},
                "spec": {"containers": [{
                    "name": "worker",
                    "image": "streamkeeper/worker:test",
                    "volumeMounts": [{"name": "state", "mountPath": "/var/lib/streamkeeper"}]
                }]}
            },
            "volumeClaimTemplates": [{
                "metadata": {"name": "state"},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
            }]
        }
    }))
    .unwrap();
    sets.create(&PostParams::default(), &set)
        .await
        .expect("StatefulSet created");

    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &namespace);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let (pod_names, claim_names) = loop {
        let pod_names = names(pods.list(&ListParams::default()).await.unwrap().items);
        let claim_names = names(claims.list(&ListParams::default()).await.unwrap().items);
        if pod_names.len() == 2 && claim_names.len() == 2 {
            break (pod_names, claim_names);
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the StatefulSet controller did not create 2 pods and 2 claims within 60 s: pods {pod_names:?}, claims {claim_names:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert_eq!(pod_names, vec!["smoke-0", "smoke-1"]);
    assert_eq!(claim_names, vec!["state-smoke-0", "state-smoke-1"]);
    let pod = pods.get("smoke-1").await.unwrap();
    let volume_claim = pod.spec.unwrap().volumes.unwrap()[0]
        .persistent_volume_claim
        .clone()
        .unwrap();
    assert_eq!(
        volume_claim.claim_name, "state-smoke-1",
        "same pod, same claim"
    );

    Api::<Namespace>::all(client)
        .delete(&namespace, &DeleteParams::default())
        .await
        .expect("namespace deleted");
}

fn names<K: kube::Resource>(items: Vec<K>) -> Vec<String> {
    let mut names: Vec<String> = items.iter().filter_map(|i| i.meta().name.clone()).collect();
    names.sort();
    names
}
