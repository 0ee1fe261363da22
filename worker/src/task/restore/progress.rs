//! Restore figures (records and bytes done, rate, ETA, download progress), published to the
//! task board (`/v1/tasks`), the metrics and the logs as the restore goes through its phases.

use crate::board::TaskBoard;
use crate::metrics::{TaskLabel, WorkerMetrics};
use crate::task::WorkerContext;
use std::time::{Duration, Instant};
use streamkeeper_contract::task_report::{
    DownloadProgress, RestorePhase, RestoreProgress, RestoreSource,
};

/// Restore figures, published to the task board, the metrics and the logs.
pub(in crate::task) struct Progress<'a> {
    metrics: &'a WorkerMetrics,
    board: &'a TaskBoard,
    task: u32,
    source: RestoreSource,
    reprocessed_input_records: Option<u64>,
    total: u64,
    pub(super) records_done: u64,
    reported_records: u64,
    pub(super) bytes_done: u64,
    reported_bytes: u64,
    pub(super) started: Instant,
    last_log: Instant,
    download: Option<DownloadProgress>,
    download_started: Instant,
    reported_download_bytes: u64,
}

impl<'a> Progress<'a> {
    pub(in crate::task) fn new(context: &'a WorkerContext, task: u32) -> Self {
        Self::publishing_to(&context.metrics, &context.board, task)
    }

    fn publishing_to(metrics: &'a WorkerMetrics, board: &'a TaskBoard, task: u32) -> Self {
        Self {
            metrics,
            board,
            task,
            source: RestoreSource::Unknown,
            reprocessed_input_records: None,
            total: 0,
            records_done: 0,
            reported_records: 0,
            bytes_done: 0,
            reported_bytes: 0,
            started: Instant::now(),
            last_log: Instant::now(),
            download: None,
            download_started: Instant::now(),
            reported_download_bytes: 0,
        }
    }

    /// A checkpoint download starts (or restarts with an older checkpoint).
    pub(in crate::task) fn start_download(&mut self, sequence: u64, bytes_total: u64) {
        self.download = Some(DownloadProgress {
            checkpoint_sequence: sequence,
            bytes_done: 0,
            bytes_total,
            bytes_per_second: 0.0,
            eta_seconds: None,
        });
        self.download_started = Instant::now();
        self.reported_download_bytes = 0;
        self.metrics
            .restore_download_target_bytes
            .get_or_create(&TaskLabel { task: self.task })
            .set(i64::try_from(bytes_total).unwrap_or(i64::MAX));
    }

    /// Bytes of the running download received so far; publishes them as the Download phase.
    pub(in crate::task) fn download_progress(&mut self, bytes_done: u64) {
        let seconds = self.download_started.elapsed().as_secs_f64().max(1e-9);
        let label = TaskLabel { task: self.task };
        let metrics = self.metrics;
        if let Some(download) = self.download.as_mut() {
            download.bytes_done = bytes_done;
            download.bytes_per_second = bytes_done as f64 / seconds;
            let left = download.bytes_total.saturating_sub(bytes_done) as f64;
            download.eta_seconds =
                (download.bytes_per_second > 0.0).then(|| left / download.bytes_per_second);
            metrics
                .restore_download_bytes
                .get_or_create(&label)
                .inc_by(bytes_done.saturating_sub(self.reported_download_bytes));
            self.reported_download_bytes = self.reported_download_bytes.max(bytes_done);
            metrics
                .restore_download_bytes_per_second
                .get_or_create(&label)
                .set(download.bytes_per_second);
            if self.last_log.elapsed() >= Duration::from_secs(5) {
                tracing::info!(
                    task = self.task,
                    phase = "Download",
                    checkpoint = download.checkpoint_sequence,
                    bytes_done,
                    bytes_total = download.bytes_total,
                    bytes_per_second = download.bytes_per_second,
                    eta_seconds = download.eta_seconds.unwrap_or(0.0),
                    "restore progress"
                );
                self.last_log = Instant::now();
            }
        }
        self.report(RestorePhase::Download);
    }

    /// Discovery is over: what the replay starts from and how many offsets it covers.
    pub(in crate::task) fn start_replay(&mut self, source: RestoreSource, total: u64) {
        self.source = source;
        self.total = total;
        self.started = Instant::now();
        self.metrics
            .restore_records_total
            .get_or_create(&TaskLabel { task: self.task })
            .set(i64::try_from(total).unwrap_or(i64::MAX));
    }

    /// A restore from the input: how many input records will be processed a second time.
    pub(in crate::task) fn set_reprocessed_input_records(&mut self, records: Option<u64>) {
        self.reprocessed_input_records = records;
    }

    /// Records and bytes written since the last report.
    pub(in crate::task) fn add_done(&mut self, records: u64, bytes: u64) {
        self.records_done += records;
        self.bytes_done += bytes;
    }

    pub(in crate::task) fn report(&mut self, phase: RestorePhase) {
        let seconds = self.started.elapsed().as_secs_f64().max(1e-9);
        let rate = self.records_done as f64 / seconds;
        // The total counts offsets, which include transaction markers and compacted gaps, so
        // it is an upper bound: the ETA errs long.
        let left = self.total.saturating_sub(self.records_done) as f64;
        let eta = (rate > 0.0 && phase != RestorePhase::Done).then(|| left / rate);
        let label = TaskLabel { task: self.task };
        let metrics = self.metrics;
        metrics
            .restore_records
            .get_or_create(&label)
            .inc_by(self.records_done - self.reported_records);
        metrics
            .restore_bytes
            .get_or_create(&label)
            .inc_by(self.bytes_done - self.reported_bytes);
        self.reported_records = self.records_done;
        self.reported_bytes = self.bytes_done;
        metrics
            .restore_records_per_second
            .get_or_create(&label)
            .set(rate);
        // One ETA metric for the whole restore: while the checkpoint downloads it is the
        // download's (the replay has not started, its own ETA would read 0).
        let published = match (&self.download, phase) {
            (Some(download), RestorePhase::Download) => download.eta_seconds,
            _ => eta,
        };
        metrics
            .restore_eta_seconds
            .get_or_create(&label)
            .set(published.unwrap_or(0.0));
        let progress = RestoreProgress {
            phase,
            source: self.source,
            records_done: self.records_done,
            records_total: self.total,
            bytes_done: self.bytes_done,
            records_per_second: rate,
            eta_seconds: eta,
            download: self.download.clone(),
            reprocessed_input_records: self.reprocessed_input_records,
        };
        let log_due =
            self.last_log.elapsed() >= Duration::from_secs(5) && phase != RestorePhase::Download;
        if log_due || phase == RestorePhase::Done {
            tracing::info!(
                task = self.task,
                ?phase,
                records_done = self.records_done,
                records_total = self.total,
                bytes_done = self.bytes_done,
                records_per_second = rate,
                eta_seconds = eta.unwrap_or(0.0),
                "restore progress"
            );
            self.last_log = Instant::now();
        }
        self.board
            .update(self.task, |report| report.restore = Some(progress));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eta_metric(metrics: &WorkerMetrics) -> f64 {
        metrics
            .restore_eta_seconds
            .get_or_create(&TaskLabel { task: 0 })
            .get()
    }

    #[test]
    fn the_eta_metric_is_the_downloads_during_a_download_and_the_replays_after() {
        let metrics = WorkerMetrics::new();
        let board = TaskBoard::default();
        let mut progress = Progress::publishing_to(&metrics, &board, 0);
        progress.start_download(7, 1_000);
        progress.download_started = Instant::now() - Duration::from_secs(10);
        // 100 of 1000 bytes in 10 s: 900 bytes left at 10 bytes/s.
        progress.download_progress(100);
        let eta = eta_metric(&metrics);
        assert!((85.0..95.0).contains(&eta), "download ETA {eta}");

        progress.start_replay(RestoreSource::Checkpoint, 400);
        progress.started = Instant::now() - Duration::from_secs(10);
        // 100 of 400 records in 10 s: 300 left at 10 records/s.
        progress.add_done(100, 1_000);
        progress.report(RestorePhase::Replay);
        let eta = eta_metric(&metrics);
        assert!((25.0..35.0).contains(&eta), "replay ETA {eta}");

        progress.report(RestorePhase::Done);
        assert_eq!(eta_metric(&metrics), 0.0);
    }
}
