//! A real `helm install` of the chart into the test control plane, its operator pods run by the
//! local node agent (`streamkeeper-local-node`, which maps the operator and worker images to the
//! binaries cargo built and gives each pod its ServiceAccount's token): the chart's operator
//! takes its Lease, runs a job whose workers count exactly once; `helm upgrade` rolls the
//! operator and the new one takes over; a worker pod force-deleted mid-stream has its tasks
//! moved to their standbys with the output still exact, as status and Events show; `helm
//! uninstall` removes the operator and leaves the job, its StatefulSet, volumes, changelog and
//! checkpoints alone.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

mod chart_support;
mod operator_support;

use chart_support::{CHART, helm, succeed, values_file};
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use operator_support::cards::*;
use operator_support::{support, *};
use std::path::Path;
use std::process::Command;
use std::time::Duration;
use streamkeeper::api::StatefulStreamJob;

const PARTITIONS: i32 = 2;
const CARDS: u32 = 20;
const WAIT: Duration = Duration::from_secs(180);
const TAINT_KEY: &str = "streamkeeper.dev/chart-test-node";

fn start_node(node: &str, namespace: &str, root: &Path) -> Process {
    let mut command = Command::new(sibling_binary("streamkeeper-local-node"));
    command
        .args(["--node-name", node, "--root"])
        .arg(root.join("node"))
        .arg("--image")
        .arg(format!(
            "streamkeeper/operator={}",
            env!("CARGO_BIN_EXE_streamkeeper-operator")
        ))
        .arg("--image")
        .arg(format!(
            "streamkeeper/worker={}",
            sibling_binary("streamkeeper-worker").display()
        ))
        .args(["--taint", &format!("{TAINT_KEY}={node}:NoSchedule")])
        .args(["--provision-namespace", namespace])
        // Apart from the addresses other tests' node agents hand out (10, 100).
        .args(["--first-pod-address", "180"])
        .env("RUST_LOG", "info");
    Process::spawn("node agent", &mut command, root.join("node.log"))
}

/// The chart's values for this test: the job namespace only, on this node, and the metrics
/// port on the pod's own loopback address (the replicas share this host).
fn values(namespace: &str, node: &str, reconciles: u32) -> String {
    format!(
        r#"
watchNamespace: {namespace}
maxConcurrentReconciles: {reconciles}
logging: {{level: info, format: text}}
metrics: {{host: "$(POD_IP)"}}
nodeSelector: {{kubernetes.io/hostname: {node}}}
tolerations: [{{key: {TAINT_KEY}, operator: Equal, value: {node}, effect: NoSchedule}}]
"#
    )
}

fn helm_in(namespace: &str, args: &[&str]) -> String {
    succeed(
        Command::new(helm())
            .args(args)
            .args(["--namespace", namespace]),
        None,
    )
}

/// Waits up to [`WAIT`] until `check` gives a value.
async fn wait_until<T>(what: &str, check: impl AsyncFnMut() -> Option<T>) -> T {
    operator_support::support::wait_until(what, WAIT, check).await
}

/// The Lease holder, once it is one of the Running pods of the operator Deployment.
async fn leader(client: &kube::Client, namespace: &str, lease: &str) -> Option<String> {
    let holder = Api::<Lease>::namespaced(client.clone(), namespace)
        .get_opt(lease)
        .await
        .unwrap()?
        .spec?
        .holder_identity?;
    let pods = Api::<Pod>::namespaced(client.clone(), namespace)
        .list(&ListParams::default().labels("app.kubernetes.io/name=streamkeeper-operator"))
        .await
        .unwrap();
    pods.items
        .iter()
        .any(|pod| {
            pod.metadata.name.as_deref() == Some(holder.as_str())
                && pod.metadata.deletion_timestamp.is_none()
        })
        .then_some(holder)
}

/// The notes of the job's `Promoted` and `HandedOff` Events (a task's active copy moved).
async fn move_events(client: &kube::Client, namespace: &str, job: &str) -> Vec<String> {
    let events = Api::<Event>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await
        .unwrap();
    events
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(job))
        .filter(|e| matches!(e.reason.as_deref(), Some("Promoted" | "HandedOff")))
        .filter_map(|e| e.note)
        .collect()
}

/// The tasks the job's stored assignment gives `pod` as their active owner.
async fn active_tasks_of(client: &kube::Client, namespace: &str, job: &str, pod: &str) -> Vec<u32> {
    use k8s_openapi::api::core::v1::ConfigMap;
    use streamkeeper_contract::{AssignmentDocument, Versioned};
    let map = Api::<ConfigMap>::namespaced(client.clone(), namespace)
        .get(&format!("{job}-assignment"))
        .await
        .unwrap();
    let text = map.data.unwrap().remove("assignment.json").unwrap();
    let document = AssignmentDocument::from_json(text.as_bytes()).unwrap();
    document.active_tasks_of(pod).collect()
}

/// Every task of the job runs (`readyTasks` is all of them).
fn ready(job: &StatefulStreamJob) -> bool {
    job.status.as_ref().and_then(|s| s.ready_tasks.as_deref())
        == Some(&format!("{PARTITIONS}/{PARTITIONS}"))
}

/// Every pod of the job's StatefulSet runs its update revision, and the job is Ready with a
/// warm standby for every task.
async fn rolled_out(client: &kube::Client, namespace: &str, job: &str) -> bool {
    let set = Api::<StatefulSet>::namespaced(client.clone(), namespace)
        .get(job)
        .await
        .unwrap();
    let replicas = set.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let Some(revision) = set.status.and_then(|s| s.update_revision) else {
        return false;
    };
    let pods = Api::<Pod>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    let workers: Vec<_> = pods
        .iter()
        .filter(|p| {
            p.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with(&format!("{job}-")))
        })
        .collect();
    let updated = i32::try_from(workers.len()) == Ok(replicas)
        && workers.iter().all(|p| {
            p.metadata.deletion_timestamp.is_none()
                && p.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get("controller-revision-hash"))
                    == Some(&revision)
        });
    let job = Api::<StatefulStreamJob>::namespaced(client.clone(), namespace)
        .get(job)
        .await
        .unwrap();
    let standbys_ready = job.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == "StandbysReady" && c.status == "True")
    });
    updated && ready(&job) && standbys_ready
}

#[tokio::test(flavor = "multi_thread")]
async fn helm_installs_a_working_operator_upgrades_it_and_uninstalls_it_leaving_jobs_alone() {
    let client = client().await;
    let ns = namespace(&client, "chart-install").await;
    let node = support::unique_name("sk-chart-node");
    let mut dir = tempfile::tempdir().unwrap();
    // SK_KEEP_LOGS keeps the node agent's and the pods' logs.
    if std::env::var_os("SK_KEEP_LOGS").is_some() {
        dir.disable_cleanup(true);
        eprintln!("logs kept in {}", dir.path().display());
    }
    let _agent = start_node(&node, &ns, dir.path());
    let release = "streamkeeper";
    let lease = release; // the release's full name: "streamkeeper" already names the chart

    let first = values_file(&values(&ns, &node, 16));
    helm_in(
        &ns,
        &[
            "install",
            release,
            CHART,
            "--wait",
            "--timeout",
            "180s",
            "--values",
            first.path().to_str().unwrap(),
        ],
    );
    let first_leader = wait_until("a chart operator pod holding the Lease", async || {
        leader(&client, &ns, lease).await
    })
    .await;

    let input = support::unique_name("chart-install-in");
    let output = format!("{input}-out");
    create_topic(&input, PARTITIONS, &[]).await;
    create_topic(&output, PARTITIONS, &[]).await;
    let prefix = support::unique_name("chart-install");
    let name = "cards";
    let mut job = serde_json::to_value(operator_support::job(name, &input, &prefix)).unwrap();
    job["spec"]["checkpoint"]["interval"] = "5s".into();
    job["spec"]["standbyReplicas"] = 1.into();
    job["spec"]["pod"] = serde_json::json!({
        "nodeSelector": {"kubernetes.io/hostname": node},
        "tolerations": [{"key": TAINT_KEY, "operator": "Equal", "value": node, "effect": "NoSchedule"}],
    });
    let job: StatefulStreamJob = serde_json::from_value(job).unwrap();
    let jobs: Api<StatefulStreamJob> = Api::namespaced(client.clone(), &ns);
    produce_cards(&input, CARDS, 0..300);
    jobs.create(&PostParams::default(), &job).await.unwrap();
    wait_until(
        "the chart's operator running the job's workers",
        async || ready(&jobs.get(name).await.unwrap()).then_some(()),
    )
    .await;
    wait_until("exact output of 300 events", async || {
        exact_output(&output, PARTITIONS, 300)
    })
    .await;

    // An upgrade rolls the Deployment; a new pod takes the Lease and reconciles a spec change.
    let old_pods: Vec<String> = Api::<Pod>::namespaced(client.clone(), &ns)
        .list(&ListParams::default().labels("app.kubernetes.io/name=streamkeeper-operator"))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|pod| pod.metadata.name)
        .collect();
    assert!(
        old_pods.contains(&first_leader),
        "{first_leader} is not among {old_pods:?}"
    );
    let second = values_file(&values(&ns, &node, 4));
    helm_in(
        &ns,
        &[
            "upgrade",
            release,
            CHART,
            "--wait",
            "--timeout",
            "180s",
            "--values",
            second.path().to_str().unwrap(),
        ],
    );
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let args = deployments
        .get(release)
        .await
        .unwrap()
        .spec
        .unwrap()
        .template
        .spec
        .unwrap()
        .containers[0]
        .args
        .clone()
        .unwrap();
    assert!(
        args.contains(&"--max-concurrent-reconciles=4".to_string()),
        "{args:?}"
    );
    let new_leader = wait_until("a new operator pod leading", async || {
        leader(&client, &ns, lease)
            .await
            .filter(|holder| !old_pods.contains(holder))
    })
    .await;
    jobs.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"spec": {"checkpoint": {"interval": "6s"}}})),
    )
    .await
    .unwrap();
    wait_until(
        &format!("{new_leader} reconciling generation 2"),
        async || {
            let job = jobs.get(name).await.unwrap();
            (job.status.and_then(|s| s.observed_generation) == Some(2)).then_some(())
        },
    )
    .await;

    // The spec change rolls the workers one pod at a time; the kill comes once that is over
    // (a kill during the roll may find the pod's tasks already handed off, so nothing moves).
    wait_until(
        "the workers rolled out, every task with a warm standby",
        async || rolled_out(&client, &ns, name).await.then_some(()),
    )
    .await;

    // The scenario of tests/e2e/kind.sh: a worker pod force-deleted mid-stream; its tasks move
    // to their standbys, the output stays exact, and status and Events show the move.
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let victim = format!("{name}-0");
    let victim_uid = pods.get(&victim).await.unwrap().metadata.uid;
    let moved = wait_until(&format!("{victim} owning a task"), async || {
        let tasks = active_tasks_of(&client, &ns, name, &victim).await;
        (!tasks.is_empty()).then_some(tasks)
    })
    .await;
    let producing = {
        let input = input.clone();
        std::thread::spawn(move || produce_cards(&input, CARDS, 300..400))
    };
    let force = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    pods.delete(&victim, &force).await.unwrap();
    producing.join().unwrap();
    wait_until(&format!("{victim} recreated"), async || {
        let pod = pods.get_opt(&victim).await.unwrap()?;
        (pod.metadata.uid != victim_uid).then_some(())
    })
    .await;
    wait_until("exact output of 400 events", async || {
        exact_output(&output, PARTITIONS, 400)
    })
    .await;
    // Ready again, and the status names each move off the deleted pod, timed to the new
    // owner's first commit.
    let moves = wait_until("the job Ready again, the moves in its status", async || {
        let job = jobs.get(name).await.unwrap();
        let tasks = job.status.as_ref().filter(|_| ready(&job))?.tasks.clone();
        moved
            .iter()
            .map(|task| {
                let status = tasks.get(*task as usize)?;
                [&status.last_promotion, &status.last_handoff]
                    .into_iter()
                    .flatten()
                    .find(|m| m.from == victim && m.first_commit_seconds.is_some())
                    .cloned()
            })
            .collect::<Option<Vec<_>>>()
    })
    .await;
    for (task, last) in moved.iter().zip(&moves) {
        eprintln!(
            "task {task}: {} from {} to {}, first commit {:?} s after the decision",
            last.reason, last.from, last.to, last.first_commit_seconds
        );
    }
    let notes = move_events(&client, &ns, name).await;
    for task in &moved {
        let named = notes
            .iter()
            .any(|note| note.starts_with(&format!("task {task}:")) && note.contains(&victim));
        assert!(
            named,
            "an Event names the move of task {task} off {victim}: {notes:?}"
        );
    }
    let checkpoints = wait_until("a checkpoint in S3", async || {
        let listed = s3_client()
            .list_objects_v2()
            .bucket(support::s3_settings().bucket)
            .prefix(format!("{prefix}/{ns}/{name}/"))
            .send()
            .await
            .unwrap();
        let keys: Vec<String> = listed
            .contents()
            .iter()
            .filter_map(|o| o.key().map(String::from))
            .collect();
        keys.iter()
            .any(|key| key.contains("/checkpoints/"))
            .then_some(keys)
    })
    .await;

    // Uninstall: the operator goes; the CRD, the job and everything that holds its state stay.
    helm_in(&ns, &["uninstall", release, "--wait", "--timeout", "120s"]);
    wait_until("the operator pods gone", async || {
        let pods = Api::<Pod>::namespaced(client.clone(), &ns)
            .list(&ListParams::default().labels("app.kubernetes.io/name=streamkeeper-operator"))
            .await
            .unwrap();
        pods.items.is_empty().then_some(())
    })
    .await;
    assert!(
        jobs.get_opt(name).await.unwrap().is_some(),
        "the job survives uninstall"
    );
    assert!(
        Api::<StatefulSet>::namespaced(client.clone(), &ns)
            .get_opt(name)
            .await
            .unwrap()
            .is_some()
    );
    let claims = Api::<PersistentVolumeClaim>::namespaced(client.clone(), &ns)
        .list(&ListParams::default())
        .await
        .unwrap();
    assert_eq!(
        claims.items.len(),
        2,
        "the state volumes of the job's 2 worker pods stay"
    );
    let changelog = format!("{ns}.{name}.changelog");
    assert!(
        describe_topic(&changelog).await.is_some(),
        "the changelog stays"
    );
    let listed = s3_client()
        .list_objects_v2()
        .bucket(support::s3_settings().bucket)
        .prefix(format!("{prefix}/{ns}/{name}/"))
        .send()
        .await
        .unwrap();
    assert!(
        listed.contents().len() >= checkpoints.len(),
        "the checkpoints stay"
    );
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(client.clone());
    assert!(
        crds.get_opt("statefulstreamjobs.streamkeeper.dev")
            .await
            .unwrap()
            .is_some(),
        "the CRD stays"
    );

    // No operator is left to remove the finalizer: take it off so the namespace can go.
    jobs.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    delete_namespace(&client, &ns).await;
}
