//! The failover loop's links to worker pods (`streamkeeper::failover::links`) against real
//! workers on loopback, in both directions of an upgrade:
//!
//! - this operator and this worker: the report stream, a killed process found refused, a frozen
//!   one found silent since its last frame and answering again when it thaws;
//! - this operator and a worker from before the stream (which answers it 404): polled as
//!   before, a killed one refused;
//! - an operator from before the stream and this worker: it polls `GET /v1/tasks` with the
//!   client it had, and the worker answers it, stream open or not.
//!
//! Each worker runs on a runtime of its own thread, so a test can kill it (the runtime shuts
//! down and its sockets close, as a killed process's do) or freeze it (its only thread sleeps,
//! as a stopped process does).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use streamkeeper::adapters::worker_client;
use streamkeeper::failover::links::{Heard, Links, Target};
use streamkeeper_contract::TaskReportsDocument;
use streamkeeper_contract::report_stream::SILENT_AFTER_BEATS;
use streamkeeper_worker::board::TaskBoard;
use streamkeeper_worker::metrics::WorkerMetrics;
use streamkeeper_worker::runtime::http::{TokenSource, router};

const BEAT: Duration = Duration::from_millis(100);

/// A worker process stand-in: a runtime of its own, on a thread of its own, serving a router.
struct Worker {
    address: SocketAddr,
    runtime: tokio::runtime::Handle,
    kill: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Worker {
    /// This version's worker.
    fn current() -> Self {
        Self::serving(|| {
            router(
                TaskBoard::default(),
                WorkerMetrics::new(),
                None,
                None,
                TokenSource::Unset,
            )
        })
    }

    /// A worker from before the report stream: it answered `GET /v1/tasks`, and any path it did
    /// not know with 404.
    fn older() -> Self {
        Self::serving(|| {
            let document = TaskReportsDocument::new(Vec::new()).answered_by("1-older");
            axum::Router::new().route(
                "/v1/tasks",
                axum::routing::get(move || async move { axum::Json(document.clone()) }),
            )
        })
    }

    fn serving(app: impl FnOnce() -> axum::Router + Send + 'static) -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let address = listener.local_addr().unwrap();
        let (kill, killed) = tokio::sync::oneshot::channel::<()>();
        let (handle_tx, handle_rx) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            handle_tx.send(runtime.handle().clone()).unwrap();
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                tokio::select! {
                    _ = axum::serve(listener, app()) => {}
                    _ = killed => {}
                }
            });
            // Dropping the runtime drops every connection's task: their sockets close.
            drop(runtime);
        });
        Self {
            address,
            runtime: handle_rx.recv().unwrap(),
            kill: Some(kill),
            thread: Some(thread),
        }
    }

    fn target(&self) -> Target {
        Target {
            uid: "uid-1".into(),
            ip: self.address.ip().to_string(),
            port: self.address.port(),
            beat: BEAT,
        }
    }

    /// Stops the process for `pause`: its only thread sleeps, so nothing it serves moves.
    fn freeze(&self, pause: Duration) {
        self.runtime.spawn(async move { std::thread::sleep(pause) });
    }

    /// Kills it: every socket it holds closes, and its port refuses.
    fn kill(&mut self) {
        let _ = self.kill.take().unwrap().send(());
        self.thread.take().unwrap().join().unwrap();
    }
}

/// Waits until the link of "pod" heard what `wanted` accepts; what it heard then.
async fn wait_for(links: &Links, what: &str, wanted: impl Fn(&Heard) -> bool) -> Heard {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let heard = links.heard("pod").unwrap();
        if wanted(&heard) {
            return heard;
        }
        assert!(Instant::now() < deadline, "{what}: still {heard:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn answered(heard: &Heard) -> Option<Arc<TaskReportsDocument>> {
    match heard {
        Heard::Answered(document, _) => Some(Arc::clone(document)),
        _ => None,
    }
}

#[tokio::test]
async fn a_current_worker_streams_and_a_frozen_or_killed_one_is_found() {
    let mut worker = Worker::current();
    let mut links = Links::default();
    links.follow([("pod".to_string(), worker.target())]);
    let heard = wait_for(&links, "first frame", |h| answered(h).is_some()).await;
    let process = answered(&heard).unwrap().process.clone();
    assert!(process.is_some(), "the worker names its process");

    // Frozen: silent since about the last frame, found after two beats without one.
    let frozen_at = Instant::now();
    worker.freeze(BEAT * (SILENT_AFTER_BEATS + 8));
    let heard = wait_for(&links, "silence", |h| matches!(h, Heard::Silent(..))).await;
    let Heard::Silent(since, why) = heard else {
        unreachable!()
    };
    assert!(since <= frozen_at + BEAT, "silent since the last frame");
    assert!(
        frozen_at.duration_since(since) <= BEAT * 2,
        "{:?} before the freeze",
        frozen_at.duration_since(since)
    );
    assert!(why.contains("no frame"), "{why}");
    // Thawed: the same process answers again on the same stream.
    let heard = wait_for(&links, "thaw", |h| answered(h).is_some()).await;
    assert_eq!(answered(&heard).unwrap().process, process);

    let killed_at = Instant::now();
    worker.kill();
    wait_for(&links, "refusal", |h| matches!(h, Heard::Refused(_))).await;
    assert!(
        killed_at.elapsed() < Duration::from_secs(1),
        "a killed process is found refused at once, not after a timeout: {:?}",
        killed_at.elapsed()
    );
}

#[tokio::test]
async fn a_worker_from_before_the_stream_is_polled_and_its_death_found() {
    let mut worker = Worker::older();
    let mut links = Links::default();
    links.follow([("pod".to_string(), worker.target())]);
    let heard = wait_for(&links, "first answer", |h| answered(h).is_some()).await;
    assert_eq!(
        answered(&heard).unwrap().process.as_deref(),
        Some("1-older")
    );
    worker.kill();
    wait_for(&links, "refusal", |h| matches!(h, Heard::Refused(_))).await;
}

#[tokio::test]
async fn an_operator_from_before_the_stream_polls_this_worker_while_a_stream_is_open() {
    let worker = Worker::current();
    let mut links = Links::default();
    links.follow([("pod".to_string(), worker.target())]);
    let streamed = wait_for(&links, "first frame", |h| answered(h).is_some()).await;
    // The previous operator's heartbeat: `GET /v1/tasks`, with the client it had.
    let target = worker.target();
    let polled = worker_client::task_reports(&target.ip, target.port, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(Some(&polled), answered(&streamed).as_deref());
}

#[tokio::test]
async fn a_link_ends_with_its_pod() {
    let worker = Worker::current();
    let mut links = Links::default();
    links.follow([("pod".to_string(), worker.target())]);
    wait_for(&links, "first frame", |h| answered(h).is_some()).await;
    links.follow(Vec::new());
    assert!(links.heard("pod").is_none());
    // Another uid under the same name is another link, which starts from nothing.
    let renewed = Target {
        uid: "uid-2".into(),
        ..worker.target()
    };
    links.follow([("pod".to_string(), renewed)]);
    assert!(matches!(links.heard("pod"), Some(Heard::Nothing)));
}
