use super::*;
use crate::api::{RestoreSource, RestoreSpec};
use crate::controller::judge::checkpoints;
use crate::controller::test_support;
use streamkeeper_contract::task_report::{TaskFailure, TaskPhase, TaskRole};

const WEEK_MS: &str = "604800000";

fn of(observation: &Observation, type_: &str) -> ConditionUpdate {
    observation
        .conditions
        .iter()
        .rev()
        .find(|c| c.type_ == type_)
        .cloned()
        .unwrap_or_else(|| panic!("no {type_} condition in {observation:?}"))
}

fn no_checkpoints(tasks: usize) -> CheckpointObservation {
    checkpoints::judge(&vec![None; tasks], &[], None, 0)
}

fn running(pod: &str, tasks: &[u32]) -> (String, Vec<TaskReport>) {
    let reports = tasks
        .iter()
        .map(|task| TaskReport {
            phase: TaskPhase::Running,
            ..TaskReport::new(*task, TaskRole::Active)
        })
        .collect();
    (pod.to_string(), reports)
}

fn evidence<'a>(
    job: &'a StatefulStreamJob,
    validated: &'a ValidatedJob,
    reports: &'a [(String, Vec<TaskReport>)],
) -> TaskEvidence<'a> {
    TaskEvidence {
        job,
        validated,
        roll: RollState::default(),
        checkpoints: no_checkpoints(2),
        reports,
        desired_pods: 2,
        ready_pods: 2,
        moves: &NO_MOVES,
        partitions_changed: None,
    }
}

static NO_MOVES: std::collections::BTreeMap<u32, crate::failover::LastMoves> =
    std::collections::BTreeMap::new();

#[test]
fn a_week_of_input_retention_fits_a_thirty_second_interval() {
    let input = TopicRetention::from_topic_config(Some(WEEK_MS), None).unwrap();
    let verdict = retention(&test_support::validated(), &input);
    let condition = verdict.condition.unwrap();
    assert_eq!(condition.status, ConditionStatus::True);
    assert_eq!(condition.reason, reasons::WITHIN_RETENTION);
    assert!(
        condition
            .message
            .contains("max safe checkpoint age 84h (retention / 2)"),
        "{}",
        condition.message
    );
    assert_eq!(verdict.max_safe_age, Some(Duration::from_secs(84 * 3600)));
    assert_eq!(verdict.status.input_retention_ms, Some(604_800_000));
    assert_eq!(
        verdict.status.max_safe_checkpoint_age_seconds,
        Some(84 * 3600)
    );
}

#[test]
fn an_interval_longer_than_a_quarter_of_the_retention_is_refused() {
    // 30 s interval against 100 s retention: the interval may be at most 25 s.
    let input = TopicRetention::from_topic_config(Some("100000"), None).unwrap();
    let refusal = retention(&test_support::validated(), &input)
        .condition
        .unwrap_err();
    assert_eq!(refusal.field, "spec.checkpoint.interval");
    assert_eq!(refusal.condition_type, types::RETENTION_SAFE);
    let mut observation = Observation::default();
    refused(&mut observation, &refusal);
    assert_eq!(observation.phase, Some(JobPhase::Failed));
    let invalid = of(&observation, types::INVALID);
    assert_eq!(invalid.status, ConditionStatus::True);
    assert_eq!(invalid.reason, reasons::INTERVAL_EXCEEDS_RETENTION);
    assert!(invalid.message.starts_with("spec.checkpoint.interval: "));
    assert_eq!(
        of(&observation, types::RETENTION_SAFE).status,
        ConditionStatus::False
    );
    assert_eq!(
        of(&observation, types::READY).status,
        ConditionStatus::False
    );
}

#[test]
fn retention_by_bytes_alone_is_unknown_and_unlimited_retention_is_safe() {
    let bytes = TopicRetention::from_topic_config(Some("-1"), Some("1073741824")).unwrap();
    let verdict = retention(&test_support::validated(), &bytes);
    let condition = verdict.condition.unwrap();
    assert_eq!(condition.status, ConditionStatus::Unknown);
    assert_eq!(condition.reason, reasons::RETENTION_UNKNOWN);
    assert_eq!(verdict.max_safe_age, None);

    let unlimited = TopicRetention::from_topic_config(Some("-1"), None).unwrap();
    let condition = retention(&test_support::validated(), &unlimited)
        .condition
        .unwrap();
    assert_eq!(condition.reason, reasons::RETENTION_UNLIMITED);
}

#[test]
fn every_task_running_on_ready_pods_is_ready_and_looked_at_again_in_a_minute() {
    let job = test_support::job();
    let validated = test_support::validated();
    let reports = [running("card-count-0", &[0]), running("card-count-1", &[1])];
    let mut observation = Observation::default();
    let recheck = tasks(&mut observation, evidence(&job, &validated, &reports));
    assert_eq!(recheck, RESYNC);
    assert_eq!(observation.phase, Some(JobPhase::Running));
    let ready = of(&observation, types::READY);
    assert_eq!(ready.status, ConditionStatus::True);
    assert_eq!(ready.reason, reasons::ALL_TASKS_RUNNING);
    assert_eq!(ready.message, "2/2 tasks running; 2/2 worker pods ready");
    assert_eq!(observation.ready_tasks.as_deref(), Some("2/2"));
    assert_eq!(
        of(&observation, types::RESTORING).reason,
        reasons::NO_RESTORE
    );
}

#[test]
fn a_task_not_running_is_not_ready_and_looked_at_again_soon() {
    let job = test_support::job();
    let validated = test_support::validated();
    let reports = [running("card-count-0", &[0])];
    let mut observation = Observation::default();
    let recheck = tasks(
        &mut observation,
        TaskEvidence {
            ready_pods: 1,
            ..evidence(&job, &validated, &reports)
        },
    );
    assert_eq!(recheck, TASKS_RECHECK);
    assert_eq!(observation.phase, Some(JobPhase::Degraded));
    let ready = of(&observation, types::READY);
    assert_eq!(ready.status, ConditionStatus::False);
    assert_eq!(ready.reason, reasons::TASKS_NOT_RUNNING);
    assert_eq!(ready.message, "1/2 tasks running; 1/2 worker pods ready");
}

#[test]
fn a_task_its_owner_stopped_on_an_error_degrades_the_job_and_names_the_reason() {
    let job = test_support::job();
    let validated = test_support::validated();
    let lost = TaskReport {
        phase: TaskPhase::Failed,
        reason: Some("changelog lost: it ends at 0, the state wrote up to 41".into()),
        ..TaskReport::new(1, TaskRole::Active)
    };
    let reports = [
        running("card-count-0", &[0]),
        ("card-count-1".to_string(), vec![lost]),
    ];
    let mut observation = Observation::default();
    let recheck = tasks(&mut observation, evidence(&job, &validated, &reports));
    assert_eq!(recheck, TASKS_RECHECK);
    assert_eq!(
        observation.phase,
        Some(JobPhase::Degraded),
        "both pods are ready, but task 1 does not run"
    );
    let ready = of(&observation, types::READY);
    assert_eq!(ready.status, ConditionStatus::False);
    assert_eq!(ready.reason, reasons::TASK_FAILED);
    assert_eq!(
        ready.message,
        "task 1 stopped on card-count-1: changelog lost: it ends at 0, the state wrote up to 41; \
         1/2 tasks running; 2/2 worker pods ready"
    );
}

#[test]
fn a_join_task_stopped_by_a_partition_count_change_degrades_the_job_as_partitions_changed() {
    let job = test_support::job();
    let validated = test_support::validated();
    let stopped = TaskReport {
        phase: TaskPhase::Failed,
        reason: Some("partitions changed: task 1: cards has 6 partitions, but the job's keys are placed by 4".into()),
        failure: Some(TaskFailure::PartitionsChanged),
        ..TaskReport::new(1, TaskRole::Active)
    };
    let reports = [
        running("card-count-0", &[0]),
        ("card-count-1".to_string(), vec![stopped]),
    ];
    let mut observation = Observation::default();
    tasks(&mut observation, evidence(&job, &validated, &reports));
    assert_eq!(observation.phase, Some(JobPhase::Degraded));
    let ready = of(&observation, types::READY);
    assert_eq!(ready.status, ConditionStatus::False);
    assert_eq!(ready.reason, reasons::PARTITIONS_CHANGED);
    assert!(
        ready.message.contains("cards has 6 partitions"),
        "{}",
        ready.message
    );
}

#[test]
fn a_started_joins_topic_with_another_partition_count_degrades_it_before_any_worker_says_so() {
    let job = test_support::job();
    let validated = test_support::validated();
    let reports = [running("card-count-0", &[0]), running("card-count-1", &[1])];
    let changed = streamkeeper_contract::co_partitioning::still_placed_by(
        2,
        &[("transactions", 2), ("cards", 3)],
    )
    .unwrap_err();
    let mut observation = Observation::default();
    tasks(
        &mut observation,
        TaskEvidence {
            partitions_changed: Some(&changed),
            ..evidence(&job, &validated, &reports)
        },
    );
    assert_eq!(observation.phase, Some(JobPhase::Degraded));
    let ready = of(&observation, types::READY);
    assert_eq!(ready.status, ConditionStatus::False);
    assert_eq!(ready.reason, reasons::PARTITIONS_CHANGED);
    assert!(
        ready.message.contains("cards has 3 partitions"),
        "{}",
        ready.message
    );
}

#[test]
fn rolling_pods_are_looked_at_again_first() {
    let job = test_support::job();
    let validated = test_support::validated();
    let reports = [running("card-count-0", &[0, 1])];
    let mut observation = Observation::default();
    let roll = RollState {
        outdated: 1,
        waiting_for_controller: false,
    };
    let recheck = tasks(
        &mut observation,
        TaskEvidence {
            roll,
            ..evidence(&job, &validated, &reports)
        },
    );
    assert_eq!(recheck, ROLLING_RECHECK);
}

#[test]
fn a_stale_checkpoint_degrades_a_running_job() {
    let job = test_support::job();
    let validated = test_support::validated();
    let reports = [running("card-count-0", &[0]), running("card-count-1", &[1])];
    let manifest = |task: u32| streamkeeper_contract::CheckpointManifest {
        version: 1,
        task,
        sequence: 1,
        owner: "card-count-0".into(),
        assignment_generation: 0,
        created_at_ms: 0,
        input_offset: 0,
        changelog_offset: 0,
        newest_record_ms: 0,
        processor_kind: "aggregate".into(),
        state_format_version: 1,
        files: vec![],
        changelog_incarnation: None,
    };
    let day_ms = 86_400_000;
    let checkpoints = checkpoints::judge(
        &[Some(manifest(0)), Some(manifest(1))],
        &[0, 0],
        Some(Duration::from_secs(3600)),
        day_ms,
    );
    let mut observation = Observation::default();
    tasks(
        &mut observation,
        TaskEvidence {
            checkpoints,
            ..evidence(&job, &validated, &reports)
        },
    );
    assert_eq!(observation.phase, Some(JobPhase::Degraded));
    assert_eq!(
        of(&observation, types::CHECKPOINT_STALE).reason,
        reasons::CHECKPOINT_TOO_OLD
    );
}

#[test]
fn a_restore_is_applying_until_every_task_reports_it_then_it_is_handled() {
    let with_restore = |job: &mut StatefulStreamJob| {
        job.spec.restore = Some(RestoreSpec {
            adopt_input: false,
            id: "r1".into(),
            checkpoint: "latest".into(),
            source: RestoreSource::default(),
        });
    };
    let job = test_support::job_with(with_restore);
    let validated = test_support::validated_with(with_restore);
    let applied = |task: u32, id: Option<&str>| TaskReport {
        phase: TaskPhase::Running,
        applied_restore_id: id.map(str::to_string),
        ..TaskReport::new(task, TaskRole::Active)
    };
    let half = [(
        "card-count-0".to_string(),
        vec![applied(0, Some("r1")), applied(1, None)],
    )];
    let mut observation = Observation::default();
    tasks(&mut observation, evidence(&job, &validated, &half));
    assert_eq!(observation.phase, Some(JobPhase::Restoring));
    let restoring = of(&observation, types::RESTORING);
    assert_eq!(restoring.reason, reasons::RESTORE_APPLYING);
    assert_eq!(restoring.message, "restore r1: 1/2 tasks have applied it");
    assert_eq!(observation.handled_restore_id, None);

    let all = [(
        "card-count-0".to_string(),
        vec![applied(0, Some("r1")), applied(1, Some("r1"))],
    )];
    let mut observation = Observation::default();
    tasks(&mut observation, evidence(&job, &validated, &all));
    assert_eq!(observation.phase, Some(JobPhase::Running));
    assert_eq!(
        of(&observation, types::RESTORING).reason,
        reasons::RESTORE_DONE
    );
    assert_eq!(observation.handled_restore_id.as_deref(), Some("r1"));
}

#[test]
fn suspend_reports_the_final_checkpoint_and_keeps_it_once_at_zero() {
    let job = test_support::job();
    let note = SuspendNote {
        reason: reasons::FINAL_CHECKPOINT_INCOMPLETE,
        message: "no final checkpoint from card-count-1".into(),
    };
    let now = suspended(&job, true, Some(&note));
    assert_eq!(now.status, ConditionStatus::True);
    assert_eq!(now.reason, reasons::FINAL_CHECKPOINT_INCOMPLETE);

    // The next reconcile finds the job at zero: the outcome the condition records stays.
    let at_zero = test_support::job_with(|job| {
        let status = crate::api::StatefulStreamJobStatus {
            conditions: conditions::merge_conditions(
                &[],
                vec![now.clone()],
                Some(3),
                &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                ),
            ),
            ..Default::default()
        };
        job.status = Some(status);
    });
    let later = suspended(&at_zero, true, None);
    assert_eq!(later.reason, reasons::FINAL_CHECKPOINT_INCOMPLETE);
    assert_eq!(later.message, note.message);

    assert_eq!(suspended(&job, true, None).reason, reasons::SUSPENDED);
    assert_eq!(
        suspended(&at_zero, false, None).status,
        ConditionStatus::False
    );
}

#[test]
fn an_unreachable_service_leaves_what_it_could_not_check_unknown() {
    let mut observation = Observation::default();
    unreachable(
        &mut observation,
        reasons::S3_UNAVAILABLE,
        "bucket did not answer",
        &[types::CHECKPOINT_STALE, types::RECOVERY_GAP],
    );
    for type_ in [types::CHECKPOINT_STALE, types::RECOVERY_GAP] {
        let condition = of(&observation, type_);
        assert_eq!(condition.status, ConditionStatus::Unknown);
        assert_eq!(condition.reason, reasons::S3_UNAVAILABLE);
        assert_eq!(condition.message, "bucket did not answer");
    }
    assert_eq!(observation.phase, None);
}

#[test]
fn standbys_ready_counts_only_running_standbys_within_the_acceptable_lag() {
    use crate::controller::judge::standbys_ready;
    use streamkeeper_contract::task_report::{TaskPhase, TaskRole};
    let standby = |task, phase, lag| TaskReport {
        phase,
        changelog_lag: Some(lag),
        ..TaskReport::new(task, TaskRole::Standby)
    };
    let reports = vec![
        (
            "job-0".to_string(),
            vec![
                standby(1, TaskPhase::Running, 10),
                standby(2, TaskPhase::Restoring, 0),
            ],
        ),
        (
            "job-1".to_string(),
            vec![
                standby(0, TaskPhase::Running, 0),
                standby(2, TaskPhase::Running, 11),
            ],
        ),
    ];
    let short = standbys_ready(1, 10, 3, &reports);
    assert_eq!(short.status, ConditionStatus::False);
    assert_eq!(short.reason, reasons::STANDBYS_WARMING);
    assert!(short.message.ends_with(": 2 (0/1)"), "{}", short.message);
    let all = standbys_ready(1, 20, 3, &reports);
    assert_eq!(all.status, ConditionStatus::True);
    assert_eq!(all.reason, reasons::STANDBYS_WARM);
    let two = standbys_ready(2, 20, 3, &reports);
    assert_eq!(two.status, ConditionStatus::False);
    let none = standbys_ready(0, 20, 3, &[]);
    assert_eq!(none.reason, reasons::NO_STANDBYS_REQUESTED);
}
