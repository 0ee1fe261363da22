//! Scaling through the whole system (operator binary, local node agent, worker processes, real
//! Kafka, S3 and apiserver): a job of 2 pods with 1 standby per task, input flowing, scaled to
//! 3 pods and back to 2. The new pod gets tasks only through warm-up copies, the removed pod
//! hands its tasks to their standbys while it still runs (the StatefulSet keeps it until it
//! holds nothing), and no active copy is ever rebuilt from a checkpoint or the
//! whole changelog while a warm copy exists: every restore an active copy reports in the scene
//! starts from its own local state. The status names the new pod's tasks as soon as they run
//! there. The output is exactly one count per event. Its own test binary, so it never shares
//! the machine with another scene.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

mod operator_support;

use kube::api::{Api, Patch, PatchParams};
use operator_support::cards::exact_output;
use operator_support::failover::*;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};
use streamkeeper::api::StatefulStreamJob;
use streamkeeper_contract::task_report::{RestoreSource, TaskPhase, TaskRole};

/// The (pod, task) of every active copy whose report names a restore: an active keeps
/// naming the restore it started with (the job's first start, from the whole changelog).
async fn active_restores(system: &System) -> BTreeSet<(String, u32)> {
    let mut seen = BTreeSet::new();
    for (pod, reports) in system.reports().await {
        for report in reports.iter().filter(|r| r.role == TaskRole::Active) {
            if report.restore.is_some() {
                seen.insert((pod.clone(), report.task));
            }
        }
    }
    seen
}

/// Watches every pod's reports every 100 ms until `done` holds; panics on an active copy that
/// restores from anything but its local state (one restoring now, or one not in `before`).
/// Returns the (pod, task) of each active copy seen restoring from local state.
async fn watch_restores(
    system: &System,
    what: &str,
    before: &BTreeSet<(String, u32)>,
    mut done: impl AsyncFnMut() -> bool,
) -> BTreeSet<(String, u32)> {
    let deadline = Instant::now() + WAIT;
    let mut local = BTreeSet::new();
    while !done().await {
        assert!(Instant::now() < deadline, "{what}: not within {WAIT:?}");
        for (pod, reports) in system.reports().await {
            for report in reports.iter().filter(|r| r.role == TaskRole::Active) {
                let Some(restore) = &report.restore else {
                    continue;
                };
                let now = report.phase == TaskPhase::Restoring;
                if !now && before.contains(&(pod.clone(), report.task)) {
                    continue;
                }
                match restore.source {
                    RestoreSource::Local => {
                        local.insert((pod.clone(), report.task));
                    }
                    RestoreSource::Unknown => {}
                    source => panic!(
                        "{what}: task {} on {pod} restores its active copy from {source:?} \
                         while a warm copy exists",
                        report.task
                    ),
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    local
}

async fn scale(system: &System, replicas: i32) {
    let jobs: Api<StatefulStreamJob> = Api::namespaced(system.client.clone(), &system.namespace);
    jobs.patch(
        system.name,
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({ "spec": { "replicas": replicas } })),
    )
    .await
    .unwrap();
}

/// The stored document places actives on exactly `pods` pods, every task runs on its owner
/// with a warm standby, and every pod of the job answers.
async fn settled_on(system: &System, pods: usize) -> bool {
    let Some(document) = system.document().await else {
        return false;
    };
    let owners: BTreeSet<&String> = document
        .tasks
        .iter()
        .filter_map(|t| t.active.as_ref())
        .collect();
    let reports = system.reports().await;
    owners.len() == pods
        && system.pods().await.len() == pods
        && reports.len() == pods
        && settled(&document, &reports, 1)
}

#[tokio::test(flavor = "multi_thread")]
async fn scaling_up_and_down_moves_tasks_through_warm_copies_only() {
    let system = System::start("op-scaling", 150, 2, 1, 2_000).await;
    system.settled(1).await;
    let producing = produce_in_background(&system.input, 2_000, 12_000);

    let before = active_restores(&system).await;
    scale(&system, 3).await;
    let up = watch_restores(&system, "scaling 2 -> 3", &before, async || {
        settled_on(&system, 3).await
    })
    .await;
    let document = system.document().await.unwrap();
    assert!(
        document.active_tasks_of("cards-2").next().is_some(),
        "the new pod runs a task: {document:?}"
    );
    eprintln!("scaling up: active copies restored from local state: {up:?}");
    // The status names the new pod's task at once, although nothing else changed in the job.
    let shown = system.status_follows(&document).await;
    eprintln!(
        "scaling up: the status named the new owners {:.2} s after they ran",
        shown.as_secs_f64()
    );
    assert!(
        shown <= STATUS_AFTER_MOVE,
        "the status named the new owners {shown:?} after they ran (bound {STATUS_AFTER_MOVE:?})"
    );

    let before = active_restores(&system).await;
    scale(&system, 2).await;
    let down = watch_restores(&system, "scaling 3 -> 2", &before, async || {
        settled_on(&system, 2).await
    })
    .await;
    eprintln!("scaling down: active copies restored from local state: {down:?}");
    let document = system.document().await.unwrap();
    assert!(
        document.active_tasks_of("cards-2").next().is_none()
            && document.tasks.iter().all(|t| t.standbys.len() == 1),
        "the removed pod holds nothing and every task has a standby again: {document:?}"
    );
    // Its tasks were handed off while it still ran, before the StatefulSet let it go; a pod
    // that is already stopping would make each move note so.
    let from_removed: Vec<String> = system
        .event_notes("HandedOff")
        .await
        .into_iter()
        .filter(|note| note.contains("moved from cards-2"))
        .collect();
    assert!(
        !from_removed.is_empty()
            && from_removed
                .iter()
                .all(|note| note.contains("(the job scales down: it leaves once it holds nothing)")),
        "every move off the removed pod is a handoff while it runs: {from_removed:?}"
    );

    let events = producing.stop();
    wait_until("exactly one count per event", async || {
        exact_output(&system.output, PARTITIONS, events)
    })
    .await;
    system.clean_up().await;
}
