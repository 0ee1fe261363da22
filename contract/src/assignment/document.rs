//! The assignment document: which worker pod is active and which are standbys for each task.
//! The operator writes it; workers watch it. `generation` only grows, and a checkpoint records the
//! generation of the owner that wrote it.

use crate::version::{FormatError, Versioned};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AssignmentDocument {
    pub version: u32,
    pub generation: u64,
    pub tasks: Vec<TaskAssignment>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TaskAssignment {
    /// Task i processes input partition i.
    pub task: u32,
    /// Pod name of the active owner; none while the task is unassigned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active: Option<String>,
    #[serde(default)]
    pub standbys: Vec<String>,
}

impl AssignmentDocument {
    pub fn active_tasks_of<'a>(&'a self, pod: &'a str) -> impl Iterator<Item = u32> + 'a {
        self.tasks
            .iter()
            .filter(move |t| t.active.as_deref() == Some(pod))
            .map(|t| t.task)
    }

    pub fn standby_tasks_of<'a>(&'a self, pod: &'a str) -> impl Iterator<Item = u32> + 'a {
        self.tasks
            .iter()
            .filter(move |t| t.standbys.iter().any(|s| s == pod))
            .map(|t| t.task)
    }
}

impl Versioned for AssignmentDocument {
    const FORMAT: &'static str = "assignment document";
    const VERSION: u32 = 1;

    fn version(&self) -> u32 {
        self.version
    }

    fn check(&self) -> Result<(), FormatError> {
        let invalid = |field: String, reason: &str| FormatError::InvalidField {
            format: Self::FORMAT,
            field,
            reason: reason.into(),
        };
        let mut seen = BTreeSet::new();
        for (index, task) in self.tasks.iter().enumerate() {
            if !seen.insert(task.task) {
                return Err(invalid(format!("tasks[{index}].task"), "listed twice"));
            }
            let distinct: BTreeSet<_> = task.standbys.iter().collect();
            if distinct.len() != task.standbys.len() {
                return Err(invalid(
                    format!("tasks[{index}].standbys"),
                    "a pod is listed twice",
                ));
            }
            if task
                .active
                .as_ref()
                .is_some_and(|active| distinct.contains(active))
            {
                return Err(invalid(
                    format!("tasks[{index}].standbys"),
                    "the active pod cannot also be a standby of the same task",
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> AssignmentDocument {
        AssignmentDocument {
            version: 1,
            generation: 7,
            tasks: vec![
                TaskAssignment {
                    task: 0,
                    active: Some("job-0".into()),
                    standbys: vec!["job-1".into()],
                },
                TaskAssignment {
                    task: 1,
                    active: Some("job-1".into()),
                    standbys: vec!["job-0".into()],
                },
                TaskAssignment {
                    task: 2,
                    active: None,
                    standbys: vec![],
                },
            ],
        }
    }

    #[test]
    fn round_trips_and_answers_per_pod() {
        let doc = sample();
        let back = AssignmentDocument::from_json(&doc.to_json()).unwrap();
        assert_eq!(back, doc);
        assert_eq!(doc.active_tasks_of("job-0").collect::<Vec<_>>(), vec![0]);
        assert_eq!(doc.standby_tasks_of("job-0").collect::<Vec<_>>(), vec![1]);
    }

    #[test]
    fn refuses_an_active_that_is_also_standby() {
        let mut doc = sample();
        doc.tasks[0].standbys.push("job-0".into());
        let error = AssignmentDocument::from_json(&doc.to_json()).unwrap_err();
        assert!(error.to_string().contains("tasks[0].standbys"), "{error}");
    }

    #[test]
    fn refuses_unknown_version() {
        let mut doc = sample();
        doc.version = 9;
        assert!(matches!(
            AssignmentDocument::from_json(&doc.to_json()),
            Err(FormatError::UnsupportedVersion { found: 9, .. })
        ));
    }
}
