//! The running failover loops as the rest of the operator sees them: started and stopped by
//! the reconcile, and, for a rolling upgrade, told which pod to drain and asked whether it is
//! drained and whether every copy is warm again; for a scale-down, asked how many pods to
//! keep until the leaving ones have handed everything off.
//!
//! What a loop shares with the registry is in [`super::shared`].

use super::job::{FailoverDeps, FailoverJob};
use super::poll::run;
use super::scale_down;
use super::shared::{DrainTarget, LastMoves, Shared, locked};
use super::status_requests::StatusRefresh;
use prometheus_client::metrics::gauge::Gauge;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;
use streamkeeper_contract::TaskReportsDocument;
use tokio::sync::watch;

/// The running loops, by `namespace/name`.
#[derive(Default)]
pub struct Failovers {
    loops: Mutex<HashMap<String, Running>>,
    /// The loops' requests to write a job's status now.
    pub refresh: StatusRefresh,
    /// How many loops run (`streamkeeper_operator_failover_loops`).
    running: Gauge,
}

/// One job's loop as the registry holds it.
struct Running {
    job: watch::Sender<FailoverJob>,
    shared: Shared,
}

/// What a scale-down may do now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScaleDown {
    /// Nothing leaves, or the leaving pods hold nothing and every copy is warm.
    Now,
    /// Keep this many pods: the leaving ones are still handing off.
    Keep(i32),
    /// The loop has not seen the pods yet (it just started): keep what the StatefulSet has.
    NotYetKnown,
}

impl Failovers {
    /// No loop yet; `running` counts the loops as they start and stop.
    pub fn counted_by(running: Gauge) -> Self {
        Self {
            running,
            ..Self::default()
        }
    }

    /// Sets the gauge to the loops that still run.
    fn count(&self, loops: &HashMap<String, Running>) {
        let running = loops.values().filter(|one| !one.job.is_closed()).count();
        self.running.set(i64::try_from(running).unwrap_or(i64::MAX));
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Running>> {
        locked(&self.loops)
    }

    fn shared(&self, namespace: &str, name: &str) -> Option<Shared> {
        let loops = self.lock();
        Some(loops.get(&format!("{namespace}/{name}"))?.shared.clone())
    }

    /// Starts the job's loop, or hands it the job's current settings.
    pub fn ensure(&self, deps: &FailoverDeps, job: FailoverJob) {
        let key = format!("{}/{}", job.namespace, job.name);
        let mut loops = self.lock();
        if let Some(running) = loops.get(&key)
            && !running.job.is_closed()
        {
            running.job.send_if_modified(|current| {
                let changed = *current != job;
                if changed {
                    *current = job.clone();
                }
                changed
            });
            return;
        }
        let (sender, receiver) = watch::channel(job);
        let shared = Shared::default();
        tokio::spawn(run(deps.clone(), receiver, shared.clone()));
        loops.insert(
            key,
            Running {
                job: sender,
                shared,
            },
        );
        self.count(&loops);
    }

    /// Stops the job's loop (the job is being deleted).
    pub fn stop(&self, namespace: &str, name: &str) {
        let mut loops = self.lock();
        loops.remove(&format!("{namespace}/{name}"));
        self.count(&loops);
    }

    /// Moves every task of the pod to other pods' copies, and gives it none, until it is gone.
    pub fn drain(&self, namespace: &str, name: &str, target: DrainTarget) {
        if let Some(shared) = self.shared(namespace, name) {
            *locked(&shared.draining) = Some(target);
        }
    }

    /// The pod being drained, if any.
    pub fn draining(&self, namespace: &str, name: &str) -> Option<DrainTarget> {
        self.shared(namespace, name)?.draining()
    }

    /// The drained pod holds no task in the stored assignment and has released every active
    /// copy (or no longer answers at all). True when the job has no loop.
    pub fn drained(&self, namespace: &str, name: &str, pod: &str) -> bool {
        let Some(shared) = self.shared(namespace, name) else {
            return true;
        };
        locked(&shared.view).holds_nothing(pod)
    }

    /// How many pods the StatefulSet keeps while a job with standbys scales down to `target`
    /// (`scale_down::pods_to_keep`). A drain that has not finished within
    /// [`scale_down::DRAIN_LIMIT`] is given up, and the leaving pods' tasks move as they stop.
    pub fn scale_down(&self, namespace: &str, name: &str, target: i32) -> ScaleDown {
        let Some(shared) = self.shared(namespace, name) else {
            return ScaleDown::NotYetKnown;
        };
        let view = locked(&shared.view);
        if !view.listed {
            return ScaleDown::NotYetKnown;
        }
        let keep = scale_down::pods_to_keep(&view, target);
        drop(view);
        let mut since = locked(&shared.scale_down_since);
        let Some(keep) = keep else {
            *since = None;
            return ScaleDown::Now;
        };
        let started = *since.get_or_insert_with(Instant::now);
        if started.elapsed() >= scale_down::DRAIN_LIMIT {
            tracing::warn!(job = %name, namespace = %namespace, target, limit_seconds = scale_down::DRAIN_LIMIT.as_secs(), "the leaving pods did not hand off every task in time: scaling down now, their remaining tasks move as they stop");
            return ScaleDown::Now;
        }
        ScaleDown::Keep(keep)
    }

    /// The generation of the assignment the loop holds, once it has one.
    pub fn generation(&self, namespace: &str, name: &str) -> Option<u64> {
        let shared = self.shared(namespace, name)?;
        let view = locked(&shared.view);
        Some(view.document.as_ref()?.generation)
    }

    /// What each pod that answered the loop's last poll reported, by pod name; `None` when the
    /// job has no loop.
    pub fn reports(
        &self,
        namespace: &str,
        name: &str,
    ) -> Option<BTreeMap<String, Arc<TaskReportsDocument>>> {
        self.shared(namespace, name)
            .map(|shared| locked(&shared.reports).clone())
    }

    /// Each task's last move this process decided.
    pub fn moves(&self, namespace: &str, name: &str) -> BTreeMap<u32, LastMoves> {
        self.shared(namespace, name)
            .map(|shared| locked(&shared.moves).clone())
            .unwrap_or_default()
    }

    /// Every task runs on its owner and every standby is caught up: the next pod of a rolling
    /// upgrade may go. True when the job has no loop.
    pub fn settled(&self, namespace: &str, name: &str) -> bool {
        self.shared(namespace, name)
            .is_none_or(|shared| locked(&shared.view).settled)
    }
}
