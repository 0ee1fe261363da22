//! The fleet on real sockets: two simulated pods on their own loopback addresses, driven through
//! the control API and called as the operator calls a worker (HTTP/1.1, one connection a call).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};
use streamkeeper_contract::{AssignmentDocument, TaskAssignment, TaskReportsDocument, Versioned};
use streamkeeper_fleet_workers::{Fleet, control};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const TOKEN: &str = "Bearer 0123456789abcdef0123456789abcdef0123456789abcdef";
const TASKS: &str = "/v1/tasks";

/// A fleet with pods `job-0` and `job-1`, each on an address of its own in 127.201.N.0/24.
struct Harness {
    control: SocketAddr,
    pods: [SocketAddr; 2],
}

async fn start(subnet: u8) -> Harness {
    let ips = [
        Ipv4Addr::new(127, 201, subnet, 1),
        Ipv4Addr::new(127, 201, subnet, 2),
    ];
    // A port free on the first address; the others of 127.201/16 are used by nothing else.
    let probe = tokio::net::TcpListener::bind((ips[0], 0)).await.unwrap();
    let port = probe.local_addr().unwrap().port();
    drop(probe);
    let fleet = Fleet::new(port);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let control = listener.local_addr().unwrap();
    tokio::spawn(control::serve(listener, fleet));
    let harness = Harness {
        control,
        pods: [
            SocketAddr::from((ips[0], port)),
            SocketAddr::from((ips[1], port)),
        ],
    };
    for (index, ip) in ips.iter().enumerate() {
        let body = format!(r#"{{"name":"job-{index}"}}"#);
        let (status, _) = harness.control("PUT", &format!("/pods/{ip}"), &body).await;
        assert_eq!(status, 200);
    }
    harness
}

impl Harness {
    async fn control(&self, method: &str, path: &str, body: &str) -> (u16, serde_json::Value) {
        let (status, body) = call(self.control, method, path, None, body.as_bytes())
            .await
            .unwrap();
        (
            status,
            serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null),
        )
    }

    async fn act(&self, pod: usize, action: &str) {
        let ip = self.pods[pod].ip();
        let (status, answer) = self
            .control("POST", &format!("/pods/{ip}/{action}"), "")
            .await;
        assert_eq!(status, 200, "{action}: {answer}");
    }

    async fn reports(&self, pod: usize) -> TaskReportsDocument {
        let (status, body) = call(self.pods[pod], "GET", TASKS, None, b"").await.unwrap();
        assert_eq!(status, 200);
        TaskReportsDocument::from_json(&body).unwrap()
    }

    /// Requests the pod has received so far.
    async fn requests(&self, pod: usize) -> u64 {
        let ip = self.pods[pod].ip();
        self.control("GET", &format!("/pods/{ip}"), "").await.1["requests"]
            .as_u64()
            .unwrap()
    }
}

fn request(method: &str, path: &str, authorization: Option<&str>, body: &[u8]) -> Vec<u8> {
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nhost: worker\r\nconnection: close\r\ncontent-type: application/json\r\ncontent-length: {}\r\n",
        body.len()
    );
    if let Some(authorization) = authorization {
        head.push_str(&format!("authorization: {authorization}\r\n"));
    }
    head.push_str("\r\n");
    [head.as_bytes(), body].concat()
}

/// One HTTP/1.1 exchange on a connection of its own: (status, body).
async fn call(
    to: SocketAddr,
    method: &str,
    path: &str,
    authorization: Option<&str>,
    body: &[u8],
) -> std::io::Result<(u16, Vec<u8>)> {
    let mut stream = TcpStream::connect(to).await?;
    stream
        .write_all(&request(method, path, authorization, body))
        .await?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await?;
    Ok(parse(&answer))
}

fn parse(answer: &[u8]) -> (u16, Vec<u8>) {
    let text = String::from_utf8_lossy(answer);
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.as_bytes().to_vec())
        .unwrap_or_default();
    (status, body)
}

fn assignment(generation: u64) -> Vec<u8> {
    AssignmentDocument {
        version: 1,
        generation,
        tasks: vec![
            TaskAssignment {
                task: 0,
                active: Some("job-0".into()),
                standbys: vec!["job-1".into()],
            },
            TaskAssignment {
                task: 1,
                active: Some("job-1".into()),
                standbys: vec!["job-0".into()],
            },
        ],
    }
    .to_json()
}

/// Polls `condition` until it holds; fails after ten seconds.
async fn wait_until<F: std::future::Future<Output = bool>>(
    what: &str,
    mut condition: impl FnMut() -> F,
) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !condition().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_assignment_round_trips_and_its_arrival_is_recorded() {
    let fleet = start(1).await;
    let body = assignment(3);
    let (refused, _) = call(fleet.pods[0], "PUT", "/v1/assignment", None, &body)
        .await
        .unwrap();
    assert_eq!(refused, 401, "a PUT without a token is refused");
    let before_ms = streamkeeper_fleet_workers::fleet::now_ms();
    for pod in fleet.pods {
        let (status, answer) = call(pod, "PUT", "/v1/assignment", Some(TOKEN), &body)
            .await
            .unwrap();
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&answer));
    }
    let reports = fleet.reports(0).await;
    assert_eq!(reports.generation, Some(3));
    let roles: Vec<_> = reports.tasks.iter().map(|r| (r.task, r.role)).collect();
    use streamkeeper_contract::task_report::TaskRole::{Active, Standby};
    assert_eq!(roles, vec![(0, Active), (1, Standby)]);

    let ip = fleet.pods[1].ip();
    let (status, record) = fleet
        .control("GET", &format!("/pods/{ip}/assignments"), "")
        .await;
    assert_eq!(status, 200);
    assert_eq!(record["name"], "job-1");
    let arrival = &record["arrivals"][0];
    assert_eq!(arrival["generation"], 3);
    assert!(arrival["atMs"].as_u64().unwrap() >= before_ms, "{record}");

    let (_, stats) = fleet.control("GET", "/stats", "").await;
    assert_eq!(stats["pods"], 2);
    assert_eq!(stats["requests"]["PUT /v1/assignment"], 3);
    assert_eq!(stats["requests"]["GET /v1/tasks"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusing_pod_refuses_connections_and_restarts_as_a_new_process() {
    let fleet = start(2).await;
    call(
        fleet.pods[0],
        "PUT",
        "/v1/assignment",
        Some(TOKEN),
        &assignment(5),
    )
    .await
    .unwrap();
    let before = fleet.reports(0).await;
    assert_eq!(before.generation, Some(5));

    fleet.act(0, "refuse").await;
    let refused = TcpStream::connect(fleet.pods[0]).await.unwrap_err();
    assert_eq!(refused.kind(), std::io::ErrorKind::ConnectionRefused);
    assert!(
        fleet.reports(1).await.process.is_some(),
        "the other pod still answers"
    );

    fleet.act(0, "restart").await;
    let after = fleet.reports(0).await;
    assert_ne!(after.process, before.process);
    assert_eq!(after.generation, None);
    assert!(after.tasks.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_pod_takes_a_request_and_answers_only_once_thawed() {
    let fleet = start(3).await;
    fleet.act(0, "silent").await;
    let received = fleet.requests(0).await;
    let mut stream = TcpStream::connect(fleet.pods[0]).await.unwrap();
    stream
        .write_all(&request("GET", TASKS, None, b""))
        .await
        .unwrap();
    wait_until("the frozen pod to take the request", || async {
        fleet.requests(0).await > received
    })
    .await;
    let mut byte = [0u8; 1];
    let pending = stream.try_read(&mut byte).unwrap_err();
    assert_eq!(
        pending.kind(),
        std::io::ErrorKind::WouldBlock,
        "no answer while frozen"
    );

    fleet.act(0, "normal").await;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.unwrap();
    assert_eq!(parse(&answer).0, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_pod_that_is_killed_drops_the_call_in_flight() {
    let fleet = start(4).await;
    fleet.act(1, "silent").await;
    let received = fleet.requests(1).await;
    let mut stream = TcpStream::connect(fleet.pods[1]).await.unwrap();
    stream
        .write_all(&request("GET", TASKS, None, b""))
        .await
        .unwrap();
    wait_until("the frozen pod to take the request", || async {
        fleet.requests(1).await > received
    })
    .await;
    fleet.act(1, "refuse").await;
    let mut answer = Vec::new();
    // Closed without an answer: end of stream, or a reset.
    let read = stream.read_to_end(&mut answer).await;
    assert!(read.is_err() || answer.is_empty(), "{read:?} {answer:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_pod_answers_after_its_delay_and_a_lagging_one_reports_its_lag() {
    let fleet = start(5).await;
    call(
        fleet.pods[0],
        "PUT",
        "/v1/assignment",
        Some(TOKEN),
        &assignment(1),
    )
    .await
    .unwrap();
    fleet.act(0, "slow?ms=300").await;
    fleet.act(0, "lag?records=42").await;
    let asked = Instant::now();
    let reports = fleet.reports(0).await;
    assert!(
        asked.elapsed() >= Duration::from_millis(300),
        "{:?}",
        asked.elapsed()
    );
    assert_eq!(reports.tasks[0].input_lag, Some(42));
    assert_eq!(reports.tasks[1].changelog_lag, Some(42));

    fleet.act(0, "normal").await;
    assert_eq!(fleet.reports(0).await.tasks[0].input_lag, Some(0));
}

/// Reads from `stream` until `count` frames of the report stream have come (chunked: the frames
/// are the lines holding JSON, between the chunk sizes).
async fn frames(
    stream: &mut TcpStream,
    count: usize,
) -> Vec<streamkeeper_contract::report_stream::ReportFrame> {
    let mut seen = Vec::new();
    let mut buffer = [0u8; 4096];
    loop {
        let read = stream.read(&mut buffer).await.unwrap();
        assert!(
            read > 0,
            "the stream ended: {}",
            String::from_utf8_lossy(&seen)
        );
        seen.extend_from_slice(&buffer[..read]);
        let text = String::from_utf8_lossy(&seen).to_string();
        let Some((_, body)) = text.split_once("\r\n\r\n") else {
            continue;
        };
        let frames: Vec<_> = body
            .split(['\r', '\n'])
            .filter(|line| line.starts_with('{'))
            .map(|line| {
                streamkeeper_contract::report_stream::ReportFrame::from_json(line.as_bytes())
                    .unwrap()
            })
            .collect();
        if frames.len() >= count {
            return frames;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_pod_restarted_at_once_ends_its_stream_and_answers_as_a_new_process() {
    let fleet = start(6).await;
    let mut stream = TcpStream::connect(fleet.pods[0]).await.unwrap();
    let head = "GET /v1/tasks/stream?beatMs=50 HTTP/1.1\r\nhost: worker\r\n\r\n";
    stream.write_all(head.as_bytes()).await.unwrap();
    let first = frames(&mut stream, 2).await;
    let before = first[0].document.clone().expect("the whole document first");
    assert!(first[1].is_beat());

    // Frozen, then restarted at once: the listener is the same, so no bind can fail.
    fleet.act(0, "silent").await;
    fleet.act(0, "restart").await;
    let mut rest = Vec::new();
    let ended = stream.read_to_end(&mut rest).await;
    assert!(
        ended.is_err() || !rest.ends_with(b"0\r\n\r\n"),
        "cut, not finished"
    );
    let after = fleet.reports(0).await;
    assert_ne!(after.process, before.process);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_pod_has_no_report_stream() {
    let fleet = start(7).await;
    fleet.act(1, "older").await;
    let (status, _) = call(fleet.pods[1], "GET", "/v1/tasks/stream", None, b"")
        .await
        .unwrap();
    assert_eq!(status, 404);
    assert_eq!(fleet.reports(1).await.tasks.len(), 0, "still polled");
}
