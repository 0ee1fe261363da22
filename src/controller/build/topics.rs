//! The Kafka topics the operator creates for a job, as plain data for the Kafka admin API: the
//! compacted changelog and the dead-letter topic. Partition counts come from [`Facts`], never
//! from a broker call here.

use crate::adapters::kafka_admin::DesiredTopic;
use crate::controller::build::Facts;
use crate::controller::valid_job::ValidatedJob;
use crate::retention;
use std::collections::BTreeMap;

/// Both topics of a job, named so `apply` handles each explicitly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DesiredTopics {
    pub changelog: DesiredTopic,
    pub dead_letter: DesiredTopic,
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

    let mut dead_letter = shared;
    dead_letter.insert("cleanup.policy".into(), "delete".into());

    DesiredTopics {
        // Task i keeps its state in changelog partition i: exactly one per input partition.
        changelog: DesiredTopic {
            name: kafka.changelog_topic.clone(),
            partitions: facts.input_partitions,
            replication_factor: kafka.replication_factor,
            config: changelog,
        },
        // Same count, so bad records of task i stay in order in one partition.
        dead_letter: DesiredTopic {
            name: kafka.dead_letter_topic.clone(),
            partitions: facts.input_partitions,
            replication_factor: kafka.replication_factor,
            config: dead_letter,
        },
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
}
