//! One simulated worker process: the assignment it acts on, the reports it gives, and the faults
//! it is told to show. Pure: no sockets, no clock (callers pass the time), so every answer can be
//! unit-tested. [`crate::serve`] puts it behind a listener.
//!
//! It answers as the real worker does (`worker/src/runtime/assignment.rs` and its HTTP routes)
//! where the operator looks: an older generation than the one acted on is refused (409), as is
//! another document under the same generation; a task named active is reported `Active` and
//! `Running` with growing commits, a standby `Standby` and `Running`, with the lag it is told.

use std::collections::BTreeMap;
use std::time::Duration;
use streamkeeper_contract::task_report::{TaskPhase, TaskRole};
use streamkeeper_contract::{AssignmentDocument, FormatError, TaskReport, TaskReportsDocument};
use streamkeeper_contract::{Versioned, worker_http::ErrorDocument};

/// The most arrivals kept per pod: a bench reads them every few seconds, and an operator that
/// re-sends an unchanged document is not recorded again, so this is never reached in practice;
/// it only bounds memory if something sends new generations in a loop.
pub const MAX_ARRIVALS: usize = 10_000;

/// Whether the simulated process takes connections and answers them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Availability {
    /// Listening and answering.
    Serving,
    /// Not listening: a connection is refused, as to a killed process.
    Refusing,
    /// Listening, taking connections and requests, and never answering: a frozen process.
    Silent,
}

/// The faults a pod shows. [`Faults::default`] is a healthy worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Faults {
    pub availability: Availability,
    /// Every answer waits this long first (an overloaded process).
    pub delay_ms: u64,
    /// Reported as every task's lag: `inputLag` of an active, `changelogLag` of a standby.
    pub lag: i64,
    /// Answers as a worker from before the report stream: 404 on `GET /v1/tasks/stream`.
    pub older: bool,
}

impl Default for Faults {
    fn default() -> Self {
        Self {
            availability: Availability::Serving,
            delay_ms: 0,
            lag: 0,
            older: false,
        }
    }
}

/// What the server does with a request, given the faults at the time it arrives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plan {
    /// Hold the request until the faults change (frozen).
    Hold,
    /// Answer after this delay (zero: at once).
    AnswerAfter(Duration),
}

impl Faults {
    /// How a request that reached the listener is handled. A refusing pod has no listener, so
    /// a request never gets here; one that was already in flight when the listener closed is
    /// dropped with its connection.
    pub fn plan(&self) -> Plan {
        match self.availability {
            Availability::Silent | Availability::Refusing => Plan::Hold,
            Availability::Serving => Plan::AnswerAfter(Duration::from_millis(self.delay_ms)),
        }
    }
}

/// An assignment document as the pod received it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Arrival {
    /// When it arrived, in milliseconds since the Unix epoch (the bench's clock is the same).
    pub at_ms: u64,
    pub generation: u64,
    /// The process that received it.
    pub process: String,
}

/// Why an assignment was not taken; the status and message are the real worker's.
#[derive(Debug, thiserror::Error)]
pub enum AssignmentRefused {
    #[error(
        "assignment generation {got} is older than generation {seen}, which this worker has acted on"
    )]
    Stale { seen: u64, got: u64 },
    #[error(
        "assignment generation {0} differs from the document of the same generation this worker has"
    )]
    Conflict(u64),
    #[error("not an assignment document: {0}")]
    Invalid(#[from] FormatError),
}

impl AssignmentRefused {
    pub fn status(&self) -> u16 {
        match self {
            AssignmentRefused::Stale { .. } | AssignmentRefused::Conflict(_) => 409,
            AssignmentRefused::Invalid(_) => 400,
        }
    }

    pub fn document(&self) -> ErrorDocument {
        ErrorDocument::new(self.to_string())
    }
}

/// The state of one simulated worker process on one pod.
#[derive(Debug, Clone)]
pub struct PodState {
    /// The pod's name: the assignment document names pods, not addresses.
    name: String,
    /// Fresh at each simulated process start, reported as `process`.
    process: String,
    document: Option<AssignmentDocument>,
    /// Transactions committed by each task this process runs as active, since it became so.
    commits: BTreeMap<u32, u64>,
    arrivals: Vec<Arrival>,
    /// Documents received again unchanged (not recorded as arrivals).
    repeats: u64,
}

impl PodState {
    /// A process that has just started: no assignment yet.
    pub fn new(name: impl Into<String>, process: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            process: process.into(),
            document: None,
            commits: BTreeMap::new(),
            arrivals: Vec::new(),
            repeats: 0,
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn process(&self) -> &str {
        &self.process
    }

    pub fn generation(&self) -> Option<u64> {
        self.document.as_ref().map(|d| d.generation)
    }

    pub fn arrivals(&self) -> &[Arrival] {
        &self.arrivals
    }

    pub fn repeats(&self) -> u64 {
        self.repeats
    }

    /// The process was killed and started again: everything it held in memory is gone. The
    /// arrivals stay, as the bench's record of what this pod received.
    pub fn restart(&mut self, process: impl Into<String>) {
        self.process = process.into();
        self.document = None;
        self.commits.clear();
    }

    /// `PUT /v1/assignment`: takes `body` if it is a document at least as new as the one held,
    /// and answers each of this pod's tasks' roles.
    pub fn assign(
        &mut self,
        body: &[u8],
        now_ms: u64,
    ) -> Result<BTreeMap<u32, TaskRole>, AssignmentRefused> {
        let document = AssignmentDocument::from_json(body)?;
        if let Some(seen) = &self.document {
            if document.generation < seen.generation {
                return Err(AssignmentRefused::Stale {
                    seen: seen.generation,
                    got: document.generation,
                });
            }
            if document.generation == seen.generation && document != *seen {
                return Err(AssignmentRefused::Conflict(document.generation));
            }
            if document == *seen {
                self.repeats += 1;
                return Ok(self.roles());
            }
        }
        if self.arrivals.len() >= MAX_ARRIVALS {
            self.arrivals.remove(0);
        }
        self.arrivals.push(Arrival {
            at_ms: now_ms,
            generation: document.generation,
            process: self.process.clone(),
        });
        self.document = Some(document);
        let roles = self.roles();
        // A task that stays active keeps its commits; one that becomes active starts from none.
        self.commits
            .retain(|task, _| roles.get(task) == Some(&TaskRole::Active));
        for (task, role) in &roles {
            if *role == TaskRole::Active {
                self.commits.entry(*task).or_insert(0);
            }
        }
        Ok(roles)
    }

    /// This pod's role in each task of the document it acts on.
    fn roles(&self) -> BTreeMap<u32, TaskRole> {
        let Some(document) = &self.document else {
            return BTreeMap::new();
        };
        let active = document
            .active_tasks_of(&self.name)
            .map(|task| (task, TaskRole::Active));
        let standby = document
            .standby_tasks_of(&self.name)
            .map(|task| (task, TaskRole::Standby));
        active.chain(standby).collect()
    }

    /// `GET /v1/tasks`: every task of this pod Running in its role, `lag` behind. Each answer
    /// counts one more commit for each active task, so an operator waiting for the new owner's
    /// first commit sees it on the next poll.
    pub fn reports(&mut self, lag: i64) -> TaskReportsDocument {
        let reports = self
            .roles()
            .into_iter()
            .map(|(task, role)| {
                let mut report = TaskReport::new(task, role);
                report.phase = TaskPhase::Running;
                match role {
                    TaskRole::Active => {
                        let commits = self.commits.entry(task).or_insert(0);
                        *commits += 1;
                        report.committed_transactions = *commits;
                        report.input_lag = Some(lag);
                    }
                    TaskRole::Standby => report.changelog_lag = Some(lag),
                }
                report
            })
            .collect();
        TaskReportsDocument::new(reports)
            .acting_on(self.generation())
            .answered_by(&self.process)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use streamkeeper_contract::TaskAssignment;

    fn document(generation: u64, active_of_task_0: &str) -> Vec<u8> {
        AssignmentDocument {
            version: 1,
            generation,
            tasks: vec![
                TaskAssignment {
                    task: 0,
                    active: Some(active_of_task_0.into()),
                    standbys: vec![other(active_of_task_0)],
                },
                TaskAssignment {
                    task: 1,
                    active: Some("job-1".into()),
                    standbys: vec!["job-0".into()],
                },
            ],
        }
        .to_json()
    }

    fn other(pod: &str) -> String {
        if pod == "job-0" { "job-1" } else { "job-0" }.into()
    }

    #[test]
    fn a_fresh_process_reports_no_tasks_and_no_generation() {
        let mut pod = PodState::new("job-0", "p1");
        let reports = pod.reports(0);
        assert!(reports.tasks.is_empty());
        assert_eq!(reports.generation, None);
        assert_eq!(reports.process.as_deref(), Some("p1"));
    }

    #[test]
    fn an_assigned_pod_reports_its_tasks_running_in_their_roles_with_growing_commits() {
        let mut pod = PodState::new("job-0", "p1");
        let roles = pod.assign(&document(3, "job-0"), 1_000).unwrap();
        assert_eq!(
            roles,
            BTreeMap::from([(0, TaskRole::Active), (1, TaskRole::Standby)])
        );
        let first = pod.reports(7);
        assert_eq!(first.generation, Some(3));
        let active = &first.tasks[0];
        assert_eq!((active.task, active.role), (0, TaskRole::Active));
        assert_eq!(active.phase, TaskPhase::Running);
        assert_eq!(active.committed_transactions, 1);
        assert_eq!(active.input_lag, Some(7));
        let standby = &first.tasks[1];
        assert_eq!((standby.task, standby.role), (1, TaskRole::Standby));
        assert_eq!(standby.changelog_lag, Some(7));
        assert_eq!(pod.reports(0).tasks[0].committed_transactions, 2);
        assert_eq!(
            TaskReportsDocument::from_json(&first.to_json()).unwrap(),
            first
        );
    }

    #[test]
    fn each_new_document_is_recorded_once_and_repeats_are_only_counted() {
        let mut pod = PodState::new("job-0", "p1");
        pod.assign(&document(3, "job-0"), 1_000).unwrap();
        pod.assign(&document(3, "job-0"), 2_000).unwrap();
        pod.assign(&document(4, "job-1"), 3_000).unwrap();
        let seen: Vec<_> = pod
            .arrivals()
            .iter()
            .map(|a| (a.at_ms, a.generation))
            .collect();
        assert_eq!(seen, vec![(1_000, 3), (3_000, 4)]);
        assert_eq!(pod.repeats(), 1);
    }

    #[test]
    fn an_older_or_conflicting_document_is_refused_as_the_worker_does() {
        let mut pod = PodState::new("job-0", "p1");
        pod.assign(&document(5, "job-0"), 0).unwrap();
        let stale = pod.assign(&document(4, "job-0"), 0).unwrap_err();
        assert!(matches!(
            stale,
            AssignmentRefused::Stale { seen: 5, got: 4 }
        ));
        assert_eq!(stale.status(), 409);
        let conflict = pod.assign(&document(5, "job-1"), 0).unwrap_err();
        assert!(matches!(conflict, AssignmentRefused::Conflict(5)));
        let invalid = pod.assign(b"{}", 0).unwrap_err();
        assert_eq!(invalid.status(), 400);
        assert_eq!(pod.generation(), Some(5));
    }

    #[test]
    fn a_promoted_task_starts_counting_commits_from_none() {
        let mut pod = PodState::new("job-1", "p1");
        pod.assign(&document(1, "job-0"), 0).unwrap();
        pod.reports(0);
        pod.assign(&document(2, "job-1"), 0).unwrap();
        let task_0 = &pod.reports(0).tasks[0];
        assert_eq!(task_0.role, TaskRole::Active);
        assert_eq!(task_0.committed_transactions, 1);
    }

    #[test]
    fn a_restarted_process_has_a_new_name_and_no_assignment_but_keeps_the_record() {
        let mut pod = PodState::new("job-0", "p1");
        pod.assign(&document(5, "job-0"), 10).unwrap();
        pod.restart("p2");
        let reports = pod.reports(0);
        assert_eq!(reports.process.as_deref(), Some("p2"));
        assert_eq!(reports.generation, None);
        assert!(reports.tasks.is_empty());
        // A fresh process takes an older generation: it has recorded none.
        pod.assign(&document(2, "job-0"), 20).unwrap();
        assert_eq!(pod.arrivals().len(), 2);
        assert_eq!(pod.arrivals()[1].process, "p2");
    }

    #[test]
    fn each_fault_plans_its_answer() {
        let healthy = Faults::default();
        assert_eq!(healthy.plan(), Plan::AnswerAfter(Duration::ZERO));
        let slow = Faults {
            delay_ms: 250,
            ..healthy
        };
        assert_eq!(slow.plan(), Plan::AnswerAfter(Duration::from_millis(250)));
        for availability in [Availability::Silent, Availability::Refusing] {
            let frozen = Faults {
                availability,
                ..slow
            };
            assert_eq!(frozen.plan(), Plan::Hold);
        }
    }
}
