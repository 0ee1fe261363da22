//! What a job's failover loop needs to know of it: built from the validated spec and the task
//! count, by the reconcile and, on a takeover, from the status the last leader wrote
//! ([`crate::controller::resume`]).

use crate::controller::valid_job::ValidatedJob;
use crate::failover::FailoverJob;
use crate::k8s::names;

/// The loop's settings for `validated` with `tasks` tasks (its input's partitions).
pub fn failover_job(validated: &ValidatedJob, tasks: i32) -> FailoverJob {
    FailoverJob {
        namespace: validated.namespace.clone(),
        name: validated.name.clone(),
        owner: validated.owner.clone(),
        tasks: u32::try_from(tasks).unwrap_or(0),
        desired_pods: if validated.workers.suspend {
            0
        } else {
            validated.workers.replicas
        },
        standby_replicas: validated.workers.standby_replicas,
        acceptable_recovery_lag: i64::try_from(validated.acceptable_recovery_lag)
            .unwrap_or(i64::MAX),
        heartbeat_timeout: validated.heartbeat_timeout,
        port: u16::try_from(names::HTTP_PORT).unwrap_or(8080),
    }
}
