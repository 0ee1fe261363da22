//! Failover through the whole system: the operator binary, the local node agent running the
//! worker pods it creates as real processes, the real apiserver, Kafka and S3. Three pods with
//! one standby per task; input flows while the process of the pod owning task 0 is killed with
//! kill -9. The operator's heartbeat notices, the warmest standby is promoted, and the time
//! from the kill to the new owner's first committed transaction is measured. Tasks the kill did
//! not touch keep their owner; the killed pod comes back with copies; the read_committed output
//! is exactly one count per event, and a `Promoted` Event names the task.
//!
//! A frozen owner (SIGSTOP: a silent failure, no refused connection) is found by the heartbeat's
//! silence instead; its tasks move within [`FROZEN_BOUND`], and once it runs again it is fenced:
//! the output stays exact and it holds a copy again.
//!
//! A pod force-deleted mid-stream (`kubectl delete pod --force --grace-period=0`) is recreated
//! under the same name and address at once, and its new worker may answer before any poll
//! finds the port closed; its tasks still move to their standbys, as `Promoted` Events and the
//! status say, and the output stays exact.
//!
//! A stored assignment that is lost (deleted, or unreadable as here) while the operator is down
//! does not wedge the job: the next leader starts above the generation the workers recorded,
//! which they take.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

mod operator_support;

use kube::api::Api;
use operator_support::failover::*;
use std::time::Duration;
use streamkeeper::api::StatefulStreamJob;

/// The failover bound of the standby issue: p99 ≤ 5 s (the bench measures p50 and p99).
const FAILOVER_BOUND: Duration = Duration::from_secs(5);
/// A frozen owner: the heartbeat's 2 s of silence, a poll, and the promotion (measured 3.2 s
/// alone, over 4 s once with three test binaries at once), within the same p99 bound. The
/// detection time in the status (under 3 s) is what a loop held up by a frozen pod misses
/// (it was 3.8 s).
const FROZEN_BOUND: Duration = FAILOVER_BOUND;

#[tokio::test(flavor = "multi_thread")]
async fn a_killed_pods_tasks_are_promoted_on_their_standbys_within_the_bound() {
    let system = System::start("op-failover", 120, 3, 1, 2_000).await;
    let before = system.settled(1).await;

    let producing = produce_in_background(&system.input, 2_000, 30);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (victim, new_owner, failover) = system.fail_owner_of(0, "KILL").await;
    eprintln!(
        "kill -9 of {victim}: task 0 committed on {new_owner} {:.3} s later",
        failover.as_secs_f64()
    );
    assert_eq!(
        Some(&new_owner),
        before.tasks[0].standbys.first(),
        "the standby took over"
    );
    assert!(
        failover <= FAILOVER_BOUND,
        "failover took {failover:?} (bound {FAILOVER_BOUND:?})"
    );
    let after = system.document().await.unwrap();
    for (was, now) in before.tasks.iter().zip(&after.tasks) {
        if was.active.as_ref() != Some(&victim) {
            assert_eq!(
                was.active, now.active,
                "task {} was not on the killed pod",
                was.task
            );
        }
    }

    // The killed pod returns and holds copies again; the output is exact.
    producing.finish();
    system
        .recovered_exactly(std::slice::from_ref(&victim), 5_000)
        .await;
    let promoted = system.event_notes("Promoted").await;
    assert!(
        promoted.iter().any(|m| m.starts_with("task 0:")),
        "a Promoted Event names task 0: {promoted:?}"
    );

    // The status tells the story: the move of task 0 with its figures, the generation that
    // made it, and every task warm-standby'd again.
    let jobs: Api<StatefulStreamJob> = Api::namespaced(system.client.clone(), &system.namespace);
    let status = wait_until(
        "the status shows the promotion and warm standbys",
        async || {
            let status = jobs.get(system.name).await.ok()?.status?;
            let standbys_ready = status
                .conditions
                .iter()
                .any(|c| c.type_ == "StandbysReady" && c.status == "True");
            let committed = status
                .tasks
                .first()?
                .last_promotion
                .as_ref()?
                .first_commit_seconds;
            (standbys_ready && committed.is_some()).then_some(status)
        },
    )
    .await;
    let promotion = status.tasks[0].last_promotion.clone().unwrap();
    eprintln!("task 0's last promotion in the status: {promotion:?}");
    assert_eq!(promotion.reason, "Promoted");
    assert_eq!(
        (promotion.from.as_str(), promotion.to.as_str()),
        (victim.as_str(), new_owner.as_str())
    );
    assert!(
        promotion
            .detection_seconds
            .is_some_and(|s| s < FAILOVER_BOUND.as_secs_f64())
    );
    assert!(
        promotion
            .first_commit_seconds
            .is_some_and(|s| s < FAILOVER_BOUND.as_secs_f64())
    );
    let generation = status.assignment_generation.unwrap();
    assert!(
        generation >= promotion.generation && promotion.generation > 1,
        "{status:?}"
    );
    system.clean_up().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_frozen_owner_is_found_by_its_silence_fenced_and_holds_a_copy_again() {
    let system = System::start("op-frozen", 130, 3, 1, 2_000).await;
    system.settled(1).await;
    let producing = produce_in_background(&system.input, 2_000, 30);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (victim, new_owner, failover) = system.fail_owner_of(0, "STOP").await;
    eprintln!(
        "SIGSTOP of {victim}: task 0 committed on {new_owner} {:.3} s later",
        failover.as_secs_f64()
    );
    let pid = system.pid_of(&victim).await.unwrap();
    let resumed = std::process::Command::new("kill")
        .args(["-CONT", &pid])
        .status()
        .unwrap();
    assert!(resumed.success());
    assert!(
        failover <= FROZEN_BOUND,
        "a frozen owner's task moved after {failover:?} (bound {FROZEN_BOUND:?})"
    );

    // Resumed, the old owner finds itself fenced: nothing it still had open reaches the
    // output (exactly one count per event), and it serves copies again.
    producing.finish();
    system
        .recovered_exactly(std::slice::from_ref(&victim), 5_000)
        .await;
    let promotion = system.timed_promotion(0).await;
    assert_eq!(
        (promotion.from.as_str(), promotion.to.as_str()),
        (victim.as_str(), new_owner.as_str())
    );
    // Found by silence: at least the heartbeat's suspicion, and not much more.
    let detection = promotion.detection_seconds.unwrap();
    assert!(
        (2.0..3.0).contains(&detection),
        "detected after {detection} s of silence"
    );
    system.clean_up().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_force_deleted_pods_tasks_are_promoted_although_it_is_recreated_at_once() {
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::DeleteParams;
    let system = System::start("op-deleted", 250, 3, 1, 2_000).await;
    let before = system.settled(1).await;
    let victim = before.tasks[0].active.clone().unwrap();
    let owned: Vec<u32> = before.active_tasks_of(&victim).collect();

    let producing = produce_in_background(&system.input, 2_000, 30);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let pods: Api<Pod> = Api::namespaced(system.client.clone(), &system.namespace);
    let deleted = std::time::Instant::now();
    pods.delete(&victim, &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    let (new_owner, took) = system.new_owner_of(0, &victim, deleted).await;
    eprintln!(
        "force-delete of {victim}: task 0 committed on {new_owner} {:.3} s later",
        took.as_secs_f64()
    );
    assert_eq!(
        Some(&new_owner),
        before.tasks[0].standbys.first(),
        "the standby took over, not the recreated pod"
    );
    assert!(
        took <= FAILOVER_BOUND,
        "{took:?} (bound {FAILOVER_BOUND:?})"
    );

    producing.finish();
    system
        .recovered_exactly(std::slice::from_ref(&victim), 5_000)
        .await;
    let promoted = system.event_notes("Promoted").await;
    for task in &owned {
        assert!(
            promoted
                .iter()
                .any(|note| note.starts_with(&format!("task {task}:")) && note.contains(&victim)),
            "a Promoted Event names task {task}'s move off {victim}: {promoted:?}"
        );
    }
    let promotion = system.timed_promotion(0).await;
    assert_eq!(
        (promotion.from.as_str(), promotion.to.as_str()),
        (victim.as_str(), new_owner.as_str())
    );
    system.clean_up().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lost_stored_assignment_is_replaced_above_the_generation_the_workers_recorded() {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{Patch, PatchParams};
    let mut system = System::start("op-lost-doc", 230, 3, 1, 2_000).await;
    system.settled(1).await;
    // A failover first, so the workers have recorded a generation above the first one: a
    // new leader starting over at 1 would be refused by every worker.
    let producing = produce_in_background(&system.input, 2_000, 10);
    system.fail_owner_of(1, "KILL").await;
    producing.finish();
    system.settled(1).await;
    // The document the settled state was read from may not be the last: the killed pod
    // returns and may be handed tasks back. Wait for the one every worker recorded.
    let before = system
        .recorded_by_every_worker("the workers recorded the stored generation", 3)
        .await;
    assert!(before.generation > 1, "{before:?}");

    let maps: Api<ConfigMap> = Api::namespaced(system.client.clone(), &system.namespace);
    let name = format!("{}-assignment", system.name);
    let garbage = serde_json::json!({ "data": { "assignment.json": "{ not a document" } });
    maps.patch(&name, &PatchParams::default(), &Patch::Merge(&garbage))
        .await
        .unwrap();
    system.restart_operator();

    let after = system
        .recorded_by_every_worker("a new document the workers act on", 3)
        .await;
    eprintln!(
        "stored generation {} lost; the new leader wrote {}",
        before.generation, after.generation
    );
    assert!(after.generation > before.generation, "{after:?}");
    // And it works: a killed owner's task still moves (input flows, so the new owner commits).
    let producing = produce_in_background(&system.input, 3_000, 30);
    let (victim, owner, took) = system.fail_owner_of(0, "KILL").await;
    producing.finish();
    eprintln!(
        "then kill -9 of {victim}: task 0 committed on {owner} {:.3} s later",
        took.as_secs_f64()
    );
    assert!(took <= FAILOVER_BOUND, "{took:?}");
    system.clean_up().await;
}
