use super::*;
use proptest::prelude::*;
use std::collections::BTreeSet;

/// `count` pods `job-0..`, on nodes `n0..n<nodes>` in turn, node `n` in zone `z<n % zones>`.
fn pods(count: usize, nodes: usize, zones: usize) -> Vec<PodPlace> {
    (0..count)
        .map(|i| {
            let node = i % nodes.max(1);
            PodPlace {
                name: format!("job-{i}"),
                node: (nodes > 0).then(|| format!("n{node}")),
                zone: (zones > 0).then(|| format!("z{}", node % zones)),
            }
        })
        .collect()
}

/// Every copy the document places, caught up (as once the standbys have warmed).
fn warm_copies(doc: &AssignmentDocument) -> BTreeMap<u32, Vec<CopyLag>> {
    doc.tasks
        .iter()
        .map(|t| {
            let copies = t
                .active
                .iter()
                .chain(&t.standbys)
                .map(|pod| CopyLag {
                    pod: pod.clone(),
                    lag: 0,
                })
                .collect();
            (t.task, copies)
        })
        .collect()
}

/// `tasks` tasks, all active on job-0 with their standby on job-1, at `generation`.
fn all_on_job_0_standbys_on_job_1(tasks: u32, generation: u64) -> AssignmentDocument {
    AssignmentDocument {
        version: 1,
        generation,
        tasks: (0..tasks)
            .map(|task| TaskAssignment {
                task,
                active: Some("job-0".into()),
                standbys: vec!["job-1".into()],
            })
            .collect(),
    }
}

fn decide(
    tasks: u32,
    pods: &[PodPlace],
    copies: &BTreeMap<u32, Vec<CopyLag>>,
    current: Option<&AssignmentDocument>,
    standbys: u32,
) -> AssignmentDocument {
    next_assignment(AssignmentInputs {
        tasks,
        pods,
        copies,
        current,
        standby_replicas: standbys,
        acceptable_recovery_lag: 100,
        balance: true,
        settling: &BTreeSet::new(),
        newest_recorded_generation: 0,
        fenced_actives: &BTreeSet::new(),
    })
    .unwrap()
}

/// Decides again with every copy warm until nothing changes (at most `rounds` times).
fn settle(
    tasks: u32,
    pods: &[PodPlace],
    mut doc: AssignmentDocument,
    standbys: u32,
) -> AssignmentDocument {
    for _ in 0..8 {
        let next = decide(tasks, pods, &warm_copies(&doc), Some(&doc), standbys);
        if next == doc {
            return doc;
        }
        doc = next;
    }
    doc
}

fn loads(doc: &AssignmentDocument, pods: &[PodPlace]) -> Vec<usize> {
    pods.iter()
        .map(|pod| doc.active_tasks_of(&pod.name).count())
        .collect()
}

fn place<'a>(pods: &'a [PodPlace], name: &str) -> &'a PodPlace {
    pods.iter().find(|p| p.name == name).unwrap()
}

fn distance(pods: &[PodPlace], a: &str, b: &str) -> Proximity {
    let index = |name: &str| pods.iter().position(|p| p.name == name).unwrap();
    proximity(&places(pods), index(a), index(b))
}

#[test]
fn a_new_job_spreads_actives_and_puts_standbys_in_other_zones() {
    let pods = pods(3, 3, 3);
    let doc = decide(6, &pods, &BTreeMap::new(), None, 1);
    assert_eq!(doc.generation, 1);
    assert!(doc.check().is_ok());
    assert_eq!(loads(&doc, &pods), vec![2, 2, 2]);
    for task in &doc.tasks {
        let active = task.active.as_deref().unwrap();
        assert_eq!(task.standbys.len(), 1);
        let standby = &task.standbys[0];
        assert_ne!(place(&pods, active).zone, place(&pods, standby).zone);
    }
    // Each pod's two tasks keep their standbys on two different pods, so losing it spreads
    // the failover.
    for pod in &pods {
        let holders: BTreeSet<&String> = doc
            .tasks
            .iter()
            .filter(|t| t.active.as_deref() == Some(pod.name.as_str()))
            .flat_map(|t| &t.standbys)
            .collect();
        assert_eq!(holders.len(), 2, "{doc:?}");
    }
}

#[test]
fn a_lost_pod_fails_over_to_the_warmest_copy_and_nothing_else_moves() {
    let pods = pods(3, 3, 3);
    let doc = settle(6, &pods, decide(6, &pods, &BTreeMap::new(), None, 1), 1);
    let lost = "job-1";
    let survivors: Vec<PodPlace> = pods.iter().filter(|p| p.name != lost).cloned().collect();
    let mut copies = warm_copies(&doc);
    for list in copies.values_mut() {
        list.retain(|c| c.pod != lost);
    }
    let next = decide(6, &survivors, &copies, Some(&doc), 1);
    assert_eq!(next.generation, doc.generation + 1);
    for (before, after) in doc.tasks.iter().zip(&next.tasks) {
        if before.active.as_deref() == Some(lost) {
            // Its only standby took over.
            assert_eq!(after.active.as_ref(), before.standbys.first());
        } else {
            assert_eq!(after.active, before.active);
        }
        if before.active.as_deref() != Some(lost) && !before.standbys.iter().any(|s| s == lost) {
            assert_eq!(after, before, "a task the loss did not touch changed");
        }
    }
    assert_eq!(loads(&next, &survivors), vec![3, 3]);
}

#[test]
fn the_warmest_standby_is_promoted() {
    let pods = pods(3, 3, 0);
    let doc = AssignmentDocument {
        version: 1,
        generation: 4,
        tasks: vec![TaskAssignment {
            task: 0,
            active: Some("job-0".into()),
            standbys: vec!["job-1".into(), "job-2".into()],
        }],
    };
    let survivors = &pods[1..];
    let copies = BTreeMap::from([(
        0,
        vec![
            CopyLag {
                pod: "job-1".into(),
                lag: 900,
            },
            CopyLag {
                pod: "job-2".into(),
                lag: 3,
            },
        ],
    )]);
    let next = decide(1, survivors, &copies, Some(&doc), 2);
    assert_eq!(next.tasks[0].active.as_deref(), Some("job-2"));
    assert_eq!(next.tasks[0].standbys, vec!["job-1".to_string()]);
}

#[test]
fn a_new_pod_gets_tasks_only_through_warm_up() {
    let two = pods(2, 2, 0);
    let doc = settle(4, &two, decide(4, &two, &BTreeMap::new(), None, 0), 0);
    assert_eq!(loads(&doc, &two), vec![2, 2]);
    let three = pods(3, 3, 0);
    // The new pod has no copy yet: nothing moves, it warms one up.
    let next = decide(4, &three, &warm_copies(&doc), Some(&doc), 0);
    for (before, after) in doc.tasks.iter().zip(&next.tasks) {
        assert_eq!(after.active, before.active);
    }
    let warming: Vec<u32> = next.standby_tasks_of("job-2").collect();
    assert_eq!(warming.len(), 1, "{next:?}");
    // Once the copy is warm, the task moves to it (the old owner keeps a copy until then).
    let moved = decide(4, &three, &warm_copies(&next), Some(&next), 0);
    assert_eq!(moved.active_tasks_of("job-2").collect::<Vec<_>>(), warming);
    let final_doc = settle(4, &three, moved, 0);
    let mut counts = loads(&final_doc, &three);
    counts.sort_unstable();
    assert_eq!(counts, vec![1, 1, 2]);
}

#[test]
fn a_task_still_being_taken_over_is_not_moved_on_to_even_out_the_load() {
    // job-0 runs tasks 0-3 and has just taken over tasks 1-3 (its copies of them still
    // restore); job-1, below its share, holds caught-up copies of all four.
    let two = pods(2, 2, 0);
    let current = all_on_job_0_standbys_on_job_1(4, 7);
    let copy = |pod: &str, lag| CopyLag {
        pod: pod.into(),
        lag,
    };
    let mut copies: BTreeMap<u32, Vec<CopyLag>> = (0..4)
        .map(|task| (task, vec![copy("job-0", 0), copy("job-1", 0)]))
        .collect();
    copies.insert(1, vec![copy("job-0", 1), copy("job-1", 0)]);
    copies.insert(2, vec![copy("job-0", 40), copy("job-1", 0)]);
    copies.insert(3, vec![copy("job-1", 0)]);
    let next = decide(4, &two, &copies, Some(&current), 1);
    let moved: Vec<u32> = next.active_tasks_of("job-1").collect();
    assert_eq!(
        moved,
        [0],
        "only a task job-0 already serves moves: {next:?}"
    );
    // When job-0 serves none of them yet, nothing moves; a later decision evens it out.
    copies.insert(0, vec![copy("job-0", 5), copy("job-1", 0)]);
    let waiting = decide(4, &two, &copies, Some(&current), 1);
    assert_eq!(waiting.active_tasks_of("job-1").count(), 0, "{waiting:?}");
}

#[test]
fn held_balance_leaves_a_returning_pod_without_tasks_and_still_warms_its_copies() {
    // job-1 came back after its tasks failed over to job-0; its standby copies are warm.
    let two = pods(2, 2, 0);
    let current = all_on_job_0_standbys_on_job_1(4, 9);
    let copies = warm_copies(&current);
    let held = next_assignment(AssignmentInputs {
        tasks: 4,
        pods: &two,
        copies: &copies,
        current: Some(&current),
        standby_replicas: 1,
        acceptable_recovery_lag: 100,
        balance: false,
        settling: &BTreeSet::new(),
        newest_recorded_generation: 0,
        fenced_actives: &BTreeSet::new(),
    })
    .unwrap();
    assert_eq!(held.active_tasks_of("job-1").count(), 0, "{held:?}");
    assert_eq!(held.standby_tasks_of("job-1").count(), 4, "standbys placed");
    // Once balance is allowed, the warm copies take their share.
    let balanced = decide(4, &two, &warm_copies(&held), Some(&held), 1);
    assert_eq!(balanced.active_tasks_of("job-1").count(), 2, "{balanced:?}");
}

#[test]
fn a_settling_task_stays_with_its_new_owner_while_the_others_even_out() {
    // Tasks 0 and 1 were just promoted onto job-0 (their new owner has not committed); job-1
    // came back with warm copies of everything.
    let two = pods(2, 2, 0);
    let current = all_on_job_0_standbys_on_job_1(4, 9);
    let copies = warm_copies(&current);
    let decide_settling = |settling: &BTreeSet<u32>, current: &AssignmentDocument| {
        next_assignment(AssignmentInputs {
            tasks: 4,
            pods: &two,
            copies: &copies,
            current: Some(current),
            standby_replicas: 1,
            acceptable_recovery_lag: 100,
            balance: true,
            settling,
            newest_recorded_generation: 0,
            fenced_actives: &BTreeSet::new(),
        })
        .unwrap()
    };
    let next = decide_settling(&BTreeSet::from([0, 1]), &current);
    let moved: Vec<u32> = next.active_tasks_of("job-1").collect();
    assert_eq!(moved, [2, 3], "only the settled tasks move: {next:?}");

    // Every task of the busiest pod settling: the next busiest evens out meanwhile.
    let three = pods(3, 3, 0);
    let mut uneven = all_on_job_0_standbys_on_job_1(7, 9);
    for task in [4, 5, 6] {
        uneven.tasks[task].active = Some("job-1".into());
        uneven.tasks[task].standbys = vec!["job-2".into()];
    }
    for task in [0, 1, 2, 3] {
        uneven.tasks[task].standbys = vec!["job-2".into()];
    }
    let copies = warm_copies(&uneven);
    let next = next_assignment(AssignmentInputs {
        tasks: 7,
        pods: &three,
        copies: &copies,
        current: Some(&uneven),
        standby_replicas: 1,
        acceptable_recovery_lag: 100,
        balance: true,
        settling: &BTreeSet::from([0, 1, 2, 3]),
        newest_recorded_generation: 0,
        fenced_actives: &BTreeSet::new(),
    })
    .unwrap();
    let on_0: Vec<u32> = next.active_tasks_of("job-0").collect();
    assert_eq!(on_0, [0, 1, 2, 3], "settling tasks stay: {next:?}");
    assert_eq!(
        next.active_tasks_of("job-2").count(),
        1,
        "job-1 gave one: {next:?}"
    );
}

#[test]
fn no_pods_leaves_every_task_unassigned() {
    let doc = decide(3, &[], &BTreeMap::new(), None, 1);
    assert!(
        doc.tasks
            .iter()
            .all(|t| t.active.is_none() && t.standbys.is_empty())
    );
}

fn arb_case() -> impl Strategy<Value = (u32, usize, usize, usize, u32)> {
    (1u32..40, 1usize..10, 0usize..6, 0usize..4, 0u32..3)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn invariants_hold_and_a_settled_assignment_is_sticky(
        (tasks, pod_count, nodes, zones, standbys) in arb_case()
    ) {
        let pods = pods(pod_count, nodes, zones);
        let first = decide(tasks, &pods, &BTreeMap::new(), None, standbys);
        let doc = settle(tasks, &pods, first, standbys);
        prop_assert!(doc.check().is_ok());
        let wanted = (standbys as usize).min(pod_count - 1);
        for task in &doc.tasks {
            let active = task.active.as_deref();
            prop_assert!(active.is_some(), "task {} has no active", task.task);
            let active = active.unwrap_or_default();
            prop_assert_eq!(task.standbys.len(), wanted, "{:?}", doc);
            // No free pod is farther from the active than the nearest standby needs to be.
            let used: BTreeSet<&str> =
                task.standbys.iter().map(String::as_str).chain([active]).collect();
            let worst = task.standbys.iter().map(|s| distance(&pods, active, s)).max();
            if let Some(worst) = worst {
                for pod in pods.iter().filter(|p| !used.contains(p.name.as_str())) {
                    prop_assert!(distance(&pods, active, &pod.name) >= worst, "{:?}", doc);
                }
            }
        }
        let counts = loads(&doc, &pods);
        let (low, high) = (counts.iter().min(), counts.iter().max());
        prop_assert!(high.unwrap_or(&0) - low.unwrap_or(&0) <= 1, "loads {:?}", counts);
        // Sticky: the same facts decide the same document, generation included.
        let again = decide(tasks, &pods, &warm_copies(&doc), Some(&doc), standbys);
        prop_assert_eq!(again, doc);
    }

    #[test]
    fn a_lost_pod_moves_only_its_own_actives_and_the_generation_grows(
        (tasks, pod_count, nodes, zones, _) in arb_case(),
        lost in 0usize..10,
    ) {
        prop_assume!(pod_count >= 2);
        let pods = pods(pod_count, nodes, zones);
        let doc = settle(tasks, &pods, decide(tasks, &pods, &BTreeMap::new(), None, 1), 1);
        let lost = pods[lost % pod_count].name.clone();
        let survivors: Vec<PodPlace> = pods.iter().filter(|p| p.name != lost).cloned().collect();
        let mut copies = warm_copies(&doc);
        for list in copies.values_mut() {
            list.retain(|c| c.pod != lost);
        }
        let next = decide(tasks, &survivors, &copies, Some(&doc), 1);
        prop_assert!(next.check().is_ok());
        for (before, after) in doc.tasks.iter().zip(&next.tasks) {
            prop_assert!(after.active.as_ref().is_some_and(|a| *a != lost));
            prop_assert!(!after.standbys.contains(&lost));
            if before.active.as_deref() == Some(lost.as_str()) {
                // A standby existed, so it is the new owner: no cold start.
                prop_assert!(before.standbys.contains(after.active.as_ref().unwrap_or(&lost)));
            }
        }
        let lost_actives = doc.active_tasks_of(&lost).count();
        let moved = doc.tasks.iter().zip(&next.tasks).filter(|(b, a)| b.active != a.active).count();
        prop_assert!(moved >= lost_actives);
        if lost_actives > 0 || doc.standby_tasks_of(&lost).count() > 0 {
            prop_assert!(next.generation > doc.generation);
        }
    }
}

#[test]
fn without_a_document_in_force_the_generation_starts_above_any_a_worker_recorded() {
    let pods = pods(2, 2, 1);
    let fresh = decide(2, &pods, &BTreeMap::new(), None, 1);
    assert_eq!(fresh.generation, 1, "a new job starts at 1");
    let after_loss = next_assignment(AssignmentInputs {
        tasks: 2,
        pods: &pods,
        copies: &BTreeMap::new(),
        current: None,
        standby_replicas: 1,
        acceptable_recovery_lag: 100,
        balance: true,
        settling: &BTreeSet::new(),
        newest_recorded_generation: 17,
        fenced_actives: &BTreeSet::new(),
    })
    .unwrap();
    assert_eq!(after_loss.generation, 18);
    assert_eq!(after_loss.tasks, fresh.tasks, "the same decision otherwise");

    // A worker that answers late with a newer generation lifts an unchanged document above it.
    let lifted = next_assignment(AssignmentInputs {
        tasks: 2,
        pods: &pods,
        copies: &BTreeMap::new(),
        current: Some(&fresh),
        standby_replicas: 1,
        acceptable_recovery_lag: 100,
        balance: true,
        settling: &BTreeSet::new(),
        newest_recorded_generation: 17,
        fenced_actives: &BTreeSet::new(),
    })
    .unwrap();
    assert_eq!(lifted.generation, 18);
    assert_eq!(lifted.tasks, fresh.tasks);
}

#[test]
fn an_active_fenced_under_the_document_in_force_gets_it_again_under_a_newer_generation() {
    let pods = pods(2, 2, 1);
    let current = decide(2, &pods, &BTreeMap::new(), None, 1);
    let facts = |fenced: &BTreeSet<u32>| {
        next_assignment(AssignmentInputs {
            tasks: 2,
            pods: &pods,
            copies: &BTreeMap::new(),
            current: Some(&current),
            standby_replicas: 1,
            acceptable_recovery_lag: 100,
            balance: true,
            settling: &BTreeSet::new(),
            newest_recorded_generation: current.generation,
            fenced_actives: fenced,
        })
        .unwrap()
    };
    assert_eq!(
        facts(&BTreeSet::new()),
        current,
        "nothing fenced: unchanged"
    );
    let again = facts(&BTreeSet::from([1]));
    assert_eq!(again.generation, current.generation + 1);
    assert_eq!(again.tasks, current.tasks, "the same owners claim again");
}

#[test]
fn the_last_generation_refuses_a_change_instead_of_repeating_itself() {
    let pods = pods(2, 2, 1);
    let last = all_on_job_0_standbys_on_job_1(2, u64::MAX);
    let decide_on = |pods: &[PodPlace]| {
        next_assignment(AssignmentInputs {
            tasks: 2,
            pods,
            copies: &warm_copies(&last),
            current: Some(&last),
            standby_replicas: 1,
            acceptable_recovery_lag: 100,
            balance: false,
            settling: &BTreeSet::new(),
            newest_recorded_generation: 0,
            fenced_actives: &BTreeSet::new(),
        })
    };
    assert_eq!(
        decide_on(&pods).map(|d| d.generation),
        Ok(u64::MAX),
        "nothing changed: it stands"
    );
    let refused = decide_on(&pods[1..]);
    assert_eq!(refused, Err(GenerationsExhausted(u64::MAX)));
    assert!(refused.unwrap_err().to_string().contains("is the last one"));
}
