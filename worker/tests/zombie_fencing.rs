//! A second worker for the same task fences the first: none of the zombie's writes appear in
//! the committed output or the changelog, and the result equals an uninterrupted run. A
//! transaction the coordinator aborts for its timeout is not a fence: the task retries.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

mod support;

use std::time::Duration;
use support::*;

#[tokio::test(flavor = "multi_thread")]
async fn newer_owner_fences_the_older_one() {
    let input = unique_name("zombie-input");
    create_topic(&input, 2, false).await;
    produce(&input, 2, (0..20_000).map(|i| card_event(i, 100)));

    let job = Job::new("zombie", &input, 2, count_processor()).await;
    // The old owner freezes in the middle of an open transaction (a GC pause, a lost node)...
    let mut old_owner = job.start(Some("mid-transaction:500:8000"));
    wait_for("the old owner to freeze", TIMEOUT, || {
        old_owner.log().contains("stalling")
    });
    // ...and a new owner with its own volume (a replacement pod) takes the task meanwhile.
    let new_state = job.dir.path().join("new-owner-state");
    let mut new_owner = job.start_with_state(&new_state, None);
    job.wait_until_caught_up(&mut new_owner, Duration::from_secs(180));
    // The old owner wakes up with its transaction open: it must find itself fenced and stop,
    // never claim the task back (which would fence the new owner in turn).
    wait_for("the old owner to notice it was fenced", TIMEOUT, || {
        old_owner.log().contains("to=Fenced")
    });
    produce(&input, 2, (20_000..21_000).map(|i| card_event(i, 100)));
    job.wait_until_caught_up(&mut new_owner, Duration::from_secs(60));
    new_owner.terminate(Duration::from_secs(30));
    assert!(
        !new_owner.log().contains("to=Fenced"),
        "the new owner keeps the task:\n{}",
        new_owner.log_tail()
    );
    old_owner.kill9();

    let reference = Job::new("zombie-reference", &input, 2, count_processor()).await;
    let mut worker = reference.start(None);
    reference.wait_until_caught_up(&mut worker, Duration::from_secs(180));
    worker.terminate(Duration::from_secs(30));

    assert_same_output(&job.output(), &reference.output());
    // The changelog, read committed, rebuilds exactly the reference state.
    let changelog = read_committed(&job.config.kafka.changelog_topic, 2);
    let reference_changelog = read_committed(&reference.config.kafka.changelog_topic, 2);
    for p in 0..2 {
        let last = |records: &Vec<Record>| {
            records
                .iter()
                .map(|r| (r.key.clone(), r.value.clone()))
                .collect::<std::collections::BTreeMap<_, _>>()
        };
        assert!(
            last(&changelog[&p]) == last(&reference_changelog[&p]),
            "partition {p}: changelog state differs"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_transaction_aborted_by_its_timeout_is_retried_not_fenced() {
    let input = unique_name("txn-timeout-input");
    create_topic(&input, 2, false).await;
    produce(&input, 2, (0..6_000).map(|i| card_event(i, 100)));

    let mut job = Job::new("txn-timeout", &input, 2, count_processor()).await;
    job.config.kafka.transaction_timeout = Duration::from_millis(1_500);
    // One task stalls 6 s with its transaction open: the coordinator aborts it (timeout 1.5 s,
    // checked every second by the test broker).
    let address = format!("127.0.0.1:{}", free_port());
    let mut worker = job.start_listening_with(&address, Some("mid-transaction:300:6000"));
    job.wait_until_caught_up(&mut worker, Duration::from_secs(120));
    let aborted = support::checkpoints::metric(&address, "streamkeeper_transactions_aborted_total");
    worker.terminate(Duration::from_secs(30));
    let log = worker.log();
    assert!(log.contains("stall over"), "the stall happened:\n{log}");
    assert!(
        !log.contains("to=Fenced"),
        "a timeout is not a fence:\n{log}"
    );
    assert!(
        log.contains("transaction timed out"),
        "the retry names the timeout:\n{log}"
    );
    assert!(aborted >= 1.0, "the aborted transaction is counted");

    let reference = Job::new("txn-timeout-reference", &input, 2, count_processor()).await;
    let mut worker = reference.start(None);
    reference.wait_until_caught_up(&mut worker, Duration::from_secs(120));
    worker.terminate(Duration::from_secs(30));
    assert_same_output(&job.output(), &reference.output());
}
