//! Dropping a copy that is still warming up, against the real broker and S3: the copy is
//! downloading a checkpoint through a slow link when the next document drops it. The document
//! is answered at once, the copy ends within a second, the pod's health and reports answer
//! throughout (so an operator would never take the pod for silent and promote its other
//! actives away), the pod's own active task goes on committing, and the output is exact. And a
//! pod that hands an active task off stays ready with the tasks it keeps.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use streamkeeper_contract::task_report::TaskPhase;
use support::checkpoints::{Proxy, checkpoint_now};
use support::standby::*;
use support::*;

const PARTITIONS: i32 = 2;
/// Distinct cards: a state of this many keys makes a checkpoint of a few hundred kilobytes.
const KEYS: u32 = 20_000;
/// The slow link while the copy downloads: the checkpoint takes well over a minute.
const SLOW_LINK_BYTES_PER_SECOND: u64 = 4_096;

/// One poll of `path` on `address`: how long the answer took (`None`: no 200 answer).
fn timed_get(address: &str, path: &str) -> Option<Duration> {
    let asked = Instant::now();
    worker_request(address, "GET", path, Duration::from_secs(2))
        .filter(|(status, _)| *status == 200)
        .map(|_| asked.elapsed())
}

/// Polls `/healthz` and `/v1/tasks` on `address` every 50 ms until stopped, counting the polls
/// in `made`; each poll's time, `None` for a poll that got no answer.
fn poll_health(
    address: String,
    stop: Arc<AtomicBool>,
    made: Arc<AtomicUsize>,
) -> std::thread::JoinHandle<Vec<Option<Duration>>> {
    std::thread::spawn(move || {
        let mut polls = Vec::new();
        while !stop.load(Ordering::SeqCst) {
            polls.push(timed_get(&address, "/healthz"));
            polls.push(timed_get(&address, "/v1/tasks"));
            made.fetch_add(2, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(50));
        }
        polls
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn a_copy_dropped_mid_download_stops_at_once_and_the_pod_keeps_answering() {
    let input = unique_name("drop-input");
    create_topic(&input, PARTITIONS, false).await;
    produce(&input, PARTITIONS, (0..KEYS).map(|i| card_event(i, KEYS)));
    let s3 = s3_settings();
    let proxy = Proxy::start(s3.endpoint.trim_start_matches("http://"));
    let mut job = Job::new("drop", &input, PARTITIONS, count_processor()).await;
    job.enable_checkpoints(Duration::from_secs(3600), 3, Some(&proxy.endpoint()));
    let a = Pod::start(&mut job, "drop-0", 2);
    let b = Pod::start(&mut job, "drop-1", 2);

    // Each pod owns one task; task 0's state gets a checkpoint.
    assign_all(&[&a, &b], &document(1, &[("drop-0", &[]), ("drop-1", &[])]));
    wait_for("the input is processed", Duration::from_secs(120), || {
        job.committed_offsets() == job.input_ends()
    });
    let checkpoints = checkpoint_now(&a.address);
    eprintln!("checkpoints of drop-0: {checkpoints:?}");
    assert!(checkpoints.contains_key(&0));

    // Over a slow link, drop-1 starts a copy of task 0: it downloads the checkpoint.
    proxy.throttle(SLOW_LINK_BYTES_PER_SECOND);
    let more = std::thread::spawn({
        let input = input.clone();
        move || {
            for chunk in 0..100 {
                let from = KEYS + chunk * 20;
                produce(
                    &input,
                    PARTITIONS,
                    (from..from + 20).map(|i| card_event(i, KEYS)),
                );
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    });
    assign_all(
        &[&a, &b],
        &document(2, &[("drop-0", &["drop-1"]), ("drop-1", &[])]),
    );
    wait_for_or(
        "drop-1's copy of task 0 is downloading",
        Duration::from_secs(60),
        || {
            b.report(0)
                .and_then(|r| r.restore?.download)
                .is_some_and(|d| d.bytes_done > 0 && d.bytes_done < d.bytes_total)
        },
        || format!("{:?}", b.report(0)),
    );
    let stop_polling = Arc::new(AtomicBool::new(false));
    let made = Arc::new(AtomicUsize::new(0));
    let polls = poll_health(
        b.address.clone(),
        Arc::clone(&stop_polling),
        Arc::clone(&made),
    );
    // A couple of seconds of polls while the copy downloads, and as many after the drop.
    wait_for(
        "40 polls during the download",
        Duration::from_secs(60),
        || made.load(Ordering::SeqCst) >= 40,
    );
    let commits_before = b.report(1).map_or(0, |r| r.committed_transactions);

    // The copy is dropped mid-download.
    let downloading = b.report(0).and_then(|r| r.restore?.download);
    assert!(
        downloading
            .as_ref()
            .is_some_and(|d| d.bytes_done < d.bytes_total),
        "still downloading when dropped: {downloading:?}"
    );
    let sent = Instant::now();
    let (status, body) = b.assign(&document(3, &[("drop-0", &[]), ("drop-1", &[])]));
    let answered = sent.elapsed();
    assert_eq!(status, 200, "{body}");
    wait_for_or(
        "the dropped copy stops",
        Duration::from_secs(30),
        || {
            // It ends, then leaves the reports (the pod answers: it still runs task 1).
            let reports = b.reports();
            !reports.is_empty()
                && reports
                    .iter()
                    .all(|r| r.task != 0 || r.phase == TaskPhase::Stopped)
        },
        || format!("{:?}\n{}", b.report(0), b.worker.log_tail()),
    );
    let stopped = sent.elapsed();
    eprintln!(
        "dropped mid-download: the document answered in {:.3} s, the copy stopped {:.3} s after it was sent",
        answered.as_secs_f64(),
        stopped.as_secs_f64()
    );
    assert!(
        answered < Duration::from_secs(1),
        "the document waited {answered:?}"
    );
    assert!(
        stopped < Duration::from_secs(1),
        "the copy ended after {stopped:?}"
    );
    assign_all(&[&a], &document(3, &[("drop-0", &[]), ("drop-1", &[])]));
    wait_for(
        "drop-1's own task commits on",
        Duration::from_secs(30),
        || {
            b.report(1)
                .is_some_and(|r| r.committed_transactions > commits_before)
        },
    );
    let after_drop = made.load(Ordering::SeqCst) + 40;
    wait_for("40 polls after the drop", Duration::from_secs(60), || {
        made.load(Ordering::SeqCst) >= after_drop
    });
    stop_polling.store(true, Ordering::SeqCst);
    let polls = polls.join().unwrap();
    let mut answered: Vec<Duration> = polls.iter().flatten().copied().collect();
    answered.sort();
    let missed = polls.len() - answered.len();
    let p99 = answered[answered.len() * 99 / 100];
    let slowest = answered.last().copied().unwrap_or_default();
    eprintln!(
        "health polls during the drop: {} answered, {missed} missed, p99 {:.1} ms, slowest {:.1} ms",
        answered.len(),
        p99.as_secs_f64() * 1e3,
        slowest.as_secs_f64() * 1e3
    );
    assert_eq!(missed, 0, "every health poll answered");
    assert!(p99 <= Duration::from_millis(100), "p99 {p99:?}");
    // The operator's poll timeout: a slower answer is a silent pod.
    assert!(slowest <= Duration::from_millis(500), "slowest {slowest:?}");

    // The output is exact: every card counted once per event.
    proxy.throttle(0);
    more.join().unwrap();
    wait_for("everything committed", Duration::from_secs(120), || {
        job.committed_offsets() == job.input_ends()
    });
    let got = job.output();
    let mut a = a;
    let mut b = b;
    a.worker.terminate(Duration::from_secs(30));
    b.worker.terminate(Duration::from_secs(30));
    let reference = Job::new("drop-reference", &input, PARTITIONS, count_processor()).await;
    let mut worker = reference.start(None);
    reference.wait_until_caught_up(&mut worker, Duration::from_secs(120));
    worker.terminate(Duration::from_secs(30));
    assert_same_output(&got, &reference.output());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pod_that_hands_an_active_task_off_stays_ready_with_the_tasks_it_keeps() {
    let input = unique_name("handoff-ready-input");
    create_topic(&input, PARTITIONS, false).await;
    produce(&input, PARTITIONS, (0..400).map(|i| card_event(i, 50)));
    let mut job = Job::new("handoff-ready", &input, PARTITIONS, count_processor()).await;
    let pod = Pod::start(&mut job, "handoff-ready-0", 2);
    let ready = |pod: &Pod| http_get(&pod.address, "/readyz").is_some_and(|(s, _)| s == 200);

    assign_all(&[&pod], &document(1, &[(&pod.name, &[]), (&pod.name, &[])]));
    wait_for(
        "both tasks running, the pod ready",
        Duration::from_secs(60),
        || ready(&pod),
    );

    // Task 1 moves to another pod (with no standby left here): this pod keeps task 0.
    assign_all(
        &[&pod],
        &document(2, &[(&pod.name, &[]), ("handoff-ready-1", &[])]),
    );
    wait_for("task 1 ended on the pod", Duration::from_secs(30), || {
        pod.report(1).is_none_or(|r| r.phase == TaskPhase::Stopped)
    });
    wait_for("the pod ready with task 0", Duration::from_secs(10), || {
        ready(&pod)
    });
    assert!(pod.report(1).is_none(), "task 1 left the pod's reports");
    assert_eq!(
        pod.report(0).expect("task 0 stays").phase,
        TaskPhase::Running
    );
}
