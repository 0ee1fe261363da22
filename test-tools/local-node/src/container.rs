//! One container of a pod run as a local process group: started from its plan, reaped when it
//! exits (its log's tail kept as the termination message under `FallbackToLogsOnError`),
//! restarted after a backoff, and probed (startup, then readiness and liveness) as the
//! kubelet does.

use crate::launch::{ContainerPlan, HttpProbe};
use crate::status::{ContainerState, ContainerView};
use crate::termination::signal;
use k8s_openapi::jiff::Timestamp;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const MAX_BACKOFF: Duration = Duration::from_secs(10);

pub fn now() -> String {
    Timestamp::now().to_string()
}

pub struct ContainerRun {
    pub plan: ContainerPlan,
    log: PathBuf,
    pub child: Option<Child>,
    pub state: ContainerState,
    last_termination: Option<ContainerState>,
    restart_count: u32,
    pub restart_at: Option<Instant>,
    started: Instant,
    ready: bool,
    readiness_failures: u32,
    liveness_failures: u32,
    /// Whether the startup probe has succeeded (true without one): until then the readiness
    /// and liveness probes wait, as the kubelet's do.
    started_up: bool,
    startup_failures: u32,
    next_probe: Instant,
}

impl ContainerRun {
    pub fn spawn(&mut self, pod_ip: &str) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log);
        let spawned = log.and_then(|log| {
            let mut command = Command::new(&self.plan.program);
            command
                .args(&self.plan.args)
                .env_clear()
                .env("PATH", std::env::var_os("PATH").unwrap_or_default())
                .env("HOME", std::env::var_os("HOME").unwrap_or_default())
                .env("HOSTNAME", pod_ip)
                .envs(self.plan.env.iter().map(|(k, v)| (k, v)))
                .stdin(Stdio::null())
                .stdout(log.try_clone()?)
                .stderr(log);
            if let Some(dir) = &self.plan.working_dir {
                command.current_dir(dir);
            }
            std::os::unix::process::CommandExt::process_group(&mut command, 0);
            command.spawn()
        });
        let started_at = now();
        match spawned {
            Ok(child) => {
                tracing::info!(container = %self.plan.name, pid = child.id(), program = %self.plan.program.display(), "container started");
                self.child = Some(child);
                self.state = ContainerState::Running { started_at };
                self.started = Instant::now();
                self.ready = self.plan.readiness.is_none();
                self.readiness_failures = 0;
                self.liveness_failures = 0;
                self.started_up = self.plan.startup.is_none();
                self.startup_failures = 0;
                let delay = self
                    .plan
                    .readiness
                    .as_ref()
                    .map_or(Duration::ZERO, |p| p.timing.initial_delay);
                self.next_probe = Instant::now() + delay;
            }
            Err(error) => {
                tracing::warn!(container = %self.plan.name, %error, "container did not start");
                self.exited(127, "StartError", started_at, error.to_string());
            }
        }
    }

    fn exited(&mut self, exit_code: i32, reason: &str, started_at: String, message: String) {
        self.child = None;
        self.ready = false;
        self.state = ContainerState::Terminated {
            exit_code,
            reason: reason.into(),
            started_at,
            finished_at: now(),
            message,
        };
    }

    fn backoff(&self) -> Duration {
        let exponent = self.restart_count.min(4);
        Duration::from_secs(1 << exponent).min(MAX_BACKOFF)
    }

    pub fn view(&self) -> ContainerView {
        ContainerView {
            name: self.plan.name.clone(),
            image: self.plan.image.clone(),
            state: self.state.clone(),
            last_termination: self.last_termination.clone(),
            ready: self.ready,
            restart_count: self.restart_count,
            pid: self.child.as_ref().map(Child::id),
        }
    }
}

async fn probe(probe: &HttpProbe, ip: &str) -> bool {
    crate::probe::http_get(ip, probe.timing.port, &probe.path, probe.timing.timeout).await
}

impl ContainerRun {
    /// A container of `plan` not started yet, logging to `log`.
    pub fn new(log: PathBuf, plan: ContainerPlan) -> Self {
        Self {
            log,
            plan,
            child: None,
            state: ContainerState::Waiting {
                reason: "ContainerCreating".into(),
                message: String::new(),
            },
            last_termination: None,
            restart_count: 0,
            restart_at: None,
            started: Instant::now(),
            ready: false,
            readiness_failures: 0,
            liveness_failures: 0,
            started_up: false,
            startup_failures: 0,
            next_probe: Instant::now(),
        }
    }

    /// Records the process's exit, if it exited, and when to restart it under `policy` (never
    /// while the pod is `terminating`).
    pub fn reap(&mut self, pod: &str, policy: &str, terminating: bool) {
        let Some(Ok(Some(exit))) = self.child.as_mut().map(Child::try_wait) else {
            return;
        };
        let code = exit.code().unwrap_or(137);
        let started_at = match &self.state {
            ContainerState::Running { started_at } => started_at.clone(),
            _ => now(),
        };
        tracing::warn!(pod, container = %self.plan.name, code, "container exited");
        let reason = if code == 0 { "Completed" } else { "Error" };
        let message = if code != 0 && self.plan.message_from_log {
            std::fs::read(&self.log)
                .map(|log| crate::status::log_tail(&log))
                .unwrap_or_default()
        } else {
            String::new()
        };
        self.exited(code, reason, started_at, message);
        let restarts = match policy {
            "Never" => false,
            "OnFailure" => code != 0,
            _ => true,
        };
        if restarts && !terminating {
            self.restart_at = Some(Instant::now() + self.backoff());
        }
    }

    /// Starts the container again once its backoff is over.
    pub fn restart_when_due(&mut self, pod_ip: &str) {
        if self.child.is_none()
            && let Some(at) = self.restart_at
            && Instant::now() >= at
        {
            self.last_termination = Some(self.state.clone());
            self.restart_count += 1;
            self.restart_at = None;
            self.spawn(pod_ip);
        }
    }

    /// Runs the probes that are due: the startup probe until it succeeds (killing the process
    /// after its failure threshold), then readiness and liveness (killing after liveness's).
    pub async fn probe_when_due(&mut self, pod: &str, pod_ip: &str) {
        if self.child.is_none() || Instant::now() < self.next_probe {
            return;
        }
        let mut period = Duration::from_secs(1);
        if !self.started_up
            && let Some(startup) = &self.plan.startup
        {
            if probe(startup, pod_ip).await {
                self.started_up = true;
            } else {
                self.startup_failures += 1;
                if self.startup_failures >= startup.timing.failure_threshold
                    && let Some(child) = &self.child
                {
                    tracing::warn!(pod, container = %self.plan.name, "startup probe failed; killing");
                    signal(child, "-KILL");
                }
                self.next_probe = Instant::now() + startup.timing.period;
                return;
            }
        }
        if let Some(readiness) = &self.plan.readiness {
            period = readiness.timing.period;
            if probe(readiness, pod_ip).await {
                self.ready = true;
                self.readiness_failures = 0;
            } else {
                self.readiness_failures += 1;
                if self.readiness_failures >= readiness.timing.failure_threshold {
                    self.ready = false;
                }
            }
        }
        if let Some(liveness) = &self.plan.liveness
            && self.started.elapsed() >= liveness.timing.initial_delay
        {
            period = period.min(liveness.timing.period);
            if probe(liveness, pod_ip).await {
                self.liveness_failures = 0;
            } else {
                self.liveness_failures += 1;
                if self.liveness_failures >= liveness.timing.failure_threshold
                    && let Some(child) = &self.child
                {
                    tracing::warn!(pod, container = %self.plan.name, "liveness probe failed; killing");
                    signal(child, "-KILL");
                }
            }
        }
        self.next_probe = Instant::now() + period;
    }
}
