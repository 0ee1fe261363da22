//! Every simulated pod this process serves, by address: its state, its faults and its
//! listener, and the request counts over all of them. Pods come and go through [`Fleet::add`]
//! and [`Fleet::remove`] (from the pod watch or the control API); faults through
//! [`Fleet::apply`]. The listeners themselves are [`crate::serve`]'s.

use crate::pod::{Arrival, Availability, Faults, PodState};
use crate::serve::{self, Listening};
use serde::Serialize;
use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};
use tokio::sync::watch;

/// What the control API can make a pod do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    /// Close its listener: connections are refused and open ones dropped (a killed process).
    Refuse,
    /// Take connections and requests, answer none (a frozen process) until told otherwise.
    Silent,
    /// Answer every request after this many milliseconds.
    Slow(u64),
    /// Report this lag on every task.
    Lag(i64),
    /// Answer as a worker from before the report stream (404 on it), until restarted.
    Older,
    /// A new process: new name, no assignment, no faults, a new listener.
    Restart,
    /// No faults, listening, the same process (a frozen one thaws with its state).
    Normal,
}

#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    #[error("no simulated pod at {0}")]
    UnknownPod(Ipv4Addr),
    #[error("cannot listen on {address} for pod {pod}: {source}")]
    Listen {
        address: SocketAddr,
        pod: String,
        #[source]
        source: std::io::Error,
    },
}

/// One simulated pod, shared with its listener's tasks.
pub struct Pod {
    pub(crate) ip: Ipv4Addr,
    state: Mutex<PodState>,
    pub(crate) faults: watch::Sender<Faults>,
    /// The open listener; dropping it closes the listener and every connection it took.
    listening: Mutex<Option<Listening>>,
    pub(crate) requests: AtomicU64,
}

impl Pod {
    pub(crate) fn state(&self) -> MutexGuard<'_, PodState> {
        // A panic elsewhere cannot leave a PodState half-changed in a way that matters to a
        // test tool; keep serving.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn listening(&self) -> MutexGuard<'_, Option<Listening>> {
        self.listening
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// A pod as the control API shows it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodView {
    pub ip: Ipv4Addr,
    pub name: String,
    pub process: String,
    pub generation: Option<u64>,
    pub faults: Faults,
    pub listening: bool,
    pub requests: u64,
    /// Unchanged documents received again.
    pub repeated_assignments: u64,
}

/// Every assignment document a pod received (new ones only).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ArrivalsView {
    pub ip: Ipv4Addr,
    pub name: String,
    pub arrivals: Vec<Arrival>,
}

/// Request counts over the whole fleet.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StatsView {
    pub pods: usize,
    pub connections: u64,
    /// By `METHOD path`.
    pub requests: BTreeMap<String, u64>,
}

/// The fleet; cheap to clone.
#[derive(Clone)]
pub struct Fleet {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    port: u16,
    pods: Mutex<BTreeMap<Ipv4Addr, Arc<Pod>>>,
    requests: Mutex<BTreeMap<String, u64>>,
    pub(crate) connections: AtomicU64,
    /// Simulated process starts so far, numbering process names.
    starts: AtomicU64,
    /// When this fleet started: process names of two fleet runs never collide.
    epoch_ms: u64,
}

impl Inner {
    pub(crate) fn count_request(&self, method: &str, path: &str) {
        let mut requests = self.requests.lock().unwrap_or_else(PoisonError::into_inner);
        *requests.entry(format!("{method} {path}")).or_insert(0) += 1;
    }
}

impl Fleet {
    /// A fleet whose pods listen on `port` of their own addresses.
    pub fn new(port: u16) -> Self {
        Self {
            inner: Arc::new(Inner {
                port,
                pods: Mutex::new(BTreeMap::new()),
                requests: Mutex::new(BTreeMap::new()),
                connections: AtomicU64::new(0),
                starts: AtomicU64::new(0),
                epoch_ms: now_ms(),
            }),
        }
    }

    pub fn port(&self) -> u16 {
        self.inner.port
    }

    fn pods(&self) -> MutexGuard<'_, BTreeMap<Ipv4Addr, Arc<Pod>>> {
        self.inner
            .pods
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn pod(&self, ip: Ipv4Addr) -> Result<Arc<Pod>, FleetError> {
        self.pods()
            .get(&ip)
            .cloned()
            .ok_or(FleetError::UnknownPod(ip))
    }

    fn new_process(&self, ip: Ipv4Addr) -> String {
        let start = self.inner.starts.fetch_add(1, Ordering::Relaxed);
        format!("fleet-{}-{ip}-{start}", self.inner.epoch_ms)
    }

    /// Starts serving pod `name` at `ip` as a freshly started process. An address already served
    /// under the same name is left as it is; under another name (the address went to another
    /// pod) the old one is dropped first.
    pub fn add(&self, ip: Ipv4Addr, name: &str) -> Result<(), FleetError> {
        if let Ok(existing) = self.pod(ip) {
            if existing.state().name() == name {
                return Ok(());
            }
            self.remove(ip);
        }
        let pod = Arc::new(Pod {
            ip,
            state: Mutex::new(PodState::new(name, self.new_process(ip))),
            faults: watch::Sender::new(Faults::default()),
            listening: Mutex::new(None),
            requests: AtomicU64::new(0),
        });
        self.listen(&pod)?;
        self.pods().insert(ip, pod);
        tracing::debug!(%ip, pod = name, "serving");
        Ok(())
    }

    /// Stops serving `ip` (its pod is gone). `false` if it was not served.
    pub fn remove(&self, ip: Ipv4Addr) -> bool {
        let removed = self.pods().remove(&ip);
        if let Some(pod) = &removed {
            pod.listening().take();
            tracing::debug!(%ip, "no longer served");
        }
        removed.is_some()
    }

    /// Opens the pod's listener unless it is open.
    fn listen(&self, pod: &Arc<Pod>) -> Result<(), FleetError> {
        let mut listening = pod.listening();
        if listening.is_none() {
            let address = SocketAddr::from((pod.ip, self.inner.port));
            let opened = serve::listen(address, Arc::clone(pod), Arc::clone(&self.inner)).map_err(
                |source| FleetError::Listen {
                    address,
                    pod: pod.state().name().to_string(),
                    source,
                },
            )?;
            *listening = Some(opened);
        }
        Ok(())
    }

    /// Makes the pod at `ip` do `command`, and shows it after.
    pub fn apply(&self, ip: Ipv4Addr, command: Command) -> Result<PodView, FleetError> {
        let pod = self.pod(ip)?;
        let set = |change: &dyn Fn(&mut Faults)| pod.faults.send_modify(|f| change(f));
        match command {
            Command::Refuse => {
                set(&|f| f.availability = Availability::Refusing);
                pod.listening().take();
            }
            Command::Silent => {
                set(&|f| f.availability = Availability::Silent);
                self.listen(&pod)?;
            }
            Command::Slow(delay_ms) => set(&|f| f.delay_ms = delay_ms),
            Command::Lag(lag) => set(&|f| f.lag = lag),
            Command::Older => set(&|f| f.older = true),
            Command::Restart => {
                // The old process's connections die with it, before the new one answers.
                if let Some(listening) = pod.listening().as_ref() {
                    listening.cut_connections();
                }
                pod.state().restart(self.new_process(ip));
                set(&|f| *f = Faults::default());
                self.listen(&pod)?;
            }
            Command::Normal => {
                set(&|f| *f = Faults::default());
                self.listen(&pod)?;
            }
        }
        tracing::info!(%ip, ?command, "fault applied");
        Ok(view(&pod))
    }

    pub fn view(&self, ip: Ipv4Addr) -> Result<PodView, FleetError> {
        self.pod(ip).map(|pod| view(&pod))
    }

    pub fn views(&self) -> Vec<PodView> {
        let pods: Vec<Arc<Pod>> = self.pods().values().cloned().collect();
        pods.iter().map(|pod| view(pod)).collect()
    }

    pub fn arrivals(&self, ip: Ipv4Addr) -> Result<ArrivalsView, FleetError> {
        let pod = self.pod(ip)?;
        let state = pod.state();
        Ok(ArrivalsView {
            ip,
            name: state.name().to_string(),
            arrivals: state.arrivals().to_vec(),
        })
    }

    pub fn stats(&self) -> StatsView {
        let requests = self
            .inner
            .requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        StatsView {
            pods: self.pods().len(),
            connections: self.inner.connections.load(Ordering::Relaxed),
            requests,
        }
    }

    /// The addresses served now.
    pub fn addresses(&self) -> Vec<Ipv4Addr> {
        self.pods().keys().copied().collect()
    }
}

fn view(pod: &Pod) -> PodView {
    let faults = *pod.faults.borrow();
    let listening = pod.listening().is_some();
    let state = pod.state();
    PodView {
        ip: pod.ip,
        name: state.name().to_string(),
        process: state.process().to_string(),
        generation: state.generation(),
        faults,
        listening,
        requests: pod.requests.load(Ordering::Relaxed),
        repeated_assignments: state.repeats(),
    }
}

/// Milliseconds since the Unix epoch: the clock a bench on this machine compares with.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}
