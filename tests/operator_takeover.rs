//! The operator leader dies in the middle of a failover, through the whole system (operator
//! binaries, the local node agent running the worker pods, the real apiserver, Kafka and S3).
//!
//! The leader is armed with a failpoint that aborts it (as abruptly as kill -9) right after it
//! stores a decision that moves a task: no worker has heard of the new generation, no Event is
//! out, the status does not know. A second operator waits for the Lease. The owner of task 0 is
//! killed with input flowing; the next leader must finish the failover from what was stored:
//! the promotion reaches the workers, tasks the kill did not touch keep their owner, the killed
//! pod holds copies again, the output is exact, and the move is in the status and in an Event.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

mod operator_support;

use operator_support::failover::*;
use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

/// The spare takes the Lease once the dead leader's has gone unrenewed for its duration (6 s)
/// and its next attempt comes (1 s); then the failover bound of the standby issue.
const TAKEOVER_BOUND: Duration = Duration::from_secs(6 + 1 + 5);

#[tokio::test(flavor = "multi_thread")]
async fn a_leader_that_dies_mid_failover_leaves_the_next_leader_to_finish_it() {
    let mut system = System::start("op-takeover", 240, 3, 1, 2_000).await;
    let before = system.settled(1).await;
    system.restart_operator_with(&[("STREAMKEEPER_FAILPOINT", "assignment-stored-with-moves:1")]);
    let armed = system.operator_identity();
    wait_until("the armed operator leads", async || {
        (system.lease_holder().await? == armed).then_some(())
    })
    .await;
    // A kill before its first reconcile has started the job's loop would be judged by no one:
    // the pod's restart resumes the recorded document instead of a standby taking over.
    wait_until("the armed operator's failover loop runs", async || {
        let metrics = system.operator_metrics().await?;
        metrics
            .lines()
            .any(|line| line == "streamkeeper_operator_failover_loops 1")
            .then_some(())
    })
    .await;
    // It went on from the stored document without moving anything.
    assert_eq!(system.document().await.unwrap(), before);
    system.start_spare_operator();

    let producing = produce_in_background(&system.input, 2_000, 40);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (victim, new_owner, took) = system.fail_owner_of(0, "KILL").await;
    eprintln!(
        "kill -9 of {victim}; the leader died storing the promotion; task 0 committed on {new_owner} {:.3} s after the kill",
        took.as_secs_f64()
    );
    let exit = system
        .operator_exit()
        .expect("the armed leader has stopped");
    assert_eq!(
        exit.signal(),
        Some(6),
        "it aborted at the failpoint: {exit:?}"
    );
    assert_eq!(system.lease_holder().await.as_deref(), Some("spare"));
    assert_eq!(
        Some(&new_owner),
        before.tasks[0].standbys.first(),
        "the standby the dead leader chose took over"
    );
    assert!(
        took <= TAKEOVER_BOUND,
        "{took:?} (bound {TAKEOVER_BOUND:?})"
    );
    // No shuffle: the next leader went on from the stored document. A task the kill did not
    // touch either kept its owner or was handed to the returning pod for balance (the takeover
    // takes the Lease's 6 s, by which time the killed pod is back with warm copies), and no
    // more of them than balance needs.
    let after = system.document().await.unwrap();
    let mut balanced = 0;
    for (was, now) in before.tasks.iter().zip(&after.tasks) {
        if was.active.as_ref() != Some(&victim) && was.active != now.active {
            assert_eq!(
                now.active.as_ref(),
                Some(&victim),
                "task {} was not on the killed pod, and moved elsewhere than back to it: {after:?}",
                was.task
            );
            balanced += 1;
        }
    }
    let lost = before.active_tasks_of(&victim).count();
    assert!(
        balanced <= lost,
        "{balanced} balance moves for {lost} tasks lost: {after:?}"
    );

    producing.finish();
    system
        .recovered_exactly(std::slice::from_ref(&victim), 6_000)
        .await;

    // The dead leader reported nothing; the next one did, from the stored record.
    let promoted = system.event_notes("Promoted").await;
    let expected = format!("task 0: {new_owner} took over from {victim}");
    assert!(
        promoted.iter().any(|note| note.starts_with(&expected)),
        "a Promoted Event names task 0's move: {promoted:?}"
    );
    let promotion = system.timed_promotion(0).await;
    assert_eq!(
        (promotion.from.as_str(), promotion.to.as_str()),
        (victim.as_str(), new_owner.as_str())
    );
    assert!(promotion.generation > i64::try_from(before.generation).unwrap());
    // Timed from the dead leader's decision: the takeover (the Lease's 6 s) is part of the
    // task's stall, and the next leader does not start the clock on its own.
    let first_commit = promotion.first_commit_seconds.unwrap();
    assert!(
        (4.0..TAKEOVER_BOUND.as_secs_f64()).contains(&first_commit),
        "first commit {first_commit} s after the decision"
    );
    system.clean_up().await;
}
