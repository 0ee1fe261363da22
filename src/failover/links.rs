//! The failover loop's link to each worker pod: a task per pod that holds the pod's report
//! stream open ([`crate::adapters::report_stream`]) and keeps what it last heard, so a poll of
//! the loop reads its pods from memory instead of asking each one over HTTP.
//!
//! What a link says is what a poll said ([`Heard`]):
//! - frames arrive: the pod answers, with its reports as of the last frame;
//! - the stream ended and the next connect was refused: nothing listens (the process is gone);
//! - no frame for [`SILENT_AFTER_BEATS`] beats, or no stream at all: silent, since the last
//!   frame. The timer that finds it is this task's own, and a read that is ready wins over it:
//!   an operator held up finds the frames that arrived meanwhile, not a silence.
//!
//! A worker older than the stream answers it with 404; its link polls `GET /v1/tasks` every
//! [`OLDER_WORKER_POLL_EVERY`] as the loop did before, and tries the stream again once another process
//! answers (the pod's worker was upgraded in place).

use crate::adapters::report_stream::{self, OpenError, ReportStream};
use crate::adapters::worker_client::{self, WorkerCallError};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use streamkeeper_contract::TaskReportsDocument;
use streamkeeper_contract::report_stream::{Change, ReportView, SILENT_AFTER_BEATS};
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

/// How often a link to a worker older than the stream polls it: the pace at which the loop
/// asked every worker before the stream.
pub const OLDER_WORKER_POLL_EVERY: Duration = Duration::from_millis(250);
/// How long a connect, the stream's answer head, or a poll may take before it counts as
/// silence.
pub const ASK_TIMEOUT: Duration = Duration::from_millis(500);

/// What a link last heard from its pod.
#[derive(Debug, Clone)]
pub enum Heard {
    /// Nothing yet: the first connect is under way.
    Nothing,
    /// The pod answers; its reports as of its last frame or answer, and when that came.
    Answered(Arc<TaskReportsDocument>, Instant),
    /// Nothing listens on the pod's port.
    Refused(String),
    /// No answer since this instant (the last frame, or the question), and why.
    Silent(Instant, String),
}

impl Heard {
    fn answered_document(&self) -> Option<&TaskReportsDocument> {
        match self {
            Heard::Answered(document, _) => Some(document),
            _ => None,
        }
    }
}

/// Where a link connects, and with what beat. A change of any starts a new link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The pod's uid: a pod recreated under its name is another link.
    pub uid: String,
    pub ip: String,
    pub port: u16,
    pub beat: Duration,
}

struct Link {
    target: Target,
    heard: watch::Receiver<Heard>,
    task: JoinHandle<()>,
}

impl Drop for Link {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One job's links, by pod name.
#[derive(Default)]
pub struct Links {
    links: BTreeMap<String, Link>,
    /// Told when a link hears news: a refusal, a silence, an answer again, or reports that
    /// changed more than their progress figures. The loop then polls at once.
    news: Arc<Notify>,
}

/// A link's end of its channel: what it heard, and the loop's wake-up for news.
struct Teller {
    tell: watch::Sender<Heard>,
    news: Arc<Notify>,
}

impl Teller {
    /// Records `heard`; wakes the loop when it is `news`, or not the same kind as before (an
    /// answer after a silence, a refusal after an answer).
    fn heard(&self, heard: Heard, news: bool) {
        let before = self.tell.send_replace(heard);
        let kind_changed =
            std::mem::discriminant(&before) != std::mem::discriminant(&*self.tell.borrow());
        if news || kind_changed {
            self.news.notify_one();
        }
    }
}

impl Links {
    /// Links exactly the pods of `targets`: a new pod (or a new uid, address, port or beat) gets
    /// a new link, a pod gone loses its own.
    pub fn follow(&mut self, targets: impl IntoIterator<Item = (String, Target)>) {
        let wanted: BTreeMap<String, Target> = targets.into_iter().collect();
        self.links
            .retain(|pod, link| wanted.get(pod).is_some_and(|t| *t == link.target));
        for (pod, target) in wanted {
            if self.links.contains_key(&pod) {
                continue;
            }
            let (tell, heard) = watch::channel(Heard::Nothing);
            let teller = Teller {
                tell,
                news: Arc::clone(&self.news),
            };
            let task = tokio::spawn(run(target.clone(), teller));
            self.links.insert(
                pod,
                Link {
                    target,
                    heard,
                    task,
                },
            );
        }
    }

    /// Waits, up to `limit`, until every link has heard something: a new pod's first answer
    /// counts in the poll that first sees it, as it did when the loop asked.
    pub async fn first_answers(&self, limit: Duration) {
        let waits = self.links.values().map(|link| {
            let mut heard = link.heard.clone();
            async move {
                let _ = heard
                    .wait_for(|heard| !matches!(heard, Heard::Nothing))
                    .await;
            }
        });
        let _ = tokio::time::timeout(limit, futures::future::join_all(waits)).await;
    }

    /// What the link of `pod` heard last; `None` when the pod has no link.
    pub fn heard(&self, pod: &str) -> Option<Heard> {
        self.links.get(pod).map(|link| link.heard.borrow().clone())
    }

    /// Closes every link (this replica is no longer the leader).
    pub fn clear(&mut self) {
        self.links.clear();
    }

    /// Resolves when a link heard news since the last call returned (at once if it did).
    pub async fn news(&self) {
        self.news.notified().await;
    }
}

/// A link's life: the stream while the worker has one, else polls.
async fn run(target: Target, tell: Teller) {
    let mut heard_at: Option<Instant> = None;
    loop {
        let asked = Instant::now();
        let opened = report_stream::open(&target.ip, target.port, target.beat, ASK_TIMEOUT).await;
        match opened {
            Ok(stream) => {
                follow_stream(stream, &target, &tell, &mut heard_at).await;
                // Ended: connect again at once, and a refusal says the process is gone.
                continue;
            }
            Err(OpenError::Unsupported { .. }) => {
                poll_older_worker(&target, &tell).await;
                continue;
            }
            Err(OpenError::Call(error)) => {
                let since = heard_at.unwrap_or(asked);
                tell.heard(unanswered(&error, since), false);
            }
        }
        tokio::time::sleep(target.beat).await;
    }
}

/// Reads frames until the stream ends or breaks.
async fn follow_stream(
    mut stream: ReportStream,
    target: &Target,
    tell: &Teller,
    heard_at: &mut Option<Instant>,
) {
    let mut view = ReportView::default();
    let mut document: Option<Arc<TaskReportsDocument>> = None;
    let silent_after = target.beat * SILENT_AFTER_BEATS;
    loop {
        // `timeout` polls the read first: a frame that is there wins over the timer.
        let next = tokio::time::timeout(silent_after, stream.next()).await;
        let frame = match next {
            Ok(Ok(Some(frame))) => frame,
            Ok(Ok(None)) => return,
            Ok(Err(error)) => {
                let since = heard_at.unwrap_or_else(Instant::now);
                tell.heard(Heard::Silent(since, error.to_string()), false);
                return;
            }
            Err(_) => {
                let since = heard_at.unwrap_or_else(Instant::now);
                let why = format!("no frame for {silent_after:?}");
                tell.heard(Heard::Silent(since, why), false);
                continue;
            }
        };
        let now = Instant::now();
        *heard_at = Some(now);
        let news = match view.apply(frame) {
            Ok(Change::Nothing) => false,
            Ok(change) => {
                document = view.document().cloned().map(Arc::new);
                change == Change::News
            }
            Err(error) => {
                tell.heard(Heard::Silent(Instant::now(), error.to_string()), true);
                return;
            }
        };
        if let Some(document) = &document {
            tell.heard(Heard::Answered(Arc::clone(document), now), news);
        }
    }
}

/// Polls a worker that has no stream, until another process answers.
async fn poll_older_worker(target: &Target, tell: &Teller) {
    let mut first_process: Option<String> = None;
    let mut ticks = tokio::time::interval(OLDER_WORKER_POLL_EVERY);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let asked = Instant::now();
        match worker_client::task_reports(&target.ip, target.port, ASK_TIMEOUT).await {
            Ok(document) => {
                let process = document.process.clone();
                if first_process.is_none() {
                    first_process = process.clone();
                }
                // Older workers are few: any change of their reports wakes the loop.
                let news = tell.tell.borrow().answered_document() != Some(&document);
                tell.heard(Heard::Answered(Arc::new(document), Instant::now()), news);
                if process != first_process {
                    return;
                }
            }
            Err(error) => {
                tell.heard(unanswered(&error, asked), false);
            }
        }
    }
}

/// A call that got no answer: refused, or silent since `since`.
fn unanswered(error: &WorkerCallError, since: Instant) -> Heard {
    match error {
        WorkerCallError::Unreachable { source, .. }
            if source.kind() == std::io::ErrorKind::ConnectionRefused =>
        {
            Heard::Refused(error.to_string())
        }
        _ => Heard::Silent(since, error.to_string()),
    }
}
