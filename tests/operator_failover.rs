//! Failover through the whole system: the operator binary, the local node agent running the
//! worker pods it creates as real processes, the real apiserver, Kafka and S3. Three pods with
//! one standby per task; input flows while the process of the pod owning task 0 is killed with
//! kill -9. The operator's heartbeat notices, the warmest standby is promoted, and the time
//! from the kill to the new owner's first committed transaction is measured. Tasks the kill did
//! not touch keep their owner; the killed pod comes back as a standby; the read_committed
//! output is exactly one count per event.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

mod operator_support;

use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use operator_support::cards::*;
use operator_support::{support, *};
use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};
use streamkeeper::api::StatefulStreamJob;
use streamkeeper_contract::task_report::{TaskPhase, TaskReport, TaskRole};
use streamkeeper_contract::{AssignmentDocument, Versioned};

const PARTITIONS: i32 = 4;
const CARDS: u32 = 60;
const WAIT: Duration = Duration::from_secs(180);
/// The failover bound of the standby issue: p99 ≤ 5 s (p50 ≤ 2 s is measured by the bench).
const FAILOVER_BOUND: Duration = Duration::from_secs(5);

struct Scene {
    client: kube::Client,
    namespace: String,
    name: &'static str,
}

impl Scene {
    async fn pods(&self) -> Vec<Pod> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &self.namespace);
        let selector = streamkeeper::controller::labels::selector_string(self.name);
        api.list(&ListParams::default().labels(&selector))
            .await
            .unwrap()
            .items
    }

    /// Each answering pod's task reports, by pod name.
    async fn reports(&self) -> BTreeMap<String, Vec<TaskReport>> {
        let mut all = BTreeMap::new();
        for pod in self.pods().await {
            let Some(ip) = pod.status.as_ref().and_then(|s| s.pod_ip.clone()) else {
                continue;
            };
            let name = pod.metadata.name.clone().unwrap_or_default();
            if let Ok(document) =
                streamkeeper::worker_client::task_reports(&ip, 8080, Duration::from_millis(500))
                    .await
            {
                all.insert(name, document.tasks);
            }
        }
        all
    }

    async fn document(&self) -> Option<AssignmentDocument> {
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), &self.namespace);
        let map = api
            .get_opt(&format!("{}-assignment", self.name))
            .await
            .unwrap()?;
        let text = map.data?.remove("assignment.json")?;
        AssignmentDocument::from_json(text.as_bytes()).ok()
    }

    /// The worker process of `pod` (the node agent names it in the container id).
    async fn pid_of(&self, pod: &str) -> Option<String> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &self.namespace);
        let pod = api.get(pod).await.ok()?;
        let id = pod
            .status?
            .container_statuses?
            .first()?
            .container_id
            .clone()?;
        id.strip_prefix("local://").map(str::to_string)
    }
}

fn runs(
    reports: &BTreeMap<String, Vec<TaskReport>>,
    pod: &str,
    task: u32,
    role: TaskRole,
) -> Option<TaskReport> {
    reports
        .get(pod)?
        .iter()
        .find(|r| r.task == task && r.role == role && r.phase == TaskPhase::Running)
        .cloned()
}

/// Every task runs on its document owner, and each standby is warm.
fn settled(document: &AssignmentDocument, reports: &BTreeMap<String, Vec<TaskReport>>) -> bool {
    document.tasks.iter().all(|task| {
        let Some(owner) = &task.active else {
            return false;
        };
        task.standbys.len() == 1
            && runs(reports, owner, task.task, TaskRole::Active).is_some()
            && task.standbys.iter().all(|standby| {
                runs(reports, standby, task.task, TaskRole::Standby)
                    .is_some_and(|r| r.changelog_lag.is_some_and(|lag| lag <= 50))
            })
    })
}

async fn wait_until<T>(what: &str, mut probe: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        assert!(Instant::now() < deadline, "{what}: not within {WAIT:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_killed_pods_tasks_are_promoted_on_their_standbys_within_the_bound() {
    let client = client().await;
    let namespace = namespace(&client, "op-failover").await;
    let input = support::unique_name("op-failover-in");
    create_topic(&input, PARTITIONS, &[]).await;
    let output = format!("{input}-out");
    create_topic(&output, PARTITIONS, &[]).await;
    let prefix = support::unique_name("op-failover");
    let node = support::unique_name("sk-failover-node");
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
            .args(["--first-pod-address", "120"])
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
    let mut value = serde_json::to_value(job(name, &input, &prefix)).unwrap();
    value["spec"]["replicas"] = serde_json::json!(3);
    value["spec"]["standbyReplicas"] = serde_json::json!(1);
    value["spec"]["checkpoint"]["interval"] = serde_json::json!("10s");
    value["spec"]["pod"] = serde_json::json!({
        "nodeSelector": { "kubernetes.io/hostname": node },
        "tolerations": [{ "key": taint_key, "operator": "Equal", "value": node, "effect": "NoSchedule" }],
    });
    let spec: StatefulStreamJob = serde_json::from_value(value).unwrap();
    produce_cards(&input, CARDS, 0..2_000);
    let jobs: Api<StatefulStreamJob> = Api::namespaced(client.clone(), &namespace);
    jobs.create(&PostParams::default(), &spec).await.unwrap();
    let scene = Scene {
        client: client.clone(),
        namespace: namespace.clone(),
        name,
    };

    // The operator assigns every task an owner and a warm standby on another pod.
    let before = wait_until("every task owned with a warm standby", async || {
        let document = scene.document().await?;
        settled(&document, &scene.reports().await).then_some(document)
    })
    .await;
    let victim = before.tasks[0].active.clone().unwrap();
    let pid = scene.pid_of(&victim).await.expect("the victim's process");

    // Input keeps flowing through the failure.
    let producing = {
        let input = input.clone();
        std::thread::spawn(move || {
            for chunk in 0..30u32 {
                let from = 2_000 + chunk * 100;
                produce_cards(&input, CARDS, from..from + 100);
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let killed = Instant::now();
    assert!(
        Command::new("kill")
            .args(["-KILL", &pid])
            .status()
            .unwrap()
            .success()
    );
    let (new_owner, failover) = wait_until("task 0 commits on a new owner", async || {
        let reports = scene.reports().await;
        reports.iter().find_map(|(pod, list)| {
            (pod != &victim
                && list.iter().any(|r| {
                    r.task == 0
                        && r.role == TaskRole::Active
                        && r.phase == TaskPhase::Running
                        && r.committed_transactions >= 1
                }))
            .then(|| (pod.clone(), killed.elapsed()))
        })
    })
    .await;
    eprintln!(
        "kill -9 of {victim}: task 0 committed on {new_owner} {:.3} s later",
        failover.as_secs_f64()
    );
    assert_eq!(
        Some(&new_owner),
        before.tasks[0].standbys.first(),
        "the standby took over"
    );
    assert!(
        failover <= FAILOVER_BOUND,
        "failover took {failover:?} (bound {FAILOVER_BOUND:?})"
    );
    let after = scene.document().await.unwrap();
    for (was, now) in before.tasks.iter().zip(&after.tasks) {
        if was.active.as_ref() != Some(&victim) {
            assert_eq!(
                was.active, now.active,
                "task {} was not on the killed pod",
                was.task
            );
        }
    }

    // The killed pod returns and holds copies again; the output is exact.
    producing.join().unwrap();
    wait_until("the returned pod holds warm copies", async || {
        let reports = scene.reports().await;
        reports
            .get(&victim)
            .is_some_and(|list| list.iter().any(|r| r.phase == TaskPhase::Running))
            .then_some(())
    })
    .await;
    wait_until("exactly one count per event", async || {
        exact_output(&output, PARTITIONS, 5_000)
    })
    .await;
    let events: Api<Event> = Api::namespaced(client.clone(), &namespace);
    let promoted = events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("Promoted"))
        .filter_map(|e| e.note)
        .collect::<Vec<_>>();
    assert!(
        promoted.iter().any(|m| m.starts_with("task 0:")),
        "a Promoted Event names task 0: {promoted:?}"
    );

    jobs.delete(name, &DeleteParams::default()).await.unwrap();
    delete_namespace(&client, &namespace).await;
    let _ = Api::<Node>::all(client.clone())
        .delete(&node, &DeleteParams::default())
        .await;
}
