//! The local node agent against the real apiserver, scheduler and controller-manager: a
//! StatefulSet with a volume claim template runs as local processes, each pod on its own
//! loopback address with its own claim directory; a killed process is restarted; a deleted pod
//! is recreated by the StatefulSet controller and finds its claim's data again.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::json;
use std::path::Path;
use std::process::{Child, Command};
use std::time::Duration;
use streamkeeper_test_support::{unique_name, wait_until};

const SERVER: &str = r#"
import http.server, os, sys
data = os.environ["DATA"]
with open(os.path.join(data, "starts"), "a") as f:
    f.write(os.environ["POD_NAME"] + "\n")
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
    def log_message(self, *args):
        pass
http.server.HTTPServer((sys.argv[1], 8080), Handler).serve_forever()
"#;

struct Agent {
    child: Child,
    log: std::path::PathBuf,
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            eprintln!(
                "agent log (tail):\n{}",
                lines[lines.len().saturating_sub(40)..].join("\n")
            );
        }
    }
}

/// Deletes the test's node and namespace however the test ends.
struct Cleanup {
    client: kube::Client,
    node: String,
    namespace: String,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let (client, node, namespace) = (
            self.client.clone(),
            self.node.clone(),
            self.namespace.clone(),
        );
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                let _ = Api::<Namespace>::all(client.clone())
                    .delete(&namespace, &DeleteParams::default())
                    .await;
                let _ = Api::<Node>::all(client)
                    .delete(&node, &DeleteParams::default())
                    .await;
            });
        })
        .join();
    }
}

fn starts(root: &Path, namespace: &str, claim: &str) -> Vec<String> {
    std::fs::read_to_string(
        root.join("volumes")
            .join(namespace)
            .join(claim)
            .join("starts"),
    )
    .unwrap_or_default()
    .lines()
    .map(str::to_string)
    .collect()
}

fn ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn restarts(pod: &Pod) -> i32 {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.first())
        .map_or(0, |c| c.restart_count)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_statefulset_runs_restarts_and_keeps_its_claims() {
    assert!(
        std::env::var("KUBECONFIG").is_ok_and(|v| !v.is_empty()),
        "KUBECONFIG is not set: this test needs the control plane started by `tests/services/kube.sh start`"
    );
    let client = kube::Client::try_default().await.unwrap();
    let namespace = unique_name("local-node");
    let node_name = unique_name("sk-test-node");
    let root = tempfile::tempdir().unwrap();
    Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({ "metadata": { "name": namespace } })).unwrap(),
        )
        .await
        .unwrap();

    let _cleanup = Cleanup {
        client: client.clone(),
        node: node_name.clone(),
        namespace: namespace.clone(),
    };
    let log_path = root.path().join("agent.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let agent = Agent {
        log: log_path,
        child: Command::new(env!("CARGO_BIN_EXE_streamkeeper-local-node"))
            .args(["--node-name", &node_name, "--root"])
            .arg(root.path())
            .args(["--image", "example.invalid/unused=/bin/false"])
            .args([
                "--taint",
                &format!("streamkeeper.dev/test-node={node_name}:NoSchedule"),
            ])
            .args(["--provision-namespace", &namespace])
            .stderr(log)
            .spawn()
            .unwrap(),
    };

    let statefulsets: Api<StatefulSet> = Api::namespaced(client.clone(), &namespace);
    let set = json!({
        "metadata": { "name": "web" },
        "spec": {
            "replicas": 2,
            "serviceName": "web",
            "selector": { "matchLabels": { "app": "web" } },
            "template": {
                "metadata": { "labels": { "app": "web" } },
                "spec": {
                    "terminationGracePeriodSeconds": 5,
                    "tolerations": [{ "key": "streamkeeper.dev/test-node", "operator": "Equal", "value": node_name, "effect": "NoSchedule" }],
                    "nodeSelector": { "kubernetes.io/hostname": node_name },
                    "containers": [{
                        "name": "server",
                        "image": "example.invalid/python",
                        "command": ["python3", "-c", SERVER, "$(POD_IP)"],
                        "env": [
                            { "name": "POD_IP", "valueFrom": { "fieldRef": { "fieldPath": "status.podIP" } } },
                            { "name": "POD_NAME", "valueFrom": { "fieldRef": { "fieldPath": "metadata.name" } } },
                            { "name": "DATA", "value": "/data" },
                        ],
                        "ports": [{ "name": "http", "containerPort": 8080 }],
                        "readinessProbe": { "httpGet": { "path": "/", "port": "http" }, "periodSeconds": 1 },
                        "volumeMounts": [{ "name": "data", "mountPath": "/data" }],
                    }],
                },
            },
            "volumeClaimTemplates": [{
                "metadata": { "name": "data" },
                "spec": { "accessModes": ["ReadWriteOnce"], "resources": { "requests": { "storage": "1Gi" } } },
            }],
        },
    });
    statefulsets
        .create(
            &PostParams::default(),
            &serde_json::from_value(set).unwrap(),
        )
        .await
        .unwrap();

    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    let running = wait_until("both pods Ready", Duration::from_secs(120), async || {
        let list = pods.list(&Default::default()).await.ok()?.items;
        (list.len() == 2 && list.iter().all(ready)).then_some(list)
    })
    .await;
    let addresses: Vec<String> = running
        .iter()
        .map(|p| p.status.as_ref().unwrap().pod_ip.clone().unwrap())
        .collect();
    assert_ne!(addresses[0], addresses[1], "each pod has its own address");
    assert!(
        addresses.iter().all(|a| a.starts_with("127.0.0.")),
        "{addresses:?}"
    );
    assert_eq!(starts(root.path(), &namespace, "data-web-0"), ["web-0"]);
    assert_eq!(starts(root.path(), &namespace, "data-web-1"), ["web-1"]);

    // kill -9 of web-0's process: restarted in place, same claim.
    let web0 = pods.get("web-0").await.unwrap();
    let pid = web0
        .status
        .as_ref()
        .unwrap()
        .container_statuses
        .as_ref()
        .unwrap()[0]
        .container_id
        .clone()
        .unwrap()
        .trim_start_matches("local://")
        .to_string();
    assert!(
        Command::new("kill")
            .args(["-KILL", &pid])
            .status()
            .unwrap()
            .success()
    );
    wait_until(
        "web-0 restarted and Ready",
        Duration::from_secs(60),
        async || {
            let pod = pods.get("web-0").await.ok()?;
            (restarts(&pod) == 1 && ready(&pod)).then_some(())
        },
    )
    .await;
    assert_eq!(
        starts(root.path(), &namespace, "data-web-0"),
        ["web-0", "web-0"]
    );

    // Deleting web-1: stopped, recreated by the StatefulSet controller, same claim directory.
    let old_uid = pods.get("web-1").await.unwrap().metadata.uid.unwrap();
    pods.delete("web-1", &DeleteParams::default())
        .await
        .unwrap();
    wait_until(
        "web-1 recreated and Ready",
        Duration::from_secs(120),
        async || {
            let pod = pods.get("web-1").await.ok()?;
            (pod.metadata.uid.as_deref() != Some(old_uid.as_str()) && ready(&pod)).then_some(())
        },
    )
    .await;
    assert_eq!(
        starts(root.path(), &namespace, "data-web-1"),
        ["web-1", "web-1"]
    );

    // SIGTERM stops the agent and every process it started.
    let live_pids: Vec<String> = pods
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter_map(|p| {
            p.status
                .as_ref()?
                .container_statuses
                .as_ref()?
                .first()?
                .container_id
                .clone()
        })
        .map(|id| id.trim_start_matches("local://").to_string())
        .collect();
    assert_eq!(live_pids.len(), 2, "{live_pids:?}");
    assert!(
        live_pids
            .iter()
            .all(|pid| Path::new(&format!("/proc/{pid}")).exists())
    );
    let mut agent = agent;
    assert!(
        Command::new("kill")
            .args(["-TERM", &agent.child.id().to_string()])
            .status()
            .unwrap()
            .success()
    );
    let status = agent.child.wait().unwrap();
    assert!(status.success(), "agent exit: {status}");
    for pid in &live_pids {
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "process {pid} outlived the agent"
        );
    }
    let _ = Api::<Namespace>::all(client.clone())
        .delete(&namespace, &DeleteParams::default())
        .await;
    let _ = Api::<Node>::all(client)
        .delete(&node_name, &DeleteParams::default())
        .await;
}
