//! Support for the chart tests: helm and kubectl as the user runs them (the binaries
//! `tests/services/helm.sh` and `tests/services/kube.sh` built), rendering the chart, and picking
//! objects out of the rendered YAML.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use serde_json::Value;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

// The test crate's own `support` module (tests/support), declared once by each test file.
use crate::support;

pub const CHART: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/charts/streamkeeper");
/// The control plane's version (tests/services/kube.sh): `helm template` renders for it.
pub const KUBE_VERSION: &str = "1.34.4";

pub fn helm() -> PathBuf {
    PathBuf::from(support::required_env("SK_HELM", "tests/services/helm.sh"))
}

pub fn kubectl() -> PathBuf {
    PathBuf::from(support::required_env(
        "SK_KUBE_BIN",
        "tests/services/kube.sh",
    ))
    .join("kubectl")
}

/// Runs `command`, feeding `stdin`; returns the whole output whatever the exit status.
pub fn run(command: &mut Command, stdin: Option<&str>) -> Output {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {command:?}: {e}"));
    let mut pipe = child.stdin.take().unwrap();
    if let Some(input) = stdin {
        pipe.write_all(input.as_bytes()).unwrap();
    }
    drop(pipe);
    child.wait_with_output().unwrap()
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Runs `command` and returns its stdout; panics with its stderr when it fails.
pub fn succeed(command: &mut Command, stdin: Option<&str>) -> String {
    let output = run(command, stdin);
    assert!(
        output.status.success(),
        "{command:?} failed ({}):\n{}\n{}",
        output.status,
        text(&output.stderr),
        text(&output.stdout)
    );
    text(&output.stdout)
}

/// `helm template <release> CHART -n <namespace> <args>` for the test cluster's version.
pub fn template(release: &str, namespace: &str, args: &[&str]) -> Output {
    run(
        Command::new(helm())
            .args(["template", release, CHART, "--namespace", namespace])
            .args(["--kube-version", KUBE_VERSION])
            .args(args),
        None,
    )
}

/// The rendered manifests; panics with helm's message when rendering fails.
pub fn render(release: &str, namespace: &str, args: &[&str]) -> String {
    let output = template(release, namespace, args);
    assert!(
        output.status.success(),
        "helm template {args:?} failed:\n{}",
        text(&output.stderr)
    );
    text(&output.stdout)
}

/// Every object of a multi-document YAML stream, as JSON.
pub fn objects(yaml: &str) -> Vec<Value> {
    use serde::Deserialize;
    serde_yaml_ng::Deserializer::from_str(yaml)
        .map(|document| Value::deserialize(document).expect("helm renders valid YAML"))
        .filter(|object| !object.is_null())
        .collect()
}

/// The one object of `kind` (and `name`, when given) among `objects`.
pub fn find<'a>(objects: &'a [Value], kind: &str, name: Option<&str>) -> &'a Value {
    let matching: Vec<&Value> = objects
        .iter()
        .filter(|object| object["kind"] == kind)
        .filter(|object| name.is_none_or(|name| object["metadata"]["name"] == name))
        .collect();
    assert_eq!(
        matching.len(),
        1,
        "expected one {kind} {name:?}, found {}",
        matching.len()
    );
    matching[0]
}

/// The kinds among `objects`, sorted, with repeats.
pub fn kinds(objects: &[Value]) -> Vec<String> {
    let mut kinds: Vec<String> = objects
        .iter()
        .map(|object| object["kind"].as_str().unwrap_or_default().to_string())
        .collect();
    kinds.sort();
    kinds
}

/// A values file with `yaml`, removed when dropped.
pub fn values_file(yaml: &str) -> tempfile::NamedTempFile {
    let mut file = tempfile::Builder::new().suffix(".yaml").tempfile().unwrap();
    file.write_all(yaml.as_bytes()).unwrap();
    file
}

/// Values that turn on or change everything the chart offers, for `namespace` as the watched one.
pub fn custom_values(watched: &str) -> String {
    format!(
        r#"
image:
  repository: registry.example.com/platform/streamkeeper-operator
  tag: 0.1.0-rc.1
  pullPolicy: Always
  pullSecrets: [registry-credentials]
replicaCount: 3
leaderElection: {{leaseDurationSeconds: 20, renewDeadlineSeconds: 12, retryPeriodSeconds: 3}}
watchNamespace: {watched}
maxConcurrentReconciles: 4
finalCheckpointTimeoutSeconds: 90
logging: {{level: "info,streamkeeper=debug", format: text}}
metrics:
  host: "$(POD_IP)"
  port: 9090
  service: {{enabled: true, type: ClusterIP, annotations: {{team: platform}}}}
  serviceMonitor: {{enabled: true, interval: 15s, labels: {{release: prometheus}}}}
  podMonitor: {{enabled: true, interval: 15s, labels: {{release: prometheus}}}}
serviceAccount: {{create: true, name: streamkeeper-custom, annotations: {{owner: platform}}}}
podDisruptionBudget: {{enabled: true, minAvailable: 2}}
networkPolicy:
  enabled: true
  metricsFrom:
    - namespaceSelector: {{matchLabels: {{kubernetes.io/metadata.name: monitoring}}}}
  egress:
    - ports: [{{port: 443, protocol: TCP}}, {{port: 6443, protocol: TCP}}]
    - ports: [{{port: 9092, protocol: TCP}}, {{port: 8333, protocol: TCP}}, {{port: 8080, protocol: TCP}}]
resources:
  requests: {{cpu: 200m, memory: 256Mi}}
  limits: {{cpu: "1", memory: 1Gi}}
podAnnotations: {{example.com/scrape: "false"}}
podLabels: {{team: platform}}
nodeSelector: {{kubernetes.io/os: linux}}
tolerations:
  - {{key: dedicated, operator: Equal, value: platform, effect: NoSchedule}}
affinity:
  nodeAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      nodeSelectorTerms:
        - matchExpressions: [{{key: kubernetes.io/arch, operator: In, values: [amd64, arm64]}}]
priorityClassName: streamkeeper-critical
extraEnv:
  - {{name: HTTPS_PROXY, value: "http://proxy.example.com:3128"}}
  - name: NODE_NAME
    valueFrom: {{fieldRef: {{fieldPath: spec.nodeName}}}}
"#
    )
}

/// The container args of the operator Deployment among `objects`.
pub fn operator_args(objects: &[Value]) -> Vec<String> {
    let deployment = find(objects, "Deployment", None);
    deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|arg| arg.as_str().unwrap().to_string())
        .collect()
}
