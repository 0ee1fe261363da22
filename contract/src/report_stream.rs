//! The worker's report stream, `GET /v1/tasks/stream`: one long-lived answer per operator and
//! pod that carries the task reports of `GET /v1/tasks` as they change, instead of the operator
//! asking for all of them several times a second.
//!
//! The answer is newline-delimited JSON (`application/x-ndjson`), one [`ReportFrame`] a line:
//! - the first frame holds the whole [`TaskReportsDocument`];
//! - then, every beat (the `beatMs` query parameter, [`beat_for`] of the job's heartbeat
//!   timeout), a frame with the reports that changed and the ones that are gone, or an empty
//!   frame when nothing did: the heartbeat itself;
//! - a change of the document's own fields (the process, the recorded generation, shutting
//!   down) sends the whole document again.
//!
//! Progress alone (offsets, lags, commit counts, restore figures, a new checkpoint) is sent at
//! most every [`PROGRESS_EVERY`]: it feeds the status, which is not on the failover's path. A
//! task's first commit is news, not progress, since the operator times a moved task's stall by
//! it.
//!
//! What the stream says about liveness is what the poll said: a closed connection, then a
//! refused one, is a process gone; no frame for two beats is silence, counted from the last
//! frame. A worker that predates the stream answers 404, and the operator polls it as before.

use crate::task_report::{TaskReport, TaskReportsDocument, TaskRole};
use crate::{FormatError, Versioned};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// `GET`: the report stream (no token: it is a read, as `GET /v1/tasks` is).
pub const REPORT_STREAM_PATH: &str = "/v1/tasks/stream";
/// The query parameter naming the beat, in milliseconds.
pub const BEAT_PARAMETER: &str = "beatMs";
/// The answer's content type.
pub const CONTENT_TYPE: &str = "application/x-ndjson";
/// The beat a request without [`BEAT_PARAMETER`] gets.
pub const DEFAULT_BEAT: Duration = Duration::from_millis(250);
/// The shortest beat a worker sends: a faster one costs both sides for nothing.
pub const MIN_BEAT: Duration = Duration::from_millis(50);
/// The longest beat: a slower one would hide a frozen worker for too long.
pub const MAX_BEAT: Duration = Duration::from_secs(1);
/// How often progress alone is sent.
pub const PROGRESS_EVERY: Duration = Duration::from_secs(1);
/// Beats a reader waits for a frame before it counts the worker as silent.
pub const SILENT_AFTER_BEATS: u32 = 2;

/// The beat for a job whose heartbeat timeout is `heartbeat_timeout`: an eighth of it, so a
/// healthy worker has to miss several beats in a row before it counts as down, within
/// [`MIN_BEAT`]..=[`MAX_BEAT`].
pub fn beat_for(heartbeat_timeout: Duration) -> Duration {
    (heartbeat_timeout / 8).clamp(MIN_BEAT, MAX_BEAT)
}

/// The request path and query for `beat`.
pub fn request_path(beat: Duration) -> String {
    format!("{REPORT_STREAM_PATH}?{BEAT_PARAMETER}={}", beat.as_millis())
}

/// The beat a request's query asks for: [`DEFAULT_BEAT`] when it names none or an unreadable
/// one, and within [`MIN_BEAT`]..=[`MAX_BEAT`] whatever it names.
pub fn beat_from_query(query: Option<&str>) -> Duration {
    let asked = query
        .unwrap_or_default()
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(name, _)| *name == BEAT_PARAMETER)
        .and_then(|(_, value)| value.parse::<u64>().ok())
        .map(Duration::from_millis);
    asked.unwrap_or(DEFAULT_BEAT).clamp(MIN_BEAT, MAX_BEAT)
}

/// Which report a change is about: a worker hosts a task at most once per role.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReportKey {
    pub task: u32,
    pub role: TaskRole,
}

impl ReportKey {
    pub fn of(report: &TaskReport) -> Self {
        Self {
            task: report.task,
            role: report.role,
        }
    }
}

/// One line of the stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReportFrame {
    pub version: u32,
    /// The whole document, replacing whatever the reader holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub document: Option<TaskReportsDocument>,
    /// Reports that are new or changed since the last frame.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changed: Vec<TaskReport>,
    /// Reports that are gone since the last frame.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub removed: Vec<ReportKey>,
}

impl Versioned for ReportFrame {
    const FORMAT: &'static str = "task report frame";
    const VERSION: u32 = 1;

    fn version(&self) -> u32 {
        self.version
    }

    fn check(&self) -> Result<(), FormatError> {
        if let Some(document) = &self.document {
            document.check()?;
        }
        Ok(())
    }
}

impl ReportFrame {
    /// The heartbeat: nothing changed.
    pub fn beat() -> Self {
        Self {
            version: Self::VERSION,
            document: None,
            changed: Vec::new(),
            removed: Vec::new(),
        }
    }

    pub fn whole(document: TaskReportsDocument) -> Self {
        Self {
            document: Some(document),
            ..Self::beat()
        }
    }

    pub fn is_beat(&self) -> bool {
        self.document.is_none() && self.changed.is_empty() && self.removed.is_empty()
    }

    /// The frame as one line of the stream, newline included.
    pub fn to_line(&self) -> Vec<u8> {
        // Plain data with string keys: serializing cannot fail. Compact JSON has no raw newline.
        let mut line = serde_json::to_vec(self).unwrap_or_default();
        line.push(b'\n');
        line
    }
}

/// Why a frame cannot be applied: the stream is broken, and the reader starts a new one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StreamError {
    #[error("the stream's first frame holds changes, not the whole document")]
    ChangesBeforeDocument,
}

/// What a reader holds: the document as the frames so far make it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReportView {
    document: Option<TaskReportsDocument>,
}

impl ReportView {
    pub fn document(&self) -> Option<&TaskReportsDocument> {
        self.document.as_ref()
    }

    /// Applies the next frame; what it changed.
    pub fn apply(&mut self, frame: ReportFrame) -> Result<Change, StreamError> {
        if let Some(document) = frame.document {
            self.document = Some(document);
            return Ok(Change::News);
        }
        if frame.changed.is_empty() && frame.removed.is_empty() {
            return Ok(Change::Nothing);
        }
        let document = self
            .document
            .as_mut()
            .ok_or(StreamError::ChangesBeforeDocument)?;
        let mut reports: BTreeMap<ReportKey, TaskReport> = std::mem::take(&mut document.tasks)
            .into_iter()
            .map(|report| (ReportKey::of(&report), report))
            .collect();
        let mut change = Change::Progress;
        for key in &frame.removed {
            reports.remove(key);
            change = Change::News;
        }
        for report in frame.changed {
            let key = ReportKey::of(&report);
            let progress = reports
                .get(&key)
                .is_some_and(|before| progress_only(before, &report));
            if !progress {
                change = Change::News;
            }
            reports.insert(key, report);
        }
        document.tasks = reports.into_values().collect();
        Ok(change)
    }
}

/// What a frame changed in a reader's view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// A heartbeat.
    Nothing,
    /// Progress figures only.
    Progress,
    /// Something a failover decision may depend on: a role, a phase, a first commit, a report
    /// come or gone, the document's own fields.
    News,
}

/// The writer's side: what the reader holds, and when it last got progress.
#[derive(Debug, Clone, Default)]
pub struct FrameWriter {
    sent: Option<TaskReportsDocument>,
    progress_sent_at: Option<Instant>,
}

impl FrameWriter {
    /// The frame that brings the reader from what it holds to `now`, written at `at`. Progress
    /// alone goes out at most every [`PROGRESS_EVERY`]; until then the reader keeps the older
    /// figures.
    pub fn next(&mut self, now: &TaskReportsDocument, at: Instant) -> ReportFrame {
        let progress_due = self
            .progress_sent_at
            .is_none_or(|sent| at.saturating_duration_since(sent) >= PROGRESS_EVERY);
        if progress_due {
            self.progress_sent_at = Some(at);
        }
        let Some(sent) = self.sent.as_mut() else {
            self.sent = Some(now.clone());
            return ReportFrame::whole(now.clone());
        };
        if !same_document_fields(sent, now) {
            *sent = now.clone();
            return ReportFrame::whole(now.clone());
        }
        let held: BTreeMap<ReportKey, &TaskReport> = sent
            .tasks
            .iter()
            .map(|report| (ReportKey::of(report), report))
            .collect();
        let current: BTreeMap<ReportKey, &TaskReport> = now
            .tasks
            .iter()
            .map(|report| (ReportKey::of(report), report))
            .collect();
        let removed: Vec<ReportKey> = held
            .keys()
            .filter(|key| !current.contains_key(key))
            .copied()
            .collect();
        let changed: Vec<TaskReport> = current
            .iter()
            .filter(|(key, report)| match held.get(key) {
                None => true,
                Some(before) => {
                    before != *report && (progress_due || !progress_only(before, report))
                }
            })
            .map(|(_, report)| (*report).clone())
            .collect();
        let frame = ReportFrame {
            changed,
            removed,
            ..ReportFrame::beat()
        };
        let mut view = ReportView {
            document: self.sent.take(),
        };
        // The reader's view moves by exactly this frame; it holds a document, so this applies.
        let _applied = view.apply(frame.clone());
        self.sent = view.document;
        frame
    }
}

fn same_document_fields(a: &TaskReportsDocument, b: &TaskReportsDocument) -> bool {
    a.version == b.version
        && a.stopping == b.stopping
        && a.generation == b.generation
        && a.process == b.process
}

/// Whether `after` differs from `before` in progress figures only. A first commit is not
/// progress: the operator times a moved task's stall by it.
pub fn progress_only(before: &TaskReport, after: &TaskReport) -> bool {
    if before.committed_transactions == 0 && after.committed_transactions > 0 {
        return false;
    }
    without_progress(before) == without_progress(after)
}

fn without_progress(report: &TaskReport) -> TaskReport {
    let mut bare = report.clone();
    bare.next_input_offset = None;
    bare.next_changelog_offset = None;
    bare.input_lag = None;
    bare.committed_transactions = 0;
    bare.changelog_lag = None;
    bare.last_checkpoint = None;
    bare.placement = Vec::new();
    // A restore's phase and source are news; its counters are progress.
    bare.restore = report.restore.as_ref().map(|restore| {
        let mut phase_only = restore.clone();
        phase_only.records_done = 0;
        phase_only.records_total = 0;
        phase_only.bytes_done = 0;
        phase_only.records_per_second = 0.0;
        phase_only.eta_seconds = None;
        phase_only.download = None;
        phase_only.reprocessed_input_records = None;
        phase_only
    });
    bare
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task_report::TaskPhase;

    fn report(task: u32, role: TaskRole, commits: u64) -> TaskReport {
        TaskReport {
            phase: TaskPhase::Running,
            committed_transactions: commits,
            next_input_offset: Some(commits as i64 * 10),
            ..TaskReport::new(task, role)
        }
    }

    fn document(tasks: Vec<TaskReport>) -> TaskReportsDocument {
        TaskReportsDocument::new(tasks)
            .answered_by("7-1")
            .acting_on(Some(3))
    }

    /// Writes each document in turn through a writer and reads the frames back; the reader's
    /// view after each frame.
    /// Frames are written a beat apart, so progress is due only at the first.
    fn replay(
        documents: &[TaskReportsDocument],
    ) -> Vec<(ReportFrame, Option<TaskReportsDocument>)> {
        let mut writer = FrameWriter::default();
        let mut view = ReportView::default();
        let start = Instant::now();
        documents
            .iter()
            .enumerate()
            .map(|(beat, document)| {
                let frame = writer.next(document, start + DEFAULT_BEAT * beat as u32);
                let line = frame.to_line();
                assert_eq!(line.iter().filter(|&&b| b == b'\n').count(), 1);
                let read = ReportFrame::from_json(&line).unwrap();
                assert_eq!(read, frame, "round trip");
                view.apply(read).unwrap();
                (frame, view.document().cloned())
            })
            .collect()
    }

    #[test]
    fn the_first_frame_is_the_whole_document_then_nothing_changed_is_a_beat() {
        let one = document(vec![report(0, TaskRole::Active, 4)]);
        let frames = replay(&[one.clone(), one.clone()]);
        assert_eq!(frames[0].0, ReportFrame::whole(one.clone()));
        assert!(frames[1].0.is_beat());
        assert_eq!(frames[1].0.to_line(), b"{\"version\":1}\n");
        assert_eq!(frames[1].1.as_ref(), Some(&one));
    }

    #[test]
    fn changes_carry_only_the_changed_and_the_removed_reports() {
        let first = document(vec![
            report(0, TaskRole::Active, 1),
            report(1, TaskRole::Standby, 0),
        ]);
        let mut fenced = report(0, TaskRole::Active, 1);
        fenced.phase = TaskPhase::Fenced;
        let second = document(vec![fenced.clone(), report(2, TaskRole::Active, 0)]);
        let frames = replay(&[first, second.clone()]);
        let frame = &frames[1].0;
        assert!(frame.document.is_none());
        assert_eq!(frame.changed, vec![fenced, report(2, TaskRole::Active, 0)]);
        assert_eq!(
            frame.removed,
            vec![ReportKey {
                task: 1,
                role: TaskRole::Standby
            }]
        );
        assert_eq!(frames[1].1.as_ref(), Some(&second));
    }

    #[test]
    fn a_reader_tells_progress_from_news() {
        let mut view = ReportView::default();
        let running = document(vec![report(0, TaskRole::Active, 1)]);
        assert_eq!(view.apply(ReportFrame::whole(running)), Ok(Change::News));
        let progressed = ReportFrame {
            changed: vec![report(0, TaskRole::Active, 5)],
            ..ReportFrame::beat()
        };
        assert_eq!(view.apply(progressed), Ok(Change::Progress));
        let mut fenced = report(0, TaskRole::Active, 5);
        fenced.phase = TaskPhase::Fenced;
        let news = ReportFrame {
            changed: vec![fenced],
            ..ReportFrame::beat()
        };
        assert_eq!(view.apply(news), Ok(Change::News));
        let gone = ReportFrame {
            removed: vec![ReportKey {
                task: 0,
                role: TaskRole::Active,
            }],
            ..ReportFrame::beat()
        };
        assert_eq!(view.apply(gone), Ok(Change::News));
    }

    #[test]
    fn progress_waits_until_due_but_a_first_commit_does_not() {
        let idle = document(vec![report(0, TaskRole::Active, 0)]);
        let first_commit = document(vec![report(0, TaskRole::Active, 1)]);
        let busier = document(vec![report(0, TaskRole::Active, 9)]);
        let mut writer = FrameWriter::default();
        let start = Instant::now();
        writer.next(&idle, start);
        let soon = start + DEFAULT_BEAT;
        assert_eq!(writer.next(&first_commit, soon).changed.len(), 1);
        assert!(writer.next(&busier, soon).is_beat(), "progress only");
        let due = writer.next(&busier, start + PROGRESS_EVERY);
        assert_eq!(due.changed, busier.tasks);
        assert!(writer.next(&busier, start + PROGRESS_EVERY).is_beat());
    }

    #[test]
    fn a_change_of_the_documents_own_fields_sends_it_whole() {
        let running = document(vec![report(0, TaskRole::Active, 2)]);
        for next in [
            running.clone().stopping(),
            running.clone().acting_on(Some(4)),
            running.clone().answered_by("8-2"),
        ] {
            let frames = replay(&[running.clone(), next.clone()]);
            assert_eq!(frames[1].0, ReportFrame::whole(next.clone()));
        }
    }

    #[test]
    fn changes_before_the_document_break_the_stream() {
        let mut view = ReportView::default();
        assert_eq!(view.apply(ReportFrame::beat()), Ok(Change::Nothing));
        let changes = ReportFrame {
            changed: vec![report(0, TaskRole::Active, 1)],
            ..ReportFrame::beat()
        };
        assert_eq!(view.apply(changes), Err(StreamError::ChangesBeforeDocument));
    }

    #[test]
    fn another_version_is_refused() {
        let error = ReportFrame::from_json(br#"{"version":2}"#).unwrap_err();
        assert!(
            matches!(error, FormatError::UnsupportedVersion { found: 2, .. }),
            "{error}"
        );
    }

    #[test]
    fn the_beat_is_an_eighth_of_the_timeout_within_bounds_and_travels_in_the_query() {
        assert_eq!(beat_for(Duration::from_secs(2)), Duration::from_millis(250));
        assert_eq!(beat_for(Duration::from_millis(100)), MIN_BEAT);
        assert_eq!(beat_for(Duration::from_secs(60)), MAX_BEAT);
        let path = request_path(Duration::from_millis(250));
        assert_eq!(path, "/v1/tasks/stream?beatMs=250");
        let (_, query) = path.split_once('?').unwrap();
        assert_eq!(beat_from_query(Some(query)), Duration::from_millis(250));
        assert_eq!(beat_from_query(None), DEFAULT_BEAT);
        assert_eq!(beat_from_query(Some("beatMs=x&other=1")), DEFAULT_BEAT);
        assert_eq!(beat_from_query(Some("a=b&beatMs=1")), MIN_BEAT);
        assert_eq!(beat_from_query(Some("beatMs=999999")), MAX_BEAT);
    }
}
