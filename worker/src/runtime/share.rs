//! Which of a job's tasks this process runs.
//!
//! Standalone mode runs every task. A pod the operator runs (a pod name and no replica count)
//! runs none until the operator's assignment document arrives. A pod started by hand with
//! `--replicas` takes a static share by its ordinal until a document arrives: task `i` runs on
//! the pod with ordinal `i mod replicas`; pods started with different counts can briefly
//! overlap, and the transactional id fences the older writer, so the result stays exact.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskShare {
    All,
    Replica {
        ordinal: u32,
        replicas: u32,
    },
    /// Nothing until the operator's assignment document says what.
    Assigned,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShareError {
    #[error("replicas must be at least 1, got {0}")]
    NoReplicas(u32),
    #[error("pod name {0:?} does not end in -<ordinal> (a StatefulSet pod name)")]
    NoOrdinal(String),
    #[error("pod ordinal {ordinal} is not below the replica count {replicas}")]
    OrdinalOutOfRange { ordinal: u32, replicas: u32 },
}

impl TaskShare {
    /// The share of the StatefulSet pod `pod_name` among `replicas` pods.
    pub fn of_pod(pod_name: &str, replicas: u32) -> Result<Self, ShareError> {
        if replicas == 0 {
            return Err(ShareError::NoReplicas(replicas));
        }
        let ordinal = pod_name
            .rsplit_once('-')
            .and_then(|(_, n)| n.parse::<u32>().ok())
            .ok_or_else(|| ShareError::NoOrdinal(pod_name.to_string()))?;
        if ordinal >= replicas {
            return Err(ShareError::OrdinalOutOfRange { ordinal, replicas });
        }
        Ok(Self::Replica { ordinal, replicas })
    }

    /// The tasks of a job with `partitions` input partitions that this process runs.
    pub fn tasks(self, partitions: u32) -> Vec<u32> {
        (0..partitions)
            .filter(|task| match self {
                Self::All => true,
                Self::Replica { ordinal, replicas } => task % replicas == ordinal,
                Self::Assigned => false,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_task_has_exactly_one_replica() {
        for replicas in 1..6 {
            let mut owners = vec![0; 8];
            for ordinal in 0..replicas {
                let share = TaskShare::of_pod(&format!("card-count-{ordinal}"), replicas).unwrap();
                for task in share.tasks(8) {
                    owners[task as usize] += 1;
                }
            }
            assert!(owners.iter().all(|&n| n == 1), "{replicas}: {owners:?}");
        }
        assert_eq!(TaskShare::All.tasks(3), [0, 1, 2]);
        assert!(TaskShare::Assigned.tasks(3).is_empty());
    }

    #[test]
    fn pod_names_without_a_valid_ordinal_are_refused() {
        assert_eq!(
            TaskShare::of_pod("worker", 2),
            Err(ShareError::NoOrdinal("worker".into()))
        );
        assert!(matches!(
            TaskShare::of_pod("job-2", 2),
            Err(ShareError::OrdinalOutOfRange { .. })
        ));
        assert!(matches!(
            TaskShare::of_pod("job-0", 0),
            Err(ShareError::NoReplicas(0))
        ));
    }
}
