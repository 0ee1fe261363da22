//! The worker's HTTP port while it processes against the real broker: /healthz, /readyz (ready
//! only when every active task is Running), /metrics (Prometheus) and /v1/tasks, open to reads;
//! `POST /v1/checkpoints` only with the job's worker token.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

mod support;

use std::time::{Duration, Instant};
use support::*;

#[tokio::test(flavor = "multi_thread")]
async fn endpoints_report_readiness_metrics_and_tasks() {
    let input = unique_name("http-input");
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

/// `POST /v1/checkpoints` changes the worker: without the job's token, or with another, the
/// real worker refuses it (401, naming what is missing) and takes no checkpoint; with the token
/// it checkpoints every task. A worker with no token file refuses it whatever is sent.
#[tokio::test(flavor = "multi_thread")]
async fn a_checkpoint_request_needs_the_jobs_worker_token() {
    let input = unique_name("http-token-input");
    create_topic(&input, 2, false).await;
    produce(&input, 2, (0..500).map(|i| card_event(i, 20)));
    let mut job = Job::new("http-token", &input, 2, count_processor()).await;
    job.enable_checkpoints(Duration::from_secs(3600), 3, None);
    let address = format!("127.0.0.1:{}", free_port());
    let mut worker = job.start_listening(&address);
    checkpoints::wait_ready(&address, &mut worker, Duration::from_secs(60));
    job.wait_until_caught_up(&mut worker, Duration::from_secs(60));
    let post = |worker: &Worker, headers: &[(&str, &str)]| {
        let limit = Duration::from_secs(150);
        http_request(&address, "POST", "/v1/checkpoints", headers, "", limit)
            .unwrap_or_else(|| panic!("no answer; log:\n{}", worker.log_tail()))
    };

    let (status, body) = post(&worker, &[]);
    assert_eq!(status, 401, "{body}");
    let refusal: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(refusal["version"], 1);
    assert!(
        refusal["error"]
            .as_str()
            .unwrap()
            .contains("needs `Authorization: Bearer <token>`"),
        "{body}"
    );
    let wrong = format!("Bearer {HTTP_TOKEN}-not");
    let (status, body) = post(&worker, &[("Authorization", &wrong)]);
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("not this job's worker token"), "{body}");
    let (status, body) = post(&worker, &[("Authorization", HTTP_TOKEN)]);
    assert_eq!(status, 401, "a token without its scheme: {body}");
    for task in 0..2 {
        assert!(
            checkpoints::manifests(&job, task).await.is_empty(),
            "a refused request took no checkpoint of task {task}"
        );
    }

    let right = format!("Bearer {HTTP_TOKEN}");
    let (status, body) = post(&worker, &[("Authorization", &right)]);
    assert_eq!(status, 200, "{body}");
    for task in 0..2 {
        assert_eq!(
            checkpoints::manifests(&job, task).await.len(),
            1,
            "task {task}"
        );
    }
    assert!(
        worker
            .log()
            .contains("refused a request without the worker token"),
        "refusals are logged"
    );
    worker.terminate(Duration::from_secs(30));

    // No token file: nothing changes the worker, whatever the request carries.
    job.config.http.token_file = None;
    let mut worker = job.start_listening(&address);
    checkpoints::wait_ready(&address, &mut worker, Duration::from_secs(60));
    let (status, body) = post(&worker, &[("Authorization", &right)]);
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("no http.tokenFile"), "{body}");
    assert_eq!(
        http_get(&address, "/v1/tasks").unwrap().0,
        200,
        "reads stay open"
    );
    worker.terminate(Duration::from_secs(30));
}
