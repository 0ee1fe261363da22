//! The Kafka topics the operator creates for a job, as plain data for the Kafka admin API: the
//! compacted changelog, the dead-letter topic, and a re-keyed join side's repartition topic.
//! Partition counts come from [`Facts`], never from a broker call here.

use crate::adapters::kafka_admin::DesiredTopic;
use crate::controller::build::Facts;
use crate::controller::valid_job::ValidatedJob;
use crate::retention;
use std::collections::BTreeMap;

/// The topics of a job, named so `apply` handles each explicitly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DesiredTopics {
    pub changelog: DesiredTopic,
    pub dead_letter: DesiredTopic,
    /// A re-keyed join side's topic (each side's, left first): the job writes it and reads it
    /// back, so it lives and dies with the job like the changelog.
    pub repartition: Vec<DesiredTopic>,
}

pub fn build(job: &ValidatedJob, facts: &Facts) -> DesiredTopics {
    let kafka = &job.kafka;
    let mut shared = BTreeMap::new();
    if let Some(min_isr) = kafka.min_insync_replicas {
        shared.insert("min.insync.replicas".to_string(), min_isr.to_string());
    }

    let mut changelog = shared.clone();
    changelog.insert("cleanup.policy".into(), "compact".into());
    // Tombstones must outlive any checkpoint a delta restore may start from; see
    // `retention::changelog_delete_retention` for the margin.
    let delete_retention =
        retention::changelog_delete_retention(job.checkpoint.interval, job.checkpoint.retain);
    changelog.insert(
        "delete.retention.ms".into(),
        delete_retention.as_millis().to_string(),
    );

    let mut dead_letter = shared.clone();
    dead_letter.insert("cleanup.policy".into(), "delete".into());

    // Kept until the job has joined them, whatever the time: each task deletes what it has
    // consumed (DeleteRecords), as Kafka Streams does with its repartition topics.
    let mut repartition = shared;
    repartition.insert("cleanup.policy".into(), "delete".into());
    repartition.insert("retention.ms".into(), "-1".into());
    let processor = &job.processor;
    let repartition = [
        processor.left_repartition_topic(),
        processor.right_repartition_topic(),
    ]
    .into_iter()
    .flatten()
    .map(|name| DesiredTopic {
        // Task i joins partition i: one per task, where the keys are placed among them.
        name: name.to_string(),
        partitions: facts.tasks,
        replication_factor: kafka.replication_factor,
        config: repartition.clone(),
    })
    .collect();

    DesiredTopics {
        // Task i keeps its state in changelog partition i: exactly one per input partition.
        changelog: DesiredTopic {
            name: kafka.changelog_topic.clone(),
            partitions: facts.tasks,
            replication_factor: kafka.replication_factor,
            config: changelog,
        },
        // Same count, so bad records of task i stay in order in one partition.
        dead_letter: DesiredTopic {
            name: kafka.dead_letter_topic.clone(),
            partitions: facts.tasks,
            replication_factor: kafka.replication_factor,
            config: dead_letter,
        },
        repartition,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::test_support;

    fn config(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn changelog_is_compacted_with_the_input_partition_count() {
        let topics = build(&test_support::validated(), &test_support::facts());
        assert_eq!(
            topics.changelog,
            DesiredTopic {
                name: "payments.card-count.changelog".into(),
                partitions: 6,
                replication_factor: Some(3),
                config: config(&[
                    ("cleanup.policy", "compact"),
                    // 30s interval: the 24h floor wins.
                    ("delete.retention.ms", "86400000"),
                    ("min.insync.replicas", "2"),
                ]),
            }
        );
        assert!(topics.repartition.is_empty());
        assert_eq!(
            topics.dead_letter,
            DesiredTopic {
                name: "payments.card-count.dlq".into(),
                partitions: 6,
                replication_factor: Some(3),
                config: config(&[("cleanup.policy", "delete"), ("min.insync.replicas", "2")]),
            }
        );
    }

    #[test]
    fn tombstone_retention_follows_a_long_checkpoint_interval() {
        let job = test_support::validated_with(|job| {
            job.spec.checkpoint.interval = "6h".into();
            job.spec.kafka.min_insync_replicas = None;
            job.spec.kafka.changelog_topic = Some("card-count-state".into());
        });
        let changelog = build(&job, &test_support::facts()).changelog;
        assert_eq!(changelog.name, "card-count-state");
        assert_eq!(
            changelog.config,
            config(&[
                ("cleanup.policy", "compact"),
                ("delete.retention.ms", &(60 * 3_600_000u64).to_string()),
            ])
        );
        retention::check_changelog_cleanup_policy(&changelog.config["cleanup.policy"], None)
            .unwrap();
    }

    #[test]
    fn a_re_keyed_side_gets_a_repartition_topic_of_the_task_count_kept_until_consumed() {
        let job = test_support::validated_with(|job| {
            job.spec.processor = serde_yaml_ng::from_str(
                r#"
type: join
keyField: card
timeField: ts
join:
  kind: stream
  left: {repartition: true}
  right: {topic: cards, keyField: card, timeField: ts, repartition: true}
  window: {before: 5s, after: 5s}
"#,
            )
            .unwrap();
        });
        let topics = build(&job, &test_support::facts());
        let names: Vec<&str> = topics.repartition.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "payments.card-count.left-repartition",
                "payments.card-count.right-repartition"
            ]
        );
        for topic in &topics.repartition {
            assert_eq!(topic.partitions, 6);
            assert_eq!(topic.replication_factor, Some(3));
            assert_eq!(
                topic.config,
                config(&[
                    ("cleanup.policy", "delete"),
                    ("min.insync.replicas", "2"),
                    ("retention.ms", "-1"),
                ])
            );
        }
    }
}
