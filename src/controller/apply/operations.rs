//! Operations beyond applying objects: the final checkpoint before suspend and replacing worker
//! pods whose template is outdated (the StatefulSet uses `OnDelete`).
//! The clean-up of `deletionPolicy: Delete` is in [`crate::controller::apply::cleanup`].

use crate::adapters::worker_client;
use crate::controller::ValidatedJob;
use crate::controller::apply::ApiError;
use crate::controller::read_facts::job_pods;
use crate::controller::{Context, ReconcileError};
use crate::failover::DrainTarget;
use crate::k8s::events::{job_reference, publish};
use crate::k8s::names;
use crate::k8s::worker_token;
use crate::vocabulary::reasons;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams};

/// The label the StatefulSet controller puts on each pod: the revision it was created from.
const REVISION_LABEL: &str = "controller-revision-hash";

/// What the suspend step reports in the `Suspended` condition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SuspendNote {
    pub reason: &'static str,
    pub message: String,
}

/// Before scaling a running job to zero: `POST /v1/checkpoints` with the job's worker token on
/// every worker pod, at its pod address (the headless Service's DNS name before it has one). Pods that cannot be reached are named; suspend goes on
/// anyway, because the changelog and the volumes still hold the exact state (the checkpoint only
/// shortens the restore). `None` when the job is already scaled to zero.
pub async fn final_checkpoint_before_suspend(
    ctx: &Context,
    job: &ValidatedJob,
) -> Result<Option<SuspendNote>, ReconcileError> {
    let sets: Api<StatefulSet> = Api::namespaced(ctx.client.clone(), &job.namespace);
    let name = names::stateful_set(&job.name);
    let current = sets.get_opt(&name).await.map_err(|source| ApiError {
        action: "read",
        kind: "StatefulSet".into(),
        namespace: job.namespace.clone(),
        name: name.clone(),
        source,
    })?;
    let running = current
        .and_then(|set| set.spec)
        .and_then(|spec| spec.replicas)
        .is_some_and(|replicas| replicas > 0);
    if !running {
        return Ok(None);
    }
    let pods = job_pods(ctx, job).await?;
    // Without the Secret (deleted just now) the request goes without a token and the worker
    // refuses it, naming why; the suspend still goes on, as for an unreachable worker.
    let token = worker_token::read((&ctx.client, &ctx.secrets), &job.namespace, &job.name).await?;
    let token = token.as_ref();
    let port = u16::try_from(names::HTTP_PORT).unwrap_or(8080);
    let timeout = ctx.settings.final_checkpoint_timeout;
    let service = names::service(&job.name);
    // Asking for a checkpoint is an action on the workers: only the leader takes it.
    ctx.leadership.check()?;
    let calls = pods.iter().map(|pod| {
        // The worker listens on its pod address; the headless Service's DNS name is the
        // fallback for a pod whose status has none yet.
        let host = pod
            .status
            .as_ref()
            .and_then(|s| s.pod_ip.clone())
            .unwrap_or_else(|| format!("{}.{service}.{}.svc", pod.name_any(), job.namespace));
        async move {
            let result = worker_client::request_checkpoint(&host, port, token, timeout).await;
            (pod.name_any(), result)
        }
    });
    let results = futures::future::join_all(calls).await;
    let (done, failed): (Vec<_>, Vec<_>) = results.into_iter().partition(|(_, r)| r.is_ok());
    let done: Vec<String> = done.into_iter().map(|(pod, _)| pod).collect();
    let failed: Vec<String> = failed
        .into_iter()
        .map(|(pod, result)| match result {
            Err(error) => format!("{pod} ({error})"),
            Ok(()) => pod,
        })
        .collect();
    let note = if failed.is_empty() {
        SuspendNote {
            reason: reasons::FINAL_CHECKPOINT,
            message: format!(
                "final checkpoint taken on {} worker pods, then scaled to zero",
                done.len()
            ),
        }
    } else {
        SuspendNote {
            reason: reasons::FINAL_CHECKPOINT_INCOMPLETE,
            message: format!(
                "scaled to zero; no final checkpoint from {}; their tasks resume from the changelog and the volumes",
                failed.join(", ")
            ),
        }
    };
    tracing::info!(job = %job.name, message = %note.message, "suspending");
    let Some(job_object) = job_reference(&ctx.client, &job.namespace, &job.name).await else {
        return Ok(Some(note));
    };
    publish(
        &ctx.recorder,
        &job_object,
        note.reason == reasons::FINAL_CHECKPOINT_INCOMPLETE,
        note.reason,
        note.message.clone(),
    )
    .await;
    Ok(Some(note))
}

/// Where replacing outdated pods stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RollState {
    /// Pods still on an old template revision (not counting those already being deleted).
    pub outdated: usize,
    /// The StatefulSet controller has not yet seen the newest template.
    pub waiting_for_controller: bool,
}

impl RollState {
    pub fn in_progress(&self) -> bool {
        self.outdated > 0 || self.waiting_for_controller
    }
}

fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|status| status.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True")
        })
}

/// Which outdated pods to delete now: every outdated pod that is not ready (it serves nothing, so
/// replacing it costs nothing), plus one ready outdated pod when every other pod is ready, none
/// is being replaced and `next_may_go` (the copies of the last one replaced are warm), so at
/// most one working pod is down at a time, as the PDB allows.
pub fn pods_to_replace<'a>(
    pods: &'a [Pod],
    update_revision: &str,
    next_may_go: bool,
) -> (Vec<&'a Pod>, usize) {
    let live: Vec<&Pod> = pods
        .iter()
        .filter(|pod| pod.metadata.deletion_timestamp.is_none())
        .collect();
    let outdated: Vec<&Pod> = live
        .iter()
        .copied()
        .filter(|pod| pod.labels().get(REVISION_LABEL).map(String::as_str) != Some(update_revision))
        .collect();
    let mut chosen: Vec<&Pod> = outdated
        .iter()
        .copied()
        .filter(|pod| !is_ready(pod))
        .collect();
    let someone_terminating = live.len() < pods.len();
    let others_ready = live
        .iter()
        .all(|pod| is_ready(pod) || chosen.iter().any(|c| c.name_any() == pod.name_any()));
    if chosen.is_empty()
        && !someone_terminating
        && others_ready
        && next_may_go
        && let Some(first_ready) = outdated.first()
    {
        chosen.push(first_ready);
    }
    (chosen, outdated.len())
}

/// Deletes worker pods whose template revision is not the StatefulSet's update revision; the
/// StatefulSet controller recreates them from the current template (same name, same volume).
pub async fn replace_outdated_pods(
    ctx: &Context,
    job: &ValidatedJob,
    stateful_set: &StatefulSet,
) -> Result<RollState, ReconcileError> {
    let status = stateful_set.status.clone().unwrap_or_default();
    let caught_up = status.observed_generation.is_some()
        && status.observed_generation == stateful_set.metadata.generation;
    let Some(update_revision) = status.update_revision.filter(|_| caught_up) else {
        return Ok(RollState {
            outdated: 0,
            waiting_for_controller: true,
        });
    };
    let pods = job_pods(ctx, job).await?;
    // With standbys, a working pod first hands its tasks to caught-up standbys (the failover
    // loop moves them while the pod still runs), and the next pod waits for warm copies again.
    let hand_off = job.workers.standby_replicas > 0;
    let next_may_go = !hand_off || ctx.failovers.settled(&job.namespace, &job.name);
    let (mut chosen, outdated) = pods_to_replace(&pods, &update_revision, next_may_go);
    // One pod drains at a time; the one already draining stays first until it is gone.
    let draining = ctx
        .failovers
        .draining(&job.namespace, &job.name)
        .map(|target| target.pod);
    chosen.sort_by_key(|pod| Some(pod.name_any()) != draining);
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &job.namespace);
    let mut deleted = Vec::new();
    let mut drains = false;
    for pod in chosen {
        let name = pod.name_any();
        // Ready or not (a pod taking over a task is briefly not ready), a pod that still holds
        // tasks hands them off first; one whose tasks already failed over holds nothing.
        if hand_off && !ctx.failovers.drained(&job.namespace, &job.name, &name) {
            if !drains {
                tracing::info!(job = %job.name, pod = %name, "handing the pod's tasks off before replacing it");
                // The drain lasts until the pod is replaced, so the stopping pod is never
                // given copies again between its deletion and its exit.
                let target = DrainTarget {
                    pod: name.clone(),
                    uid: pod.uid().unwrap_or_default(),
                };
                ctx.failovers.drain(&job.namespace, &job.name, target);
                drains = true;
            }
            continue;
        }
        match api.delete(&name, &DeleteParams::default()).await {
            Ok(_) => deleted.push(name),
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(source) => {
                return Err(ApiError {
                    action: "delete",
                    kind: "Pod".into(),
                    namespace: job.namespace.clone(),
                    name,
                    source,
                }
                .into());
            }
        }
    }
    if !deleted.is_empty() {
        tracing::info!(job = %job.name, pods = ?deleted, %update_revision, "replacing outdated worker pods");
        if let Some(job_object) = job_reference(&ctx.client, &job.namespace, &job.name).await {
            publish(
                &ctx.recorder,
                &job_object,
                false,
                reasons::PODS_RESTARTED,
                format!(
                    "replacing {} for template revision {update_revision}",
                    deleted.join(", ")
                ),
            )
            .await;
        }
    }
    Ok(RollState {
        outdated,
        waiting_for_controller: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, revision: &str, ready: bool, terminating: bool) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": name,
                "labels": {REVISION_LABEL: revision},
                "deletionTimestamp": if terminating { Some("2026-01-01T00:00:00Z") } else { None },
            },
            "status": {"conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]}
        }))
        .unwrap()
    }

    fn names(chosen: &[&Pod]) -> Vec<String> {
        chosen.iter().map(|p| p.name_any()).collect()
    }

    #[test]
    fn not_ready_outdated_pods_go_at_once() {
        let pods = [
            pod("j-0", "old", false, false),
            pod("j-1", "old", false, false),
            pod("j-2", "new", false, false),
        ];
        let (chosen, outdated) = pods_to_replace(&pods, "new", true);
        assert_eq!(names(&chosen), ["j-0", "j-1"]);
        assert_eq!(outdated, 2);
    }

    #[test]
    fn ready_outdated_pods_go_one_at_a_time() {
        let pods = [
            pod("j-0", "old", true, false),
            pod("j-1", "old", true, false),
            pod("j-2", "new", true, false),
        ];
        let (chosen, outdated) = pods_to_replace(&pods, "new", true);
        assert_eq!(names(&chosen), ["j-0"]);
        assert_eq!(outdated, 2);
        // The copies of the last replaced pod are still warming: the next one waits.
        let (chosen, _) = pods_to_replace(&pods, "new", false);
        assert!(chosen.is_empty());

        let replacing = [
            pod("j-0", "old", true, true),
            pod("j-1", "old", true, false),
            pod("j-2", "new", true, false),
        ];
        let (chosen, outdated) = pods_to_replace(&replacing, "new", true);
        assert!(chosen.is_empty());
        assert_eq!(outdated, 1);

        let up_to_date = [pod("j-0", "new", true, false)];
        assert_eq!(pods_to_replace(&up_to_date, "new", true), (vec![], 0));
    }
}
