//! A rolling upgrade through the whole system (operator binary, local node agent, worker
//! processes, real Kafka, S3 and apiserver): a new `restartNonce` on 3 pods with 1 standby per
//! task, input flowing. Each pod hands its tasks to caught-up standbys before it is deleted
//! (`HandedOff` Events, no `Promoted` one), no task stalls beyond the handoff bound, and the
//! output is exactly one count per event. Its own test binary, so it never shares the machine
//! with the kill -9 scene of `operator_failover.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

mod operator_support;

use kube::api::Api;
use operator_support::cards::exact_output;
use operator_support::failover::*;
use std::time::Duration;
use streamkeeper_contract::task_report::TaskPhase;

/// The longest time any task went without a new commit while `until` had not yet returned
/// true, watching every pod's reports every 50 ms (a task's progress is its owner and that
/// owner's count of committed transactions).
async fn longest_stall(
    system: &System,
    mut until: impl AsyncFnMut() -> bool,
) -> std::collections::BTreeMap<u32, Duration> {
    use std::collections::BTreeMap;
    use std::time::Instant;
    use streamkeeper_contract::task_report::TaskRole;
    let deadline = Instant::now() + WAIT;
    // Per task and pod, the committed transactions last seen; per task, the last progress.
    let mut counts: BTreeMap<(u32, String), u64> = BTreeMap::new();
    let mut progress: BTreeMap<u32, Instant> = BTreeMap::new();
    let mut longest: BTreeMap<u32, Duration> = BTreeMap::new();
    while !until().await {
        assert!(
            Instant::now() < deadline,
            "the rolling upgrade did not finish"
        );
        let now = Instant::now();
        for (pod, reports) in system.reports().await {
            for report in reports {
                if report.role != TaskRole::Active || report.phase != TaskPhase::Running {
                    continue;
                }
                let seen = counts.entry((report.task, pod.clone())).or_insert(0);
                // A change to a non-zero count is a commit (a restarted copy counts from 0).
                if report.committed_transactions != *seen && report.committed_transactions > 0 {
                    progress.insert(report.task, now);
                }
                *seen = report.committed_transactions;
                progress.entry(report.task).or_insert(now);
            }
        }
        for (task, at) in &progress {
            let stalled = now.duration_since(*at);
            let worst = longest.entry(*task).or_default();
            *worst = (*worst).max(stalled);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    longest
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rolling_upgrade_hands_every_task_off_to_a_warm_standby_first() {
    use k8s_openapi::api::apps::v1::StatefulSet;
    use kube::api::{Patch, PatchParams};
    use streamkeeper::api::StatefulStreamJob;
    let system = System::start("op-rolling", 140, 3, 1, 2_000).await;
    system.settled(1).await;
    let sets: Api<StatefulSet> = Api::namespaced(system.client.clone(), &system.namespace);
    wait_until("every pod Ready", async || {
        let status = sets.get(system.name).await.ok()?.status?;
        (status.ready_replicas == Some(3)).then_some(())
    })
    .await;
    // Input flows through the whole roll: stopped once it is over (at most 20 minutes).
    let producing = produce_in_background(&system.input, 2_000, 12_000);
    tokio::time::sleep(Duration::from_secs(1)).await;

    // A new restartNonce: every pod is replaced, one at a time, each after handing its tasks
    // to caught-up standbys, the next only once the copies are warm again. A pod deleted while
    // it still ran tasks would be a failover (a `Promoted` Event): there must be none.
    let promoted_before = system.event_notes("Promoted").await;
    let jobs: Api<StatefulStreamJob> = Api::namespaced(system.client.clone(), &system.namespace);
    jobs.patch(
        system.name,
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({ "spec": { "restartNonce": "upgrade-1" } })),
    )
    .await
    .unwrap();
    wait_until("the operator applied the new template", async || {
        let set = sets.get(system.name).await.ok()?;
        let nonce = set
            .spec?
            .template
            .metadata?
            .annotations?
            .get("streamkeeper.dev/restart-nonce")
            .cloned();
        (nonce.as_deref() == Some("upgrade-1")).then_some(())
    })
    .await;
    let stalls = longest_stall(&system, async || {
        // OnDelete never moves `currentRevision`: the roll is done when every pod is from the
        // update revision and Ready, and every copy is warm again.
        let set = sets.get(system.name).await.unwrap();
        let status = set.status.clone().unwrap_or_default();
        let revision = status.update_revision.clone().unwrap_or_default();
        let pods = system.pods().await;
        let rolled = status.observed_generation == set.metadata.generation
            && status.ready_replicas == Some(3)
            && pods.len() == 3
            && pods.iter().all(|pod| {
                pod.metadata.deletion_timestamp.is_none()
                    && pod
                        .metadata
                        .labels
                        .as_ref()
                        .and_then(|labels| labels.get("controller-revision-hash"))
                        == Some(&revision)
            });
        if !rolled {
            return false;
        }
        let reports = system.reports().await;
        system
            .document()
            .await
            .is_some_and(|document| settled(&document, &reports, 1))
    })
    .await;
    eprintln!("longest stall per task during the rolling upgrade: {stalls:?}");
    for (task, stall) in &stalls {
        assert!(
            *stall <= Duration::from_secs(5),
            "task {task} stalled {stall:?} in the upgrade (handoff bound 5 s)"
        );
    }
    let handed_off = system.event_notes("HandedOff").await;
    assert!(!handed_off.is_empty(), "the upgrade handed tasks off");
    let promoted = system.event_notes("Promoted").await;
    assert_eq!(
        promoted.len(),
        promoted_before.len(),
        "no task was failed over in the upgrade: {promoted:?}"
    );

    let events = producing.stop();
    wait_until("exactly one count per event", async || {
        exact_output(&system.output, PARTITIONS, events)
    })
    .await;
    system.clean_up().await;
}
