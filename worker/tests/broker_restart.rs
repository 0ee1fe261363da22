//! The worker rides out a restart of the real broker: no crash loop, and the state and output
//! are still exact. Its own test binary, because stopping the broker would disturb other tests.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

mod support;

use std::process::Command;
use std::time::Duration;
use support::*;

fn kafka_script(action: &str) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/services/kafka.sh");
    let status = Command::new("bash")
        .arg(script)
        .arg(action)
        .status()
        .unwrap();
    assert!(status.success(), "kafka.sh {action} failed");
}

#[tokio::test(flavor = "multi_thread")]
async fn worker_survives_a_broker_restart() {
    let input = unique_name("restart-input");
    create_topic(&input, 2, false).await;
    produce(&input, 2, (0..30_000).map(|i| card_event(i, 200)));
    let job = Job::new("restart", &input, 2, aggregate_processor()).await;

    let mut worker = job.start(None);
    std::thread::sleep(Duration::from_millis(1200));
    kafka_script("pause");
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        worker.child.try_wait().unwrap().is_none(),
        "the worker must not exit while the broker is down"
    );
    kafka_script("resume");
    job.wait_until_caught_up(&mut worker, Duration::from_secs(300));
    worker.terminate(Duration::from_secs(30));

    let reference = Job::new("restart-reference", &input, 2, aggregate_processor()).await;
    let mut worker = reference.start(None);
    reference.wait_until_caught_up(&mut worker, Duration::from_secs(300));
    worker.terminate(Duration::from_secs(30));

    assert_same_output(&job.output(), &reference.output());
    assert!(
        job.local_state() == reference.local_state(),
        "state differs"
    );
}
