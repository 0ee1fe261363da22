//! The operator's Prometheus metrics, registered in one [`Registry`] held by the context (no
//! globals), and served on `/metrics` by [`crate::telemetry::http`].
//!
//! Labels stay low-cardinality: an outcome or an error category (the same words as condition
//! reasons), never a job name.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Metric, Registry};
use std::time::Instant;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    /// `success` or `error`.
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CategoryLabels {
    pub category: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ApplyLabels {
    /// The object's kind: `StatefulSet`, `ConfigMap`, `Service`, `PodDisruptionBudget`.
    pub kind: String,
    /// `applied` (sent to the apiserver) or `unchanged` (the watch cache held it as desired).
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ApiRequestLabels {
    /// `get`, `list`, `watch`, `apply`, `patch`, `create`, `update`, `delete`.
    pub verb: &'static str,
    /// The resource, with its subresource: `secrets`, `statefulstreamjobs/status`.
    pub resource: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct S3RequestLabels {
    /// The S3 operation: `ListObjectsV2`, `GetObject`, `HeadObject`, `PutObject`, ...
    pub operation: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: &'static str,
}

pub struct Metrics {
    pub registry: Registry,
    /// Every family registered, with its full name: the text exposition leaves a labelled
    /// family out until its first sample, and the dashboard's test (issue 12) needs them all.
    families: Vec<(String, MetricType)>,
    reconciles: Family<OutcomeLabels, Counter>,
    errors: Family<CategoryLabels, Counter>,
    duration: Histogram,
    leader: Gauge,
    failover_loops: Gauge,
    promotions: Counter,
    handoffs: Counter,
    detection: Histogram,
    failover: Histogram,
    handoff_stall: Histogram,
    assignment_refusals: Family<ReasonLabels, Counter>,
    applies: Family<ApplyLabels, Counter>,
    apiserver_requests: Family<ApiRequestLabels, Counter>,
    s3_requests: Family<S3RequestLabels, Counter>,
    manifests_kept: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix(PREFIX);
        let mut families = Vec::new();
        let mut r = Registrar {
            registry: &mut registry,
            families: &mut families,
        };
        let reconciles = Family::<OutcomeLabels, Counter>::default();
        r.register(
            "reconciles",
            "Reconciles of StatefulStreamJobs, by outcome",
            reconciles.clone(),
        );
        let errors = Family::<CategoryLabels, Counter>::default();
        r.register(
            "reconcile_errors",
            "Failed reconciles, by error category",
            errors.clone(),
        );
        // Each at 0 from the start: a series born at its first error is missing from queries
        // and alerts until then, and `increase()` misses that error.
        for category in crate::vocabulary::reasons::ERROR_CATEGORIES {
            drop(errors.get_or_create(&CategoryLabels { category }));
        }
        // 1 ms .. ~33 s.
        let duration = Histogram::new(exponential_buckets(0.001, 2.0, 16));
        r.register(
            "reconcile_duration_seconds",
            "Time of one reconcile, from start to the status write",
            duration.clone(),
        );
        let leader = Gauge::default();
        r.register(
            "leader",
            "1 while this process holds the leader Lease",
            leader.clone(),
        );
        let failover_loops = Gauge::default();
        r.register(
            "failover_loops",
            "Jobs whose failover loop runs in this process (every job once it leads; 0 while it waits)",
            failover_loops.clone(),
        );
        let promotions = Counter::default();
        r.register(
            "promotions",
            "Tasks moved off a pod that stopped answering, to their warmest copy",
            promotions.clone(),
        );
        let handoffs = Counter::default();
        r.register(
            "handoffs",
            "Tasks moved between answering pods (balance, scaling), to a caught-up copy",
            handoffs.clone(),
        );
        // 50 ms .. ~100 s.
        let detection = Histogram::new(exponential_buckets(0.05, 2.0, 12));
        r.register(
            "failover_detection_seconds",
            "From a promoted task's old owner's last answer to the decision that moved it",
            detection.clone(),
        );
        let failover = Histogram::new(exponential_buckets(0.05, 2.0, 12));
        r.register(
            "failover_seconds",
            "From a promoted task's old owner's last answer to its new owner's first commit",
            failover.clone(),
        );
        let handoff_stall = Histogram::new(exponential_buckets(0.05, 2.0, 12));
        r.register(
            "handoff_seconds",
            "From the decision that handed a task off to its new owner's first commit",
            handoff_stall.clone(),
        );
        let assignment_refusals = Family::<ReasonLabels, Counter>::default();
        r.register(
            "assignment_refusals",
            "Deliveries of the assignment a worker refused, by reason (Unauthorized: it holds another worker token)",
            assignment_refusals.clone(),
        );
        for reason in crate::adapters::worker_client::RefusalReason::ALL {
            drop(assignment_refusals.get_or_create(&ReasonLabels {
                reason: reason.label(),
            }));
        }
        let applies = Family::<ApplyLabels, Counter>::default();
        r.register(
            "object_applies",
            "Owned objects a reconcile would apply, by kind and outcome (unchanged: not sent, the watch cache held it as desired)",
            applies.clone(),
        );
        let apiserver_requests = Family::<ApiRequestLabels, Counter>::default();
        r.register(
            "apiserver_requests",
            "Requests this operator sent to the apiserver, by verb and resource",
            apiserver_requests.clone(),
        );
        let s3_requests = Family::<S3RequestLabels, Counter>::default();
        r.register(
            "s3_requests",
            "Requests this operator sent to S3 (checkpoint manifests, owner markers, modules), by operation",
            s3_requests.clone(),
        );
        let manifests_kept = Gauge::default();
        r.register(
            "checkpoint_manifests_kept",
            "Checkpoint manifests held between reconciles, so that a refresh reads only new ones",
            manifests_kept.clone(),
        );
        Self {
            registry,
            families,
            reconciles,
            errors,
            duration,
            leader,
            failover_loops,
            promotions,
            handoffs,
            detection,
            failover,
            handoff_stall,
            assignment_refusals,
            applies,
            apiserver_requests,
            s3_requests,
            manifests_kept,
        }
    }

    /// Starts timing one reconcile; finish it with [`ReconcileTimer::done`].
    pub fn reconcile_started(&self) -> ReconcileTimer<'_> {
        ReconcileTimer {
            metrics: self,
            start: Instant::now(),
        }
    }

    /// A task moved off a failed pod, `silent` after its owner's last answer.
    pub fn promotion(&self, silent: std::time::Duration) {
        self.promotions.inc();
        self.detection.observe(silent.as_secs_f64());
    }

    pub fn handoff(&self) {
        self.handoffs.inc();
    }

    /// A moved task's new owner committed: `took` after the old owner's last answer (a
    /// promotion) or after the decision (a handoff).
    pub fn moved_task_committed(&self, promoted: bool, took: std::time::Duration) {
        let histogram = if promoted {
            &self.failover
        } else {
            &self.handoff_stall
        };
        histogram.observe(took.as_secs_f64());
    }

    /// A worker refused a delivery of the assignment, for `reason`.
    pub fn assignment_refused(&self, reason: &'static str) {
        self.assignment_refusals
            .get_or_create(&ReasonLabels { reason })
            .inc();
    }

    /// An owned object of `kind` was applied, or found `unchanged` and not sent.
    pub fn object_apply(&self, kind: &str, unchanged: bool) {
        let outcome = if unchanged { "unchanged" } else { "applied" };
        self.applies
            .get_or_create(&ApplyLabels {
                kind: kind.to_string(),
                outcome,
            })
            .inc();
    }

    /// A request to the apiserver, `verb` on `resource`.
    pub fn apiserver_request(&self, verb: &'static str, resource: String) {
        self.apiserver_requests
            .get_or_create(&ApiRequestLabels { verb, resource })
            .inc();
    }

    /// A request to S3, `operation`.
    pub fn s3_request(&self, operation: &'static str) {
        self.s3_requests
            .get_or_create(&S3RequestLabels { operation })
            .inc();
    }

    /// How many checkpoint manifests the reconciles keep ([`crate::adapters::manifest_cache`]).
    pub fn set_manifests_kept(&self, kept: usize) {
        self.manifests_kept
            .set(i64::try_from(kept).unwrap_or(i64::MAX));
    }

    pub fn set_leader(&self, leader: bool) {
        self.leader.set(i64::from(leader));
    }

    /// The gauge of running failover loops, which the loops' registry keeps.
    pub fn failover_loops(&self) -> Gauge {
        self.failover_loops.clone()
    }

    /// Every registered family's full name and type, sampled or not.
    pub fn families(&self) -> &[(String, MetricType)] {
        &self.families
    }

    /// The text exposition format.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }
}

const PREFIX: &str = "streamkeeper_operator";

/// Registers metrics in a registry and remembers their names.
struct Registrar<'a> {
    registry: &'a mut Registry,
    families: &'a mut Vec<(String, MetricType)>,
}

impl Registrar<'_> {
    fn register(&mut self, name: &str, help: &str, metric: impl Metric) {
        self.families
            .push((format!("{PREFIX}_{name}"), metric.metric_type()));
        self.registry.register(name, help, metric);
    }
}

/// Times one reconcile and counts its outcome.
pub struct ReconcileTimer<'a> {
    metrics: &'a Metrics,
    start: Instant,
}

impl ReconcileTimer<'_> {
    /// `error_category` is `None` on success.
    pub fn done(self, error_category: Option<&'static str>) {
        self.metrics
            .duration
            .observe(self.start.elapsed().as_secs_f64());
        let outcome = if error_category.is_some() {
            "error"
        } else {
            "success"
        };
        self.metrics
            .reconciles
            .get_or_create(&OutcomeLabels { outcome })
            .inc();
        if let Some(category) = error_category {
            self.metrics
                .errors
                .get_or_create(&CategoryLabels { category })
                .inc();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_outcomes_categories_and_durations() {
        let metrics = Metrics::new();
        metrics.reconcile_started().done(None);
        metrics.reconcile_started().done(Some("KafkaUnavailable"));
        metrics.set_leader(true);
        let text = metrics.encode();
        for line in [
            "streamkeeper_operator_reconciles_total{outcome=\"success\"} 1",
            "streamkeeper_operator_reconciles_total{outcome=\"error\"} 1",
            "streamkeeper_operator_reconcile_errors_total{category=\"KafkaUnavailable\"} 1",
            "streamkeeper_operator_reconcile_errors_total{category=\"S3Unavailable\"} 0",
            "streamkeeper_operator_reconcile_duration_seconds_count 2",
            "streamkeeper_operator_leader 1",
            "streamkeeper_operator_assignment_refusals_total{reason=\"Unauthorized\"} 0",
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }
    }
}
