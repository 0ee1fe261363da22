//! A worker that restarts while no operator leads, through the whole system (operator binary,
//! local node agent, worker processes, real Kafka, S3 and apiserver; two pods, one standby per
//! task). With the operator stopped:
//! - a killed owner comes back on its volume and, when no document comes within 10 s, runs the
//!   document recorded there again: its tasks commit again and the output is exact;
//! - an owner frozen while the operator moved its tasks, then killed, comes back with a record
//!   older than the document in force. Its former tasks were committed under the newer
//!   generation, so it runs them only as standbys and fences nobody;
//! - the same with no input after the move: the new owner never committed, so the returning
//!   worker claims the tasks and fences it (found at its next transaction, when input comes).
//!   The operator, back, sees the document's owner fenced under the document in force and
//!   issues it again under a new generation, so every task runs on its owner again and the
//!   output is exact.
//!
//! Each test a job of its own, on its own pod addresses (60, 70, 80).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

mod operator_support;

use operator_support::cards::exact_output;
use operator_support::failover::*;
use std::collections::BTreeMap;
use streamkeeper_contract::AssignmentDocument;
use streamkeeper_contract::task_report::{TaskPhase, TaskReport, TaskRole};

/// The copy of `task` that `pod` reports, if it runs.
fn running(
    reports: &BTreeMap<String, Vec<TaskReport>>,
    pod: &str,
    task: u32,
) -> Option<TaskReport> {
    reports
        .get(pod)?
        .iter()
        .find(|r| r.task == task && r.phase == TaskPhase::Running)
        .cloned()
}

/// The pod other than `victim` (the job has two).
fn other(document: &AssignmentDocument, victim: &str) -> String {
    document
        .tasks
        .iter()
        .flat_map(|t| t.active.iter().chain(&t.standbys))
        .find(|pod| *pod != victim)
        .cloned()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_killed_owner_runs_its_recorded_tasks_again_while_no_operator_leads() {
    let mut system = System::start("op-leaderless", 60, 2, 1, 2_000).await;
    let before = system.settled(1).await;
    wait_until("all the input counted", async || {
        exact_output(&system.output, PARTITIONS, 2_000)
    })
    .await;
    system.stop_operator();

    let producing = produce_in_background(&system.input, 2_000, 30);
    let (victim, killed) = system.signal_owner_of(0, "KILL").await;
    let owned: Vec<u32> = before.active_tasks_of(&victim).collect();
    let took = wait_until(
        "the restarted owner runs its recorded tasks again",
        async || {
            let reports = system.reports().await;
            owned
                .iter()
                .all(|&task| {
                    running(&reports, &victim, task).is_some_and(|r| r.role == TaskRole::Active)
                })
                .then(|| killed.elapsed())
        },
    )
    .await;
    eprintln!(
        "with no operator, the killed owner ran {owned:?} again {:.1} s after the kill",
        took.as_secs_f64()
    );
    let generations = system.recorded_generations().await;
    assert_eq!(
        generations.get(&victim).copied().flatten(),
        Some(before.generation),
        "it acts on the document it had recorded: {generations:?}"
    );

    let next = producing.finish();
    let events = produce_in_background(&system.input, next, 10).finish();
    wait_until("exactly one count per event", async || {
        exact_output(&system.output, PARTITIONS, events)
    })
    .await;
    system.clean_up().await;
}

/// Freezes the owner of task 0 until the operator has moved its tasks (committed there with
/// `input` flowing, or only running there without), stops the operator, then kills the frozen
/// owner, which comes back with the older record. The victim, the other pod, the tasks moved
/// and the document in force.
async fn stale_owner_returns(
    system: &mut System,
    committed: bool,
) -> (String, String, Vec<u32>, AssignmentDocument) {
    let before = system.settled(1).await;
    let (victim, _) = system.signal_owner_of(0, "STOP").await;
    let moved: Vec<u32> = before.active_tasks_of(&victim).collect();
    let survivor = other(&before, &victim);
    let after = wait_until(
        "the frozen owner's tasks run on the other pod",
        async || {
            let document = system.document().await?;
            let reports = system.reports().await;
            moved
                .iter()
                .all(|&task| {
                    document.tasks[task as usize].active.as_ref() == Some(&survivor)
                        && running(&reports, &survivor, task).is_some_and(|r| {
                            r.role == TaskRole::Active
                                && (!committed || r.committed_transactions > 0)
                        })
                })
                .then_some(document)
        },
    )
    .await;
    assert!(after.generation > before.generation);
    system.stop_operator();
    let pid = system.pid_of(&victim).await.unwrap();
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    (victim, survivor, moved, after)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_returning_owner_with_an_older_record_leaves_tasks_committed_elsewhere_alone() {
    let mut system = System::start("op-stale", 70, 2, 1, 2_000).await;
    let producing = produce_in_background(&system.input, 2_000, 1_500);
    let (victim, survivor, moved, after) = stale_owner_returns(&mut system, true).await;

    // Resumed: every task the older record gives it runs here, the moved ones as standbys.
    wait_until("the returning owner resumes its record", async || {
        let reports = system.reports().await;
        (0..PARTITIONS as u32)
            .all(|task| running(&reports, &victim, task).is_some())
            .then_some(())
    })
    .await;
    let reports = system.reports().await;
    for &task in &moved {
        let copy = running(&reports, &victim, task).unwrap();
        assert_eq!(
            copy.role,
            TaskRole::Standby,
            "task {task} was committed under generation {} on {survivor}: {copy:?}",
            after.generation
        );
        let owner = running(&reports, &survivor, task).unwrap();
        assert_eq!(owner.role, TaskRole::Active, "never fenced: {owner:?}");
        assert_eq!(owner.fenced_in, None);
    }
    // The new owner goes on committing them.
    let commits = |reports: &BTreeMap<String, Vec<TaskReport>>| -> Vec<u64> {
        moved
            .iter()
            .map(|&task| running(reports, &survivor, task).map_or(0, |r| r.committed_transactions))
            .collect()
    };
    let seen = commits(&reports);
    wait_until("the new owner commits the moved tasks on", async || {
        let now = commits(&system.reports().await);
        now.iter()
            .zip(&seen)
            .all(|(now, seen)| now > seen)
            .then_some(())
    })
    .await;

    let events = producing.stop();
    wait_until("exactly one count per event", async || {
        exact_output(&system.output, PARTITIONS, events)
    })
    .await;
    system.clean_up().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_owner_fenced_by_an_older_record_claims_again_once_an_operator_leads() {
    let mut system = System::start("op-fenced", 80, 2, 1, 2_000).await;
    wait_until("all the input counted", async || {
        exact_output(&system.output, PARTITIONS, 2_000)
    })
    .await;
    let (victim, survivor, moved, after) = stale_owner_returns(&mut system, false).await;

    // Nothing committed the moved tasks since: the returning worker claims them back. Their
    // owner in the document learns of the fence at its next transaction, when input comes.
    wait_until("the returning owner claims the moved tasks", async || {
        let reports = system.reports().await;
        moved
            .iter()
            .all(|&task| {
                running(&reports, &victim, task).is_some_and(|r| r.role == TaskRole::Active)
            })
            .then_some(())
    })
    .await;
    let next = produce_in_background(&system.input, 2_000, 10).finish();
    let fenced = wait_until("the document's owner finds itself fenced", async || {
        let reports = system.reports().await;
        let fenced: Vec<Option<u64>> = moved
            .iter()
            .map(|&task| running(&reports, &survivor, task).and_then(|r| r.fenced_in))
            .collect();
        fenced.iter().all(Option::is_some).then_some(fenced)
    })
    .await;
    assert!(
        fenced.iter().all(|g| *g == Some(after.generation)),
        "fenced under the document in force: {fenced:?}"
    );

    system.restart_operator();
    let healed = system.settled(1).await;
    assert!(
        healed.generation > after.generation,
        "issued again: {healed:?}"
    );
    let events = produce_in_background(&system.input, next, 10).finish();
    wait_until("exactly one count per event", async || {
        exact_output(&system.output, PARTITIONS, events)
    })
    .await;
    system.clean_up().await;
}
