//! The worker started while the broker cannot be reached: it stays up, serves `/healthz`,
//! reports not ready, retries with backoff, and once the broker is reachable processes the
//! input exactly as a run that never saw the outage.
//!
//! "Unreachable" is a loopback TCP forwarder in front of the real broker that is not listening
//! yet: the worker's bootstrap address points at it, so the shared broker keeps serving every
//! other test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

mod support;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::time::{Duration, Instant};
use support::*;

/// Accepts on `listener` and copies bytes both ways to `target`, a thread per direction.
fn forward(listener: TcpListener, target: String) {
    std::thread::spawn(move || {
        for client in listener.incoming().flatten() {
            let Ok(upstream) = TcpStream::connect(&target) else {
                continue;
            };
            let pipes = [
                (client.try_clone().unwrap(), upstream.try_clone().unwrap()),
                (upstream, client),
            ];
            for (mut from, mut to) in pipes {
                std::thread::spawn(move || {
                    let mut buffer = [0u8; 64 * 1024];
                    while let Ok(n) = from.read(&mut buffer) {
                        if n == 0 || to.write_all(&buffer[..n]).is_err() {
                            break;
                        }
                    }
                    let _ = to.shutdown(Shutdown::Write);
                });
            }
        }
    });
}

fn status_of(listen: &str, path: &str) -> Option<u16> {
    http_get(listen, path).map(|(status, _)| status)
}

#[tokio::test(flavor = "multi_thread")]
async fn worker_started_without_a_reachable_broker_waits_then_runs_exactly() {
    let input = unique_name("unreachable-input");
    create_topic(&input, 2, false).await;
    produce(&input, 2, (0..5_000).map(|i| card_event(i, 100)));

    let mut job = Job::new("unreachable", &input, 2, aggregate_processor()).await;
    let proxy_port = free_port();
    job.config.kafka.bootstrap_servers = format!("127.0.0.1:{proxy_port}");
    let listen = format!("127.0.0.1:{}", free_port());
    let mut worker = job.spawn_with(&job.config.state.dir, None, Some(&listen));

    // Fifteen seconds without a broker (longer than one 10 s metadata request): up, healthy, never ready, never exiting.
    let outage = Instant::now();
    let mut answered = 0;
    while outage.elapsed() < Duration::from_secs(15) {
        assert!(
            worker.child.try_wait().unwrap().is_none(),
            "the worker must not exit while the broker is unreachable:\n{}",
            worker.log_tail()
        );
        if let Some(ready) = status_of(&listen, "/readyz") {
            assert_eq!(ready, 503, "not ready without a broker");
            assert_eq!(status_of(&listen, "/healthz"), Some(200));
            answered += 1;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    assert!(
        answered >= 20,
        "the HTTP port answered only {answered} times"
    );
    assert!(
        worker.log().contains("cannot reach Kafka; retrying"),
        "the retries are logged:\n{}",
        worker.log_tail()
    );

    forward(
        TcpListener::bind(("127.0.0.1", proxy_port)).unwrap(),
        kafka_bootstrap(),
    );
    job.wait_until_caught_up(&mut worker, Duration::from_secs(300));
    let deadline = Instant::now() + Duration::from_secs(30);
    while status_of(&listen, "/readyz") != Some(200) {
        assert!(
            Instant::now() < deadline,
            "ready once the broker is back:\n{}",
            worker.log_tail()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    worker.terminate(Duration::from_secs(30));

    let reference = Job::new("unreachable-reference", &input, 2, aggregate_processor()).await;
    let mut worker = reference.start(None);
    reference.wait_until_caught_up(&mut worker, Duration::from_secs(300));
    worker.terminate(Duration::from_secs(30));

    assert_same_output(&job.output(), &reference.output());
    assert!(
        job.local_state() == reference.local_state(),
        "state differs"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_while_the_broker_is_unreachable_stops_the_worker() {
    let input = unique_name("unreachable-stop-input");
    create_topic(&input, 1, false).await;
    let mut job = Job::new("unreachable-stop", &input, 1, aggregate_processor()).await;
    job.config.kafka.bootstrap_servers = format!("127.0.0.1:{}", free_port());
    let mut worker = job.spawn_with(&job.config.state.dir, None, None);
    wait_for(
        "the worker to try the broker",
        Duration::from_secs(30),
        || worker.log().contains("cannot reach Kafka; retrying"),
    );
    // One metadata request waits up to 10 s and one backoff up to 5 s; the pod's grace period
    // is 30 s by default.
    worker.terminate(Duration::from_secs(20));
    assert!(
        worker.log().contains("shut down before the tasks started"),
        "{}",
        worker.log_tail()
    );
}
