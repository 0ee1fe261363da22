//! The worker's HTTP port while it processes against the real broker: /healthz, /readyz (ready
//! only when every active task is Running), /metrics (Prometheus) and /v1/tasks.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

mod support;

use std::time::{Duration, Instant};
use support::*;

#[tokio::test(flavor = "multi_thread")]
async fn endpoints_report_readiness_metrics_and_tasks() {
    let input = unique("http-input");
    create_topic(&input, 3, false).await;
    produce(&input, 3, (0..3_000).map(|i| card_event(i, 50)));
    let job = Job::new("http", &input, 3, count_processor()).await;
    let address = format!("127.0.0.1:{}", free_port());
    let mut worker = job.start_listening(&address);

    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some((200, _)) = http_get(&address, "/readyz") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "never ready:\n{}",
            worker.log_tail()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(http_get(&address, "/healthz").unwrap().0, 200);
    job.wait_until_caught_up(&mut worker, Duration::from_secs(60));

    let (status, body) = http_get(&address, "/v1/tasks").unwrap();
    assert_eq!(status, 200);
    let tasks: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(tasks["version"], 1);
    let tasks = tasks["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 3);
    for task in tasks {
        assert_eq!(task["role"], "active");
        assert_eq!(task["phase"], "Running");
        assert_eq!(task["restore"]["phase"], "Done");
        assert!(task["committedTransactions"].as_u64().unwrap() > 0);
    }

    let (status, metrics) = http_get(&address, "/metrics").unwrap();
    assert_eq!(status, 200);
    let processed: f64 = metrics
        .lines()
        .filter(|l| l.starts_with("streamkeeper_input_records_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert_eq!(
        processed, 3_000.0,
        "every input record is counted:\n{metrics}"
    );
    for name in [
        "streamkeeper_transactions_committed_total",
        "streamkeeper_restore_records_total",
        "streamkeeper_input_lag_records",
    ] {
        assert!(metrics.contains(name), "{name} missing from /metrics");
    }

    worker.terminate(Duration::from_secs(30));
    assert!(
        http_get(&address, "/healthz").is_none(),
        "the port closes with the worker"
    );
}
