//! Two worker pods of one job (`--replicas 2`, pod names ending -0 and -1) split its tasks by
//! ordinal, each in its own state directory, and together produce exactly the output of one
//! standalone worker.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

mod support;

use std::time::Duration;
use support::*;

fn task_numbers(listen: &str) -> Vec<u64> {
    let (status, body) = http_get(listen, "/v1/tasks").unwrap();
    assert_eq!(status, 200);
    let tasks: serde_json::Value = serde_json::from_str(&body).unwrap();
    let mut numbers: Vec<u64> = tasks["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["task"].as_u64().unwrap())
        .collect();
    numbers.sort_unstable();
    numbers
}

#[tokio::test(flavor = "multi_thread")]
async fn two_replicas_split_the_tasks_and_stay_exact() {
    let input = unique_name("share-input");
    create_topic(&input, 4, false).await;
    produce(&input, 4, (0..8_000).map(|i| card_event(i, 150)));

    let mut job = Job::new("share", &input, 4, aggregate_processor()).await;
    job.env.push(("STREAMKEEPER_REPLICAS".into(), "2".into()));
    let mut workers = Vec::new();
    for ordinal in 0..2 {
        job.env.retain(|(name, _)| name != "POD_NAME");
        job.env
            .push(("POD_NAME".into(), format!("share-{ordinal}")));
        let listen = format!("127.0.0.1:{}", free_port());
        let state = job.dir.path().join(format!("state-{ordinal}"));
        workers.push((job.spawn_with(&state, None, Some(&listen)), listen));
    }
    let (first, rest) = workers.split_first_mut().unwrap();
    job.wait_until_caught_up(&mut first.0, Duration::from_secs(300));
    assert_eq!(task_numbers(&first.1), [0, 2]);
    assert_eq!(task_numbers(&rest[0].1), [1, 3]);
    for (worker, _) in &mut workers {
        worker.terminate(Duration::from_secs(30));
    }

    let reference = Job::new("share-reference", &input, 4, aggregate_processor()).await;
    let mut worker = reference.start(None);
    reference.wait_until_caught_up(&mut worker, Duration::from_secs(300));
    worker.terminate(Duration::from_secs(30));
    assert_same_output(&job.output(), &reference.output());
}
