//! A lost node, through the whole system: three node agents, two labelled zone `zone-a` and one
//! `zone-b`, three worker pods with one standby per task. The operator reads each pod's zone
//! from its Node, so every task active in one zone has its standby in the other. Then the
//! `zone-b` node freezes whole: SIGSTOP to its node agent and to every worker process it runs,
//! which is how a node that loses power or its network looks to the cluster (no refused
//! connection, no status update). Its tasks move to their standbys within the frozen bound, the
//! output stays exact, and once the node runs again its pod holds copies again.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

mod operator_support;

use k8s_openapi::api::core::v1::Pod;
use operator_support::failover::*;
use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

/// The heartbeat's 2 s of silence, a poll, and the promotion (as for one frozen owner).
const NODE_LOSS_BOUND: Duration = Duration::from_secs(4);
const ZONES: [Option<&str>; 3] = [Some("zone-a"), Some("zone-a"), Some("zone-b")];

fn signal(signal: &str, pid: &str) {
    let sent = Command::new("kill")
        .args([&format!("-{signal}"), pid])
        .status()
        .unwrap();
    assert!(sent.success(), "kill -{signal} {pid}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_frozen_nodes_tasks_move_to_standbys_in_the_other_zone() {
    let system = System::start_on("op-node-loss", 200, &ZONES, 3, 1, 2_000).await;
    let document = system.settled(1).await;
    let pods = system.pods().await;
    let node_of: BTreeMap<String, String> = pods
        .iter()
        .map(|pod: &Pod| {
            let name = pod.metadata.name.clone().unwrap();
            (name, pod.spec.as_ref().unwrap().node_name.clone().unwrap())
        })
        .collect();
    let zone_of = |pod: &str| {
        let node = &node_of[pod];
        let i = system.nodes.iter().position(|n| n == node).unwrap();
        ZONES[i].unwrap()
    };
    let lost_node = system.nodes[2].clone();
    let lost_pods: Vec<String> = node_of
        .iter()
        .filter(|(_, node)| **node == lost_node)
        .map(|(pod, _)| pod.clone())
        .collect();
    assert!(
        !lost_pods.is_empty() && node_of.values().any(|n| *n != lost_node),
        "the scheduler spread the pods over both zones: {node_of:?}"
    );

    // Standbys sit in the other zone than their active.
    for task in &document.tasks {
        let active = task.active.as_deref().unwrap();
        for standby in &task.standbys {
            assert_ne!(
                zone_of(active),
                zone_of(standby),
                "task {}: active {active}, standby {standby}, document {document:?}, nodes {node_of:?}",
                task.task
            );
        }
    }

    let producing = produce_in_background(&system.input, 2_000, 30);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let moved: Vec<u32> = document
        .tasks
        .iter()
        .filter(|t| t.active.as_ref().is_some_and(|a| lost_pods.contains(a)))
        .map(|t| t.task)
        .collect();
    assert!(!moved.is_empty(), "the zone-b pod owns tasks: {document:?}");
    let mut pids = vec![system.node_agent(2).child.id().to_string()];
    for pod in &lost_pods {
        pids.push(system.pid_of(pod).await.unwrap());
    }
    let frozen = Instant::now();
    for pid in &pids {
        signal("STOP", pid);
    }
    for &task in &moved {
        let victim = document.tasks[task as usize].active.clone().unwrap();
        let (owner, took) = system.new_owner_of(task, &victim, frozen).await;
        eprintln!(
            "node {lost_node} frozen: task {task} committed on {owner} {:.3} s later",
            took.as_secs_f64()
        );
        assert_eq!(zone_of(&owner), "zone-a");
        assert!(
            took <= NODE_LOSS_BOUND,
            "task {task} moved after {took:?} (bound {NODE_LOSS_BOUND:?})"
        );
    }
    for pid in &pids {
        signal("CONT", pid);
    }

    producing.finish();
    system.recovered_exactly(&lost_pods, 5_000).await;
    system.clean_up().await;
}
