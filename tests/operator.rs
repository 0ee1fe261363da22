//! The operator's reconcile against the real kube-apiserver (with the StatefulSet controller),
//! the real Kafka broker and the real S3 server. Each test has its own namespace, topics and S3
//! prefix. Reconciles run in-process through the same `reconcile` the binary's Controller runs;
//! `operator_process.rs` runs the binary itself.
//!
//! There is no kubelet: pods the StatefulSet controller creates never run, so these tests check
//! objects, topics, S3 and status, not running workers.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

mod operator_support;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, Resource, ResourceExt};
use operator_support::checkpoints::{manifest, now_ms, put_manifest};
use operator_support::process::wait_for;
use operator_support::{support, *};
use std::time::Duration;
use streamkeeper::api::{JobPhase, StatefulStreamJob};
use streamkeeper::controller::{Facts, build, validate};
use streamkeeper_contract::Versioned;

async fn resource_versions(client: &Client, namespace: &str, job: &str) -> Vec<(String, String)> {
    async fn one<K>(client: &Client, namespace: &str, name: &str) -> (String, String)
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
    {
        let api: Api<K> = Api::namespaced(client.clone(), namespace);
        let object = api
            .get(name)
            .await
            .unwrap_or_else(|e| panic!("{} {name}: {e}", K::kind(&())));
        (
            format!("{}/{name}", K::kind(&())),
            object.meta().resource_version.clone().unwrap(),
        )
    }
    vec![
        one::<StatefulStreamJob>(client, namespace, job).await,
        one::<ConfigMap>(client, namespace, &format!("{job}-worker-config")).await,
        one::<StatefulSet>(client, namespace, job).await,
        one::<Service>(client, namespace, job).await,
        one::<PodDisruptionBudget>(client, namespace, job).await,
        one::<Secret>(client, namespace, &format!("{job}-worker-token")).await,
    ]
}

/// The token in a worker token Secret, as the worker would read it.
fn worker_token_of(secret: &Secret) -> streamkeeper_contract::WorkerToken {
    let bytes = &secret.data.as_ref().expect("data")["token"].0;
    streamkeeper_contract::WorkerToken::parse(std::str::from_utf8(bytes).unwrap()).unwrap()
}

async fn patch_spec(jobs: &Api<StatefulStreamJob>, name: &str, spec: serde_json::Value) {
    jobs.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({ "spec": spec })),
    )
    .await
    .expect("spec patched");
}

#[tokio::test]
async fn apply_creates_every_object_updates_them_and_a_no_op_writes_nothing() {
    let s = setup("op-apply", &[("retention.ms", "604800000")]).await;
    let ctx = context(&s.client);
    let name = "counts";
    s.jobs
        .create(&PostParams::default(), &job(name, &s.input, &s.prefix))
        .await
        .unwrap();
    reconcile_once(&ctx, &s.jobs, name).await.unwrap();

    // Every object exists with the fields the pure builders produce.
    let stored = s.jobs.get(name).await.unwrap();
    let desired = build(
        &validate(&stored).unwrap(),
        &Facts {
            input_partitions: 3,
            pods_kept: None,
        },
    );
    let config_maps: Api<ConfigMap> = Api::namespaced(s.client.clone(), &s.namespace);
    let config_map = config_maps
        .get(&format!("{name}-worker-config"))
        .await
        .unwrap();
    assert_eq!(config_map.data, desired.config_map.data);
    assert_eq!(
        config_map.owner_references(),
        desired.config_map.owner_references()
    );
    let sets: Api<StatefulSet> = Api::namespaced(s.client.clone(), &s.namespace);
    let set = sets.get(name).await.unwrap();
    let spec = set.spec.clone().unwrap();
    let want = desired.stateful_set.spec.clone().unwrap();
    assert_eq!(spec.replicas, Some(2));
    assert_eq!(spec.update_strategy, want.update_strategy);
    assert_eq!(spec.selector, want.selector);
    assert_eq!(spec.service_name, want.service_name);
    assert_eq!(
        spec.template.metadata.clone().unwrap().annotations,
        want.template.metadata.clone().unwrap().annotations
    );
    let container = &spec.template.spec.clone().unwrap().containers[0];
    let want_container = &want.template.spec.clone().unwrap().containers[0];
    assert_eq!(container.image, want_container.image);
    assert_eq!(container.args, want_container.args);
    assert_eq!(container.security_context, want_container.security_context);
    // The apiserver defaults `fieldRef.apiVersion`; names and values must be the builders'.
    let env_names = |c: &k8s_openapi::api::core::v1::Container| {
        c.env
            .clone()
            .unwrap_or_default()
            .into_iter()
            .map(|e| (e.name, e.value))
            .collect::<Vec<_>>()
    };
    assert_eq!(env_names(container), env_names(want_container));
    let services: Api<Service> = Api::namespaced(s.client.clone(), &s.namespace);
    let service = services.get(name).await.unwrap();
    assert_eq!(service.spec.unwrap().cluster_ip.as_deref(), Some("None"));
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(s.client.clone(), &s.namespace);
    assert_eq!(
        pdbs.get(name).await.unwrap().spec.unwrap().max_unavailable,
        desired
            .pod_disruption_budget
            .spec
            .clone()
            .unwrap()
            .max_unavailable
    );
    // Least privilege: the workers use no Kubernetes API, so they get no ServiceAccount, Role or
    // RoleBinding of their own, and their pods (as the apiserver stored them) no API token. This
    // apiserver runs without the ServiceAccount admission plugin, so what keeps a cluster's from
    // injecting a token volume is `automountServiceAccountToken: false`; operator_workers.rs
    // checks that the local node agent, honouring it as a kubelet does, gives the pods none.
    let roles: Api<Role> = Api::namespaced(s.client.clone(), &s.namespace);
    assert!(
        roles
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    let bindings: Api<RoleBinding> = Api::namespaced(s.client.clone(), &s.namespace);
    assert!(
        bindings
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    let accounts: Api<ServiceAccount> = Api::namespaced(s.client.clone(), &s.namespace);
    assert!(
        accounts
            .get_opt(&format!("{name}-worker"))
            .await
            .unwrap()
            .is_none()
    );
    let pods: Api<Pod> = Api::namespaced(s.client.clone(), &s.namespace);
    let admitted = wait_for("the StatefulSet's pods", TIMEOUT, async || {
        let list = pods.list(&ListParams::default()).await.ok()?;
        (list.items.len() == 2).then_some(list.items)
    })
    .await;
    for pod in &admitted {
        let spec = pod.spec.clone().unwrap();
        assert_eq!(spec.automount_service_account_token, Some(false));
        assert_eq!(spec.service_account_name, None);
        let volumes = spec.volumes.unwrap_or_default();
        assert!(
            !volumes
                .iter()
                .any(|v| v.name.starts_with("kube-api-access")),
            "{} has a service-account token volume: {volumes:?}",
            pod.name_any()
        );
        let token_volume = volumes.iter().find(|v| v.name == "worker-token").unwrap();
        assert_eq!(
            token_volume.secret.as_ref().unwrap().secret_name.as_deref(),
            Some(format!("{name}-worker-token").as_str())
        );
        let mounts = spec.containers[0].volume_mounts.clone().unwrap_or_default();
        assert!(
            !mounts
                .iter()
                .any(|m| m.mount_path.starts_with("/var/run/secrets/kubernetes.io")),
            "{mounts:?}"
        );
    }
    // The worker token: in a Secret the job owns, usable, and where the worker config points.
    let secrets: Api<Secret> = Api::namespaced(s.client.clone(), &s.namespace);
    let secret = secrets.get(&format!("{name}-worker-token")).await.unwrap();
    assert_eq!(
        secret.owner_references(),
        desired.worker_token.owner_references()
    );
    let token = worker_token_of(&secret);
    let config: streamkeeper_contract::WorkerConfig =
        streamkeeper_contract::WorkerConfig::from_yaml(
            &config_map.data.clone().unwrap()["worker.yaml"],
        )
        .unwrap();
    assert_eq!(
        config.http.token_file.as_deref(),
        Some(std::path::Path::new("/etc/streamkeeper/http/token"))
    );

    // The changelog exists, compacted, one partition per input partition; the DLQ too.
    let changelog = format!("{}.{name}.changelog", s.namespace);
    let (partitions, config) = describe_topic(&changelog).await.expect("changelog created");
    assert_eq!(partitions, 3);
    assert_eq!(
        config.get("cleanup.policy").map(String::as_str),
        Some("compact")
    );
    assert_eq!(
        config.get("delete.retention.ms").map(String::as_str),
        Some("86400000")
    );
    let (dlq_partitions, _) = describe_topic(&format!("{}.{name}.dlq", s.namespace))
        .await
        .expect("dead-letter topic created");
    assert_eq!(dlq_partitions, 3);

    // Status: conditions with reasons, retention figures, observedGeneration.
    let job = s.jobs.get(name).await.unwrap();
    let status = job.status.clone().unwrap();
    assert_eq!(status.observed_generation, job.metadata.generation);
    assert_eq!(
        status.phase,
        Some(JobPhase::Pending),
        "no kubelet: pods never get ready"
    );
    assert_eq!(condition(&job, "ChangelogReady").status, "True");
    assert_eq!(condition(&job, "Invalid").status, "False");
    let retention_safe = condition(&job, "RetentionSafe");
    assert_eq!(retention_safe.status, "True");
    assert!(
        retention_safe.message.contains("168h"),
        "{}",
        retention_safe.message
    );
    assert_eq!(condition(&job, "CheckpointStale").reason, "NoCheckpointYet");
    let retention = status.retention.unwrap();
    assert_eq!(retention.input_retention_ms, Some(604_800_000));
    assert_eq!(retention.max_safe_checkpoint_age_seconds, Some(302_400));
    assert_eq!(retention.changelog_delete_retention_ms, Some(86_400_000));
    assert_eq!(status.tasks.len(), 3);

    // A second reconcile with nothing changed writes nothing: every resourceVersion stays.
    let before = resource_versions(&s.client, &s.namespace, name).await;
    // The StatefulSet controller writes the StatefulSet's status on its own: wait until it has
    // seen this generation and created every pod, so its writes do not count as ours.
    let sets: Api<StatefulSet> = Api::namespaced(s.client.clone(), &s.namespace);
    wait_for(
        "the StatefulSet controller to settle",
        TIMEOUT,
        async || {
            let set = sets.get(name).await.ok()?;
            let status = set.status.as_ref()?;
            let wanted = set.spec.as_ref()?.replicas?;
            (status.observed_generation == set.metadata.generation && status.replicas == wanted)
                .then_some(())
        },
    )
    .await;
    reconcile_once(&ctx, &s.jobs, name).await.unwrap();
    let settled = resource_versions(&s.client, &s.namespace, name).await;
    reconcile_once(&ctx, &s.jobs, name).await.unwrap();
    reconcile_once(&ctx, &s.jobs, name).await.unwrap();
    let after = resource_versions(&s.client, &s.namespace, name).await;
    assert_eq!(
        after, settled,
        "a no-op reconcile changed something (first pass: {before:?})"
    );
    let secret = secrets.get(&format!("{name}-worker-token")).await.unwrap();
    assert_eq!(
        worker_token_of(&secret),
        token,
        "the token is never rotated"
    );
    let job_after = s.jobs.get(name).await.unwrap();
    assert_eq!(
        condition(&job_after, "ChangelogReady").last_transition_time,
        condition(&job, "ChangelogReady").last_transition_time
    );

    // Replicas and image changes reach the StatefulSet.
    patch_spec(
        &s.jobs,
        name,
        serde_json::json!({"replicas": 3, "image": "streamkeeper/worker:test-2"}),
    )
    .await;
    reconcile_once(&ctx, &s.jobs, name).await.unwrap();
    let set = sets.get(name).await.unwrap();
    let spec = set.spec.unwrap();
    assert_eq!(spec.replicas, Some(3));
    assert_eq!(
        spec.template.spec.unwrap().containers[0].image.as_deref(),
        Some("streamkeeper/worker:test-2")
    );
    let job = s.jobs.get(name).await.unwrap();
    assert_eq!(
        job.status.unwrap().observed_generation,
        job.metadata.generation
    );

    delete_namespace(&s.client, &s.namespace).await;
}

#[tokio::test]
async fn a_changelog_without_compaction_is_refused_and_nothing_starts() {
    let s = setup("op-nocompact", &[]).await;
    let ctx = context(&s.client);
    let name = "counts";
    let changelog = format!("{}.{name}.changelog", s.namespace);
    create_topic(&changelog, 3, &[("cleanup.policy", "delete")]).await;
    s.jobs
        .create(&PostParams::default(), &job(name, &s.input, &s.prefix))
        .await
        .unwrap();
    reconcile_once(&ctx, &s.jobs, name).await.unwrap();
    let job = s.jobs.get(name).await.unwrap();
    let invalid = condition(&job, "Invalid");
    assert_eq!(invalid.status, "True");
    assert_eq!(invalid.reason, "NotCompacted");
    assert!(
        invalid.message.contains("spec.kafka.changelogTopic"),
        "{}",
        invalid.message
    );
    assert!(invalid.message.contains("compact"), "{}", invalid.message);
    assert_eq!(condition(&job, "ChangelogReady").status, "False");
    assert_eq!(job.status.as_ref().unwrap().phase, Some(JobPhase::Failed));
    let sets: Api<StatefulSet> = Api::namespaced(s.client.clone(), &s.namespace);
    assert!(
        sets.get_opt(name).await.unwrap().is_none(),
        "no StatefulSet may exist"
    );
    let config_maps: Api<ConfigMap> = Api::namespaced(s.client.clone(), &s.namespace);
    assert!(
        config_maps
            .get_opt(&format!("{name}-worker-config"))
            .await
            .unwrap()
            .is_none()
    );

    // A wrong partition count is refused the same way.
    let other = "other";
    create_topic(
        &format!("{}.{other}.changelog", s.namespace),
        2,
        &[("cleanup.policy", "compact")],
    )
    .await;
    s.jobs
        .create(
            &PostParams::default(),
            &operator_support::job(other, &s.input, &s.prefix),
        )
        .await
        .unwrap();
    reconcile_once(&ctx, &s.jobs, other).await.unwrap();
    let job = s.jobs.get(other).await.unwrap();
    assert_eq!(condition(&job, "Invalid").reason, "PartitionMismatch");
    assert!(sets.get_opt(other).await.unwrap().is_none());

    delete_namespace(&s.client, &s.namespace).await;
}

#[tokio::test]
async fn an_interval_that_does_not_fit_the_retention_is_refused_with_the_numbers() {
    // 1 minute of input retention allows a checkpoint interval of at most 15 s; the job asks 30 s.
    let s = setup("op-retention", &[("retention.ms", "60000")]).await;
    let ctx = context(&s.client);
    let name = "counts";
    s.jobs
        .create(&PostParams::default(), &job(name, &s.input, &s.prefix))
        .await
        .unwrap();
    reconcile_once(&ctx, &s.jobs, name).await.unwrap();
    let job = s.jobs.get(name).await.unwrap();
    let safe = condition(&job, "RetentionSafe");
    assert_eq!(safe.status, "False");
    assert_eq!(safe.reason, "IntervalExceedsRetention");
    for part in [
        "checkpoint.interval 30s",
        "retention 1m",
        "/ 4 = 15s",
        "retention / 2",
    ] {
        assert!(
            safe.message.contains(part),
            "{part} missing in: {}",
            safe.message
        );
    }
    let invalid = condition(&job, "Invalid");
    assert_eq!(invalid.status, "True");
    assert!(
        invalid.message.starts_with("spec.checkpoint.interval: "),
        "{}",
        invalid.message
    );
    let sets: Api<StatefulSet> = Api::namespaced(s.client.clone(), &s.namespace);
    assert!(
        sets.get_opt(name).await.unwrap().is_none(),
        "nothing may start"
    );
    assert_eq!(job.status.as_ref().unwrap().phase, Some(JobPhase::Failed));

    // A spec that becomes valid recovers by itself.
    patch_spec(
        &s.jobs,
        name,
        serde_json::json!({"checkpoint": {"interval": "10s"}}),
    )
    .await;
    reconcile_once(&ctx, &s.jobs, name).await.unwrap();
    let job = s.jobs.get(name).await.unwrap();
    assert_eq!(condition(&job, "RetentionSafe").status, "True");
    assert_eq!(condition(&job, "Invalid").status, "False");
    assert!(sets.get_opt(name).await.unwrap().is_some());

    delete_namespace(&s.client, &s.namespace).await;
}

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
    assert_eq!(
        s3_keys(&format!("{}/{}/{kept}/", s.prefix, s.namespace))
            .await
            .len(),
        1
    );

    // Delete: topics and every object under the job's prefix go; another job's objects stay.
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
    assert_eq!(
        s3_keys(&format!("{}/{}/{gone}/", s.prefix, s.namespace))
            .await
            .len(),
        3
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
    assert!(
        s3_keys(&format!("{}/{}/{gone}/", s.prefix, s.namespace))
            .await
            .is_empty()
    );
    assert_eq!(
        s3_keys(&format!("{}/{}/{kept}/", s.prefix, s.namespace))
            .await
            .len(),
        1
    );

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
async fn an_unreachable_broker_is_a_condition_and_an_error_not_a_crash() {
    let s = setup("op-nokafka", &[]).await;
    let ctx = context(&s.client);
    let name = "counts";
    let mut spec = job(name, &s.input, &s.prefix);
    spec.spec.kafka.bootstrap_servers = "127.0.0.1:1".into();
    s.jobs.create(&PostParams::default(), &spec).await.unwrap();
    let error = reconcile_once(&ctx, &s.jobs, name)
        .await
        .expect_err("Kafka is unreachable");
    assert_eq!(error.category(), "KafkaUnavailable");
    assert!(ctx.backoff("any") >= Duration::from_secs(2));
    let job = s.jobs.get(name).await.unwrap();
    let changelog = condition(&job, "ChangelogReady");
    assert_eq!(changelog.status, "Unknown");
    assert_eq!(changelog.reason, "KafkaUnavailable");
    assert!(
        changelog.message.contains("127.0.0.1:1"),
        "{}",
        changelog.message
    );

    // Pointing it at the real broker recovers without anything else.
    patch_spec(
        &s.jobs,
        name,
        serde_json::json!({"kafka": {"bootstrapServers": support::kafka_bootstrap()}}),
    )
    .await;
    reconcile_once(&ctx, &s.jobs, name).await.unwrap();
    let job = s.jobs.get(name).await.unwrap();
    assert_eq!(condition(&job, "ChangelogReady").status, "True");

    delete_namespace(&s.client, &s.namespace).await;
}

/// The operator's own Kafka client over the broker's SASL_SSL and mutual-TLS listeners, with
/// the CA, client certificate, key and SASL credentials read from Secrets in the job's namespace.
#[tokio::test]
async fn kafka_tls_and_sasl_credentials_come_from_secrets() {
    use streamkeeper::api::{KafkaSaslSpec, KafkaTlsSpec, SaslMechanism, SecretKeyRef};
    let s = setup("op-secure", &[]).await;
    let ctx = context(&s.client);
    let env = |name: &str| support::required_env(name, "tests/services/kafka.sh");
    let file = |name: &str| std::fs::read_to_string(env(name)).unwrap();
    let secret = |name: &str, password: &str| -> k8s_openapi::api::core::v1::Secret {
        serde_json::from_value(serde_json::json!({
            "metadata": { "name": name },
            "stringData": {
                "ca.crt": file("SK_KAFKA_CA_PEM"),
                "tls.crt": file("SK_KAFKA_CLIENT_CERT_PEM"),
                "tls.key": file("SK_KAFKA_CLIENT_KEY_PEM"),
                "username": env("SK_KAFKA_SASL_USERNAME"),
                "password": password,
            }
        }))
        .unwrap()
    };
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(s.client.clone(), &s.namespace);
    for (name, password) in [
        ("kafka-client", env("SK_KAFKA_SASL_PASSWORD")),
        ("kafka-wrong", "not-the-password".to_string()),
    ] {
        secrets
            .create(&PostParams::default(), &secret(name, &password))
            .await
            .unwrap();
    }
    let key = |secret: &str, key: &str| SecretKeyRef {
        name: secret.into(),
        key: key.into(),
    };
    let sasl = |secret: &str| KafkaSaslSpec {
        mechanism: SaslMechanism::ScramSha512,
        secret_name: secret.into(),
        username_key: "username".into(),
        password_key: "password".into(),
    };
    let secured =
        |name: &str, bootstrap: String, tls: KafkaTlsSpec, sasl: Option<KafkaSaslSpec>| {
            let mut job = job(name, &s.input, &s.prefix);
            job.spec.kafka.bootstrap_servers = bootstrap;
            job.spec.kafka.tls = Some(tls);
            job.spec.kafka.sasl = sasl;
            job
        };
    let ca_only = KafkaTlsSpec {
        ca: Some(key("kafka-client", "ca.crt")),
        certificate: None,
        private_key: None,
    };
    let mutual = KafkaTlsSpec {
        ca: Some(key("kafka-client", "ca.crt")),
        certificate: Some(key("kafka-client", "tls.crt")),
        private_key: Some(key("kafka-client", "tls.key")),
    };
    let jobs = [
        secured(
            "scram",
            env("SK_KAFKA_SASL_SSL_BOOTSTRAP"),
            ca_only.clone(),
            Some(sasl("kafka-client")),
        ),
        secured("mtls", env("SK_KAFKA_MTLS_BOOTSTRAP"), mutual, None),
        secured(
            "wrong",
            env("SK_KAFKA_SASL_SSL_BOOTSTRAP"),
            ca_only.clone(),
            Some(sasl("kafka-wrong")),
        ),
        secured(
            "missing",
            env("SK_KAFKA_SASL_SSL_BOOTSTRAP"),
            ca_only,
            Some(sasl("no-such-secret")),
        ),
    ];
    for job in &jobs {
        s.jobs.create(&PostParams::default(), job).await.unwrap();
    }

    // Good credentials: the changelog is created through the secured listener.
    for name in ["scram", "mtls"] {
        reconcile_once(&ctx, &s.jobs, name)
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let job = s.jobs.get(name).await.unwrap();
        let ready = condition(&job, "ChangelogReady");
        assert_eq!(ready.status, "True", "{name}: {}", ready.message);
        let changelog = ready.message.split(':').next().unwrap().to_string();
        let (partitions, config) = describe_topic(&changelog).await.expect("changelog exists");
        assert_eq!(partitions, 3);
        assert_eq!(config["cleanup.policy"], "compact");
    }

    // A refused password: a condition that says the broker refused the credentials.
    let error = reconcile_once(&ctx, &s.jobs, "wrong").await.unwrap_err();
    let job = s.jobs.get("wrong").await.unwrap();
    let ready = condition(&job, "ChangelogReady");
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("Unknown", "KafkaUnavailable")
    );
    assert!(
        ready.message.to_lowercase().contains("authentication"),
        "{}; error: {error}",
        ready.message
    );

    // A Secret that is not there: named in the condition.
    reconcile_once(&ctx, &s.jobs, "missing").await.unwrap_err();
    let job = s.jobs.get("missing").await.unwrap();
    let ready = condition(&job, "ChangelogReady");
    assert_eq!(ready.reason, "KafkaCredentialsUnavailable");
    assert!(
        ready.message.contains("no-such-secret") && ready.message.contains("does not exist"),
        "{}",
        ready.message
    );

    delete_namespace(&s.client, &s.namespace).await;
}
