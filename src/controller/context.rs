//! What every reconcile shares: the clients, the Event recorder, the metrics, the leadership
//! guard and the per-job failure counts that set the backoff.

use crate::adapters::kafka_admin::KafkaAdmins;
use crate::api::StatefulStreamJob;
use crate::failover::{FailoverDeps, Failovers};
use crate::leader::Leadership;
use crate::telemetry::metrics::Metrics;
use kube::Client;
use kube::runtime::events::{Recorder, Reporter};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// Settings of the reconcile that are not part of any job.
#[derive(Debug, Clone)]
pub struct Settings {
    /// How long a worker may take to answer `POST /v1/checkpoints` before suspend goes on.
    pub final_checkpoint_timeout: Duration,
    /// This operator's cluster name (`--cluster-name`), part of every id, default topic and S3
    /// prefix it derives from a job; `None` keeps the ids of a single cluster.
    pub cluster: Option<String>,
    /// This cluster's id, the `kube-system` namespace's uid, when the operator may read it:
    /// the owner markers of the jobs' S3 prefixes carry it ([`streamkeeper_contract::owner_marker`]).
    pub cluster_id: Option<String>,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            final_checkpoint_timeout: Duration::from_secs(60),
            cluster: None,
            cluster_id: None,
        }
    }
}

/// What every reconcile shares: clients, the Event recorder, metrics, per-job failure counts.
pub struct Context {
    pub client: Client,
    pub recorder: Recorder,
    /// Who reports the Events (this operator process).
    pub reporter: Reporter,
    pub kafka: KafkaAdmins,
    pub metrics: Arc<Metrics>,
    pub settings: Settings,
    /// Checked before every write that does not go through `client` (Kafka, S3, workers); the
    /// binary's `client` checks it itself on each request.
    pub leadership: Leadership,
    failures: Mutex<HashMap<String, u32>>,
    /// Each job's failover loop (assignment, heartbeat, promotion).
    pub failovers: Failovers,
    /// The objects seen to be their job's own (see [`crate::k8s::ownership`]).
    pub verified: crate::k8s::ownership::Verified,
    /// The controller's watch cache of the jobs, once it runs ([`crate::controller::run`]).
    pub jobs: std::sync::OnceLock<kube::runtime::reflector::Store<StatefulStreamJob>>,
    /// The controller's watch cache of the worker pods, once it runs: every failover loop reads
    /// its job's pods here instead of listing them.
    pub pods: std::sync::OnceLock<crate::k8s::pod_cache::PodCache>,
    /// The Secrets the reconciles read, kept a while ([`crate::adapters::secret_reads`]).
    pub secrets: Arc<crate::adapters::secret_reads::SecretReads>,
    /// The zones of the nodes, read once for every job's failover loop.
    node_zones: crate::failover::zones::NodeZones,
    /// Each job's touched hash when it was last reconciled: a job touched since reads its
    /// Secrets anew.
    looked_at: Mutex<HashMap<String, u64>>,
    /// This process's last write of each job's status (see [`crate::k8s::status`]).
    pub status_writes: crate::k8s::status::StatusWrites,
    /// The controller's watch caches of the objects it applies, once it runs.
    pub owned: std::sync::OnceLock<crate::k8s::owned_cache::OwnedCaches>,
    /// The digests of the WebAssembly modules read, so each object version is read once.
    pub modules: crate::adapters::wasm_module::ModuleDigests,
    /// The checkpoint manifests read, so each refresh reads only new ones.
    pub manifests: crate::adapters::manifest_cache::ManifestCache,
    /// The S3 clients, one per server and credentials, so each keeps its connections.
    pub s3_clients: crate::adapters::s3_clients::S3Clients,
}

impl Context {
    pub fn new(
        client: Client,
        reporter: Reporter,
        metrics: Arc<Metrics>,
        settings: Settings,
    ) -> Self {
        let failovers = Failovers::counted_by(metrics.failover_loops());
        Self {
            recorder: Recorder::new(client.clone(), reporter.clone()),
            reporter,
            client,
            kafka: KafkaAdmins::default(),
            metrics,
            settings,
            leadership: Leadership::unconditional(),
            failures: Mutex::new(HashMap::new()),
            failovers,
            verified: Default::default(),
            jobs: std::sync::OnceLock::new(),
            pods: std::sync::OnceLock::new(),
            owned: std::sync::OnceLock::new(),
            status_writes: Default::default(),
            secrets: Default::default(),
            node_zones: Default::default(),
            looked_at: Mutex::new(HashMap::new()),
            modules: Default::default(),
            manifests: Default::default(),
            s3_clients: Default::default(),
        }
    }

    /// Writes to Kafka, S3 and the workers only while `leadership` allows them (the default
    /// allows them always, for code that runs without an election).
    pub fn with_leadership(mut self, leadership: Leadership) -> Self {
        self.kafka = KafkaAdmins::new(leadership.clone());
        self.leadership = leadership;
        self
    }

    /// What a job's failover loop shares with the reconciles.
    pub fn failover_deps(&self) -> FailoverDeps {
        FailoverDeps {
            client: self.client.clone(),
            reporter: self.reporter.clone(),
            leadership: self.leadership.clone(),
            metrics: Arc::clone(&self.metrics),
            refresh: self.failovers.refresh.sender(),
            pods: self.pods.get().cloned(),
            zones: self.node_zones.clone(),
            secrets: Arc::clone(&self.secrets),
        }
    }

    fn failures(&self) -> std::sync::MutexGuard<'_, HashMap<String, u32>> {
        self.failures
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Counts a failure of `key` and returns the requeue delay: 2 s doubling up to 5 min.
    pub fn backoff(&self, key: &str) -> Duration {
        let mut failures = self.failures();
        let count = failures.entry(key.to_string()).or_insert(0);
        *count = count.saturating_add(1);
        let exponent = (*count - 1).min(8);
        Duration::from_secs(2u64 << exponent).min(Duration::from_secs(300))
    }

    pub(crate) fn succeeded(&self, key: &str) {
        self.failures().remove(key);
    }

    /// Whether job `key` was touched (its spec, annotations or labels: `touched` is
    /// [`crate::controller::relevant::touched`]'s hash) since this process last looked.
    /// A first look is no change: a new job, or every job at a start, is not a touch announcing
    /// a rotation (and at 100 jobs in one namespace, each new job dropped every job's kept
    /// Secrets).
    pub(crate) fn changed_since_last_look(&self, key: &str, touched: u64) -> bool {
        changed_since_recorded(&mut self.looked_at(), key, touched)
    }

    fn looked_at(&self) -> std::sync::MutexGuard<'_, HashMap<String, u64>> {
        self.looked_at
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// Records `hash` as job `key`'s; true when it differs from one recorded before.
fn changed_since_recorded(looked_at: &mut HashMap<String, u64>, key: &str, hash: u64) -> bool {
    looked_at
        .insert(key.to_string(), hash)
        .is_some_and(|before| before != hash)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_change_after_a_first_look_counts() {
        let mut looked_at = HashMap::new();
        assert!(!changed_since_recorded(&mut looked_at, "shop/a", 1));
        assert!(!changed_since_recorded(&mut looked_at, "shop/a", 1));
        assert!(!changed_since_recorded(&mut looked_at, "shop/b", 7));
        assert!(changed_since_recorded(&mut looked_at, "shop/a", 2));
        assert!(!changed_since_recorded(&mut looked_at, "shop/a", 2));
    }
}
