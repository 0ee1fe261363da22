//! The simulated workers (`test-tools/fleet-workers`, started by `tests/services/fleet-workers.sh`)
//! as the fleet bench drives them through their control API: request counts, faults, and the
//! arrival of each assignment document, from which a kill's failover is timed as the workers
//! see it (kill → the new document received).

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::ListParams;
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::operator_support::support;

pub struct Workers {
    /// `host:port` of the control API.
    address: String,
}

/// How long a killed pod's job may take to send its other pods a new document.
const FAILOVER_LIMIT: Duration = Duration::from_secs(30);

impl Workers {
    /// The control API that `tests/services/fleet-workers.sh env` names (`SK_FLEET_CONTROL`).
    pub fn from_env() -> Self {
        let url = support::required_env("SK_FLEET_CONTROL", "tests/services/fleet-workers.sh");
        Self {
            address: url.trim_start_matches("http://").to_string(),
        }
    }

    fn get(&self, path: &str) -> serde_json::Value {
        let (status, body) = support::http_get(&self.address, path)
            .unwrap_or_else(|| panic!("the fleet workers' control API did not answer {path}"));
        assert_eq!(status, 200, "GET {path}: {body}");
        serde_json::from_str(&body).unwrap()
    }

    fn act(&self, ip: &str, action: &str) {
        let path = format!("/pods/{ip}/{action}");
        let answer = support::http_request(
            &self.address,
            "POST",
            &path,
            &[],
            "",
            Duration::from_secs(5),
        );
        assert_eq!(
            answer.as_ref().map(|a| a.0),
            Some(200),
            "POST {path}: {answer:?}"
        );
    }

    /// Every pod served, and the requests each kind of call got so far (`METHOD path`).
    pub fn stats(&self) -> (u64, BTreeMap<String, f64>) {
        let stats = self.get("/stats");
        let requests = stats["requests"]
            .as_object()
            .map(|counts| {
                counts
                    .iter()
                    .map(|(key, count)| (key.clone(), count.as_f64().unwrap_or(0.0)))
                    .collect()
            })
            .unwrap_or_default();
        (stats["pods"].as_u64().unwrap_or(0), requests)
    }

    /// How many requests each pod (by address) has answered so far.
    pub fn requests_by_pod(&self) -> BTreeMap<String, u64> {
        self.get("/pods")
            .as_array()
            .map(|pods| {
                pods.iter()
                    .filter_map(|pod| {
                        Some((pod["ip"].as_str()?.to_string(), pod["requests"].as_u64()?))
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// When pod `ip` received each new document, in ms since the epoch.
    fn arrivals(&self, ip: &str) -> Vec<u64> {
        self.get(&format!("/pods/{ip}/assignments"))["arrivals"]
            .as_array()
            .map(|arrivals| {
                arrivals
                    .iter()
                    .filter_map(|arrival| arrival["atMs"].as_u64())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Brings `fault` on the process of job `job`'s first pod (`refuse`: its port refuses, as
    /// a killed worker's does; `silent`: it answers nothing, as a frozen one) and times how long
    /// until another of its pods received a new document. The pod then restarts (a new process)
    /// and is given its document before this returns, so the job is whole for the next fault.
    pub async fn time_a_fault(
        &self,
        client: &kube::Client,
        (namespace, job): (&str, &str),
        fault: &str,
    ) -> Duration {
        let ips = pod_ips(client, namespace, job).await;
        let (victim, others) = ips.split_first().expect("the job's pods");
        let killed_at = now_ms();
        self.act(victim, fault);
        let received = support::wait_until(
            "a new document on another pod",
            FAILOVER_LIMIT,
            async || {
                others
                    .iter()
                    .flat_map(|ip| self.arrivals(ip))
                    .filter(|&at| at >= killed_at)
                    .min()
            },
        )
        .await;
        let restarted_at = now_ms();
        self.act(victim, "restart");
        support::wait_until("the restarted pod's document", FAILOVER_LIMIT, async || {
            self.arrivals(victim)
                .into_iter()
                .any(|at| at >= restarted_at)
                .then_some(())
        })
        .await;
        Duration::from_millis(received.saturating_sub(killed_at))
    }
}

/// The addresses of job `job`'s pods, by pod name (ordinal 0 first).
async fn pod_ips(client: &kube::Client, namespace: &str, job: &str) -> Vec<String> {
    let selector = streamkeeper::k8s::labels::selector(job)
        .iter()
        .map(|(key, value)| format!("{key}={value}"))
        .collect::<Vec<_>>()
        .join(",");
    addresses(client, namespace, &selector).await
}

/// The addresses of the pods in `namespace` that `selector` selects, by pod name.
pub async fn addresses(client: &kube::Client, namespace: &str, selector: &str) -> Vec<String> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let mut listed: Vec<(String, String)> = pods
        .list(&ListParams::default().labels(selector))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|pod| {
            let ip = pod.status?.pod_ip?;
            Some((pod.metadata.name?, ip))
        })
        .collect();
    listed.sort();
    listed.into_iter().map(|(_, ip)| ip).collect()
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|since| since.as_millis() as u64)
        .unwrap_or_default()
}

/// The `share` quantile (0.5: the median) of `samples`, which must not be empty.
pub fn quantile(samples: &[Duration], share: f64) -> Duration {
    let mut sorted = samples.to_vec();
    sorted.sort();
    let index = ((sorted.len() as f64 * share).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[index]
}
