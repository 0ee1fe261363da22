//! A running job for the failover test and bench: a namespace, topics, the local node agent
//! running the worker pods, the operator binary, and the job with its replicas and standbys;
//! the pods' task reports and the stored assignment read back; a pod's process killed or
//! frozen, and the time until its task commits on another owner measured.

use super::cards::*;
use super::{client, create_topic, delete_namespace, job, namespace, support};
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};
use streamkeeper::api::StatefulStreamJob;
use streamkeeper_contract::task_report::{TaskPhase, TaskReport, TaskRole};
use streamkeeper_contract::{AssignmentDocument, TaskReportsDocument, Versioned};

pub const PARTITIONS: i32 = 4;
pub const CARDS: u32 = 60;
pub const WAIT: Duration = Duration::from_secs(180);
/// How soon the status names a moved task's new owner once it runs there: a reconcile, its
/// worker reports and the status write, not the next periodic refresh (up to 75 s for a
/// steady job).
pub const STATUS_AFTER_MOVE: Duration = Duration::from_secs(10);
const NAME: &str = "cards";

/// An operator process named `identity` in the Lease, with the leadership tests' short lease
/// timings (a leader that dies is replaced after about 6 s).
fn start_operator(
    namespace: &str,
    dir: &std::path::Path,
    identity: &str,
    env: &[(&str, &str)],
) -> Process {
    Process::spawn(
        "operator",
        Command::new(env!("CARGO_BIN_EXE_streamkeeper-operator"))
            .args(["run", "--namespace", namespace, "--identity", identity])
            .args(["--metrics-addr", "127.0.0.1:0"])
            .args([
                "--lease-duration-seconds",
                "6",
                "--renew-deadline-seconds",
                "4",
            ])
            .args(["--retry-period-seconds", "1"])
            .envs(env.iter().copied())
            .env("RUST_LOG", "info"),
        dir.join(format!("{identity}.log")),
    )
}

/// The job and everything it runs on; dropped, it stops the processes.
pub struct System {
    pub client: kube::Client,
    pub namespace: String,
    pub name: &'static str,
    pub input: String,
    pub output: String,
    /// The nodes the job runs on, each with its node agent.
    pub nodes: Vec<String>,
    node_agents: Vec<Process>,
    operator: Option<Process>,
    /// A second operator waiting for the Lease, once started.
    spare: Option<Process>,
    operators_started: u32,
    /// Last: fields drop in order, and the processes print their logs' tails from here when a
    /// test fails.
    pub dir: tempfile::TempDir,
}

impl System {
    /// Starts it all with `replicas` pods and `standbys` standbys per task, after `events`
    /// input events are produced. The node agent gives pods the loopback addresses from
    /// `127.0.0.<first_address>` on: tests running at once need ranges of their own.
    pub async fn start(
        prefix: &str,
        first_address: u8,
        replicas: i32,
        standbys: i32,
        events: u32,
    ) -> Self {
        Self::start_on(prefix, first_address, &[None], replicas, standbys, events).await
    }

    /// As [`System::start`], on one node per entry of `zones`, each with its own node agent and
    /// that zone label (`None`: no zone); node `i` hands out addresses from
    /// `first_address + 10 i`.
    pub async fn start_on(
        prefix: &str,
        first_address: u8,
        zones: &[Option<&str>],
        replicas: i32,
        standbys: i32,
        events: u32,
    ) -> Self {
        let spec = serde_json::json!({});
        Self::start_with(
            prefix,
            first_address,
            zones,
            (replicas, standbys),
            events,
            spec,
        )
        .await
    }

    /// As [`System::start_on`], with `spec` merged into the job's spec last (each of its
    /// fields replaces the default's, objects merged field by field).
    pub async fn start_with(
        prefix: &str,
        first_address: u8,
        zones: &[Option<&str>],
        counts: (i32, i32),
        events: u32,
        spec: serde_json::Value,
    ) -> Self {
        Self::start_with_node_args(prefix, first_address, zones, counts, events, spec, &[]).await
    }

    /// As [`System::start_with`], each node agent started with `node_args` besides its own.
    pub async fn start_with_node_args(
        prefix: &str,
        first_address: u8,
        zones: &[Option<&str>],
        (replicas, standbys): (i32, i32),
        events: u32,
        spec: serde_json::Value,
        node_args: &[&str],
    ) -> Self {
        let client = client().await;
        let namespace = namespace(&client, prefix).await;
        let input = support::unique_name(&format!("{prefix}-in"));
        create_topic(&input, PARTITIONS, &[]).await;
        let output = format!("{input}-out");
        create_topic(&output, PARTITIONS, &[]).await;
        let group = support::unique_name(&format!("sk-{prefix}"));
        let mut dir = tempfile::tempdir().unwrap();
        // SK_KEEP_LOGS keeps the node agents' and operator's logs (and the pods' volumes).
        if std::env::var_os("SK_KEEP_LOGS").is_some() {
            dir.disable_cleanup(true);
            eprintln!("logs kept in {}", dir.path().display());
        }
        let taint_key = "streamkeeper.dev/test-node";
        let group_label = "streamkeeper.dev/test-group";
        let mut nodes = Vec::new();
        let mut node_agents = Vec::new();
        for (i, zone) in zones.iter().enumerate() {
            let node = if zones.len() == 1 {
                format!("{group}-node")
            } else {
                format!("{group}-node{i}")
            };
            let (root, log) = if i == 0 {
                (dir.path().join("node"), dir.path().join("node.log"))
            } else {
                (
                    dir.path().join(format!("node{i}")),
                    dir.path().join(format!("node{i}.log")),
                )
            };
            let address = first_address + 10 * u8::try_from(i).unwrap();
            let mut command = Command::new(sibling_binary("streamkeeper-local-node"));
            command
                .args(["--node-name", &node, "--root"])
                .arg(root)
                .arg("--image")
                .arg(format!(
                    "streamkeeper/worker={}",
                    sibling_binary("streamkeeper-worker").display()
                ))
                .args(["--taint", &format!("{taint_key}={group}:NoSchedule")])
                .args(["--label", &format!("{group_label}={group}")])
                .args(["--provision-namespace", &namespace])
                .args(["--first-pod-address", &address.to_string()])
                .args(node_args)
                .env("RUST_LOG", "info");
            if let Some(zone) = zone {
                command.args(["--label", &format!("topology.kubernetes.io/zone={zone}")]);
            }
            node_agents.push(Process::spawn("node agent", &mut command, log));
            nodes.push(node);
        }
        let operator = start_operator(&namespace, dir.path(), "operator1", &[]);
        let prefix_s3 = support::unique_name(prefix);
        let mut value = serde_json::to_value(job(NAME, &input, &prefix_s3)).unwrap();
        value["spec"]["replicas"] = serde_json::json!(replicas);
        value["spec"]["standbyReplicas"] = serde_json::json!(standbys);
        value["spec"]["checkpoint"]["interval"] = serde_json::json!("10s");
        value["spec"]["pod"] = serde_json::json!({
            "nodeSelector": { group_label: group },
            "tolerations": [{ "key": taint_key, "operator": "Equal", "value": group, "effect": "NoSchedule" }],
        });
        merge(&mut value["spec"], spec);
        let spec: StatefulStreamJob = serde_json::from_value(value).unwrap();
        produce_cards(&input, CARDS, 0..events);
        let jobs: Api<StatefulStreamJob> = Api::namespaced(client.clone(), &namespace);
        jobs.create(&PostParams::default(), &spec).await.unwrap();
        Self {
            client,
            namespace,
            name: NAME,
            input,
            output,
            nodes,
            dir,
            node_agents,
            operator: Some(operator),
            spare: None,
            operators_started: 1,
        }
    }

    /// Stops the operator (SIGTERM) and starts a new one, which leads once the old one's
    /// lease is released.
    pub fn restart_operator(&mut self) {
        self.restart_operator_with(&[]);
    }

    /// [`System::restart_operator`], the new one with `env` (a failpoint, say).
    pub fn restart_operator_with(&mut self, env: &[(&str, &str)]) {
        drop(self.operator.take());
        self.operators_started += 1;
        let identity = self.operator_identity();
        self.operator = Some(start_operator(
            &self.namespace,
            self.dir.path(),
            &identity,
            env,
        ));
    }

    /// Stops the operator (SIGTERM): no operator leads until [`System::restart_operator`].
    pub fn stop_operator(&mut self) {
        drop(self.operator.take());
    }

    /// The Lease identity of the operator started last by [`System::restart_operator`].
    pub fn operator_identity(&self) -> String {
        format!("operator{}", self.operators_started)
    }

    /// Starts a second operator (`spare`), which waits for the Lease.
    pub fn start_spare_operator(&mut self) {
        self.spare = Some(start_operator(
            &self.namespace,
            self.dir.path(),
            "spare",
            &[],
        ));
    }

    /// How the operator started last ended, if it has.
    pub fn operator_exit(&mut self) -> Option<std::process::ExitStatus> {
        self.operator.as_mut()?.child.try_wait().unwrap()
    }

    /// Who holds the operators' Lease.
    pub async fn lease_holder(&self) -> Option<String> {
        let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
            Api::namespaced(self.client.clone(), &self.namespace);
        super::process::holder(&leases).await
    }

    /// The generation each pod's worker says it has recorded.
    pub async fn recorded_generations(&self) -> BTreeMap<String, Option<u64>> {
        self.report_documents()
            .await
            .into_iter()
            .map(|(pod, document)| (pod, document.generation))
            .collect()
    }

    /// Waits until each of `workers` workers has recorded the stored document's generation;
    /// that document. Gives up after [`WAIT`] naming `what`, the document and the generations.
    pub async fn recorded_by_every_worker(&self, what: &str, workers: usize) -> AssignmentDocument {
        let deadline = Instant::now() + WAIT;
        loop {
            let document = self.document().await;
            let recorded = self.recorded_generations().await;
            if let Some(document) = &document
                && recorded.len() == workers
                && recorded.values().all(|g| *g == Some(document.generation))
            {
                return document.clone();
            }
            assert!(
                Instant::now() < deadline,
                "{what}: not within {WAIT:?}; stored generation {:?}, recorded {recorded:?}",
                document.map(|d| d.generation)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The node agent of node `i`, to freeze a whole node.
    pub fn node_agent(&self, i: usize) -> &Process {
        &self.node_agents[i]
    }

    pub async fn pods(&self) -> Vec<Pod> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &self.namespace);
        let selector = streamkeeper::k8s::labels::selector_string(self.name);
        api.list(&ListParams::default().labels(&selector))
            .await
            .unwrap()
            .items
    }

    /// The address of pod `name`, once it has one.
    pub async fn pod_ip(&self, name: &str) -> Option<String> {
        self.pods()
            .await
            .into_iter()
            .find(|p| p.metadata.name.as_deref() == Some(name))
            .and_then(|p| p.status?.pod_ip)
    }

    /// Each answering pod's task reports, by pod name (all pods asked at once, so a frozen
    /// one costs one timeout, not one per pod).
    pub async fn reports(&self) -> BTreeMap<String, Vec<TaskReport>> {
        self.report_documents()
            .await
            .into_iter()
            .map(|(pod, document)| (pod, document.tasks))
            .collect()
    }

    /// Each answering pod's whole `/v1/tasks` document.
    async fn report_documents(&self) -> BTreeMap<String, TaskReportsDocument> {
        let pods = self.pods().await;
        let calls = pods.iter().filter_map(|pod| {
            let ip = pod.status.as_ref()?.pod_ip.clone()?;
            let name = pod.metadata.name.clone().unwrap_or_default();
            Some(async move {
                let answer = streamkeeper::adapters::worker_client::task_reports(
                    &ip,
                    8080,
                    Duration::from_millis(300),
                )
                .await;
                answer.ok().map(|document| (name, document))
            })
        });
        futures::future::join_all(calls)
            .await
            .into_iter()
            .flatten()
            .collect()
    }

    /// Waits until each of `pods` runs a copy again (it came back from a failure), then until
    /// the output holds exactly one count per event of the `events` produced.
    pub async fn recovered_exactly(&self, pods: &[String], events: u32) {
        wait_until("the failed pods hold copies again", async || {
            let reports = self.reports().await;
            pods.iter()
                .all(|pod| {
                    reports
                        .get(pod)
                        .is_some_and(|list| list.iter().any(|r| r.phase == TaskPhase::Running))
                })
                .then_some(())
        })
        .await;
        wait_until("exactly one count per event", async || {
            exact_output(&self.output, PARTITIONS, events)
        })
        .await;
    }

    /// The assignment the operator stored.
    pub async fn document(&self) -> Option<AssignmentDocument> {
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), &self.namespace);
        let map = api
            .get_opt(&format!("{}-assignment", self.name))
            .await
            .unwrap()?;
        let text = map.data?.remove("assignment.json")?;
        AssignmentDocument::from_json(text.as_bytes()).ok()
    }

    /// The worker process of `pod` (the node agent names it in the container id).
    pub async fn pid_of(&self, pod: &str) -> Option<String> {
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

    /// Waits until every task runs on its owner and has `standbys` warm standbys; the document.
    /// Gives up after [`WAIT`], naming the document and the reports it saw last.
    pub async fn settled(&self, standbys: usize) -> AssignmentDocument {
        let deadline = Instant::now() + WAIT;
        loop {
            let document = self.document().await;
            let reports = self.reports().await;
            if let Some(document) = &document
                && settled(document, &reports, standbys)
            {
                return document.clone();
            }
            if Instant::now() >= deadline {
                let seen: BTreeMap<&String, Vec<String>> = reports
                    .iter()
                    .map(|(pod, list)| {
                        let tasks = list
                            .iter()
                            .map(|r| {
                                format!(
                                    "{}:{:?}/{:?}/lag {:?}",
                                    r.task, r.role, r.phase, r.changelog_lag
                                )
                            })
                            .collect();
                        (pod, tasks)
                    })
                    .collect();
                panic!(
                    "every task owned, standbys warm: not within {WAIT:?}; document {document:?}; reports {seen:?}"
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Sends `signal` (`KILL`, `STOP`) to the process of `task`'s owner; returns the owner and
    /// how long until another pod committed a transaction of `task`.
    pub async fn fail_owner_of(&self, task: u32, signal: &str) -> (String, String, Duration) {
        let (victim, failed) = self.signal_owner_of(task, signal).await;
        let (owner, took) = self.new_owner_of(task, &victim, failed).await;
        (victim, owner, took)
    }

    /// Sends `signal` to the process of `task`'s owner; the owner and when it was sent.
    pub async fn signal_owner_of(&self, task: u32, signal: &str) -> (String, Instant) {
        let document = self.document().await.unwrap();
        let victim = document.tasks[task as usize].active.clone().unwrap();
        let pid = self.pid_of(&victim).await.expect("the owner's process");
        let failed = Instant::now();
        let sent = Command::new("kill")
            .args([&format!("-{signal}"), &pid])
            .status()
            .unwrap();
        assert!(sent.success(), "kill -{signal} {pid}");
        (victim, failed)
    }

    /// Waits until `task` commits on another pod than `victim`; that pod and the time since
    /// `failed`.
    pub async fn new_owner_of(
        &self,
        task: u32,
        victim: &str,
        failed: Instant,
    ) -> (String, Duration) {
        // The new owner is the one the operator's document names after the failure, and its
        // copy counts commits from its promotion: a former owner still reporting its old
        // commits (a handoff just before the failure) is no new owner.
        wait_until("the task commits on a new owner", async || {
            let owner = self.document().await?.tasks[task as usize].active.clone()?;
            let reports = self.reports().await;
            let committed = reports.get(&owner)?.iter().any(|r| {
                r.task == task
                    && r.role == TaskRole::Active
                    && r.phase == TaskPhase::Running
                    && r.committed_transactions >= 1
            });
            (owner != victim && committed).then(|| (owner.clone(), failed.elapsed()))
        })
        .await
    }

    /// The notes of the job's Events with `reason` (`Promoted`, `HandedOff`).
    pub async fn event_notes(&self, reason: &str) -> Vec<String> {
        let events: Api<k8s_openapi::api::events::v1::Event> =
            Api::namespaced(self.client.clone(), &self.namespace);
        events
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some(reason))
            .filter_map(|e| e.note)
            .collect()
    }

    /// Waits until the status names each task's owner where `document` places its active copy,
    /// which the caller has seen running there; how long that took.
    pub async fn status_follows(&self, document: &AssignmentDocument) -> Duration {
        let jobs: Api<StatefulStreamJob> = Api::namespaced(self.client.clone(), &self.namespace);
        let start = std::time::Instant::now();
        wait_until(
            "the status names each task's owner as assigned",
            async || {
                let status = jobs.get(self.name).await.ok()?.status?;
                document
                    .tasks
                    .iter()
                    .all(|t| {
                        let shown = status.tasks.get(t.task as usize);
                        shown.and_then(|s| s.owner.as_ref()) == t.active.as_ref()
                    })
                    .then(|| start.elapsed())
            },
        )
        .await
    }

    /// Waits until the status shows `task`'s last promotion timed to its new owner's first
    /// commit; that promotion.
    pub async fn timed_promotion(&self, task: usize) -> streamkeeper::api::TaskMove {
        let jobs: Api<StatefulStreamJob> = Api::namespaced(self.client.clone(), &self.namespace);
        let promotion = wait_until("the status shows the promotion, timed", async || {
            let status = jobs.get(self.name).await.ok()?.status?;
            let promotion = status.tasks.get(task)?.last_promotion.clone()?;
            promotion
                .first_commit_seconds
                .is_some()
                .then_some(promotion)
        })
        .await;
        eprintln!("task {task}'s last promotion in the status: {promotion:?}");
        promotion
    }

    /// Deletes the job, the namespace and the node.
    pub async fn clean_up(self) {
        let jobs: Api<StatefulStreamJob> = Api::namespaced(self.client.clone(), &self.namespace);
        let _ = jobs.delete(self.name, &DeleteParams::default()).await;
        delete_namespace(&self.client, &self.namespace).await;
        for node in &self.nodes {
            let _ = Api::<Node>::all(self.client.clone())
                .delete(node, &DeleteParams::default())
                .await;
        }
    }
}

/// Merges `patch` into `value`: objects field by field, anything else replaced.
fn merge(value: &mut serde_json::Value, patch: serde_json::Value) {
    match (value, patch) {
        (serde_json::Value::Object(value), serde_json::Value::Object(patch)) => {
            for (key, field) in patch {
                merge(value.entry(key).or_insert(serde_json::Value::Null), field);
            }
        }
        (value, patch) => *value = patch,
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

/// Every task runs on its document owner, with `standbys` warm standbys.
pub fn settled(
    document: &AssignmentDocument,
    reports: &BTreeMap<String, Vec<TaskReport>>,
    standbys: usize,
) -> bool {
    document.tasks.iter().all(|task| {
        let Some(owner) = &task.active else {
            return false;
        };
        task.standbys.len() == standbys
            && runs(reports, owner, task.task, TaskRole::Active).is_some()
            && task.standbys.iter().all(|standby| {
                runs(reports, standby, task.task, TaskRole::Standby)
                    .is_some_and(|r| r.changelog_lag.is_some_and(|lag| lag <= 50))
            })
    })
}

/// [`support::wait_until`] with the failover tests' [`WAIT`].
pub async fn wait_until<T>(what: &str, probe: impl AsyncFnMut() -> Option<T>) -> T {
    super::support::wait_until(what, WAIT, probe).await
}

/// Produces `chunks` chunks of 100 events from `from` on a thread, one every 100 ms.
pub fn produce_in_background(input: &str, from: u32, chunks: u32) -> Producing {
    Producing::start(input, CARDS, from, chunks)
}
