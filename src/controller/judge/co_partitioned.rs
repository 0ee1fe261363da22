//! `CoPartitioned`: whether a join's records sit where its partitioner puts their keys, judged
//! from the evidence its tasks report (`placement` in `GET /v1/tasks`: per topic, the records
//! checked, how many each known partitioner would have placed where they were, the misplaced
//! ones and an example). Equal partition counts were checked before anything started
//! (`NotCoPartitioned`); this is the rest of the rule, which only the records can show: two
//! producers placing keys by different partitioners put a key's records in different
//! partitions, where they never meet.
//!
//! The evidence is what the workers have checked since they last started. While they report
//! none (before the first records, or just after a restart) the condition keeps what it said.

use super::conditions::{self, ConditionStatus, ConditionUpdate};
use super::next_status::condition;
use crate::api::StatefulStreamJob;
use crate::vocabulary::{reasons, types};
use std::collections::BTreeMap;
use streamkeeper_contract::TaskReport;
use streamkeeper_contract::co_partitioning::{Partitioner, PlacementEvidence};
use streamkeeper_contract::task_report::TaskRole;

/// The join being judged: its two topics, left first, and the partitioner its spec names.
#[derive(Debug, Clone, Copy)]
pub struct JoinTopics<'a> {
    pub left: &'a str,
    pub right: &'a str,
    pub partitioner: Partitioner,
}

/// The condition from the active copies' evidence; `None` when they checked nothing yet and
/// the job already has one (it stands until there is evidence again).
pub fn co_partitioned(
    job: &StatefulStreamJob,
    join: JoinTopics<'_>,
    reports: &[(String, Vec<TaskReport>)],
) -> Option<ConditionUpdate> {
    let evidence = evidence_by_topic(reports);
    let side = |topic: &str| {
        evidence
            .get(topic)
            .cloned()
            .unwrap_or_else(|| PlacementEvidence::new(topic))
    };
    let (left, right) = (side(join.left), side(join.right));
    if left.checked + right.checked == 0 {
        let existing = job
            .status
            .as_ref()
            .and_then(|status| conditions::find(&status.conditions, types::CO_PARTITIONED));
        return existing.is_none().then(|| {
            condition(
                types::CO_PARTITIONED,
                ConditionStatus::Unknown,
                reasons::NO_RECORDS_CHECKED,
                "no record of either topic checked yet: each record's partition is checked against its key as the tasks read it",
            )
        });
    }
    Some(judge(join, &left, &right))
}

/// Every active copy's evidence, added up per topic.
fn evidence_by_topic(reports: &[(String, Vec<TaskReport>)]) -> BTreeMap<String, PlacementEvidence> {
    let mut by_topic: BTreeMap<String, PlacementEvidence> = BTreeMap::new();
    let active = reports
        .iter()
        .flat_map(|(_, list)| list)
        .filter(|report| report.role == TaskRole::Active);
    for evidence in active.flat_map(|report| &report.placement) {
        by_topic
            .entry(evidence.topic.clone())
            .or_insert_with(|| PlacementEvidence::new(&evidence.topic))
            .add(evidence);
    }
    by_topic
}

/// The verdict on both sides' evidence (at least one record checked).
fn judge(
    join: JoinTopics<'_>,
    left: &PlacementEvidence,
    right: &PlacementEvidence,
) -> ConditionUpdate {
    let job_partitioner = join.partitioner.as_str();
    if left.misplaced + right.misplaced == 0 {
        return condition(
            types::CO_PARTITIONED,
            ConditionStatus::True,
            reasons::KEYS_PLACED,
            format!(
                "{} records of {} and {} of {} checked: every one sits where {job_partitioner} (join.partitioner) puts its key",
                left.checked, left.topic, right.checked, right.topic
            ),
        );
    }
    let misplaced: Vec<String> = [left, right]
        .into_iter()
        .filter(|side| side.misplaced > 0)
        .map(|side| misplaced_words(side, job_partitioner))
        .collect();
    let misplaced = misplaced.join("; ");
    let (left_fits, right_fits) = (left.fitting(), right.fitting());
    if let ([left_by], [right_by]) = (left_fits.as_slice(), right_fits.as_slice())
        && left_by != right_by
    {
        return condition(
            types::CO_PARTITIONED,
            ConditionStatus::False,
            reasons::DIFFERENT_PARTITIONERS,
            format!(
                "{} is placed by {} and {} by {}: the two topics' producers use different partitioners, so a key's records sit in different partitions and never meet; have both use one (join.partitioner says {job_partitioner}). {misplaced}",
                left.topic,
                left_by.as_str(),
                right.topic,
                right_by.as_str()
            ),
        );
    }
    let advice = match (left_fits.as_slice(), right_fits.as_slice()) {
        ([left_by], [right_by]) if left_by == right_by => format!(
            " Both topics fit {}: set join.partitioner to {} (the job's state was placed by {job_partitioner}, so recreate the job).",
            left_by.as_str(),
            left_by.as_str()
        ),
        _ => String::new(),
    };
    condition(
        types::CO_PARTITIONED,
        ConditionStatus::False,
        reasons::KEYS_MISPLACED,
        format!("{misplaced}.{advice}"),
    )
}

/// One topic's misplaced records, in words: how many, an example, what they fit.
fn misplaced_words(side: &PlacementEvidence, job_partitioner: &str) -> String {
    let example = side.example.as_ref().map_or(String::new(), |example| {
        format!(
            ", e.g. key {:?} in partition {}, where {job_partitioner} puts it in {}",
            example.key, example.partition, example.expected
        )
    });
    let fits = match side.fitting().as_slice() {
        [] => "their placement fits neither murmur2 nor crc32 (a custom partitioner, or records written to chosen partitions)".to_string(),
        [one] => format!("every record of {} fits {}", side.topic, one.as_str()),
        _ => "their placement fits both partitioners".to_string(),
    };
    format!(
        "{} of {} records of {} sat in another partition than {job_partitioner} (join.partitioner) gives their key and went to the dead-letter topic (not_co_partitioned){example}; {fits}",
        side.misplaced, side.checked, side.topic
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::test_support::job;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;

    const PARTITIONS: u32 = 8;

    fn keys_apart(count: usize) -> Vec<String> {
        (0..1000)
            .map(|i| format!("card-{i}"))
            .filter(|key| {
                Partitioner::Murmur2.partition(key.as_bytes(), PARTITIONS)
                    != Partitioner::Crc32.partition(key.as_bytes(), PARTITIONS)
            })
            .take(count)
            .collect()
    }

    /// `topic`'s evidence of records its producer placed by `placed_by`, checked against the
    /// job's murmur2.
    fn evidence(topic: &str, placed_by: Partitioner, keys: &[String]) -> PlacementEvidence {
        let mut evidence = PlacementEvidence::new(topic);
        for key in keys {
            let partition = placed_by.partition(key.as_bytes(), PARTITIONS);
            let _ = evidence.observe(Partitioner::Murmur2, key.as_bytes(), partition, PARTITIONS);
        }
        evidence
    }

    fn reported(task: u32, role: TaskRole, placement: Vec<PlacementEvidence>) -> TaskReport {
        TaskReport {
            placement,
            ..TaskReport::new(task, role)
        }
    }

    const JOIN: JoinTopics<'static> = JoinTopics {
        left: "transactions",
        right: "cards",
        partitioner: Partitioner::Murmur2,
    };

    #[test]
    fn a_table_written_by_crc32_under_murmur2_is_different_partitioners_with_an_example_key() {
        let keys = keys_apart(30);
        let (first, second) = keys.split_at(15);
        let reports = vec![
            (
                "job-0".to_string(),
                vec![reported(
                    0,
                    TaskRole::Active,
                    vec![
                        evidence("transactions", Partitioner::Murmur2, first),
                        evidence("cards", Partitioner::Crc32, first),
                    ],
                )],
            ),
            (
                "job-1".to_string(),
                vec![reported(
                    1,
                    TaskRole::Active,
                    vec![
                        evidence("transactions", Partitioner::Murmur2, second),
                        evidence("cards", Partitioner::Crc32, second),
                    ],
                )],
            ),
        ];
        let verdict = co_partitioned(&job(), JOIN, &reports).unwrap();
        assert_eq!(verdict.status, ConditionStatus::False);
        assert_eq!(verdict.reason, reasons::DIFFERENT_PARTITIONERS);
        for part in [
            "transactions is placed by murmur2 and cards by crc32",
            "30 of 30 records of cards",
            &format!("e.g. key {:?}", keys[0]),
        ] {
            assert!(
                verdict.message.contains(part),
                "{part}: {}",
                verdict.message
            );
        }
    }

    #[test]
    fn both_topics_by_another_partitioner_than_the_spec_says_advise_setting_it() {
        let keys = keys_apart(10);
        let reports = vec![(
            "job-0".to_string(),
            vec![reported(
                0,
                TaskRole::Active,
                vec![
                    evidence("transactions", Partitioner::Crc32, &keys),
                    evidence("cards", Partitioner::Crc32, &keys),
                ],
            )],
        )];
        let verdict = co_partitioned(&job(), JOIN, &reports).unwrap();
        assert_eq!(verdict.reason, reasons::KEYS_MISPLACED);
        assert!(
            verdict
                .message
                .contains("Both topics fit crc32: set join.partitioner to crc32"),
            "{}",
            verdict.message
        );
    }

    #[test]
    fn records_placed_by_the_partitioner_the_spec_names_are_co_partitioned() {
        let keys = keys_apart(10);
        let placed = vec![
            evidence("transactions", Partitioner::Murmur2, &keys),
            evidence("cards", Partitioner::Murmur2, &keys),
        ];
        // A standby's evidence is not counted (it reads the changelog, not the topics).
        let standby_evidence = vec![evidence("cards", Partitioner::Crc32, &keys)];
        let reports = vec![(
            "job-0".to_string(),
            vec![
                reported(0, TaskRole::Active, placed),
                reported(1, TaskRole::Standby, standby_evidence),
            ],
        )];
        let verdict = co_partitioned(&job(), JOIN, &reports).unwrap();
        assert_eq!(verdict.status, ConditionStatus::True);
        assert_eq!(verdict.reason, reasons::KEYS_PLACED);
        assert!(
            verdict
                .message
                .contains("10 records of transactions and 10 of cards")
        );
    }

    #[test]
    fn no_evidence_is_unknown_at_first_and_keeps_a_standing_verdict_after() {
        let quiet = vec![(
            "job-0".to_string(),
            vec![TaskReport::new(0, TaskRole::Active)],
        )];
        let first = co_partitioned(&job(), JOIN, &quiet).unwrap();
        assert_eq!(first.status, ConditionStatus::Unknown);
        assert_eq!(first.reason, reasons::NO_RECORDS_CHECKED);
        let mut judged = job();
        let status = judged.status.get_or_insert_with(Default::default);
        let now = Time(Timestamp::from_second(1_800_000_000).unwrap());
        status.conditions = conditions::merge_condition(&status.conditions, first, None, &now);
        assert_eq!(co_partitioned(&judged, JOIN, &quiet), None);
    }
}
