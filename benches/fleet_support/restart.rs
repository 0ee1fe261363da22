//! The fleet bench's restart of the operator: SIGTERM (it releases its Lease), a new process,
//! and how long until every job's failover loop polls again and every job is reconciled.

use super::operator_support;
use super::operator_support::cards::Process;
use super::{start_operator, workers};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// How long a restarted operator took to run every job's failover loop again (every pod polled
/// by it) and to reconcile every job once; `None` when it did not within the bench's limit
/// (then `polled` and `reconciles` say how far it got).
pub struct Restart {
    pub loops: Option<Duration>,
    pub reconciled: Option<Duration>,
    pub polled: usize,
    pub pods: usize,
    pub reconciles: f64,
}

/// Checks `probe` every 100 ms until it holds or `limit` passes: how long it took, if it held.
async fn within(limit: Duration, mut probe: impl AsyncFnMut() -> bool) -> Option<Duration> {
    let started = Instant::now();
    while started.elapsed() < limit {
        if probe().await {
            return Some(started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

/// The successful reconciles an operator counted, from its `/metrics`.
async fn reconciles(metrics_address: &str) -> f64 {
    let text = operator_support::metrics_text(metrics_address)
        .await
        .unwrap_or_default();
    text.lines()
        .filter(|line| {
            line.starts_with("streamkeeper_operator_reconciles_total{outcome=\"success\"}")
        })
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Stops `operator` (SIGTERM: it releases its Lease, as in an upgrade of the operator) and
/// times a new one over `jobs` jobs; returns the new process with its restart's figures.
pub async fn restart_operator(
    operator: Process,
    (client, namespace, dir): (&kube::Client, &str, &std::path::Path),
    jobs: usize,
    workers: &workers::Workers,
) -> (Process, Restart) {
    drop(operator);
    // This namespace's pods only: the simulated workers also serve whatever pods an earlier
    // run left.
    let ours = workers::addresses(client, namespace, "").await;
    let polled_before: BTreeMap<String, u64> = workers
        .requests_by_pod()
        .into_iter()
        .filter(|(ip, _)| ours.contains(ip))
        .collect();
    let started = Instant::now();
    let (operator, metrics_address) = start_operator(namespace, dir, 2);
    let polled = || {
        let now = workers.requests_by_pod();
        polled_before
            .iter()
            .filter(|(ip, before)| now.get(*ip).is_some_and(|after| after > *before))
            .count()
    };
    let limit = Duration::from_secs(120);
    let loops = within(limit, async || polled() == polled_before.len()).await;
    let reconciled = within(limit, async || {
        reconciles(&metrics_address).await >= jobs as f64
    })
    .await
    .map(|_| started.elapsed());
    let restart = Restart {
        loops,
        reconciled,
        polled: polled(),
        pods: polled_before.len(),
        reconciles: reconciles(&metrics_address).await,
    };
    (operator, restart)
}
