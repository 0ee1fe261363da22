//! A second worker for the same task fences the first: none of the zombie's writes appear in
//! the committed output or the changelog, and the result equals an uninterrupted run.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

mod support;

use std::time::Duration;
use support::*;

#[tokio::test(flavor = "multi_thread")]
async fn newer_owner_fences_the_older_one() {
    let input = unique("zombie-input");
    create_topic(&input, 2, false).await;
    produce(&input, 2, (0..20_000).map(|i| card_event(i, 100)));

    let job = Job::new("zombie", &input, 2, count_processor()).await;
    let mut old_owner = job.start(None);
    std::thread::sleep(Duration::from_millis(1500));
    // The new owner has its own volume, as a replacement pod would.
    let new_state = job.dir.path().join("new-owner-state");
    let mut new_owner = job.start_with_state(&new_state, None);
    job.wait_until_caught_up(&mut new_owner, Duration::from_secs(180));
    new_owner.terminate(Duration::from_secs(30));
    std::thread::sleep(Duration::from_millis(500));
    let zombie_log = old_owner.log();
    old_owner.kill9();
    assert!(
        zombie_log.contains("Fenced"),
        "the old owner must notice it was fenced:\n{}",
        old_owner.log_tail()
    );

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
