//! One changelog per job. Two jobs that write one changelog topic fence each other's
//! transactions (their transactional ids differ, but the broker keeps one producer state per
//! partition leader and the records interleave) and, worse, each restores the other's state.
//! Derived names cannot clash (they hold the namespace and the job's name), but an explicit
//! `spec.kafka.changelogTopic` can name another job's changelog, derived or explicit.
//!
//! Which job keeps a changelog both name, decided from facts both reconciles see the same way,
//! so the two never both refuse or both go on:
//! 1. the job whose status records that it created the topic;
//! 2. otherwise the older job (creation time, then namespace and name).
//!
//! Jobs on different Kafka clusters (by their bootstrap servers, compared as a set) do not
//! clash. Pure; the reconcile reads the other jobs ([`crate::controller::read_facts`]).

use super::Refusal;
use crate::controller::read_facts::ChangelogClaim;
use crate::retention::RetentionViolation;

/// Whether `a` keeps a changelog before `b`: it created it, else it is older, else its name
/// comes first.
fn precedes(a: &ChangelogClaim, b: &ChangelogClaim) -> bool {
    (!a.created_it, a.created_at, &a.job) < (!b.created_it, b.created_at, &b.job)
}

/// The refusal of `own`'s changelog when another job keeps it.
pub fn changelog_claim(own: &ChangelogClaim, others: &[ChangelogClaim]) -> Result<(), Refusal> {
    let keeper = others
        .iter()
        .filter(|other| other.uid != own.uid && other.topic == own.topic)
        .filter(|other| !other.cluster.is_disjoint(&own.cluster))
        .filter(|other| precedes(other, own))
        .min_by(|a, b| {
            if precedes(a, b) {
                std::cmp::Ordering::Less
            } else {
                std::cmp::Ordering::Greater
            }
        });
    match keeper {
        None => Ok(()),
        Some(keeper) => Err(Refusal::changelog(RetentionViolation::ChangelogClaimed {
            topic: own.topic.clone(),
            owner: keeper.job.clone(),
            why: if keeper.created_it {
                " (the operator created it for that job)"
            } else {
                " (that job is older)"
            },
        })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(job: &str, created_at: i64, created_it: bool) -> ChangelogClaim {
        ChangelogClaim {
            job: job.into(),
            uid: format!("uid-{job}"),
            cluster: ChangelogClaim::cluster_of("Kafka-0:9092, kafka-1:9092"),
            topic: "shared.changelog".into(),
            created_it,
            created_at,
        }
    }

    fn owner_named(result: Result<(), Refusal>) -> Option<String> {
        match result.err()?.violation {
            RetentionViolation::ChangelogClaimed { owner, .. } => Some(owner),
            other => panic!("unexpected violation {other:?}"),
        }
    }

    #[test]
    fn the_older_of_two_jobs_naming_one_changelog_keeps_it() {
        let old = claim("a/old", 100, false);
        let new = claim("b/new", 200, false);
        assert_eq!(changelog_claim(&old, std::slice::from_ref(&new)), Ok(()));
        assert_eq!(
            owner_named(changelog_claim(&new, &[old])),
            Some("a/old".into())
        );
    }

    #[test]
    fn the_job_that_created_the_topic_keeps_it_even_when_younger() {
        let old = claim("a/old", 100, false);
        let creator = claim("b/creator", 200, true);
        assert_eq!(
            changelog_claim(&creator, std::slice::from_ref(&old)),
            Ok(())
        );
        assert_eq!(
            owner_named(changelog_claim(&old, &[creator])),
            Some("b/creator".into())
        );
    }

    #[test]
    fn other_topics_clusters_and_the_job_itself_do_not_clash() {
        let own = claim("a/job", 200, false);
        let mut other_topic = claim("b/other", 100, false);
        other_topic.topic = "b.other.changelog".into();
        let mut other_cluster = claim("c/other", 100, false);
        other_cluster.cluster = ChangelogClaim::cluster_of("elsewhere:9092");
        let mut itself = claim("a/job", 100, true);
        itself.uid = own.uid.clone();
        assert_eq!(
            changelog_claim(&own, &[other_topic, other_cluster, itself]),
            Ok(())
        );
    }

    #[test]
    fn a_tie_in_age_goes_to_the_first_name() {
        let a = claim("a/job", 100, false);
        let b = claim("b/job", 100, false);
        assert_eq!(changelog_claim(&a, std::slice::from_ref(&b)), Ok(()));
        assert_eq!(owner_named(changelog_claim(&b, &[a])), Some("a/job".into()));
    }
}
