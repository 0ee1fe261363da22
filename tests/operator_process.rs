//! The operator binary itself against the real apiserver, Kafka and S3: two processes elect one
//! leader through a Lease, the leader reconciles through its Controller and serves metrics,
//! killing it hands leadership to the other, and SIGTERM releases the Lease. And what a settled
//! job costs the apiserver: its reconciles read and write nothing there, counted by the
//! operator itself.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

mod operator_support;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use operator_support::process::{Operator, holder};
use operator_support::support::wait_until;
use operator_support::{support, *};
use std::process::Command;
use std::time::Duration;
use streamkeeper::api::StatefulStreamJob;
use streamkeeper::k8s::names;

#[tokio::test]
async fn two_operators_elect_one_leader_and_the_other_takes_over() {
    let client = client().await;
    let namespace = namespace(&client, "op-leader").await;
    let input = support::unique_name("op-leader-in");
    create_topic(&input, 2, &[]).await;
    let jobs: Api<StatefulStreamJob> = Api::namespaced(client.clone(), &namespace);
    let name = "counts";
    jobs.create(
        &PostParams::default(),
        &job(name, &input, &support::unique_name("op-leader")),
    )
    .await
    .unwrap();
    let leases: Api<Lease> = Api::namespaced(client.clone(), &namespace);
    let dir = tempfile::tempdir().unwrap();
    let mut operators = vec![
        Operator::start(&namespace, "operator-a", dir.path()),
        Operator::start(&namespace, "operator-b", dir.path()),
    ];

    // Exactly one leads, and stays the leader while it renews.
    let first = wait_until("a leader", TIMEOUT, async || holder(&leases).await).await;
    // It stays the leader across renewals: wait for two, the holder unchanged.
    let renewed_at = async || {
        let lease = leases.get("streamkeeper-operator").await.ok()?;
        let spec = lease.spec?;
        Some((spec.holder_identity?, spec.renew_time?.0))
    };
    let (_, start) = renewed_at().await.unwrap();
    let mut renewals = 0;
    let mut last = start;
    wait_until("two renewals by the same leader", TIMEOUT, async || {
        let (holder, at) = renewed_at().await?;
        assert_eq!(holder, first, "the leader changed while renewing");
        if at != last {
            renewals += 1;
            last = at;
        }
        (renewals >= 2).then_some(())
    })
    .await;
    assert_eq!(holder(&leases).await.as_deref(), Some(first.as_str()));
    let leading: Vec<&str> = operators
        .iter()
        .filter(|o| o.leads())
        .map(|o| o.identity.as_str())
        .collect();
    assert_eq!(leading, [first.as_str()], "exactly one process leads");

    // The leader reconciles through its Controller: status and objects appear.
    wait_until("the leader's first status", TIMEOUT, async || {
        let job = jobs.get(name).await.unwrap();
        job.status
            .and_then(|s| s.observed_generation)
            .filter(|g| Some(*g) == job.metadata.generation)
    })
    .await;
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), &namespace);
    sets.get(name)
        .await
        .expect("the leader applied the StatefulSet");

    // It serves its metrics, counting the reconciles it ran.
    let leader_index = operators.iter().position(|o| o.identity == first).unwrap();
    let address = operators[leader_index]
        .metrics_address()
        .expect("metrics address logged");
    let metrics = metrics_text(&address).await.unwrap();
    assert!(
        metrics.contains("streamkeeper_operator_leader 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("streamkeeper_operator_reconciles_total{outcome=\"success\"}"),
        "{metrics}"
    );
    assert!(
        metrics.contains("streamkeeper_operator_reconcile_duration_seconds_bucket"),
        "{metrics}"
    );

    // kill -9 the leader: the other takes over once the Lease has gone stale.
    let killed = operators.remove(leader_index);
    drop(killed);
    let second = wait_until("a new leader", Duration::from_secs(30), async || {
        holder(&leases).await.filter(|h| *h != first)
    })
    .await;
    assert_eq!(second, operators[0].identity);
    wait_until(
        "the new leader's log",
        Duration::from_secs(10),
        async || operators[0].leads().then_some(()),
    )
    .await;

    // The new leader reconciles changes.
    jobs.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"spec": {"replicas": 3}})),
    )
    .await
    .unwrap();
    wait_until(
        "replicas 3 applied by the new leader",
        TIMEOUT,
        async || {
            let set = sets.get(name).await.unwrap();
            (set.spec.and_then(|s| s.replicas) == Some(3)).then_some(())
        },
    )
    .await;

    // SIGTERM: reconciles finish, the Lease is released, the process exits cleanly.
    let pid = operators[0].child.id().to_string();
    let signalled = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(signalled.success());
    let status = wait_until("the process to exit", TIMEOUT, async || {
        operators[0].child.try_wait().unwrap()
    })
    .await;
    assert!(
        status.success(),
        "exit after SIGTERM: {status:?}\n{}",
        operators[0].log()
    );
    assert_eq!(holder(&leases).await, None, "the Lease was released");
    assert!(operators[0].log().contains("released the leader Lease"));

    delete_namespace(&client, &namespace).await;
}

/// The sum of the operator's counter samples whose line starts with `series` (a name and the
/// start of its labels).
fn counted(metrics: &str, series: &str) -> f64 {
    metrics
        .lines()
        .filter(|line| line.starts_with(series))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The successful reconciles the operator counted.
fn reconciles(metrics: &str) -> f64 {
    counted(
        metrics,
        "streamkeeper_operator_reconciles_total{outcome=\"success\"}",
    )
}

/// The reconciles that found the job's ConfigMap as desired and applied nothing.
fn unchanged_config_maps(metrics: &str) -> f64 {
    counted(
        metrics,
        "streamkeeper_operator_object_applies_total{kind=\"ConfigMap\",outcome=\"unchanged\"}",
    )
}

/// What the operator has sent to the apiserver for a job's reconciles, and how many ran.
#[derive(Debug, PartialEq)]
struct Sent {
    applies: f64,
    secret_reads: f64,
    job_reads: f64,
    status_patches: f64,
}

fn sent(metrics: &str) -> Sent {
    let requests = "streamkeeper_operator_apiserver_requests_total";
    Sent {
        applies: [
            "statefulsets",
            "configmaps",
            "services",
            "poddisruptionbudgets",
        ]
        .iter()
        .map(|resource| {
            counted(
                metrics,
                &format!("{requests}{{verb=\"apply\",resource=\"{resource}\"}}"),
            )
        })
        .sum(),
        secret_reads: counted(
            metrics,
            &format!("{requests}{{verb=\"get\",resource=\"secrets\"}}"),
        ),
        job_reads: counted(
            metrics,
            &format!("{requests}{{verb=\"get\",resource=\"statefulstreamjobs\"}}"),
        ),
        status_patches: counted(
            metrics,
            &format!("{requests}{{verb=\"patch\",resource=\"statefulstreamjobs/status\"}}"),
        ),
    }
}

#[tokio::test]
async fn a_settled_jobs_reconciles_read_nothing_and_apply_nothing() {
    let client = client().await;
    let namespace = namespace(&client, "op-quiet").await;
    let input = support::unique_name("op-quiet-in");
    create_topic(&input, 2, &[]).await;
    let jobs: Api<StatefulStreamJob> = Api::namespaced(client.clone(), &namespace);
    let name = "counts";
    let prefix = support::unique_name("op-quiet");
    // A checkpoint written at a time with milliseconds, as workers write them: the status shows
    // it in whole seconds, which must not count as a change at every reconcile.
    let mut created_at_ms = checkpoints::now_ms();
    if created_at_ms.is_multiple_of(1000) {
        created_at_ms += 1;
    }
    let written = checkpoints::manifest(0, 1, 0, created_at_ms, 0);
    checkpoints::put_manifest(&prefix, &namespace, name, &written).await;
    jobs.create(&PostParams::default(), &job(name, &input, &prefix))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let operator = Operator::start(&namespace, "operator-quiet", dir.path());
    let address = wait_until("the metrics address", TIMEOUT, async || {
        operator.metrics_address()
    })
    .await;
    let metrics = async || metrics_text(&address).await.unwrap_or_default();
    // Settled: a reconcile found the StatefulSet as it would apply it. The pods stay Pending
    // (no node), so the job is looked at again every few seconds.
    let settled = wait_until("a reconcile that applies nothing", TIMEOUT, async || {
        let now = metrics().await;
        (unchanged_config_maps(&now) >= 1.0).then_some(now)
    })
    .await;
    let before = sent(&settled);
    assert!(
        before.applies >= 4.0,
        "the first reconcile applied: {before:?}"
    );
    // The job's two Secrets (its worker token and its S3 keys) were read once each, by its
    // first reconcile: its failover loop found the token kept.
    assert_eq!(before.secret_reads, 2.0, "{before:?}");
    let later = wait_until(
        "three more reconciles",
        Duration::from_secs(60),
        async || {
            let now = metrics().await;
            (reconciles(&now) >= reconciles(&settled) + 3.0).then_some(now)
        },
    )
    .await;
    assert_eq!(
        sent(&later),
        before,
        "a settled job's reconciles apply nothing, read no Secret and no job, and write no status"
    );

    // Someone else's edit of a field the operator sets is put back (its watch triggers the
    // reconcile), so the comparison with the cache does not hide a change.
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &namespace);
    let config_name = names::worker_config_map(name);
    let config = maps.get(&config_name).await.expect("the job's ConfigMap");
    let (key, value) = config.data.clone().unwrap().into_iter().next().unwrap();
    maps.patch(
        &config_name,
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"data": {&key: "edited: by hand"}})),
    )
    .await
    .unwrap();
    wait_until("the ConfigMap put back", TIMEOUT, async || {
        let data = maps.get(&config_name).await.ok()?.data?;
        (data.get(&key) == Some(&value)).then_some(())
    })
    .await;
    let after_edit = sent(&metrics().await);
    assert!(after_edit.applies > before.applies, "{after_edit:?}");

    drop(operator);
    delete_namespace(&client, &namespace).await;
}

#[tokio::test]
async fn a_new_job_does_not_make_the_other_jobs_of_its_namespace_read_their_secrets_again() {
    let client = client().await;
    let namespace = namespace(&client, "op-neighbours").await;
    let jobs: Api<StatefulStreamJob> = Api::namespaced(client.clone(), &namespace);
    let create = async |name: &str| {
        let input = support::unique_name(&format!("op-{name}-in"));
        create_topic(&input, 2, &[]).await;
        let spec = job(name, &input, &support::unique_name(&format!("op-{name}")));
        jobs.create(&PostParams::default(), &spec).await.unwrap();
    };
    create("first").await;
    let dir = tempfile::tempdir().unwrap();
    let operator = Operator::start(&namespace, "operator-neighbours", dir.path());
    let address = wait_until("the metrics address", TIMEOUT, async || {
        operator.metrics_address()
    })
    .await;
    let metrics = async || metrics_text(&address).await.unwrap_or_default();
    let settled = wait_until("the first job settled", TIMEOUT, async || {
        let now = metrics().await;
        (unchanged_config_maps(&now) >= 1.0).then_some(now)
    })
    .await;
    // The first job's worker token and the namespace's S3 keys.
    let before = sent(&settled).secret_reads;
    assert_eq!(before, 2.0);

    // The second job shares the S3 keys (kept) and reads only whether its token exists.
    create("second").await;
    let later = wait_until(
        "both jobs reconciled three more times",
        Duration::from_secs(60),
        async || {
            let now = metrics().await;
            (reconciles(&now) >= reconciles(&settled) + 6.0).then_some(now)
        },
    )
    .await;
    assert_eq!(
        sent(&later).secret_reads,
        before + 1.0,
        "a new job in the namespace is no touch of the others: nothing they kept is read again"
    );

    drop(operator);
    delete_namespace(&client, &namespace).await;
}
