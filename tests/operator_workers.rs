//! The operator binary with real workers: the local node agent (`streamkeeper-local-node`) runs
//! the worker pods the operator creates as local processes, against the real apiserver, Kafka and
//! S3. The job's status follows the workers' own reports (owners, phases, restore progress,
//! `readyTasks`); a restore request is applied by every task exactly once and only then
//! recorded; suspend takes a final checkpoint of everything committed before scaling to zero;
//! resume restores from it; and the output stays exact through all of it.
//!
//! The worker and node agent binaries are the ones cargo built next to the operator's
//! (`cargo build --workspace --bins`, which `tests/run.sh` does).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

mod operator_support;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Node, Secret};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use operator_support::cards::*;
use operator_support::{support, *};
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use streamkeeper::api::{JobPhase, StatefulStreamJob, TaskStatus};
use streamkeeper_contract::{CheckpointManifest, TaskPrefix, Versioned};

const PARTITIONS: i32 = 4;
const CARDS: u32 = 60;
const WAIT: Duration = Duration::from_secs(180);

/// Every card's output is exactly 1, 2, …, n, and the n add up to `events`.
fn assert_exact_output(topic: &str, events: u32) {
    exact_output(topic, PARTITIONS, events).expect("one output record per event");
}

/// Waits until the job's status satisfies `done`. Every few seconds it touches an annotation,
/// which makes the operator reconcile now rather than at its next periodic resync (the figures
/// the test waits for, like input lag, change without any Kubernetes object changing).
async fn wait_for_status(
    jobs: &Api<StatefulStreamJob>,
    name: &str,
    what: &str,
    mut done: impl FnMut(&StatefulStreamJob) -> bool,
) -> StatefulStreamJob {
    let deadline = Instant::now() + WAIT;
    let mut nudged = Instant::now();
    loop {
        let job = jobs.get(name).await.unwrap();
        if done(&job) {
            return job;
        }
        if nudged.elapsed() >= Duration::from_secs(3) {
            let nudge = serde_json::json!({ "metadata": { "annotations": {
                "test.streamkeeper.dev/nudge": format!("{:?}", Instant::now()),
            } } });
            jobs.patch(name, &PatchParams::default(), &Patch::Merge(nudge))
                .await
                .unwrap();
            nudged = Instant::now();
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}; status: {:#?}",
            job.status
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn tasks(job: &StatefulStreamJob) -> Vec<TaskStatus> {
    job.status
        .as_ref()
        .map(|s| s.tasks.clone())
        .unwrap_or_default()
}

fn condition_of(job: &StatefulStreamJob, type_: &str) -> Option<(String, String, String)> {
    job.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

fn all_running(job: &StatefulStreamJob) -> bool {
    let status = job.status.as_ref();
    status.and_then(|s| s.ready_tasks.as_deref()) == Some("4/4")
        && status.and_then(|s| s.phase) == Some(JobPhase::Running)
}

/// Every manifest of every task, newest last.
async fn manifests(prefix: &str, namespace: &str, job: &str) -> Vec<CheckpointManifest> {
    let s3 = s3_client();
    let bucket = support::s3_settings().bucket;
    let mut found = Vec::new();
    for task in 0..PARTITIONS as u32 {
        let task_prefix = TaskPrefix::new(prefix, namespace, job, task);
        let listed = s3
            .list_objects_v2()
            .bucket(&bucket)
            .prefix(task_prefix.manifests())
            .send()
            .await
            .unwrap();
        for object in listed.contents() {
            let body = operator_support::checkpoints::object_bytes(object.key().unwrap()).await;
            found.push(CheckpointManifest::from_json(&body).unwrap());
        }
    }
    found.sort_by_key(|m| m.created_at_ms);
    found
}

fn input_ends(topic: &str) -> BTreeMap<u32, i64> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", support::kafka_bootstrap())
        .create()
        .unwrap();
    (0..PARTITIONS)
        .map(|p| {
            let (_, high) = consumer.fetch_watermarks(topic, p, TIMEOUT).unwrap();
            (p as u32, high)
        })
        .collect()
}

/// The running worker pods got no service-account token from the node agent (which gives one,
/// as a kubelet does, unless the pod says `automountServiceAccountToken: false`), but the job's
/// worker token, from a Secret the job owns; and the job has no Role or RoleBinding.
async fn assert_least_privilege(client: &kube::Client, namespace: &str, job: &str, root: &Path) {
    let pod_dirs: Vec<PathBuf> = std::fs::read_dir(root.join("pods"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| {
            let name = path.file_name().unwrap().to_string_lossy().to_string();
            name.starts_with(&format!("{namespace}_{job}-"))
        })
        .collect();
    assert!(!pod_dirs.is_empty(), "the node agent ran the job's pods");
    for pod_dir in &pod_dirs {
        assert!(
            !pod_dir.join("serviceaccount").exists(),
            "{} was given a service-account token",
            pod_dir.display()
        );
    }
    let none = |count: usize, kind: &str| assert_eq!(count, 0, "the job has a {kind}");
    let roles: Api<Role> = Api::namespaced(client.clone(), namespace);
    none(
        roles.list(&Default::default()).await.unwrap().items.len(),
        "Role",
    );
    let bindings: Api<RoleBinding> = Api::namespaced(client.clone(), namespace);
    none(
        bindings
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .len(),
        "RoleBinding",
    );
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let secret = secrets.get(&format!("{job}-worker-token")).await.unwrap();
    let token = secret.data.unwrap()["token"].0.clone();
    for pod_dir in &pod_dirs {
        let mounted = std::fs::read(pod_dir.join("volumes/worker-token/token")).unwrap();
        assert_eq!(mounted, token, "{}", pod_dir.display());
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_operator_runs_real_workers_restores_on_request_and_suspends_with_a_final_checkpoint() {
    let client = client().await;
    let namespace = namespace(&client, "op-workers").await;
    let input = support::unique_name("op-workers-in");
    create_topic(&input, PARTITIONS, &[]).await;
    let output = format!("{input}-out");
    create_topic(&output, PARTITIONS, &[]).await;
    let prefix = support::unique_name("op-workers");
    let node = support::unique_name("sk-op-node");
    let dir = tempfile::tempdir().unwrap();
    let taint_key = "streamkeeper.dev/test-node";

    let _node_agent = Process::spawn(
        "node agent",
        Command::new(sibling_binary("streamkeeper-local-node"))
            .args(["--node-name", &node, "--root"])
            .arg(dir.path().join("node"))
            .arg("--image")
            .arg(format!(
                "streamkeeper/worker={}",
                sibling_binary("streamkeeper-worker").display()
            ))
            .args(["--taint", &format!("{taint_key}={node}:NoSchedule")])
            .args(["--provision-namespace", &namespace])
            .args(["--first-pod-address", "100"])
            .env("RUST_LOG", "info"),
        dir.path().join("node.log"),
    );
    let _operator = Process::spawn(
        "operator",
        Command::new(env!("CARGO_BIN_EXE_streamkeeper-operator"))
            .args(["run", "--namespace", &namespace])
            .args(["--metrics-addr", "127.0.0.1:0"])
            .env("RUST_LOG", "info"),
        dir.path().join("operator.log"),
    );

    let name = "cards";
    let mut spec = job(name, &input, &prefix);
    let extra = serde_json::json!({
        "deletionPolicy": "Delete",
        "checkpoint": { "interval": "10s" },
        "pod": {
            "nodeSelector": { "kubernetes.io/hostname": node },
            "tolerations": [{ "key": taint_key, "operator": "Equal", "value": node, "effect": "NoSchedule" }],
        },
    });
    let mut value = serde_json::to_value(&spec).unwrap();
    merge_json(&mut value["spec"], &extra);
    spec = serde_json::from_value(value).unwrap();
    let jobs: Api<StatefulStreamJob> = Api::namespaced(client.clone(), &namespace);
    produce_cards(&input, CARDS, 0..3_000);
    jobs.create(&PostParams::default(), &spec).await.unwrap();

    // The status follows the workers: every task has an owner and is Running.
    let job = wait_for_status(&jobs, name, "4/4 tasks running", all_running).await;
    let pods = [format!("{name}-0"), format!("{name}-1")];
    for task in tasks(&job) {
        let owner = task.owner.clone().unwrap_or_default();
        assert!(pods.contains(&owner), "task {}: owner {owner:?}", task.task);
        assert_eq!(task.phase.as_deref(), Some("Running"));
        let restore = task.restore.expect("restore progress reported");
        assert_eq!(restore.phase, "Done");
    }
    let (status, _, message) = condition_of(&job, "Ready").unwrap();
    assert_eq!(status, "True");
    assert!(message.contains("4/4 tasks running"), "{message}");
    assert_least_privilege(&client, &namespace, name, &dir.path().join("node")).await;

    // A restore request: pods are replaced with it, every task applies it once, then it is
    // recorded. Events keep arriving meanwhile.
    produce_cards(&input, CARDS, 3_000..4_000);
    jobs.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({
            "spec": { "restore": { "id": "incident-7", "checkpoint": "latest", "source": "changelog" } }
        })),
    )
    .await
    .unwrap();
    produce_cards(&input, CARDS, 4_000..5_000);
    let job = wait_for_status(&jobs, name, "the restore to be applied", |job| {
        job.status
            .as_ref()
            .and_then(|s| s.last_restore_id.as_deref())
            == Some("incident-7")
    })
    .await;
    for task in tasks(&job) {
        assert_eq!(
            task.applied_restore_id.as_deref(),
            Some("incident-7"),
            "task {}",
            task.task
        );
    }
    assert_eq!(
        condition_of(&job, "Restoring").map(|c| c.1),
        Some("RestoreDone".to_string())
    );
    wait_for_status(&jobs, name, "tasks running after the restore", all_running).await;

    // Suspend: a final checkpoint of everything committed, then zero replicas.
    produce_cards(&input, CARDS, 5_000..6_000);
    let ends = input_ends(&input);
    wait_for_status(&jobs, name, "every input record processed", |job| {
        tasks(job).len() == PARTITIONS as usize && tasks(job).iter().all(|t| t.input_lag == Some(0))
    })
    .await;
    jobs.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({ "spec": { "suspend": true } })),
    )
    .await
    .unwrap();
    let job = wait_for_status(&jobs, name, "suspended", |job| {
        job.status.as_ref().and_then(|s| s.phase) == Some(JobPhase::Suspended)
    })
    .await;
    let (status, reason, message) = condition_of(&job, "Suspended").unwrap();
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("True", "FinalCheckpoint"),
        "{message}"
    );
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), &namespace);
    assert_eq!(
        sets.get(name).await.unwrap().spec.unwrap().replicas,
        Some(0)
    );
    let newest: BTreeMap<u32, CheckpointManifest> = manifests(&prefix, &namespace, name)
        .await
        .into_iter()
        .map(|m| (m.task, m))
        .collect();
    for (task, end) in &ends {
        assert_eq!(
            newest.get(task).map(|m| m.input_offset),
            Some(*end),
            "task {task}: the final checkpoint holds every input record"
        );
    }
    assert_exact_output(&output, 6_000);

    // Resume: the tasks come back (from the volumes, or the final checkpoint) and go on exactly.
    jobs.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({ "spec": { "suspend": false } })),
    )
    .await
    .unwrap();
    produce_cards(&input, CARDS, 6_000..7_000);
    wait_for_status(&jobs, name, "tasks running after resume", all_running).await;
    wait_for_status(&jobs, name, "the new input processed", |job| {
        tasks(job).iter().all(|t| t.input_lag == Some(0))
    })
    .await;
    assert_exact_output(&output, 7_000);

    // deletionPolicy Delete with workers running: they are stopped, then the job's own topics go.
    let changelog = format!("{namespace}.{name}.changelog");
    let dead_letter = format!("{namespace}.{name}.dlq");
    assert!(describe_topic(&changelog).await.is_some());
    jobs.delete(name, &DeleteParams::default()).await.unwrap();
    let deadline = Instant::now() + WAIT;
    while jobs.get_opt(name).await.unwrap().is_some() {
        assert!(
            Instant::now() < deadline,
            "the job's clean-up did not finish"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), &namespace);
    let selector = streamkeeper::k8s::labels::selector_string(name);
    let left = pods
        .list(&kube::api::ListParams::default().labels(&selector))
        .await
        .unwrap()
        .items;
    assert!(left.is_empty(), "worker pods outlived the clean-up");
    assert!(describe_topic(&changelog).await.is_none());
    assert!(describe_topic(&dead_letter).await.is_none());
    delete_namespace(&client, &namespace).await;
    let _ = Api::<Node>::all(client.clone())
        .delete(&node, &DeleteParams::default())
        .await;
}

fn merge_json(target: &mut serde_json::Value, extra: &serde_json::Value) {
    match (target, extra) {
        (serde_json::Value::Object(target), serde_json::Value::Object(extra)) => {
            for (key, value) in extra {
                merge_json(
                    target.entry(key.clone()).or_insert(serde_json::Value::Null),
                    value,
                );
            }
        }
        (target, extra) => *target = extra.clone(),
    }
}
