//! A job's lifecycle through the reconcile, against the real kube-apiserver (with the
//! StatefulSet controller), Kafka and S3: suspend and resume, `restartNonce`, restores on
//! request, and deletion with `deletionPolicy` Retain or Delete (the workers stopped first, a
//! shared dead-letter topic kept). There is no kubelet: pods never run.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

mod operator_support;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use operator_support::checkpoints::{manifest, now_ms, put_manifest, put_owner_marker};
use operator_support::{support, *};
use std::time::Duration;
use streamkeeper::api::{JobPhase, StatefulStreamJob};

async fn pods(client: &Client, namespace: &str) -> Vec<Pod> {
    Api::<Pod>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
}

#[tokio::test]
async fn suspend_resume_restart_nonce_and_restore() {
    let s = setup("op-ops", &[]).await;
    let ctx = context(&s.client);
    let name = "counts";
    s.jobs
        .create(&PostParams::default(), &job(name, &s.input, &s.prefix))
        .await
        .unwrap();
    let client = s.client.clone();
    let namespace = s.namespace.clone();
    reconcile_until(&ctx, &s.jobs, name, "two worker pods", async || {
        pods(&client, &namespace).await.len() == 2
    })
    .await;
    let sets: Api<StatefulSet> = Api::namespaced(s.client.clone(), &s.namespace);

    // restartNonce: every pod is replaced (OnDelete: the operator deletes outdated pods).
    let original: Vec<String> = pods(&s.client, &s.namespace)
        .await
        .iter()
        .map(|p| p.uid().unwrap())
        .collect();
    patch_spec(&s.jobs, name, serde_json::json!({"restartNonce": "first"})).await;
    reconcile_until(
        &ctx,
        &s.jobs,
        name,
        "pods replaced after restartNonce",
        async || {
            let now = pods(&client, &namespace).await;
            now.len() == 2
                && now.iter().all(|p| {
                    !original.contains(&p.uid().unwrap())
                        && p.annotations()
                            .get("streamkeeper.dev/restart-nonce")
                            .map(String::as_str)
                            == Some("first")
                })
        },
    )
    .await;

    // restore: the request reaches the pod template and pods are replaced. No worker runs here,
    // so no task reports having applied it: the restore stays in progress and is not recorded
    // (tests/operator_workers.rs sees it through with running workers).
    patch_spec(
        &s.jobs,
        name,
        serde_json::json!({"restore": {"id": "incident-1", "checkpoint": "latest"}}),
    )
    .await;
    let jobs = s.jobs.clone();
    reconcile_until(
        &ctx,
        &s.jobs,
        name,
        "restore handed to the pods",
        async || {
            let job = jobs.get(name).await.unwrap();
            let restoring = condition(&job, "Restoring");
            let now = pods(&client, &namespace).await;
            restoring.reason == "RestoreApplying"
                && now.len() == 2
                && now.iter().all(|pod| {
                    pod.annotations()
                        .get("streamkeeper.dev/restore")
                        .is_some_and(|request| request.contains("\"id\":\"incident-1\""))
                })
        },
    )
    .await;
    let job = s.jobs.get(name).await.unwrap();
    let restoring = condition(&job, "Restoring");
    assert_eq!(restoring.status, "True");
    assert!(
        restoring.message.contains("0/3 tasks have applied it"),
        "{}",
        restoring.message
    );
    assert_eq!(job.status.as_ref().unwrap().last_restore_id, None);
    assert_eq!(
        job.status.as_ref().unwrap().ready_tasks.as_deref(),
        Some("0/3")
    );

    // suspend: scaled to zero; no worker answers here, so the condition says so.
    patch_spec(&s.jobs, name, serde_json::json!({"suspend": true})).await;
    reconcile_once(&ctx, &s.jobs, name).await.unwrap();
    let set = sets.get(name).await.unwrap();
    assert_eq!(set.spec.unwrap().replicas, Some(0));
    let job = s.jobs.get(name).await.unwrap();
    assert_eq!(
        job.status.as_ref().unwrap().phase,
        Some(JobPhase::Suspended)
    );
    let suspended = condition(&job, "Suspended");
    assert_eq!(suspended.status, "True");
    assert_eq!(suspended.reason, "FinalCheckpointIncomplete");
    assert!(
        suspended.message.contains(&format!("{name}-0")),
        "{}",
        suspended.message
    );

    // resume: the replicas come back, the volumes were kept.
    patch_spec(&s.jobs, name, serde_json::json!({"suspend": false})).await;
    reconcile_once(&ctx, &s.jobs, name).await.unwrap();
    assert_eq!(
        sets.get(name).await.unwrap().spec.unwrap().replicas,
        Some(2)
    );
    let job = s.jobs.get(name).await.unwrap();
    assert_eq!(condition(&job, "Suspended").status, "False");
    assert_ne!(job.status.unwrap().phase, Some(JobPhase::Suspended));

    delete_namespace(&s.client, &s.namespace).await;
}

async fn s3_keys(prefix: &str) -> Vec<String> {
    s3_client()
        .list_objects_v2()
        .bucket(support::s3_settings().bucket)
        .prefix(prefix)
        .send()
        .await
        .unwrap()
        .contents()
        .iter()
        .filter_map(|o| o.key().map(str::to_string))
        .collect()
}

async fn delete_and_reconcile(
    ctx: &std::sync::Arc<streamkeeper::controller::Context>,
    jobs: &Api<StatefulStreamJob>,
    name: &str,
) {
    jobs.delete(name, &DeleteParams::default()).await.unwrap();
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    while let Some(job) = jobs.get_opt(name).await.unwrap() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "job not gone after clean-up"
        );
        streamkeeper::controller::reconcile::reconcile(std::sync::Arc::new(job), ctx.clone())
            .await
            .expect("clean-up succeeds");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn deletion_retains_or_deletes_changelog_and_checkpoints() {
    let s = setup("op-delete", &[]).await;
    let ctx = context(&s.client);

    // Retain (the default): the changelog and the checkpoints stay.
    let kept = "kept";
    s.jobs
        .create(&PostParams::default(), &job(kept, &s.input, &s.prefix))
        .await
        .unwrap();
    reconcile_once(&ctx, &s.jobs, kept).await.unwrap();
    let kept_job = s.jobs.get(kept).await.unwrap();
    assert!(
        kept_job
            .finalizers()
            .contains(&"streamkeeper.dev/cleanup".to_string())
    );
    put_manifest(
        &s.prefix,
        &s.namespace,
        kept,
        &manifest(0, 1, 0, now_ms(), 0),
    )
    .await;
    delete_and_reconcile(&ctx, &s.jobs, kept).await;
    assert!(
        describe_topic(&format!("{}.{kept}.changelog", s.namespace))
            .await
            .is_some()
    );
    let kept_keys = s3_keys(&format!("{}/{}/{kept}/", s.prefix, s.namespace)).await;
    assert_eq!(kept_keys.len(), 2, "the checkpoint and the owner marker");

    // Delete: topics and every checkpoint object of the job go; another job's objects stay, also
    // one whose folder lies inside this job's.
    let gone = "gone";
    let mut spec = job(gone, &s.input, &s.prefix);
    spec.spec.deletion_policy = streamkeeper::api::DeletionPolicy::Delete;
    s.jobs.create(&PostParams::default(), &spec).await.unwrap();
    reconcile_once(&ctx, &s.jobs, gone).await.unwrap();
    for task in 0..3 {
        put_manifest(
            &s.prefix,
            &s.namespace,
            gone,
            &manifest(task, 1, 0, now_ms(), 0),
        )
        .await;
    }
    // Job `gone/nested` under the prefix `<prefix>/<namespace>`: its folder lies inside this
    // job's (the prefix is free), and it must survive this job's deletion.
    let nested_prefix = format!("{}/{}", s.prefix, s.namespace);
    put_manifest(
        &nested_prefix,
        gone,
        "nested",
        &manifest(0, 1, 0, now_ms(), 0),
    )
    .await;
    assert_eq!(
        s3_keys(&format!("{}/{}/{gone}/", s.prefix, s.namespace))
            .await
            .len(),
        5,
        "three checkpoints, the nested job's and the owner marker"
    );
    delete_and_reconcile(&ctx, &s.jobs, gone).await;
    assert!(
        describe_topic(&format!("{}.{gone}.changelog", s.namespace))
            .await
            .is_none()
    );
    assert!(
        describe_topic(&format!("{}.{gone}.dlq", s.namespace))
            .await
            .is_none()
    );
    let left = s3_keys(&format!("{}/{}/{gone}/", s.prefix, s.namespace)).await;
    assert_eq!(
        left,
        [format!(
            "{}/{}/{gone}/nested/task-0/checkpoints/00000000000000000001.json",
            s.prefix, s.namespace
        )],
        "only the nested job's checkpoint is left"
    );
    assert_eq!(
        s3_keys(&format!("{}/{}/{kept}/", s.prefix, s.namespace)).await,
        kept_keys
    );

    // Delete, but the prefix's owner marker names the same job of another cluster (two clusters
    // sharing the bucket, no cluster name): its objects are not this job's to delete.
    let shared = "shared";
    let mut spec = job(shared, &s.input, &s.prefix);
    spec.spec.deletion_policy = streamkeeper::api::DeletionPolicy::Delete;
    s.jobs.create(&PostParams::default(), &spec).await.unwrap();
    reconcile_once(&ctx, &s.jobs, shared).await.unwrap();
    put_manifest(
        &s.prefix,
        &s.namespace,
        shared,
        &manifest(0, 1, 0, now_ms(), 0),
    )
    .await;
    let shared_prefix = format!("{}/{}/{shared}/", s.prefix, s.namespace);
    put_owner_marker(
        &shared_prefix,
        &s.namespace,
        shared,
        Some("another-cluster"),
    )
    .await;
    delete_and_reconcile(&ctx, &s.jobs, shared).await;
    assert_eq!(
        s3_keys(&shared_prefix).await.len(),
        2,
        "the other cluster's checkpoint and marker stay"
    );
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(s.client.clone(), &s.namespace);
    let kept_event = events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .find(|e| e.reason.as_deref() == Some("CheckpointsKept"))
        .expect("a CheckpointsKept Event");
    let note = kept_event.note.unwrap_or_default();
    assert!(note.contains("another-cluster"), "{note}");
    assert_eq!(kept_event.type_.as_deref(), Some("Warning"));

    delete_namespace(&s.client, &s.namespace).await;
}

/// Finalizers of a pod, replaced (`None` removes them all).
async fn set_pod_finalizers(
    client: &Client,
    namespace: &str,
    pod: &str,
    finalizers: Option<&[&str]>,
) {
    Api::<Pod>::namespaced(client.clone(), namespace)
        .patch(
            pod,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"finalizers": finalizers}})),
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn delete_stops_the_workers_first_and_keeps_a_shared_dead_letter_topic() {
    let s = setup("op-shared", &[]).await;
    let ctx = context(&s.client);
    // A dead-letter topic several jobs share, which existed before this job.
    let shared = support::unique_name("op-shared-dlq");
    create_topic(&shared, 3, &[]).await;
    let name = "own";
    let mut spec = job(name, &s.input, &s.prefix);
    spec.spec.deletion_policy = streamkeeper::api::DeletionPolicy::Delete;
    spec.spec.kafka.dead_letter_topic = Some(shared.clone());
    s.jobs.create(&PostParams::default(), &spec).await.unwrap();
    let (client, namespace) = (s.client.clone(), s.namespace.clone());
    reconcile_until(&ctx, &s.jobs, name, "two worker pods", async || {
        pods(&client, &namespace).await.len() == 2
    })
    .await;
    let changelog = format!("{}.{name}.changelog", s.namespace);
    assert!(describe_topic(&changelog).await.is_some());

    // A worker pod that takes its time to stop (held by a finalizer of the test).
    let hold = "streamkeeper.dev/test-hold";
    set_pod_finalizers(&s.client, &s.namespace, "own-0", Some(&[hold])).await;
    s.jobs.delete(name, &DeleteParams::default()).await.unwrap();
    let sets: Api<StatefulSet> = Api::namespaced(s.client.clone(), &s.namespace);
    let worker_pods: Api<Pod> = Api::namespaced(s.client.clone(), &s.namespace);
    let deadline = tokio::time::Instant::now() + CONTROLLER_TIMEOUT;
    loop {
        let job = s.jobs.get(name).await.unwrap();
        streamkeeper::controller::reconcile::reconcile(std::sync::Arc::new(job), ctx.clone())
            .await
            .expect("clean-up step succeeds");
        assert!(
            describe_topic(&changelog).await.is_some(),
            "the changelog was deleted while worker pod own-0 still exists"
        );
        let scaled_to_zero = sets
            .get(name)
            .await
            .unwrap()
            .spec
            .and_then(|spec| spec.replicas)
            == Some(0);
        let stopping = worker_pods
            .get("own-0")
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_some();
        if scaled_to_zero && stopping {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the workers were not stopped"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // One more look while the pod is still there: still nothing deleted.
    let job = s.jobs.get(name).await.unwrap();
    streamkeeper::controller::reconcile::reconcile(std::sync::Arc::new(job), ctx.clone())
        .await
        .unwrap();
    assert!(describe_topic(&changelog).await.is_some());

    // The pod is gone: the clean-up runs.
    set_pod_finalizers(&s.client, &s.namespace, "own-0", None).await;
    let deadline = tokio::time::Instant::now() + CONTROLLER_TIMEOUT;
    while let Some(job) = s.jobs.get_opt(name).await.unwrap() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "job not gone after clean-up"
        );
        streamkeeper::controller::reconcile::reconcile(std::sync::Arc::new(job), ctx.clone())
            .await
            .expect("clean-up succeeds");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        describe_topic(&changelog).await.is_none(),
        "the job's own changelog is deleted"
    );
    assert!(
        describe_topic(&shared).await.is_some(),
        "the shared dead-letter topic, which the operator did not create, is kept"
    );

    delete_namespace(&s.client, &s.namespace).await;
}

#[tokio::test]
async fn a_re_keyed_join_gets_a_repartition_topic_of_the_right_topics_count_deleted_with_it() {
    // The input has 3 partitions, the card table 2: re-keyed, the job has 2 tasks.
    let s = setup("op-rekey", &[]).await;
    let ctx = context(&s.client);
    let cards = support::unique_name("op-rekey-cards");
    create_topic(&cards, 2, &[("cleanup.policy", "compact")]).await;
    let name = "enrich";
    let join = serde_json::json!({
        "kind": "table",
        "mode": "left",
        "left": {"repartition": true},
        "right": {"topic": cards, "timeField": "ts"},
        "history": "24h",
    });
    let mut spec = join_job(name, &s.input, &s.prefix, "card", join);
    spec.spec.deletion_policy = streamkeeper::api::DeletionPolicy::Delete;
    s.jobs.create(&PostParams::default(), &spec).await.unwrap();
    reconcile_once(&ctx, &s.jobs, name).await.unwrap();

    let stem = format!("{}.{name}", s.namespace);
    let repartition = format!("{stem}.left-repartition");
    let (partitions, config) = describe_topic(&repartition)
        .await
        .expect("the repartition topic exists in the broker");
    assert_eq!(partitions, 2, "the right topic's count, not the input's");
    assert_eq!(
        config["retention.ms"], "-1",
        "kept until the join purges it"
    );
    assert_eq!(config["cleanup.policy"], "delete");
    let (changelog_partitions, _) = describe_topic(&format!("{stem}.changelog")).await.unwrap();
    assert_eq!(changelog_partitions, 2, "one task per right partition");
    let status = s.jobs.get(name).await.unwrap().status.unwrap();
    assert_eq!(status.created_topics[&repartition].role, "repartition");
    assert_eq!(status.created_topics[&repartition].partitions, 2);
    assert!(
        !refused(&status),
        "3 input partitions against 2 is no refusal for a re-keyed input: {:?}",
        status.conditions
    );
    let config_maps: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(s.client.clone(), &s.namespace);
    let config_map = config_maps
        .get(&format!("{name}-worker-config"))
        .await
        .unwrap();
    let text = &config_map.data.unwrap()[streamkeeper::k8s::names::WORKER_CONFIG_KEY];
    let config =
        <streamkeeper_contract::WorkerConfig as streamkeeper_contract::Versioned>::from_yaml(text)
            .unwrap();
    assert_eq!(
        config.processor.left_repartition_topic(),
        Some(repartition.as_str())
    );
    assert_eq!(config.tasks_topic(), repartition);

    delete_and_reconcile(&ctx, &s.jobs, name).await;
    assert!(describe_topic(&repartition).await.is_none());
    delete_namespace(&s.client, &s.namespace).await;
}

#[tokio::test]
async fn a_global_table_join_needs_no_co_partitioning_and_keeps_the_inputs_task_count() {
    // The input has 3 partitions, the table 2: every task reads the whole table.
    let s = setup("op-global", &[]).await;
    let ctx = context(&s.client);
    let currencies = support::unique_name("op-global-currencies");
    create_topic(&currencies, 2, &[("cleanup.policy", "compact")]).await;
    let name = "convert";
    let join = serde_json::json!({
        "kind": "globalTable",
        "right": {"topic": currencies},
        "history": "1h",
    });
    let spec = join_job(name, &s.input, &s.prefix, "currency", join);
    s.jobs.create(&PostParams::default(), &spec).await.unwrap();
    reconcile_once(&ctx, &s.jobs, name).await.unwrap();

    let status = s.jobs.get(name).await.unwrap().status.unwrap();
    assert!(
        !refused(&status),
        "3 input partitions against a 2-partition global table is no refusal: {:?}",
        status.conditions
    );
    let changelog = format!("{}.{name}.changelog", s.namespace);
    let (partitions, _) = describe_topic(&changelog).await.unwrap();
    assert_eq!(partitions, 3, "one task per input partition");
    assert!(
        !status
            .created_topics
            .keys()
            .any(|t| t.contains("repartition")),
        "{:?}",
        status.created_topics
    );
    delete_namespace(&s.client, &s.namespace).await;
}

/// Whether the job's status says its spec is refused (`Invalid` `True`).
fn refused(status: &streamkeeper::api::status::StatefulStreamJobStatus) -> bool {
    status
        .conditions
        .iter()
        .any(|c| c.type_ == "Invalid" && c.status == "True")
}
