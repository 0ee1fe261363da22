//! A new leader's first step, before any reconcile: every job whose failover loop ran under the
//! previous leader, for the spec it has now, gets its loop back at once.
//!
//! A loop is otherwise started by the job's reconcile, and a fleet's reconciles take their
//! time (each reads Kafka, S3 and the workers; at most `--max-concurrent-reconciles` run at
//! once): with a thousand jobs the last loop would start a minute after the takeover, and a pod
//! that died meanwhile would keep its tasks that long. What a loop needs (the validated spec and
//! the task count) is in the job and the status the last leader wrote, so it can start from
//! them; the job's reconcile hands the loop fresh settings when it comes (`Failovers::ensure`
//! updates a running loop), so a stale task count lasts only until then.

use crate::api::{JobPhase, StatefulStreamJob};
use crate::controller::{Context, build, validate};
use crate::failover::FailoverJob;
use std::sync::Arc;

/// The loop settings to resume `job` with, when its status shows that the last leader ran its
/// loop for the spec it has now: the status describes this generation, records an assignment
/// and the task count, and the job was not refused (Failed). A job being deleted, one never
/// assigned and one whose spec changed since are left to their reconcile.
pub fn resumable(job: &StatefulStreamJob, cluster: Option<&str>) -> Option<FailoverJob> {
    if job.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let status = job.status.as_ref()?;
    let current = status.observed_generation.is_some()
        && status.observed_generation == job.metadata.generation;
    let ran = status.assignment_generation.is_some() && !status.tasks.is_empty();
    if !current || !ran || status.phase == Some(JobPhase::Failed) {
        return None;
    }
    let validated = validate::validate(job, cluster).ok()?;
    let tasks = i32::try_from(status.tasks.len()).ok()?;
    Some(build::failover_job(&validated, tasks))
}

/// Starts the loop of every job of `jobs` that [`resumable`] accepts; returns how many.
pub fn resume_loops(ctx: &Context, jobs: &[Arc<StatefulStreamJob>]) -> usize {
    let deps = ctx.failover_deps();
    let mut resumed = 0;
    for job in jobs {
        if let Some(settings) = resumable(job, ctx.settings.cluster.as_deref()) {
            ctx.failovers.ensure(&deps, settings);
            resumed += 1;
        }
    }
    resumed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{StatefulStreamJobStatus, TaskStatus};
    use crate::controller::test_support::{job, job_with};

    /// The test job as the last leader left it: assigned, 4 tasks, status of generation 3.
    fn assigned(edit: impl FnOnce(&mut StatefulStreamJob)) -> StatefulStreamJob {
        job_with(|job| {
            job.status = Some(StatefulStreamJobStatus {
                phase: Some(JobPhase::Running),
                observed_generation: Some(3),
                assignment_generation: Some(12),
                tasks: (0..4)
                    .map(|task| TaskStatus {
                        task,
                        ..TaskStatus::default()
                    })
                    .collect(),
                ..StatefulStreamJobStatus::default()
            });
            edit(job);
        })
    }

    #[test]
    fn a_job_assigned_by_the_last_leader_resumes_with_its_recorded_tasks() {
        let settings = resumable(&assigned(|_| {}), None).expect("resumed");
        let expected = build::failover_job(&validate::validate(&job(), None).unwrap(), 4);
        assert_eq!(settings, expected);
    }

    #[test]
    fn a_changed_spec_a_new_job_a_refused_or_deleted_one_waits_for_its_reconcile() {
        let waits: [(&str, StatefulStreamJob); 5] = [
            (
                "spec changed since the status",
                assigned(|job| job.metadata.generation = Some(4)),
            ),
            ("never reconciled", job()),
            (
                "never assigned",
                assigned(|job| job.status.as_mut().unwrap().assignment_generation = None),
            ),
            (
                "refused",
                assigned(|job| job.status.as_mut().unwrap().phase = Some(JobPhase::Failed)),
            ),
            (
                "being deleted",
                assigned(|job| {
                    job.metadata.deletion_timestamp =
                        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                        ));
                }),
            ),
        ];
        for (why, job) in waits {
            assert_eq!(resumable(&job, None), None, "{why}");
        }
    }

    #[test]
    fn an_invalid_spec_is_not_resumed() {
        let invalid = assigned(|job| job.spec.replicas = 0);
        assert!(
            validate::validate(&invalid, None).is_err(),
            "the edit must make it invalid"
        );
        assert_eq!(resumable(&invalid, None), None);
    }
}
