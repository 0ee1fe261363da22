//! Which worker pods are alive, from the operator's own heartbeat: each pod's report stream
//! (a worker older than the stream is asked for its reports a few times a second instead; see
//! [`super::links`]). Pure bookkeeping, so the rule is unit-tested.
//!
//! - A refused connection means no process listens on the pod's port (it died, or restarts):
//!   the pod is down at once, with no grace, since nothing runs its tasks.
//! - A pod that does not answer (a frozen process, a lost node, a partition) is down once it
//!   has left the heartbeat unanswered for the job's heartbeat timeout ([`DEFAULT_SUSPECT_AFTER`]
//!   unless `spec.recovery.heartbeatTimeout` says otherwise): a few polls, not the node
//!   controller's 40 s. On a stream the silence counts from the last frame, found by the link's
//!   own timer, where a frame that already arrived wins over the timer: an operator held up
//!   (a slow apiserver call, a starved process) reads what came meanwhile, not a silence. A
//!   polled worker's silence counts from the first question it left unanswered, not from its
//!   last answer: while the operator was held up, nobody asked it anything.
//! - A pod whose process was replaced (another process answers under its name, or the pod was
//!   recreated) is down until one decision has been made without it: the process that ran its
//!   tasks is gone, however quickly the next one came up. A pod force-deleted and recreated
//!   under the same name and address answers again within a poll, before any refused one.
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
/// How long a pod that has never answered counts as starting, not failed: as long as a new
/// job waits for its pods ([`crate::failover::FIRST_DECISION_WAIT`]).
pub const STARTUP_GRACE: Duration = Duration::from_secs(60);

/// What one poll of a pod found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Poll<'a> {
    /// An answer, from the process it names (if it does).
    Answered(Option<&'a str>),
    /// Connection refused: nothing listens.
    Refused,
    /// No answer in time, or a broken one, to the question asked at this instant.
    Silent(Instant),
}

#[derive(Debug, Clone)]
struct Beat {
    first_seen: Instant,
    last_answer: Option<Instant>,
    /// When the first question since the last answer was asked that went unanswered.
    unanswered_since: Option<Instant>,
    refused: bool,
    /// The process that answered last.
    process: Option<String>,
    /// Set when the pod's process was found replaced: when its predecessor last answered.
    replaced_after: Option<Instant>,
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

    pub fn record(&mut self, pod: &str, poll: Poll<'_>, now: Instant) {
        let beat = self.pods.entry(pod.to_string()).or_insert(Beat {
            first_seen: now,
            last_answer: None,
            unanswered_since: None,
            refused: false,
            process: None,
            replaced_after: None,
        });
        match poll {
            Poll::Answered(process) => {
                if let Some(process) = process {
                    if beat.process.as_deref().is_some_and(|last| last != process) {
                        beat.replaced_after = beat.replaced_after.or(beat.last_answer);
                    }
                    beat.process = Some(process.to_string());
                }
                beat.last_answer = Some(now);
                beat.unanswered_since = None;
                beat.refused = false;
            }
            Poll::Refused => beat.refused = true,
            Poll::Silent(asked) => {
                beat.unanswered_since.get_or_insert(asked);
            }
        }
    }

    /// The pod has answered, has not left the heartbeat unanswered for the timeout, and nothing
    /// says its process is gone: it can be sent the document.
    pub fn reachable(&self, pod: &str, now: Instant) -> bool {
        self.pods.get(pod).is_some_and(|beat| {
            !beat.refused
                && beat.last_answer.is_some()
                && beat
                    .unanswered_since
                    .is_none_or(|asked| now.saturating_duration_since(asked) < self.suspect_after)
        })
    }

    /// The pod was recreated under its name (a new uid): the process that answered is gone,
    /// whether or not the new one answers yet.
    pub fn replaced(&mut self, pod: &str) {
        if let Some(beat) = self.pods.get_mut(pod) {
            beat.refused = true;
            beat.replaced_after = beat.replaced_after.or(beat.last_answer);
        }
    }

    /// A decision has been made with every replaced process counted as down: the pods count
    /// by their new processes from now on.
    pub fn replacements_decided(&mut self) {
        for beat in self.pods.values_mut() {
            beat.replaced_after = None;
        }
    }

    /// The pod may keep or get tasks: its process was not just replaced, and it is reachable
    /// or starting (never answered, first seen less than [`STARTUP_GRACE`] ago).
    pub fn alive(&self, pod: &str, now: Instant) -> bool {
        let replaced = self
            .pods
            .get(pod)
            .is_some_and(|beat| beat.replaced_after.is_some());
        !replaced
            && (self.reachable(pod, now)
                || self.pods.get(pod).is_some_and(|beat| {
                    beat.last_answer.is_none()
                        && now.saturating_duration_since(beat.first_seen) < STARTUP_GRACE
                }))
    }

    /// The pod has answered before and left the last question unanswered.
    pub fn unanswered(&self, pod: &str) -> bool {
        self.pods
            .get(pod)
            .is_some_and(|beat| beat.last_answer.is_some() && beat.unanswered_since.is_some())
    }

    /// Pods that have answered at least once.
    pub fn answered(&self, pod: &str) -> bool {
        self.pods
            .get(pod)
            .is_some_and(|beat| beat.last_answer.is_some())
    }

    /// How long ago `pod` last answered (its replaced process, if it was); `None` when it never
    /// did.
    pub fn silent_for(&self, pod: &str, now: Instant) -> Option<Duration> {
        let beat = self.pods.get(pod)?;
        let at = beat.replaced_after.or(beat.last_answer)?;
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
        beats.record("p", Poll::Answered(None), start);
        assert!(beats.alive("p", start));
        assert!(beats.answered("p"));

        // Silent (frozen): alive until DEFAULT_SUSPECT_AFTER has passed since the first question
        // it left unanswered.
        let first_unanswered = start + Duration::from_millis(250);
        let later = first_unanswered + DEFAULT_SUSPECT_AFTER / 2;
        beats.record("p", Poll::Silent(first_unanswered), later);
        assert!(beats.alive("p", later));
        let late = first_unanswered + DEFAULT_SUSPECT_AFTER;
        beats.record("p", Poll::Silent(late - Duration::from_millis(500)), late);
        assert!(!beats.alive("p", late));
        assert_eq!(
            beats.silent_for("p", late),
            Some(DEFAULT_SUSPECT_AFTER + Duration::from_millis(250)),
            "since its last answer"
        );

        // Answering again makes it alive; a refused connection makes it down at once.
        beats.record("p", Poll::Answered(None), late);
        assert!(beats.alive("p", late));
        beats.record("p", Poll::Refused, late);
        assert!(!beats.alive("p", late));

        beats.retain(|pod| pod != "p");
        assert_eq!(beats.silent_for("p", late), None);
    }

    #[test]
    fn a_replaced_process_is_down_until_one_decision_is_made_without_it() {
        let start = Instant::now();
        let later = start + Duration::from_millis(250);
        let mut beats = Heartbeats::default();
        beats.record("p", Poll::Answered(Some("7-100")), start);
        beats.record("p", Poll::Answered(Some("7-100")), later);
        assert!(beats.alive("p", later), "the same process answers");

        // Another process answers under the pod's name: the one that ran its tasks is gone.
        let restarted = later + Duration::from_millis(250);
        beats.record("p", Poll::Answered(Some("1-200")), restarted);
        assert!(!beats.alive("p", restarted), "its tasks must move");
        assert!(beats.reachable("p", restarted), "it is sent the document");
        assert_eq!(
            beats.silent_for("p", restarted),
            Some(Duration::from_millis(250)),
            "silent since its predecessor's last answer"
        );
        beats.replacements_decided();
        assert!(
            beats.alive("p", restarted),
            "a pod again, by its new process"
        );

        // A pod recreated under its name: down whether or not the new process answers yet.
        beats.replaced("p");
        assert!(!beats.alive("p", restarted));
        beats.record("p", Poll::Answered(Some("1-300")), restarted);
        assert!(!beats.alive("p", restarted), "a decision is still due");
        beats.replacements_decided();
        assert!(beats.alive("p", restarted));

        // A worker that names no process is never taken for a restart.
        beats.record("q", Poll::Answered(None), start);
        beats.record("q", Poll::Answered(None), later);
        assert!(beats.alive("q", later));
    }

    #[test]
    fn a_pause_of_the_operator_is_not_silence_of_the_pod() {
        // The pod answered, then the operator was held up for 3 s and asked nothing; the one
        // question it asked then went unanswered (the pod was busy for half a second).
        let start = Instant::now();
        let mut beats = Heartbeats::default();
        beats.record("p", Poll::Answered(None), start);
        let asked = start + Duration::from_secs(3);
        let timed_out = asked + Duration::from_millis(500);
        beats.record("p", Poll::Silent(asked), timed_out);
        assert!(beats.alive("p", timed_out), "half a second unanswered");
        assert!(beats.reachable("p", timed_out));
        // Asked on and on without an answer, it is down once the timeout has passed.
        let gone = asked + DEFAULT_SUSPECT_AFTER;
        beats.record("p", Poll::Silent(gone - Duration::from_millis(500)), gone);
        assert!(!beats.alive("p", gone));
        // An answer ends the silence.
        beats.record("p", Poll::Answered(None), gone);
        let asked_again = gone + Duration::from_millis(250);
        beats.record(
            "p",
            Poll::Silent(asked_again),
            asked_again + DEFAULT_SUSPECT_AFTER / 2,
        );
        assert!(beats.alive("p", asked_again + DEFAULT_SUSPECT_AFTER / 2));
    }

    #[test]
    fn the_jobs_heartbeat_timeout_decides_when_silence_is_down() {
        let start = Instant::now();
        let mut beats = Heartbeats::default();
        beats.record("p", Poll::Answered(None), start);
        beats.suspect_after(Duration::from_secs(1));
        let after_1s = start + Duration::from_secs(1);
        beats.record("p", Poll::Silent(start), after_1s);
        assert!(!beats.alive("p", after_1s), "down after 1 s of silence");
        beats.suspect_after(Duration::from_secs(5));
        assert!(beats.alive("p", after_1s), "a longer timeout keeps it");
    }
}
