//! Standby tasks and promotion against the real broker: worker processes run as the pods of a
//! StatefulSet on their own volumes, and the tests send them assignment documents as the
//! operator does. Input flows while an owner is killed (or frozen); the output, read with
//! read_committed, is compared with an uninterrupted run of the same input. A standby whose
//! changelog consumer stalls replaces it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use support::standby::*;
use support::*;

const PARTITIONS: i32 = 2;
const KEYS: u32 = 200;
const CHUNK: u32 = 200;
const CHUNKS: u32 = 120;

/// Produces `CHUNKS` chunks of input, one every 40 ms (about 5,000 records a second).
fn produce_while_running(topic: String) -> (std::thread::JoinHandle<()>, Arc<AtomicBool>) {
    let done = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&done);
    let thread = std::thread::spawn(move || {
        for chunk in 0..CHUNKS {
            let from = chunk * CHUNK;
            produce(
                &topic,
                PARTITIONS,
                (from..from + CHUNK).map(|i| card_event(i, KEYS)),
            );
            std::thread::sleep(Duration::from_millis(40));
        }
        flag.store(true, Ordering::SeqCst);
    });
    (thread, done)
}

fn caught_up(job: &Job) -> bool {
    job.committed_offsets() == job.input_ends()
}

/// The input, run once without interruption by a fresh job: the output every run must equal.
async fn reference_output(input: &str) -> std::collections::BTreeMap<i32, Vec<(String, String)>> {
    let reference = Job::new("reference", input, PARTITIONS, count_processor()).await;
    let mut worker = reference.start(None);
    reference.wait_until_caught_up(&mut worker, Duration::from_secs(120));
    worker.terminate(Duration::from_secs(30));
    reference.output()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_killed_owners_tasks_move_to_their_warm_standbys_and_the_output_stays_exact() {
    let input = unique_name("standby-input");
    create_topic(&input, PARTITIONS, false).await;
    let mut job = Job::new("standby", &input, PARTITIONS, count_processor()).await;
    let mut a = Pod::start(&mut job, "standby-0", 2);
    let b = Pod::start(&mut job, "standby-1", 2);

    // Each pod owns one task and keeps a warm copy of the other's. Only the job's token may
    // change the assignment.
    let first = document(
        1,
        &[("standby-0", &["standby-1"]), ("standby-1", &["standby-0"])],
    );
    let body = String::from_utf8(streamkeeper_contract::Versioned::to_json(&first)).unwrap();
    let unsigned = http_put_with(&a.address, "/v1/assignment", &body, &[]).unwrap();
    assert_eq!(
        unsigned.0, 401,
        "an assignment without the token: {}",
        unsigned.1
    );
    assign_all(&[&a, &b], &first);
    wait_for("both standbys warm", Duration::from_secs(60), || {
        warm_standby(&a, 1, 5) && warm_standby(&b, 0, 5)
    });

    let (producer, produced) = produce_while_running(input.clone());
    wait_for(
        "task 0 commits on its first owner",
        Duration::from_secs(60),
        || active_with_commits(&a, 0, 5),
    );

    // The owner of task 0 dies; the operator's next document promotes the standby.
    a.worker.kill9();
    let promote = document(2, &[("standby-1", &[]), ("standby-1", &[])]);
    assign_all(&[&b], &promote);
    let promotion = wait_for(
        "task 0 commits on its new owner",
        Duration::from_secs(30),
        || active_with_commits(&b, 0, 1),
    );
    let logged = wait_for(
        "the promotion's figure is logged",
        Duration::from_secs(10),
        || promotion_seconds(&b.worker.log(), 0).is_some(),
    );
    let seconds = promotion_seconds(&b.worker.log(), 0).unwrap();
    eprintln!(
        "promotion of task 0: {:.3} s from the document to the first commit (worker's own figure {seconds:.3} s; seen {:?} later)",
        promotion.as_secs_f64(),
        logged
    );
    assert!(
        seconds < 2.0,
        "a warm standby takes over within the failover bound: {seconds} s"
    );
    // An older document (a stale operator) is refused.
    assert_eq!(b.assign(&first).0, 409);

    // The killed pod returns on its volume: a standby of both tasks, replaying only the delta.
    a.restart(&mut job, 2);
    let back = document(
        3,
        &[("standby-1", &["standby-0"]), ("standby-1", &["standby-0"])],
    );
    assign_all(&[&a, &b], &back);
    wait_for(
        "the returned pod's copies are warm",
        Duration::from_secs(60),
        || warm_standby(&a, 0, 50) && warm_standby(&a, 1, 50),
    );
    let log = a.worker.log();
    for task in 0..2 {
        let discovery = log
            .lines()
            .find(|l| l.contains("restore: discovery done") && l.contains(&format!("task={task}")))
            .unwrap_or_else(|| panic!("no restore of task {task} on the returned pod:\n{log}"));
        assert!(
            discovery.contains("source=Local"),
            "the returned pod keeps its local state for task {task}: {discovery}"
        );
        let start: i64 = field(discovery, "start");
        assert!(
            start > 0,
            "it replays from its own position, not from 0: {discovery}"
        );
    }

    // Task 1 goes back to the returned pod: a handoff to a warm standby, no cold restore.
    let handoff = document(
        4,
        &[("standby-1", &["standby-0"]), ("standby-0", &["standby-1"])],
    );
    assign_all(&[&a, &b], &handoff);
    let took = wait_for(
        "task 1 commits on the returned pod",
        Duration::from_secs(30),
        || active_with_commits(&a, 1, 1),
    );
    eprintln!(
        "handoff of task 1: {:.3} s from the document to the first commit",
        took.as_secs_f64()
    );

    producer.join().unwrap();
    assert!(produced.load(Ordering::SeqCst));
    wait_for("everything committed", Duration::from_secs(120), || {
        caught_up(&job)
    });
    let got = job.output();
    a.worker.terminate(Duration::from_secs(30));
    let mut b = b;
    b.worker.terminate(Duration::from_secs(30));
    assert_same_output(&got, &reference_output(&input).await);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_frozen_owner_is_fenced_writes_nothing_more_and_rejoins_as_a_standby() {
    let input = unique_name("frozen-input");
    create_topic(&input, PARTITIONS, false).await;
    let mut job = Job::new("frozen", &input, PARTITIONS, count_processor()).await;
    let mut a = Pod::start(&mut job, "frozen-0", 2);
    let b = Pod::start(&mut job, "frozen-1", 2);
    let first = document(
        1,
        &[("frozen-0", &["frozen-1"]), ("frozen-1", &["frozen-0"])],
    );
    assign_all(&[&a, &b], &first);
    wait_for("both standbys warm", Duration::from_secs(60), || {
        warm_standby(&a, 1, 5) && warm_standby(&b, 0, 5)
    });
    let (producer, _) = produce_while_running(input.clone());
    wait_for(
        "task 0 commits on its first owner",
        Duration::from_secs(60),
        || active_with_commits(&a, 0, 5),
    );

    // SIGSTOP: the process neither dies nor answers. Its task moves to the standby, whose
    // init_transactions fences the frozen owner's transactional id.
    let pid = a.worker.child.id().to_string();
    std::process::Command::new("kill")
        .args(["-STOP", &pid])
        .status()
        .unwrap();
    let promote = document(2, &[("frozen-1", &[]), ("frozen-1", &[])]);
    assign_all(&[&b], &promote);
    wait_for(
        "task 0 commits on its new owner",
        Duration::from_secs(30),
        || active_with_commits(&b, 0, 1),
    );
    let seconds = wait_for("the promotion is logged", Duration::from_secs(10), || {
        promotion_seconds(&b.worker.log(), 0).is_some()
    });
    eprintln!("frozen owner's task promoted; logged after {seconds:?}");

    // SIGCONT: the old owner wakes up, perhaps mid-transaction, and the operator's newest
    // document reaches it as soon as it answers again: it is a standby now. An open
    // transaction of its own cannot commit (the new owner's init_transactions fenced it and
    // aborted it), so nothing it did after the fence reaches read_committed readers.
    std::process::Command::new("kill")
        .args(["-CONT", &pid])
        .status()
        .unwrap();
    let rejoin = document(
        3,
        &[("frozen-1", &["frozen-0"]), ("frozen-1", &["frozen-0"])],
    );
    assign_all(&[&a, &b], &rejoin);
    wait_for_or(
        "the woken owner is a warm standby",
        Duration::from_secs(60),
        || warm_standby(&a, 0, 50),
        || format!("{:?}\n{}", a.report(0), a.worker.log_tail()),
    );
    let log = a.worker.log();
    assert!(
        log.contains("to=Fenced") || log.contains("active task committed and released"),
        "the woken owner either saw the fence or released the task:\n{}",
        a.worker.log_tail()
    );

    producer.join().unwrap();
    wait_for("everything committed", Duration::from_secs(120), || {
        caught_up(&job)
    });
    let got = job.output();
    a.worker.terminate(Duration::from_secs(30));
    let mut b = b;
    b.worker.terminate(Duration::from_secs(30));
    assert_same_output(&got, &reference_output(&input).await);
}

/// The integer after `name=` in a log line.
fn field(line: &str, name: &str) -> i64 {
    line.split(&format!("{name}="))
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|digits| digits.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {line}"))
}

/// librdkafka's consumer can stop fetching after a broker restart and say nothing (see the
/// worker's `consumer_watch`). The `changelog-stops` failpoint pauses the standby pod's tail of
/// one task after 20 records while input flows; the copy must replace its consumer and be warm
/// again. Without the watch its lag only grows.
#[tokio::test(flavor = "multi_thread")]
async fn a_standby_whose_changelog_consumer_stalls_replaces_it_and_is_warm_again() {
    let input = unique_name("standby-stall-input");
    create_topic(&input, PARTITIONS, false).await;
    let mut job = Job::new("standby-stall", &input, PARTITIONS, count_processor()).await;
    let a = Pod::start(&mut job, "standby-stall-0", 2);
    job.env.extend([
        ("STREAMKEEPER_FAILPOINT".into(), "changelog-stops:20".into()),
        ("STREAMKEEPER_CONSUMER_STALL_SECONDS".into(), "2".into()),
    ]);
    let b = Pod::start(&mut job, "standby-stall-1", 2);
    let both_on_a = document(
        1,
        &[
            ("standby-stall-0", &["standby-stall-1"]),
            ("standby-stall-0", &["standby-stall-1"]),
        ],
    );
    assign_all(&[&a, &b], &both_on_a);
    let (producer, _) = produce_while_running(input.clone());
    producer.join().unwrap();
    wait_for(
        "the owner commits every input record",
        Duration::from_secs(120),
        || caught_up(&job),
    );
    wait_for(
        "both copies are warm and caught up",
        Duration::from_secs(60),
        || warm_standby(&b, 0, 5) && warm_standby(&b, 1, 5),
    );
    let replaced = b
        .worker
        .log()
        .lines()
        .filter(|line| {
            line.contains("a consumer stopped delivering records the broker holds")
                && line.contains("changelog")
        })
        .count();
    assert_eq!(
        replaced,
        1,
        "one stalled tail, replaced once; log:\n{}",
        b.worker.log_tail()
    );
}
