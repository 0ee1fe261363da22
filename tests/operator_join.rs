//! A join through the whole system (operator binary, local node agent, worker processes, real
//! Kafka, S3 and apiserver): the owner of a join's task killed with kill -9 is replaced by its
//! standby within the failover bound and every event is still joined exactly once; the job's
//! status states the co-partitioning evidence (`CoPartitioned`), naming a table placed by
//! another partitioner than the events with an example key; a topic given partitions while
//! the join runs degrades the job as `PartitionsChanged`; and a re-keyed input given partitions
//! while the join runs is read whole, every event still joined once.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

mod operator_support;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::Api;
use operator_support::cards::{card_table_join, exact_join_output, produce_cards, table_read};
use operator_support::failover::*;
use rdkafka::admin::{AdminOptions, NewPartitions};
use std::time::Duration;
use streamkeeper::api::{JobPhase, StatefulStreamJob};
use streamkeeper_contract::co_partitioning::Partitioner;

/// The failover bound of the standby issue, as for a count (`operator_failover.rs`).
const FAILOVER_BOUND: Duration = Duration::from_secs(5);

/// The job's condition of `type_` once `accept` holds for it, with the phase the same status
/// write gave the job.
async fn condition_where(
    system: &System,
    type_: &str,
    accept: impl Fn(&Condition) -> bool,
) -> (Condition, Option<JobPhase>) {
    let jobs: Api<StatefulStreamJob> = Api::namespaced(system.client.clone(), &system.namespace);
    wait_until(&format!("the job's {type_} condition"), async || {
        let status = jobs.get(system.name).await.ok()?.status?;
        let found = status.conditions.into_iter().find(|c| c.type_ == type_)?;
        accept(&found).then_some((found, status.phase))
    })
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_joins_killed_owner_is_replaced_by_its_standby_and_every_event_is_joined_once() {
    let (table, processor) = card_table_join(CARDS, Partitioner::Crc32).await;
    let spec = serde_json::json!({ "processor": processor });
    let system = System::start_with("op-join", 90, &[None], (3, 1), 0, spec).await;
    table_read(&system, &table, CARDS).await;
    produce_cards(&system.input, CARDS, 0..2_000);
    let before = system.settled(1).await;

    let producing = produce_in_background(&system.input, 2_000, 30);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (victim, new_owner, failover) = system.fail_owner_of(0, "KILL").await;
    eprintln!(
        "kill -9 of {victim}: join task 0 committed on {new_owner} {:.3} s later",
        failover.as_secs_f64()
    );
    assert_eq!(
        Some(&new_owner),
        before.tasks[0].standbys.first(),
        "the standby took over"
    );
    assert!(
        failover <= FAILOVER_BOUND,
        "failover took {failover:?} (bound {FAILOVER_BOUND:?})"
    );
    producing.finish();
    wait_until("every event joined exactly once", async || {
        exact_join_output(&system.output, PARTITIONS, 5_000)
    })
    .await;
    let (placed, _) = condition_where(&system, "CoPartitioned", |c| c.status == "True").await;
    assert_eq!(placed.reason, "KeysPlaced");
    assert!(placed.message.contains(&table), "{}", placed.message);

    // The table gets partitions: its keys are placed by another count now.
    let admin = operator_support::admin();
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    let added = admin
        .create_partitions(
            &[NewPartitions::new(&table, PARTITIONS as usize + 2)],
            &options,
        )
        .await
        .unwrap();
    assert!(added.iter().all(Result::is_ok), "{added:?}");
    let (ready, phase) =
        condition_where(&system, "Ready", |c| c.reason == "PartitionsChanged").await;
    assert_eq!(ready.status, "False");
    assert!(
        ready
            .message
            .contains(&format!("{table} has {} partitions", PARTITIONS + 2)),
        "{}",
        ready.message
    );
    assert_eq!(phase, Some(JobPhase::Degraded));
    system.clean_up().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_table_placed_by_another_partitioner_than_the_events_is_named_with_an_example_key() {
    // The events are placed by crc32 (librdkafka's default), as the spec says; the table by
    // murmur2 (a Java producer's default).
    let (table, processor) = card_table_join(CARDS, Partitioner::Murmur2).await;
    let spec = serde_json::json!({ "processor": processor });
    let system = System::start_with("op-join-placed", 110, &[None], (2, 0), 2_000, spec).await;
    let (verdict, _) = condition_where(&system, "CoPartitioned", |c| c.status == "False").await;
    eprintln!("CoPartitioned: {}: {}", verdict.reason, verdict.message);
    assert_eq!(verdict.reason, "DifferentPartitioners");
    for part in [
        format!("{} is placed by crc32 and {table} by murmur2", system.input),
        format!("records of {table} sat in another partition than crc32"),
        "e.g. key \"card-".to_string(),
    ] {
        assert!(
            verdict.message.contains(&part),
            "{part}: {}",
            verdict.message
        );
    }
    system.clean_up().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_re_keyed_input_given_partitions_while_the_join_runs_is_read_whole() {
    let (table, mut processor) = card_table_join(CARDS, Partitioner::Crc32).await;
    processor["join"]["left"] = serde_json::json!({ "repartition": true });
    let spec = serde_json::json!({ "processor": processor });
    let system = System::start_with("op-join-rekey", 40, &[None], (2, 0), 0, spec).await;
    table_read(&system, &table, CARDS).await;
    produce_cards(&system.input, CARDS, 0..1_000);

    // A re-keyed input places no key (the job writes each event where its card belongs), so
    // its new partitions are dealt out among the tasks and read from their start.
    let admin = operator_support::admin();
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    let added = admin
        .create_partitions(
            &[NewPartitions::new(&system.input, PARTITIONS as usize + 2)],
            &options,
        )
        .await
        .unwrap();
    assert!(added.iter().all(Result::is_ok), "{added:?}");
    produce_cards(&system.input, CARDS, 1_000..3_000);
    wait_until("every event joined exactly once", async || {
        exact_join_output(&system.output, PARTITIONS, 3_000)
    })
    .await;
    // Still ready: nothing of the join's placement changed.
    let (ready, phase) = condition_where(&system, "Ready", |c| c.status == "True").await;
    eprintln!("Ready: {}: {}", ready.reason, ready.message);
    assert_ne!(phase, Some(JobPhase::Degraded));
    system.clean_up().await;
}
