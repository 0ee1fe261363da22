//! The assignment rule's inputs from what the cluster and the workers say: the live pods in
//! ordinal order (so a new job's first assignment is the share a StatefulSet pod starts with:
//! task `i` on pod `i mod replicas`), and each task's copies with their lag. Pure.

use std::collections::{BTreeMap, BTreeSet};
use streamkeeper_contract::task_report::{TaskPhase, TaskReport, TaskRole};
use streamkeeper_contract::{AssignmentDocument, CopyLag, PodPlace};

/// A worker pod as the rule needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodFacts {
    pub name: String,
    pub node: Option<String>,
    pub zone: Option<String>,
}

/// The ordinal of a StatefulSet pod name (`<set>-<n>`).
pub fn ordinal(pod: &str) -> Option<u32> {
    pod.rsplit_once('-')?.1.parse().ok()
}

/// The live pods, in ordinal order.
pub fn places(pods: &[PodFacts], alive: impl Fn(&str) -> bool) -> Vec<PodPlace> {
    let mut live: Vec<&PodFacts> = pods.iter().filter(|pod| alive(&pod.name)).collect();
    live.sort_by_key(|pod| (ordinal(&pod.name).unwrap_or(u32::MAX), pod.name.clone()));
    live.into_iter()
        .map(|pod| PodPlace {
            name: pod.name.clone(),
            node: pod.node.clone(),
            zone: pod.zone.clone(),
        })
        .collect()
}

/// Each task's copies on the pods that reported, with their lag behind the changelog's end.
/// A copy that does not run yet is never within `acceptable_lag`: a planned move waits until
/// it runs (a promotion would wait for its restore first, and then the task stalls).
pub fn copies(
    reports: &[(String, Vec<TaskReport>)],
    acceptable_lag: i64,
) -> BTreeMap<u32, Vec<CopyLag>> {
    let mut copies: BTreeMap<u32, Vec<CopyLag>> = BTreeMap::new();
    for (pod, list) in reports {
        for report in list {
            if let Some(lag) = lag_of(report, acceptable_lag) {
                copies.entry(report.task).or_default().push(CopyLag {
                    pod: pod.clone(),
                    lag,
                });
            }
        }
    }
    copies
}

/// Tasks whose active under `document` says its active role was fenced under that generation
/// (or a newer one): only a newer document lets it claim the task again.
pub fn fenced_actives(
    document: Option<&AssignmentDocument>,
    reports: &[(String, Vec<TaskReport>)],
) -> BTreeSet<u32> {
    let Some(document) = document else {
        return BTreeSet::new();
    };
    let mut fenced = BTreeSet::new();
    for (pod, list) in reports {
        let actives: BTreeSet<u32> = document.active_tasks_of(pod).collect();
        for report in list {
            if actives.contains(&report.task)
                && report.fenced_in.is_some_and(|g| g >= document.generation)
            {
                fenced.insert(report.task);
            }
        }
    }
    fenced
}

/// How far a copy is behind: an active that runs is current; a standby says its lag; a copy
/// still restoring is behind by what its restore has left, and by more than `acceptable_lag`,
/// so only a running copy reads as caught up (and the rule moves no task its owner does not
/// serve yet). A fenced, failed or stopped copy is no copy to move a task to.
fn lag_of(report: &TaskReport, acceptable_lag: i64) -> Option<i64> {
    match (report.role, report.phase) {
        (TaskRole::Active, TaskPhase::Running) => Some(0),
        (TaskRole::Standby, TaskPhase::Running) => Some(report.changelog_lag.unwrap_or(0)),
        (_, TaskPhase::Restoring | TaskPhase::Created) => Some(
            report
                .restore
                .as_ref()
                .map(|r| i64::try_from(r.records_total.saturating_sub(r.records_done)))
                .and_then(Result::ok)
                .unwrap_or(i64::MAX / 2)
                .max(acceptable_lag.saturating_add(1)),
        ),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str) -> PodFacts {
        PodFacts {
            name: name.into(),
            node: Some("n".into()),
            zone: None,
        }
    }

    #[test]
    fn live_pods_come_in_ordinal_order() {
        let pods = [pod("job-10"), pod("job-2"), pod("job-0"), pod("job-1")];
        let names: Vec<String> = places(&pods, |p| p != "job-1")
            .into_iter()
            .map(|p| p.name)
            .collect();
        assert_eq!(names, ["job-0", "job-2", "job-10"]);
    }

    #[test]
    fn copies_carry_their_lag_and_fenced_ones_are_none() {
        let report = |task, role, phase, lag| TaskReport {
            phase,
            changelog_lag: lag,
            ..TaskReport::new(task, role)
        };
        let reports = vec![
            (
                "job-0".to_string(),
                vec![
                    report(0, TaskRole::Active, TaskPhase::Running, None),
                    report(1, TaskRole::Standby, TaskPhase::Running, Some(7)),
                ],
            ),
            (
                "job-1".to_string(),
                vec![
                    report(1, TaskRole::Active, TaskPhase::Fenced, None),
                    report(0, TaskRole::Standby, TaskPhase::Restoring, None),
                ],
            ),
        ];
        let copies = copies(&reports, 10);
        let lags = |task: u32| -> Vec<(String, i64)> {
            copies[&task]
                .iter()
                .map(|c| (c.pod.clone(), c.lag))
                .collect()
        };
        assert_eq!(
            lags(0),
            [
                ("job-0".to_string(), 0),
                ("job-1".to_string(), i64::MAX / 2)
            ]
        );
        assert_eq!(lags(1), [("job-0".to_string(), 7)]);
    }

    #[test]
    fn an_active_fenced_under_the_document_in_force_is_found_and_an_earlier_fence_is_not() {
        use streamkeeper_contract::TaskAssignment;
        let document = AssignmentDocument {
            version: 1,
            generation: 5,
            tasks: (0..3)
                .map(|task| TaskAssignment {
                    task,
                    active: Some(format!("job-{}", task % 2)),
                    standbys: vec![format!("job-{}", (task + 1) % 2)],
                })
                .collect(),
        };
        let fenced = |task, role, generation| TaskReport {
            fenced_in: generation,
            ..TaskReport::new(task, role)
        };
        let reports = vec![
            (
                "job-0".to_string(),
                vec![
                    fenced(0, TaskRole::Standby, Some(5)),
                    fenced(1, TaskRole::Standby, Some(5)),
                    fenced(2, TaskRole::Standby, Some(4)),
                ],
            ),
            ("job-1".to_string(), vec![fenced(1, TaskRole::Active, None)]),
        ];
        // Task 0: its active, fenced under 5. Task 1: job-0 is not its active. Task 2: fenced
        // under 4, so generation 5 already lets it claim again.
        assert_eq!(
            fenced_actives(Some(&document), &reports),
            BTreeSet::from([0])
        );
        assert!(fenced_actives(None, &reports).is_empty());
    }

    #[test]
    fn a_copy_that_does_not_run_yet_is_never_caught_up() {
        use streamkeeper_contract::task_report::{RestorePhase, RestoreProgress, RestoreSource};
        let almost_done = TaskReport {
            phase: TaskPhase::Restoring,
            restore: Some(RestoreProgress {
                phase: RestorePhase::CatchUp,
                source: RestoreSource::Local,
                records_done: 99,
                records_total: 100,
                bytes_done: 0,
                records_per_second: 0.0,
                eta_seconds: None,
                download: None,
                reprocessed_input_records: None,
            }),
            ..TaskReport::new(0, TaskRole::Standby)
        };
        let copies = copies(&[("job-1".to_string(), vec![almost_done])], 10);
        assert_eq!(
            copies[&0][0].lag, 11,
            "one record left, yet behind the acceptable lag"
        );
    }
}
