//! A worker that refuses its config: the spec is valid to the operator, but only the worker's
//! image can tell whether it offers the processor the spec names and whether the processor takes
//! its settings (a custom processor's config is free JSON). A worker that refuses exits with
//! [`CONFIG_REFUSED_EXIT_CODE`] before it runs a task, its reason as its last line, which the
//! kubelet keeps as the container's termination message (`FallbackToLogsOnError`). The job then
//! shows `Invalid` with that reason, as for a spec the operator refuses itself.

use super::next_status::{Observation, condition};
use crate::api::JobPhase;
use crate::controller::judge::conditions::ConditionStatus;
use crate::k8s::names;
use crate::vocabulary::{reasons, types};
use k8s_openapi::api::core::v1::{ContainerState, Pod};
use kube::ResourceExt;
use streamkeeper_contract::worker_config::CONFIG_REFUSED_EXIT_CODE;

/// A worker pod's refusal of its config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerRefusal {
    pub pod: String,
    /// The worker's reason (its termination message).
    pub message: String,
}

/// The first of `pods` whose worker refused its config: its container has terminated with the
/// refusal's exit code, or waits to restart after it. A worker that runs again is past it.
pub fn worker_refusal(pods: &[Pod]) -> Option<WorkerRefusal> {
    pods.iter().find_map(|pod| {
        let status = pod
            .status
            .as_ref()?
            .container_statuses
            .as_ref()?
            .iter()
            .find(|c| c.name == names::WORKER_CONTAINER)?;
        let state = status.state.as_ref()?;
        let terminated = match (&state.terminated, &state.waiting) {
            (Some(terminated), _) => terminated,
            (None, Some(_)) => status
                .last_state
                .as_ref()
                .and_then(|last: &ContainerState| last.terminated.as_ref())?,
            (None, None) => return None,
        };
        (terminated.exit_code == CONFIG_REFUSED_EXIT_CODE).then(|| WorkerRefusal {
            pod: pod.name_any(),
            message: terminated
                .message
                .as_deref()
                .map(str::trim)
                .filter(|m| !m.is_empty())
                .unwrap_or("its log says why (no termination message)")
                .to_string(),
        })
    })
}

/// The job with a refused config: `Invalid` naming the pod and its reason, not `Ready`, phase
/// `Failed`. The pods stay (they restart with a backoff); a changed spec replaces them.
pub fn refused_by_worker(observation: &mut Observation, refusal: &WorkerRefusal) {
    observation.phase = Some(JobPhase::Failed);
    observation.conditions.extend([
        condition(
            types::INVALID,
            ConditionStatus::True,
            reasons::CONFIG_REFUSED,
            format!(
                "worker pod {} refused the job's config: {}",
                refusal.pod, refusal.message
            ),
        ),
        condition(
            types::READY,
            ConditionStatus::False,
            reasons::CONFIG_REFUSED,
            "the workers refuse the job's config; fix the spec (or spec.image)",
        ),
    ]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting, ContainerStatus,
        PodStatus,
    };

    fn terminated(exit_code: i32, message: Option<&str>) -> ContainerState {
        ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code,
                message: message.map(Into::into),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn pod(name: &str, state: ContainerState, last: Option<ContainerState>) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.name = Some(name.into());
        pod.status = Some(PodStatus {
            container_statuses: Some(vec![ContainerStatus {
                name: names::WORKER_CONTAINER.into(),
                state: Some(state),
                last_state: last,
                ..Default::default()
            }]),
            ..Default::default()
        });
        pod
    }

    fn waiting() -> ContainerState {
        ContainerState {
            waiting: Some(ContainerStateWaiting {
                reason: Some("CrashLoopBackOff".into()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn running() -> ContainerState {
        ContainerState {
            running: Some(ContainerStateRunning::default()),
            ..Default::default()
        }
    }

    const REASON: &str = "refusing to start: processor `velocity-check` (version 1) refused its config: maxTransactions is 0";

    #[test]
    fn a_worker_that_exits_with_the_refusal_names_its_reason() {
        let pods = [
            pod("job-0", running(), None),
            pod("job-1", terminated(78, Some(REASON)), None),
        ];
        assert_eq!(
            worker_refusal(&pods),
            Some(WorkerRefusal {
                pod: "job-1".into(),
                message: REASON.into()
            })
        );
        let backing_off = [pod("job-2", waiting(), Some(terminated(78, Some(REASON))))];
        assert_eq!(worker_refusal(&backing_off).unwrap().pod, "job-2");
        let silent = [pod("job-3", terminated(78, None), None)];
        assert!(worker_refusal(&silent).unwrap().message.contains("log"));

        let mut observation = Observation::default();
        refused_by_worker(&mut observation, &worker_refusal(&pods).unwrap());
        assert_eq!(observation.phase, Some(JobPhase::Failed));
        let invalid = &observation.conditions[0];
        assert_eq!(invalid.status, ConditionStatus::True);
        assert_eq!(invalid.reason, reasons::CONFIG_REFUSED);
        assert!(
            invalid.message.contains("job-1") && invalid.message.contains("maxTransactions is 0")
        );
    }

    #[test]
    fn other_exits_and_a_worker_running_again_are_no_refusal() {
        for pods in [
            vec![pod("job-0", terminated(1, Some("panicked")), None)],
            vec![pod("job-0", terminated(137, None), None)],
            vec![pod("job-0", waiting(), Some(terminated(1, None)))],
            vec![pod("job-0", running(), Some(terminated(78, Some(REASON))))],
            vec![pod("job-0", waiting(), None)],
            vec![Pod::default()],
        ] {
            assert_eq!(worker_refusal(&pods), None, "{pods:?}");
        }
    }
}
