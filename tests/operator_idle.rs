//! Failover of idle tasks through the whole system (operator binary, local node agent, worker
//! processes, real Kafka, S3 and apiserver): two pods with one standby per task, all input
//! processed, then the owner of task 0 killed with kill -9. Its tasks are promoted and run on
//! their new owner, which has nothing to commit: the status times each promotion to the new
//! owner running it and gives it no first commit. The promoted tasks stay where they are, but
//! they hold only themselves: when the killed pod is back with warm copies, the job evens out
//! at once with the other tasks (a promotion waiting for a commit used to hold every task's
//! balance for a minute). Its own test binary, so it never shares the machine with another
//! scene.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

mod operator_support;

use kube::api::Api;
use operator_support::cards::exact_output;
use operator_support::failover::*;
use std::time::Duration;
use streamkeeper::api::StatefulStreamJob;

/// The balance after the promotion's 5 s hold: the returning pod's warm copies take their share
/// within a few polls of it (it was the pending moves' 60 s before).
const BALANCED_WITHIN: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread")]
async fn idle_promoted_tasks_are_timed_to_running_and_hold_only_themselves() {
    let system = System::start("op-idle", 190, 2, 1, 2_000).await;
    let before = system.settled(1).await;
    wait_until("all the input counted", async || {
        exact_output(&system.output, PARTITIONS, 2_000)
    })
    .await;

    let (victim, killed) = system.signal_owner_of(0, "KILL").await;
    assert_eq!(before.tasks[0].active.as_ref(), Some(&victim));
    let promoted: Vec<u32> = before.active_tasks_of(&victim).collect();
    let survivor = before.tasks[0].standbys[0].clone();

    let jobs: Api<StatefulStreamJob> = Api::namespaced(system.client.clone(), &system.namespace);
    let moves = wait_until(
        "the status times each promotion to its new owner running",
        async || {
            let status = jobs.get(system.name).await.ok()?.status?;
            promoted
                .iter()
                .map(|&task| {
                    let promotion = status.tasks.get(task as usize)?.last_promotion.clone()?;
                    (promotion.from == victim && promotion.running_seconds.is_some())
                        .then_some(promotion)
                })
                .collect::<Option<Vec<_>>>()
        },
    )
    .await;
    for promotion in &moves {
        eprintln!("idle promotion in the status: {promotion:?}");
        assert_eq!(promotion.to, survivor);
        assert!(promotion.running_seconds.unwrap() < 5.0, "{promotion:?}");
        assert_eq!(
            promotion.first_commit_seconds, None,
            "an idle new owner has nothing to commit: {promotion:?}"
        );
    }

    // The killed pod returns with warm copies and takes tasks the failure did not move; the
    // promoted ones stay with their new owner while it has not committed.
    let (document, took) = wait_until("the returning pod runs its share", async || {
        let document = system.document().await?;
        let reports = system.reports().await;
        let owned: Vec<u32> = document.active_tasks_of(&victim).collect();
        (owned.len() == promoted.len() && settled(&document, &reports, 1))
            .then(|| (document.clone(), killed.elapsed()))
    })
    .await;
    eprintln!(
        "the killed pod ran its share again {:.1} s after the kill: {:?}",
        took.as_secs_f64(),
        document.active_tasks_of(&victim).collect::<Vec<_>>()
    );
    assert!(
        document
            .active_tasks_of(&victim)
            .all(|task| !promoted.contains(&task)),
        "no promoted task went back before its new owner committed: {document:?}"
    );
    assert!(
        took <= BALANCED_WITHIN,
        "balanced {took:?} after the kill (bound {BALANCED_WITHIN:?})"
    );

    // Input again (one chunk of 100 events): every task counts on, exactly once.
    let events = produce_in_background(&system.input, 2_000, 1).finish();
    wait_until("exactly one count per event", async || {
        exact_output(&system.output, PARTITIONS, events)
    })
    .await;
    system.clean_up().await;
}
