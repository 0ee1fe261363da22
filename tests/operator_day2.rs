//! Failover under day-2 operations, through the whole system (the operator binary, the local
//! node agent running the worker pods, the real apiserver, Kafka and S3).
//!
//! A rotated worker token: the token Secret is deleted and written again while input flows.
//! The kubelet delivers the new token to each pod's mounted file on its own schedule; here the
//! test does the kubelet's part, pod by pod, so the window in which the pods hold different
//! tokens is certain rather than a matter of timing (the node agent's own refresh is switched
//! off). In that window and after it, a killed owner's task moves to its standby within the
//! bound and the output stays exact. A pod that holds a token the Secret never had refuses the
//! assignment, and the operator says so: a Warning Event and its refusal counter.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

mod operator_support;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use operator_support::failover::*;
use std::path::PathBuf;
use std::time::Duration;
use streamkeeper::api::StatefulStreamJob;
use streamkeeper_contract::WorkerToken;
use streamkeeper_contract::worker_http::TOKEN_BYTES;

/// The failover bound of the standby issue: p99 ≤ 5 s.
const FAILOVER_BOUND: Duration = Duration::from_secs(5);

/// The token the job's Secret holds now.
async fn secret_token(system: &System) -> Option<String> {
    let secrets: Api<Secret> = Api::namespaced(system.client.clone(), &system.namespace);
    let secret = secrets
        .get_opt(&format!("{}-worker-token", system.name))
        .await
        .unwrap()?;
    let bytes = secret.data?.remove("token")?.0;
    Some(String::from_utf8(bytes).unwrap())
}

/// The file `pod`'s worker reads its token from: the Secret's volume, as the node agent
/// projected it into the pod's directory.
async fn token_file(system: &System, pod: &str) -> PathBuf {
    let uid = system
        .pods()
        .await
        .into_iter()
        .find(|p| p.metadata.name.as_deref() == Some(pod))
        .and_then(|p| p.metadata.uid)
        .unwrap();
    system
        .dir
        .path()
        .join("node/pods")
        .join(format!("{}_{pod}_{uid}", system.namespace))
        .join("volumes/worker-token/token")
}

/// Writes `token` into `pod`'s token file, as the kubelet does after a rotation.
async fn deliver_token(system: &System, pod: &str, token: &str) {
    let file = token_file(system, pod).await;
    assert!(file.exists(), "{} holds the pod's token", file.display());
    let temporary = file.with_extension("new");
    std::fs::write(&temporary, token).unwrap();
    std::fs::rename(&temporary, &file).unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rotated_worker_token_still_moves_a_killed_owners_tasks() {
    // No refresh of projected volumes by the node agent: the test delivers the token itself.
    let system = System::start_with_node_args(
        "op-rotate",
        150,
        &[None],
        (2, 1),
        2_000,
        serde_json::json!({}),
        &["--volume-refresh-seconds", "86400"],
    )
    .await;
    let before = system.settled(1).await;
    let old = secret_token(&system).await.unwrap();

    // Rotate as the docs say: delete the Secret. A change to the job's annotations asks for a
    // reconcile now instead of at the next resync (up to 75 s).
    let secrets: Api<Secret> = Api::namespaced(system.client.clone(), &system.namespace);
    secrets
        .delete(
            &format!("{}-worker-token", system.name),
            &DeleteParams::default(),
        )
        .await
        .unwrap();
    let jobs: Api<StatefulStreamJob> = Api::namespaced(system.client.clone(), &system.namespace);
    let touch = serde_json::json!({ "metadata": { "annotations": { "test/rotated": "1" } } });
    jobs.patch(system.name, &PatchParams::default(), &Patch::Merge(&touch))
        .await
        .unwrap();
    let new = wait_until("the operator writes a new token", async || {
        secret_token(&system).await.filter(|token| *token != old)
    })
    .await;

    // The window: the pod that will survive holds the new token, the owner of task 0 the old.
    let victim = before.tasks[0].active.clone().unwrap();
    let survivor = before.tasks[0].standbys[0].clone();
    deliver_token(&system, &survivor, &new).await;
    let producing = produce_in_background(&system.input, 2_000, 600);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (killed, new_owner, failover) = system.fail_owner_of(0, "KILL").await;
    eprintln!(
        "in the rotation window, kill -9 of {killed}: task 0 committed on {new_owner} {:.3} s later",
        failover.as_secs_f64()
    );
    assert_eq!(
        (killed.as_str(), new_owner.as_str()),
        (victim.as_str(), survivor.as_str())
    );
    assert!(
        failover <= FAILOVER_BOUND,
        "failover took {failover:?} (bound {FAILOVER_BOUND:?})"
    );

    // After the window: every pod holds the new token, and a second owner's tasks move too.
    deliver_token(&system, &victim, &new).await;
    system.settled(1).await;
    let (killed, new_owner, failover) = system.fail_owner_of(0, "KILL").await;
    eprintln!(
        "after the rotation, kill -9 of {killed}: task 0 committed on {new_owner} {:.3} s later",
        failover.as_secs_f64()
    );
    assert!(failover <= FAILOVER_BOUND, "{failover:?}");
    let events = producing.stop();
    system
        .recovered_exactly(&[victim.clone(), killed], events)
        .await;

    // A pod whose file holds a token the Secret never had refuses the document: the operator
    // reports it instead of retrying in silence.
    let stranger = WorkerToken::from_random_bytes(&[0x5a; TOKEN_BYTES]);
    deliver_token(&system, &victim, stranger.as_str()).await;
    let note = wait_until("a Warning Event names the refusing pod", async || {
        system
            .event_notes("AssignmentRefused")
            .await
            .into_iter()
            .find(|note| note.contains(&victim))
    })
    .await;
    eprintln!("AssignmentRefused: {note}");
    assert!(note.contains("worker token"), "{note}");
    let refused = wait_until("the refusal counter counts it", async || {
        let metrics = system.operator_metrics().await?;
        metrics
            .lines()
            .find(|l| {
                l.starts_with(
                    "streamkeeper_operator_assignment_refusals_total{reason=\"Unauthorized\"}",
                )
            })
            .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .filter(|n| *n > 0.0)
    })
    .await;
    eprintln!("assignment refusals (Unauthorized): {refused}");
    system.clean_up().await;
}

/// A loopback firewall rule that drops what reaches `address:port`, removed on drop: the
/// operator (and anyone else) is cut off from one pod's worker port, while the pod still reaches
/// Kafka and S3.
struct Cut {
    rule: Vec<String>,
}

impl Cut {
    fn off(address: &str, port: u16) -> Self {
        let rule: Vec<String> = [
            "INPUT",
            "-p",
            "tcp",
            "-d",
            address,
            "--dport",
            &port.to_string(),
            "-j",
            "DROP",
        ]
        .map(str::to_string)
        .to_vec();
        let inserted = std::process::Command::new("iptables")
            .arg("-I")
            .args(&rule)
            .status()
            .unwrap_or_else(|e| panic!("iptables runs (this test needs it, and root; tests/services/node.sh install installs it): {e}"));
        assert!(inserted.success(), "iptables -I {rule:?}");
        Self { rule }
    }
}

impl Drop for Cut {
    fn drop(&mut self) {
        let _ = std::process::Command::new("iptables")
            .arg("-D")
            .args(&self.rule)
            .status();
    }
}

/// The producer epoch of `transactional_id`, as the transaction coordinator describes it
/// (Kafka's own `TransactionsCommand`, DescribeTransactions).
fn producer_epoch(transactional_id: &str) -> i64 {
    let bootstrap = std::env::var("SK_KAFKA_BOOTSTRAP").expect("SK_KAFKA_BOOTSTRAP");
    let out = std::process::Command::new("tests/services/kafka.sh")
        .args(["tool", "org.apache.kafka.tools.TransactionsCommand"])
        .args(["--bootstrap-server", &bootstrap, "describe"])
        .args(["--transactional-id", transactional_id])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let header: Vec<&str> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    let column = header
        .iter()
        .position(|h| *h == "ProducerEpoch")
        .unwrap_or_else(|| {
            panic!(
                "no ProducerEpoch column for {transactional_id}: {text} {}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    let row: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    row[column].parse().unwrap()
}

/// How often task `task` entered the Fenced phase on the worker at `ip` since it started there
/// (`streamkeeper_task_phase_transitions_total`); `None` while the worker does not answer.
async fn fenced_count(ip: &str, task: u32) -> Option<f64> {
    let answer = operator_support::metrics_text(&format!("{ip}:8080")).await?;
    let series =
        format!("streamkeeper_task_phase_transitions_total{{task=\"{task}\",phase=\"Fenced\"}}");
    answer
        .lines()
        .find(|line| line.starts_with(&series))
        .and_then(|line| line.rsplit(' ').next()?.parse().ok())
}

#[tokio::test(flavor = "multi_thread")]
async fn an_owner_cut_off_from_the_operator_is_fenced_once_and_stays_fenced() {
    let system = System::start("op-cutoff", 170, 2, 0, 2_000).await;
    system.settled(0).await;
    // A later generation that keeps every owner (the standbys are added): the owners' roles
    // started under an older generation than the one in force.
    let jobs: Api<StatefulStreamJob> = Api::namespaced(system.client.clone(), &system.namespace);
    let standbys = serde_json::json!({ "spec": { "standbyReplicas": 1 } });
    jobs.patch(
        system.name,
        &PatchParams::default(),
        &Patch::Merge(&standbys),
    )
    .await
    .unwrap();
    let before = system.settled(1).await;
    let victim = before.tasks[0].active.clone().unwrap();
    let moved: Vec<u32> = before.active_tasks_of(&victim).collect();
    let address = system.pod_ip(&victim).await.unwrap();

    let ids: Vec<String> = moved
        .iter()
        .map(|task| format!("{}.{}.task-{task}", system.namespace, system.name))
        .collect();
    // The standby that takes the tasks over, and how often it was fenced before (a handoff while
    // the job settled may have fenced it already): the cut must add none.
    let standby = before.tasks[moved[0] as usize].standbys[0].clone();
    let standby_ip = system.pod_ip(&standby).await.unwrap();
    let mut fenced_before = Vec::new();
    for &task in &moved {
        fenced_before.push(fenced_count(&standby_ip, task).await.unwrap());
    }
    let producing = produce_in_background(&system.input, 2_000, 300);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let cut = Cut::off(&address, 8080);
    let promoted = wait_until("the cut-off pod's tasks commit on new owners", async || {
        let document = system.document().await?;
        let reports = system.reports().await;
        moved
            .iter()
            .all(|&task| {
                let owner = document.tasks[task as usize].active.as_deref();
                owner.is_some_and(|o| {
                    o != victim
                        && reports.get(o).is_some_and(|list| {
                            list.iter()
                                .any(|r| r.task == task && r.committed_transactions > 0)
                        })
                })
            })
            .then_some(document)
    })
    .await;
    eprintln!("cut off {victim} ({address}:8080); its tasks {moved:?} moved: {promoted:?}");

    // The old owner, still running and still reaching Kafka, is fenced at its next write and
    // stays fenced: it never claims its tasks back, so their new owner is never fenced (a fence
    // recorded under an older generation than the one in force let it claim back once, fencing
    // the new owner), and their epochs stop rising.
    let new_owner = promoted.tasks[moved[0] as usize].active.clone().unwrap();
    assert_eq!(new_owner, standby, "the standby took the tasks over");
    let first: Vec<i64> = ids.iter().map(|id| producer_epoch(id)).collect();
    let window = std::time::Instant::now();
    let mut last = first.clone();
    while window.elapsed() < Duration::from_secs(10) {
        for (&task, &before) in moved.iter().zip(&fenced_before) {
            let fenced = fenced_count(&standby_ip, task).await;
            assert_eq!(
                fenced,
                Some(before),
                "task {task}'s new owner {new_owner} was fenced {:.1} s after the promotion: the old owner claimed it back",
                window.elapsed().as_secs_f64()
            );
        }
        last = ids.iter().map(|id| producer_epoch(id)).collect();
    }
    assert_eq!(
        first, last,
        "the epochs of {ids:?} rose after the promotion"
    );
    eprintln!(
        "epochs of {ids:?}: {first:?} after the promotion, unchanged for 10 s; their new owner {new_owner} not fenced since the cut"
    );
    drop(cut);

    let events = producing.stop();
    system
        .recovered_exactly(std::slice::from_ref(&victim), events)
        .await;
    let notes = system.event_notes("Promoted").await;
    for task in &moved {
        let promotions = notes
            .iter()
            .filter(|n| n.starts_with(&format!("task {task}:")))
            .count();
        assert_eq!(promotions, 1, "task {task} was promoted once: {notes:?}");
    }
    system.clean_up().await;
}
