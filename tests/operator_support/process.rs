//! The operator binary as a child process of a test: started with short lease timings, its log
//! read back, signalled, killed when the test ends.

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

pub struct Operator {
    pub identity: String,
    pub child: Child,
    log: PathBuf,
}

impl Operator {
    pub fn start(namespace: &str, identity: &str, dir: &Path) -> Self {
        Self::start_with(namespace, identity, dir, &[])
    }

    pub fn start_with(namespace: &str, identity: &str, dir: &Path, extra: &[&str]) -> Self {
        Self::start_with_env(namespace, identity, dir, extra, &[])
    }

    /// [`Operator::start_with`] with extra environment (e.g. another `KUBECONFIG`).
    pub fn start_with_env(
        namespace: &str,
        identity: &str,
        dir: &Path,
        extra: &[&str],
        env: &[(&str, &Path)],
    ) -> Self {
        let log = dir.join(format!("{identity}.log"));
        let file = std::fs::File::create(&log).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_streamkeeper-operator"))
            .args([
                "run",
                "--namespace",
                namespace,
                "--identity",
                identity,
                "--metrics-addr",
                "127.0.0.1:0",
                "--log-format",
                "json",
                "--lease-duration-seconds",
                "6",
                "--renew-deadline-seconds",
                "4",
                "--retry-period-seconds",
                "1",
            ])
            .args(extra)
            .envs(env.iter().copied())
            .env("RUST_LOG", "info")
            .stdout(Stdio::from(file.try_clone().unwrap()))
            .stderr(Stdio::from(file))
            .spawn()
            .expect("the operator binary starts");
        Self {
            identity: identity.to_string(),
            child,
            log,
        }
    }

    pub fn signal(&self, signal: &str) {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill").args([signal, &pid]).status().unwrap();
        assert!(sent.success(), "kill {signal} {pid}");
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn leads(&self) -> bool {
        self.log().contains("leading: reconciling")
    }

    /// The metrics address the process logged.
    pub fn metrics_address(&self) -> Option<String> {
        self.log()
            .lines()
            .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
            .find(|line| line["message"] == "serving /metrics and /healthz")
            .and_then(|line| line["address"].as_str().map(str::to_string))
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub async fn holder(leases: &Api<Lease>) -> Option<String> {
    leases
        .get_opt("streamkeeper-operator")
        .await
        .unwrap()
        .and_then(|lease| lease.spec)
        .and_then(|spec| spec.holder_identity)
}

/// Kills the process when the test ends, passed or not.
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

// What a test reads of the operator process a `System` runs: its log and its `/metrics`.
impl super::failover::System {
    /// The log of the operator started last.
    pub fn operator_log(&self) -> String {
        let log = self
            .dir
            .path()
            .join(format!("{}.log", self.operator_identity()));
        std::fs::read_to_string(log).unwrap_or_default()
    }

    /// The text of the operator's `/metrics`, at the address it logged; `None` until it serves.
    pub async fn operator_metrics(&self) -> Option<String> {
        // The operator logs as text here, in colour: `... serving /metrics and /healthz
        // address=HOST:PORT` with escape sequences around the field's name.
        let line = self
            .operator_log()
            .lines()
            .find(|line| line.contains("serving /metrics and /healthz"))?
            .to_string();
        let plain = strip_ansi(&line);
        let address = plain
            .split_whitespace()
            .find_map(|word| word.strip_prefix("address="))?
            .to_string();
        super::metrics_text(&address).await
    }
}

/// `text` without its terminal colour sequences (`ESC [ ... m`).
fn strip_ansi(text: &str) -> String {
    let mut plain = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for inner in chars.by_ref() {
                if inner == 'm' {
                    break;
                }
            }
        } else {
            plain.push(c);
        }
    }
    plain
}
