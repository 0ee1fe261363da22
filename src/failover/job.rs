//! What a job's failover loop knows of its job, and what it shares with the rest of the
//! operator.

use super::status_requests;
use crate::leader::Leadership;
use crate::telemetry::metrics::Metrics;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Client;
use kube::runtime::events::Reporter;
use std::sync::Arc;
use std::time::Duration;

/// What the failover loop of one job needs to know of it.
#[derive(Debug, Clone, PartialEq)]
pub struct FailoverJob {
    pub namespace: String,
    pub name: String,
    /// The job itself, owner of the stored document and subject of the Events.
    pub owner: OwnerReference,
    pub tasks: u32,
    /// Pods the job should have (`spec.replicas`, 0 while suspended: nothing is decided then).
    /// The StatefulSet may keep more for a moment: the pods a scale-down removes drain first.
    pub desired_pods: i32,
    pub standby_replicas: u32,
    pub acceptable_recovery_lag: i64,
    /// How long a silent pod keeps its tasks (`spec.recovery.heartbeatTimeout`).
    pub heartbeat_timeout: Duration,
    pub port: u16,
}

/// What the loops share with the rest of the operator.
#[derive(Clone)]
pub struct FailoverDeps {
    pub client: Client,
    /// Who reports the move Events.
    pub reporter: Reporter,
    pub leadership: Leadership,
    pub metrics: Arc<Metrics>,
    /// Asks for the job's status to be written again once a move has finished.
    pub refresh: status_requests::RefreshSender,
    /// The worker pods as the controller's watch sees them; `None` where no controller runs (a
    /// reconcile run on its own), and the loop lists its job's pods instead.
    pub pods: Option<crate::k8s::pod_cache::PodCache>,
    /// The zones of the nodes, read once for every job's loop.
    pub zones: super::zones::NodeZones,
    /// The Secrets read by the reconciles, kept a while: a new loop's first read of the worker
    /// token finds what the reconcile read a moment before.
    pub secrets: Arc<crate::adapters::secret_reads::SecretReads>,
}
