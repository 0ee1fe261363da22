//! Which worker pods are alive, from the operator's own heartbeat: it asks every pod for its
//! task reports a few times a second. Pure bookkeeping, so the rule is unit-tested.
//!
//! - A refused connection means no process listens on the pod's port (it died, or restarts):
//!   the pod is down at once, with no grace, since nothing runs its tasks.
//! - A pod that does not answer (a frozen process, a lost node, a partition) is down once its
//!   last answer is older than the job's heartbeat timeout ([`DEFAULT_SUSPECT_AFTER`] unless
//!   `spec.recovery.heartbeatTimeout` says otherwise), a few polls, not the node controller's
//!   40 s.
//! - A pod that has never answered is starting: it keeps what the document gives it for
//!   [`STARTUP_GRACE`] after the loop first saw it, so a resumed job, a new leader or a slow
//!   start never sends every task to the first pod that happens to answer.
//!
//! A wrong guess is safe: the promoted standby fences the old owner's transactional id.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How long a pod may be silent before its tasks move, by default. Two seconds: a busy worker
/// (two cores shared by many processes, as in CI) missed a second of polls without being
/// frozen, and each false suspicion costs a handoff; a dead process is found at once anyway
/// (refused).
pub const DEFAULT_SUSPECT_AFTER: Duration = Duration::from_millis(2_000);
/// How long a pod that has never answered counts as starting, not failed.
pub const STARTUP_GRACE: Duration = Duration::from_secs(30);

/// What one poll of a pod found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Poll {
    Answered,
    /// Connection refused: nothing listens.
    Refused,
    /// No answer in time, or a broken one.
    Silent,
}

#[derive(Debug, Clone, Copy)]
struct Beat {
    first_seen: Instant,
    last_answer: Option<Instant>,
    refused: bool,
}

/// The heartbeats of one job's pods.
#[derive(Debug)]
pub struct Heartbeats {
    pods: HashMap<String, Beat>,
    suspect_after: Duration,
}

impl Default for Heartbeats {
    fn default() -> Self {
        Self {
            pods: HashMap::new(),
            suspect_after: DEFAULT_SUSPECT_AFTER,
        }
    }
}

impl Heartbeats {
    /// A pod silent for `timeout` is down from now on.
    pub fn suspect_after(&mut self, timeout: Duration) {
        self.suspect_after = timeout;
    }

    pub fn record(&mut self, pod: &str, poll: Poll, now: Instant) {
        let beat = self.pods.entry(pod.to_string()).or_insert(Beat {
            first_seen: now,
            last_answer: None,
            refused: false,
        });
        match poll {
            Poll::Answered => {
                beat.last_answer = Some(now);
                beat.refused = false;
            }
            Poll::Refused => beat.refused = true,
            Poll::Silent => {}
        }
    }

    /// The pod answered recently and nothing says its process is gone: it can be sent the
    /// document.
    pub fn reachable(&self, pod: &str, now: Instant) -> bool {
        self.pods.get(pod).is_some_and(|beat| {
            !beat.refused
                && beat
                    .last_answer
                    .is_some_and(|at| now.saturating_duration_since(at) < self.suspect_after)
        })
    }

    /// The pod may keep or get tasks: reachable, or starting (never answered, first seen less
    /// than [`STARTUP_GRACE`] ago).
    pub fn alive(&self, pod: &str, now: Instant) -> bool {
        self.reachable(pod, now)
            || self.pods.get(pod).is_some_and(|beat| {
                beat.last_answer.is_none()
                    && now.saturating_duration_since(beat.first_seen) < STARTUP_GRACE
            })
    }

    /// Pods that have answered at least once.
    pub fn answered(&self, pod: &str) -> bool {
        self.pods
            .get(pod)
            .is_some_and(|beat| beat.last_answer.is_some())
    }

    /// How long ago `pod` last answered; `None` when it never did.
    pub fn silent_for(&self, pod: &str, now: Instant) -> Option<Duration> {
        let at = self.pods.get(pod)?.last_answer?;
        Some(now.saturating_duration_since(at))
    }

    /// Forgets pods that no longer exist.
    pub fn retain(&mut self, exists: impl Fn(&str) -> bool) {
        self.pods.retain(|pod, _| exists(pod));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_connection_is_down_at_once_and_silence_after_the_grace() {
        let start = Instant::now();
        let mut beats = Heartbeats::default();
        beats.record("p", Poll::Refused, start);
        assert!(beats.alive("p", start), "never answered: starting");
        assert!(!beats.reachable("p", start));
        assert!(
            !beats.alive("p", start + STARTUP_GRACE),
            "started too long ago"
        );
        beats.record("p", Poll::Answered, start);
        assert!(beats.alive("p", start));
        assert!(beats.answered("p"));

        // Silent (frozen): alive until DEFAULT_SUSPECT_AFTER has passed since the last answer.
        let later = start + DEFAULT_SUSPECT_AFTER / 2;
        beats.record("p", Poll::Silent, later);
        assert!(beats.alive("p", later));
        let late = start + DEFAULT_SUSPECT_AFTER;
        beats.record("p", Poll::Silent, late);
        assert!(!beats.alive("p", late));
        assert_eq!(beats.silent_for("p", late), Some(DEFAULT_SUSPECT_AFTER));

        // Answering again makes it alive; a refused connection makes it down at once.
        beats.record("p", Poll::Answered, late);
        assert!(beats.alive("p", late));
        beats.record("p", Poll::Refused, late);
        assert!(!beats.alive("p", late));

        beats.retain(|pod| pod != "p");
        assert_eq!(beats.silent_for("p", late), None);
    }

    #[test]
    fn the_jobs_heartbeat_timeout_decides_when_silence_is_down() {
        let start = Instant::now();
        let mut beats = Heartbeats::default();
        beats.record("p", Poll::Answered, start);
        beats.suspect_after(Duration::from_secs(1));
        let after_1s = start + Duration::from_secs(1);
        beats.record("p", Poll::Silent, after_1s);
        assert!(!beats.alive("p", after_1s), "down after 1 s of silence");
        beats.suspect_after(Duration::from_secs(5));
        assert!(beats.alive("p", after_1s), "a longer timeout keeps it");
    }
}
