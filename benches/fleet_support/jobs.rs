//! The fleet bench's jobs: each with its input and output topics, its state volumes bound
//! ahead, its checkpoint manifests in S3, and its pods on KWOK's simulated nodes.

use super::operator_support;
use super::operator_support::checkpoints;
use super::operator_support::support;
use k8s_openapi::api::core::v1::PersistentVolume;
use kube::Api;
use kube::api::PostParams;
use streamkeeper::api::StatefulStreamJob;

/// The label of the volumes the bench made for its namespace's claims.
pub const VOLUME_LABEL: &str = "streamkeeper.dev/fleet-bench";

/// A volume for each of job `job`'s `pods` state claims, bound to it ahead: no provisioner runs
/// beside KWOK, and a pod with an unbound claim is never scheduled. Nothing mounts it.
async fn add_volumes(client: &kube::Client, namespace: &str, job: &str, pods: i32) {
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    for ordinal in 0..pods {
        let claim = format!("{}-{job}-{ordinal}", streamkeeper::k8s::names::STATE_VOLUME);
        let volume: PersistentVolume = serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("{namespace}-{claim}"), "labels": {VOLUME_LABEL: namespace}},
            "spec": {
                "capacity": {"storage": "10Gi"},
                "accessModes": ["ReadWriteOnce"],
                "persistentVolumeReclaimPolicy": "Retain",
                "storageClassName": "",
                "hostPath": {"path": "/nonexistent/fleet-bench"},
                "claimRef": {"namespace": namespace, "name": claim},
            },
        }))
        .unwrap();
        volumes
            .create(&PostParams::default(), &volume)
            .await
            .unwrap();
    }
}

/// Writes `count` checkpoint manifests for each of `tasks` tasks of `job`, as its workers would
/// have: the simulated workers write none, and the reconciles' S3 reads (and the Kafka offsets
/// they then read) should be those of a job that checkpoints.
async fn add_manifests(namespace: &str, (prefix, job): (&str, &str), tasks: u32, count: u64) {
    let now = checkpoints::now_ms();
    let writes = (0..tasks).flat_map(|task| {
        (1..=count).map(move |sequence| {
            let manifest = checkpoints::manifest(task, sequence, 0, now, 0);
            async move { checkpoints::put_manifest(prefix, namespace, job, &manifest).await }
        })
    });
    futures::future::join_all(writes).await;
}

/// Adds jobs until `namespace` holds `total`, each with `pods` pods on the simulated nodes, one
/// standby per task, as many partitions as pods, and `manifests` checkpoints a task.
pub async fn add_jobs(
    (client, namespace): (&kube::Client, &str),
    (from, total): (usize, usize),
    pods: i32,
    manifests: u64,
) {
    let jobs: Api<StatefulStreamJob> = Api::namespaced(client.clone(), namespace);
    for index in from..total {
        let name = format!("job{index}");
        add_volumes(client, namespace, &name, pods).await;
        let input = support::unique_name(&format!("fleet{index}-in"));
        operator_support::create_topic(&input, pods, &[]).await;
        operator_support::create_topic(&format!("{input}-out"), pods, &[]).await;
        let prefix = support::unique_name("fleet");
        let tasks = u32::try_from(pods).unwrap();
        add_manifests(namespace, (&prefix, &name), tasks, manifests).await;
        let mut value =
            serde_json::to_value(operator_support::job(&name, &input, &prefix)).unwrap();
        value["spec"]["replicas"] = serde_json::json!(pods);
        value["spec"]["standbyReplicas"] = serde_json::json!(1);
        // On KWOK's nodes only (tests/services/kwok.sh taints them against every other pod).
        value["spec"]["pod"] = serde_json::json!({
            "nodeSelector": {"type": "kwok"},
            "tolerations": [{
                "key": "streamkeeper.dev/simulated",
                "operator": "Exists",
                "effect": "NoSchedule",
            }],
        });
        let job: StatefulStreamJob = serde_json::from_value(value).unwrap();
        jobs.create(&PostParams::default(), &job).await.unwrap();
    }
}
