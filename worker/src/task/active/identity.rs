//! Which processor built a task's state. Its config is stored in the state itself under
//! [`keys::PROCESSOR`], so it travels with the changelog and every checkpoint; a task whose
//! state was built by another processor config stops instead of reading it.
//!
//! Without this, a job deleted with `deletionPolicy: Retain` and created again under the same
//! name with another processor (another key field, window or kind) silently adopts the old
//! volumes, changelog, offsets and checkpoints, and reads state it does not understand. A
//! state with no identity (new, or written before this rule) gets this job's.

use super::processing_loop::ActiveLoop;
use crate::processor::keys;
use crate::store::{ChangeSet, RocksStore, StateStore};
use crate::task::TaskError;
use streamkeeper_contract::worker_config::ProcessorConfig;

/// The encoding version of the stored identity: a version byte, then the processor config as
/// JSON.
const IDENTITY_FORMAT_VERSION: u8 = 1;

fn encode(config: &ProcessorConfig) -> Result<Vec<u8>, TaskError> {
    let json = serde_json::to_vec(config)
        .map_err(|e| TaskError::Internal(format!("encoding the processor identity: {e}")))?;
    Ok([&[IDENTITY_FORMAT_VERSION][..], &json].concat())
}

fn decode(raw: &[u8]) -> Option<serde_json::Value> {
    let (&version, json) = raw.split_first()?;
    (version == IDENTITY_FORMAT_VERSION)
        .then(|| serde_json::from_slice(json).ok())
        .flatten()
}

/// What the stored identity says about running `ours` on this state.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Built by this processor config.
    Same,
    /// No identity yet: this job's is written.
    Unmarked,
    /// Built by another: the reason names both.
    Other(String),
}

/// Compares the stored identity `stored` with `ours` (pure).
pub fn judge(task: u32, stored: Option<&[u8]>, ours: &ProcessorConfig) -> Verdict {
    let Some(stored) = stored else {
        return Verdict::Unmarked;
    };
    let ours_json = serde_json::to_value(ours).unwrap_or(serde_json::Value::Null);
    match decode(stored) {
        Some(theirs) if theirs == ours_json => Verdict::Same,
        theirs => {
            let theirs = theirs.map_or_else(|| "an unreadable identity".into(), |v| v.to_string());
            Verdict::Other(format!(
                "task {task}'s state was built by processor {theirs}, but this job runs {ours_json}: state of one processor cannot be read by another. Delete the old job's data (deletionPolicy: Delete), or give this job other topic names and S3 prefix"
            ))
        }
    }
}

/// Checks the state restored into `store` against the job's processor, writing the job's
/// identity into a state that has none (in its own transaction, so it reaches the changelog).
pub(in crate::task) fn check(
    task: u32,
    store: &mut RocksStore,
    ours: &ProcessorConfig,
    active: &ActiveLoop<'_>,
) -> Result<(), TaskError> {
    let stored = store.get(keys::PROCESSOR)?;
    match judge(task, stored.as_deref(), ours) {
        Verdict::Same => Ok(()),
        Verdict::Unmarked => {
            let mut changes = ChangeSet::new();
            changes.put(keys::PROCESSOR, encode(ours)?);
            active.commit_changes(store, changes, super::sources::Positions::default())
        }
        Verdict::Other(reason) => Err(TaskError::ProcessorMismatch(reason)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use streamkeeper_contract::worker_config::ProcessorKind;

    fn count(key_field: &str) -> ProcessorConfig {
        ProcessorConfig {
            key_field: key_field.into(),
            time_field: None,
            kind: ProcessorKind::Count,
        }
    }

    #[test]
    fn the_same_config_is_the_same_and_another_is_named() {
        let stored = encode(&count("card")).unwrap();
        assert_eq!(judge(0, Some(&stored), &count("card")), Verdict::Same);
        assert_eq!(judge(0, None, &count("card")), Verdict::Unmarked);
        let Verdict::Other(reason) = judge(4, Some(&stored), &count("user")) else {
            panic!("must differ");
        };
        assert!(reason.contains("task 4"), "{reason}");
        assert!(
            reason.contains("\"card\"") && reason.contains("\"user\""),
            "{reason}"
        );
        let Verdict::Other(reason) = judge(0, Some(b"\x09junk"), &count("card")) else {
            panic!("an unknown version is not ours");
        };
        assert!(reason.contains("unreadable"), "{reason}");
    }
}
