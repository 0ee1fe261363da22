//! The worker's Prometheus metrics, registered in one registry owned by the worker (no globals).
//! Names are `streamkeeper_*` with units in the name.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Metric, Registry};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use streamkeeper_contract::task_report::TaskPhase;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TaskLabel {
    pub task: u32,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    pub task: u32,
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabel {
    pub task: u32,
    pub phase: String,
}

/// The values each reason-labelled counter of a task can take.
#[derive(Debug, Clone, Copy)]
pub struct TaskReasons<'a> {
    pub dead_letter: &'a [&'a str],
    pub dropped: &'a [&'a str],
    pub errors: &'a [&'a str],
    pub repairs: &'a [&'a str],
}

/// Handles to every metric; cheap to clone.
#[derive(Clone, Debug)]
pub struct WorkerMetrics {
    registry: Arc<Registry>,
    /// Every family registered, with its full name: the text exposition leaves a labelled
    /// family out until its first sample, and the dashboard's test (issue 12) needs them all.
    families: Arc<Vec<(String, MetricType)>>,
    pub records_processed: Family<TaskLabel, Counter>,
    pub records_repartitioned: Family<TaskLabel, Counter>,
    pub records_dead_lettered: Family<ReasonLabel, Counter>,
    pub records_dropped: Family<ReasonLabel, Counter>,
    pub transactions_committed: Family<TaskLabel, Counter>,
    pub transactions_aborted: Family<TaskLabel, Counter>,
    pub changelog_records_written: Family<TaskLabel, Counter>,
    pub restore_records: Family<TaskLabel, Counter>,
    pub restore_bytes: Family<TaskLabel, Counter>,
    pub restore_records_total: Family<TaskLabel, Gauge>,
    pub restore_records_per_second: Family<TaskLabel, Gauge<f64, AtomicU64>>,
    pub restore_eta_seconds: Family<TaskLabel, Gauge<f64, AtomicU64>>,
    pub input_lag_records: Family<TaskLabel, Gauge>,
    pub phase_transitions: Family<PhaseLabel, Counter>,
    pub task_errors: Family<ReasonLabel, Counter>,
    pub checkpoints: Family<TaskLabel, Counter>,
    pub checkpoint_failures: Family<TaskLabel, Counter>,
    pub checkpoint_fallbacks: Family<TaskLabel, Counter>,
    pub checkpoint_uploaded_bytes: Family<TaskLabel, Counter>,
    pub checkpoint_duration_seconds: Family<TaskLabel, Gauge<f64, AtomicU64>>,
    pub checkpoint_snapshot_seconds: Family<TaskLabel, Gauge<f64, AtomicU64>>,
    pub checkpoint_last_success_seconds: Family<TaskLabel, Gauge<f64, AtomicU64>>,
    pub checkpoint_age_seconds: Family<TaskLabel, Gauge<f64, AtomicU64>>,
    pub checkpoint_gc_deleted_objects: Family<TaskLabel, Counter>,
    pub restore_download_bytes: Family<TaskLabel, Counter>,
    pub restore_download_target_bytes: Family<TaskLabel, Gauge>,
    pub restore_download_bytes_per_second: Family<TaskLabel, Gauge<f64, AtomicU64>>,
    pub input_offset_repairs: Family<ReasonLabel, Counter>,
    pub input_records_lost: Family<TaskLabel, Counter>,
    pub input_offset_refreshes: Family<TaskLabel, Counter>,
    /// Consumers (a task's input, a standby's changelog) replaced because they stopped
    /// delivering records the broker holds.
    pub consumer_stalls: Family<TaskLabel, Counter>,
    pub standby_lag_records: Family<TaskLabel, Gauge>,
    pub promotions: Family<TaskLabel, Counter>,
    pub promotion_seconds: Family<TaskLabel, Gauge<f64, AtomicU64>>,
    pub handoffs: Family<TaskLabel, Counter>,
    pub assignment_generation: Gauge,
    /// Starts that ran the recorded document again because no operator sent one.
    pub assignment_resumes: Counter,
}

impl WorkerMetrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("streamkeeper");
        let metrics = Self {
            registry: Arc::new(Registry::default()),
            families: Arc::default(),
            records_processed: Family::default(),
            records_repartitioned: Family::default(),
            records_dead_lettered: Family::default(),
            records_dropped: Family::default(),
            transactions_committed: Family::default(),
            transactions_aborted: Family::default(),
            changelog_records_written: Family::default(),
            restore_records: Family::default(),
            restore_bytes: Family::default(),
            restore_records_total: Family::default(),
            restore_records_per_second: Family::default(),
            restore_eta_seconds: Family::default(),
            input_lag_records: Family::default(),
            phase_transitions: Family::default(),
            task_errors: Family::default(),
            checkpoints: Family::default(),
            checkpoint_failures: Family::default(),
            checkpoint_fallbacks: Family::default(),
            checkpoint_uploaded_bytes: Family::default(),
            checkpoint_duration_seconds: Family::default(),
            checkpoint_snapshot_seconds: Family::default(),
            checkpoint_last_success_seconds: Family::default(),
            checkpoint_age_seconds: Family::default(),
            checkpoint_gc_deleted_objects: Family::default(),
            restore_download_bytes: Family::default(),
            restore_download_target_bytes: Family::default(),
            restore_download_bytes_per_second: Family::default(),
            input_offset_repairs: Family::default(),
            input_records_lost: Family::default(),
            input_offset_refreshes: Family::default(),
            consumer_stalls: Family::default(),
            standby_lag_records: Family::default(),
            promotions: Family::default(),
            promotion_seconds: Family::default(),
            handoffs: Family::default(),
            assignment_generation: Gauge::default(),
            assignment_resumes: Counter::default(),
        };
        let r = &mut Registrar {
            registry: &mut registry,
            prefix: "streamkeeper",
            families: Vec::new(),
        };
        register_task_families(r, &metrics);
        register_checkpoint_families(r, &metrics);
        register_input_and_role_families(r, &metrics);
        let families = Arc::new(std::mem::take(&mut r.families));
        Self {
            registry: Arc::new(registry),
            families,
            ..metrics
        }
    }

    /// Every registered family's full name and type, sampled or not.
    pub fn families(&self) -> &[(String, MetricType)] {
        &self.families
    }

    /// Starts every counter of `task` at 0, each reason-labelled one with each value in
    /// `reasons`: a series that appears only at its first increment is missing from queries
    /// and alerts until then, and `increase()` misses that increment.
    pub fn start_task(&self, task: u32, reasons: &TaskReasons<'_>) {
        let label = TaskLabel { task };
        for family in [
            &self.records_processed,
            &self.records_repartitioned,
            &self.transactions_committed,
            &self.transactions_aborted,
            &self.changelog_records_written,
            &self.restore_records,
            &self.restore_bytes,
            &self.checkpoints,
            &self.checkpoint_failures,
            &self.checkpoint_fallbacks,
            &self.checkpoint_uploaded_bytes,
            &self.checkpoint_gc_deleted_objects,
            &self.restore_download_bytes,
            &self.input_records_lost,
            &self.input_offset_refreshes,
            &self.consumer_stalls,
            &self.promotions,
            &self.handoffs,
        ] {
            drop(family.get_or_create(&label));
        }
        let labelled = [
            (&self.records_dead_lettered, reasons.dead_letter),
            (&self.records_dropped, reasons.dropped),
            (&self.task_errors, reasons.errors),
            (&self.input_offset_repairs, reasons.repairs),
        ];
        for (family, values) in labelled {
            for reason in values {
                drop(family.get_or_create(&ReasonLabel {
                    task,
                    reason: (*reason).to_string(),
                }));
            }
        }
        for phase in [
            TaskPhase::Created,
            TaskPhase::Restoring,
            TaskPhase::Running,
            TaskPhase::Fenced,
            TaskPhase::Failed,
            TaskPhase::Stopped,
        ] {
            drop(self.phase_transitions.get_or_create(&PhaseLabel {
                task,
                phase: format!("{phase:?}"),
            }));
        }
    }

    pub fn phase_transition(&self, task: u32, phase: TaskPhase) {
        self.phase_transitions
            .get_or_create(&PhaseLabel {
                task,
                phase: format!("{phase:?}"),
            })
            .inc();
    }

    pub fn task_error(&self, task: u32, category: &str) {
        self.task_errors
            .get_or_create(&ReasonLabel {
                task,
                reason: category.to_string(),
            })
            .inc();
    }

    /// The Prometheus text exposition of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}

/// Registers the families of the tasks' processing, restores, lag, phases and errors.
fn register_task_families(r: &mut Registrar<'_>, metrics: &WorkerMetrics) {
    r.register(
        "input_records",
        "Input records processed",
        metrics.records_processed.clone(),
    );
    r.register(
        "repartitioned_records",
        "Records of a re-keyed join side written to its repartition topic, keyed by their join key",
        metrics.records_repartitioned.clone(),
    );
    r.register(
        "dead_letter_records",
        "Input records sent to the dead-letter topic, by reason",
        metrics.records_dead_lettered.clone(),
    );
    r.register(
        "dropped_records",
        "Input records dropped by the processor (late, duplicate)",
        metrics.records_dropped.clone(),
    );
    r.register(
        "transactions_committed",
        "Kafka transactions committed",
        metrics.transactions_committed.clone(),
    );
    r.register(
        "transactions_aborted",
        "Kafka transactions aborted",
        metrics.transactions_aborted.clone(),
    );
    r.register(
        "changelog_records_written",
        "Changelog records produced",
        metrics.changelog_records_written.clone(),
    );
    r.register(
        "restore_records",
        "Changelog records replayed by restores",
        metrics.restore_records.clone(),
    );
    r.register(
        "restore_bytes",
        "Changelog bytes replayed by restores",
        metrics.restore_bytes.clone(),
    );
    r.register(
        "restore_target_records",
        "Changelog records the running restore must replay",
        metrics.restore_records_total.clone(),
    );
    r.register(
        "restore_rate_records_per_second",
        "Replay rate of the running restore",
        metrics.restore_records_per_second.clone(),
    );
    r.register(
        "restore_eta_seconds",
        "Estimated time left of the running restore",
        metrics.restore_eta_seconds.clone(),
    );
    r.register(
        "input_lag_records",
        "Input records behind the partition end",
        metrics.input_lag_records.clone(),
    );
    r.register(
        "task_phase_transitions",
        "Task phase transitions, by phase entered",
        metrics.phase_transitions.clone(),
    );
    r.register(
        "task_errors",
        "Task errors, by category",
        metrics.task_errors.clone(),
    );
}

/// Registers the families of checkpoints, and the downloads of restores from them.
fn register_checkpoint_families(r: &mut Registrar<'_>, metrics: &WorkerMetrics) {
    r.register(
        "checkpoints",
        "Durable checkpoints written to S3",
        metrics.checkpoints.clone(),
    );
    r.register(
        "checkpoint_failures",
        "Checkpoint attempts that failed (S3 or local); retried with backoff",
        metrics.checkpoint_failures.clone(),
    );
    r.register(
        "checkpoint_fallbacks",
        "Restores that skipped a missing or corrupt checkpoint for an older one",
        metrics.checkpoint_fallbacks.clone(),
    );
    r.register(
        "checkpoint_uploaded_bytes",
        "Bytes uploaded to S3 by checkpoints (new objects only)",
        metrics.checkpoint_uploaded_bytes.clone(),
    );
    r.register(
        "checkpoint_duration_seconds",
        "Duration of the newest durable checkpoint, snapshot to manifest",
        metrics.checkpoint_duration_seconds.clone(),
    );
    r.register(
        "checkpoint_snapshot_seconds",
        "Time the processing loop spent on the newest local RocksDB checkpoint",
        metrics.checkpoint_snapshot_seconds.clone(),
    );
    r.register(
        "checkpoint_last_success_timestamp_seconds",
        "Unix time of the newest durable checkpoint",
        metrics.checkpoint_last_success_seconds.clone(),
    );
    r.register(
        "checkpoint_age_seconds",
        "Age of the newest durable checkpoint",
        metrics.checkpoint_age_seconds.clone(),
    );
    r.register(
        "checkpoint_gc_deleted_objects",
        "Checkpoint objects and manifests deleted by retention",
        metrics.checkpoint_gc_deleted_objects.clone(),
    );
    r.register(
        "restore_download_bytes",
        "Checkpoint bytes downloaded by restores",
        metrics.restore_download_bytes.clone(),
    );
    r.register(
        "restore_download_target_bytes",
        "Bytes the running checkpoint download must fetch",
        metrics.restore_download_target_bytes.clone(),
    );
    r.register(
        "restore_download_rate_bytes_per_second",
        "Download rate of the running checkpoint restore",
        metrics.restore_download_bytes_per_second.clone(),
    );
}

/// Registers the families of the input offsets' repairs and refreshes, standbys, promotions,
/// handoffs and the assignment.
fn register_input_and_role_families(r: &mut Registrar<'_>, metrics: &WorkerMetrics) {
    r.register(
        "input_offset_repairs",
        "Starts where Kafka's committed input offset disagreed with the state's position and was written again, by how (missing, behind, ahead)",
        metrics.input_offset_repairs.clone(),
    );
    r.register(
        "input_lost_records",
        "Input records retention deleted before the task processed them (a recovery gap)",
        metrics.input_records_lost.clone(),
    );
    r.register(
        "input_offset_refreshes",
        "Commits of an idle task's unchanged input offset, which keep Kafka from expiring it",
        metrics.input_offset_refreshes.clone(),
    );
    r.register(
        "consumer_stalls",
        "Consumers (a task's input, a standby's changelog) that returned no record while the broker held records for them, replaced by restarting the role",
        metrics.consumer_stalls.clone(),
    );
    r.register(
        "standby_lag_records",
        "Changelog records a standby copy has not applied yet",
        metrics.standby_lag_records.clone(),
    );
    r.register(
        "promotions",
        "Standby copies of this worker promoted to active",
        metrics.promotions.clone(),
    );
    r.register(
        "promotion_seconds",
        "The newest promotion on this worker: from the assignment that made the task active to its first committed transaction",
        metrics.promotion_seconds.clone(),
    );
    r.register(
        "handoffs",
        "Active tasks this worker committed and released to another owner (demoted to standby or dropped)",
        metrics.handoffs.clone(),
    );
    r.register(
        "assignment_generation",
        "Generation of the newest assignment document this worker acts on",
        metrics.assignment_generation.clone(),
    );
    r.register(
        "assignment_resumes",
        "Starts that ran the assignment recorded on the volume again because no operator sent one within 10 s",
        metrics.assignment_resumes.clone(),
    );
}

/// Registers metrics in a registry and remembers their names.
struct Registrar<'a> {
    registry: &'a mut Registry,
    /// The registry's prefix, which its names get.
    prefix: &'static str,
    families: Vec<(String, MetricType)>,
}

impl Registrar<'_> {
    fn register(&mut self, name: &str, help: &str, metric: impl Metric) {
        self.families
            .push((format!("{}_{name}", self.prefix), metric.metric_type()));
        self.registry.register(name, help, metric);
    }
}

impl Default for WorkerMetrics {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_started_task_exports_every_counter_at_zero_with_every_reason() {
        let metrics = WorkerMetrics::new();
        assert!(!metrics.encode().contains("task=\"3\""));
        let reasons = TaskReasons {
            dead_letter: &["not_json", "wrong_type"],
            dropped: &["late"],
            errors: &["kafka"],
            repairs: &["missing"],
        };
        metrics.start_task(3, &reasons);
        let text = metrics.encode();
        for series in [
            "streamkeeper_checkpoint_failures_total{task=\"3\"} 0",
            "streamkeeper_transactions_aborted_total{task=\"3\"} 0",
            "streamkeeper_dead_letter_records_total{task=\"3\",reason=\"wrong_type\"} 0",
            "streamkeeper_dropped_records_total{task=\"3\",reason=\"late\"} 0",
            "streamkeeper_task_errors_total{task=\"3\",reason=\"kafka\"} 0",
            "streamkeeper_input_offset_repairs_total{task=\"3\",reason=\"missing\"} 0",
            "streamkeeper_task_phase_transitions_total{task=\"3\",phase=\"Fenced\"} 0",
        ] {
            assert!(text.contains(series), "{series} in:\n{text}");
        }
        assert!(
            !text.contains("streamkeeper_checkpoint_age_seconds{task=\"3\"}"),
            "no gauge made up"
        );
        // Started again (a restarted slot), nothing is reset.
        metrics.task_error(3, "kafka");
        metrics.start_task(3, &reasons);
        assert!(
            metrics
                .encode()
                .contains("streamkeeper_task_errors_total{task=\"3\",reason=\"kafka\"} 1")
        );
    }
}
