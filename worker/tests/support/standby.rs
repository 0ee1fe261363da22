//! Support for the standby and promotion tests: worker processes started as StatefulSet pods
//! (a pod name, their own state volume and port), assignment documents sent as the operator
//! sends them, and the workers' task reports read back.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::{Job, Worker, wait_for};
use std::path::{Path, PathBuf};
use std::time::Duration;
use streamkeeper_contract::{
    AssignmentDocument, TaskAssignment, TaskReport, TaskReportsDocument, Versioned,
};

/// A worker process as one pod of the job's StatefulSet.
pub struct Pod {
    pub name: String,
    pub address: String,
    pub state: PathBuf,
    pub worker: Worker,
}

impl Pod {
    /// Starts pod `name` of `replicas` on its own volume under the job's directory.
    pub fn start(job: &mut Job, name: &str, replicas: u32) -> Self {
        let state = job.dir.path().join(format!("volume-{name}"));
        let address = format!("127.0.0.1:{}", super::free_port());
        let worker = spawn(job, name, replicas, &state, &address);
        let pod = Self {
            name: name.into(),
            address,
            state,
            worker,
        };
        pod.wait_until_serving();
        pod
    }

    /// Starts the pod's process again on the same volume and port (a returning pod).
    pub fn restart(&mut self, job: &mut Job, replicas: u32) {
        self.worker = spawn(job, &self.name, replicas, &self.state, &self.address);
        self.wait_until_serving();
    }

    fn wait_until_serving(&self) {
        wait_for(
            &format!("{} serves HTTP", self.name),
            Duration::from_secs(30),
            || super::http_get(&self.address, "/healthz").is_some_and(|(status, _)| status == 200),
        );
    }

    /// The pod's task reports; empty while it does not answer.
    pub fn reports(&self) -> Vec<TaskReport> {
        reports_at(&self.address)
    }

    pub fn report(&self, task: u32) -> Option<TaskReport> {
        self.reports().into_iter().find(|r| r.task == task)
    }

    /// Sends `document`; the HTTP status and body.
    pub fn assign(&self, document: &AssignmentDocument) -> (u16, String) {
        let body = String::from_utf8(document.to_json()).unwrap();
        http_put(&self.address, "/v1/assignment", &body).expect("the worker answers")
    }
}

fn spawn(job: &mut Job, name: &str, replicas: u32, state: &Path, address: &str) -> Worker {
    let kept = job.env.clone();
    job.env.extend([
        ("POD_NAME".to_string(), name.to_string()),
        ("STREAMKEEPER_REPLICAS".to_string(), replicas.to_string()),
    ]);
    let worker = job.spawn_with(state, None, Some(address));
    job.env = kept;
    worker
}

/// The task reports of the worker listening on `address`; empty while it does not answer.
pub fn reports_at(address: &str) -> Vec<TaskReport> {
    super::http_get(address, "/v1/tasks")
        .filter(|(status, _)| *status == 200)
        .and_then(|(_, body)| TaskReportsDocument::from_json(body.as_bytes()).ok())
        .map(|document| document.tasks)
        .unwrap_or_default()
}

/// One task's place in a document: its active pod and standbys.
pub fn document(generation: u64, tasks: &[(&str, &[&str])]) -> AssignmentDocument {
    AssignmentDocument {
        version: 1,
        generation,
        tasks: tasks
            .iter()
            .enumerate()
            .map(|(task, (active, standbys))| TaskAssignment {
                task: u32::try_from(task).unwrap(),
                active: Some((*active).to_string()),
                standbys: standbys.iter().map(|s| (*s).to_string()).collect(),
            })
            .collect(),
    }
}

/// Sends `document` to every pod and expects each to act on it.
pub fn assign_all(pods: &[&Pod], document: &AssignmentDocument) {
    for pod in pods {
        let (status, body) = pod.assign(document);
        assert_eq!(
            status, 200,
            "{} refused generation {}: {body}",
            pod.name, document.generation
        );
    }
}

/// A standby copy of `task` on `pod` has warmed up and is at most `lag` records behind.
pub fn warm_standby(pod: &Pod, task: u32, lag: i64) -> bool {
    pod.report(task).is_some_and(|r| {
        r.role == streamkeeper_contract::task_report::TaskRole::Standby
            && r.phase == streamkeeper_contract::task_report::TaskPhase::Running
            && r.changelog_lag.is_some_and(|l| l <= lag)
    })
}

/// `task` runs as active on `pod` and has committed at least `transactions` transactions.
pub fn active_with_commits(pod: &Pod, task: u32, transactions: u64) -> bool {
    pod.report(task).is_some_and(|r| {
        r.role == streamkeeper_contract::task_report::TaskRole::Active
            && r.phase == streamkeeper_contract::task_report::TaskPhase::Running
            && r.committed_transactions >= transactions
    })
}

/// A plain HTTP PUT with a JSON body on loopback, with the test jobs' worker token as the
/// operator sends it: (status, body).
pub fn http_put(address: &str, path: &str, body: &str) -> Option<(u16, String)> {
    let authorization = format!("Bearer {}", super::HTTP_TOKEN);
    http_put_with(address, path, body, &[("Authorization", &authorization)])
}

/// [`http_put`] with exactly `headers` added.
pub fn http_put_with(
    address: &str,
    path: &str,
    body: &str,
    headers: &[(&str, &str)],
) -> Option<(u16, String)> {
    super::http_request(address, "PUT", path, headers, body, Duration::from_secs(30))
}

/// The `seconds` of the newest "promotion: first commit" line of `log` for `task`.
pub fn promotion_seconds(log: &str, task: u32) -> Option<f64> {
    log.lines()
        .filter(|line| line.contains("promotion: first commit as the new owner"))
        .filter(|line| line.contains(&format!("task={task}")))
        .filter_map(|line| {
            let rest = line.split("seconds=").nth(1)?;
            rest.split_whitespace().next()?.parse().ok()
        })
        .next_back()
}
