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
use crate::processor::{Build, ProcessorIdentity};
use crate::store::{ChangeSet, RocksStore, StateStore};
use crate::task::TaskError;
use serde_json::Value;

/// The encoding version of the stored identity: a version byte, then
/// [`ProcessorIdentity::to_stored`]'s JSON.
const IDENTITY_FORMAT_VERSION: u8 = 1;

fn encode(identity: &ProcessorIdentity) -> Result<Vec<u8>, TaskError> {
    let json = serde_json::to_vec(&identity.to_stored())
        .map_err(|e| TaskError::Internal(format!("encoding the processor identity: {e}")))?;
    Ok([&[IDENTITY_FORMAT_VERSION][..], &json].concat())
}

fn decode(raw: &[u8]) -> Option<Value> {
    let (&version, json) = raw.split_first()?;
    (version == IDENTITY_FORMAT_VERSION)
        .then(|| serde_json::from_slice(json).ok())
        .flatten()
}

/// What a stored identity says about running this job on the state (the input's too).
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Built by this job's processor (input).
    Same,
    /// No identity yet: this job's is written.
    Unmarked,
    /// Built by another: the reason names both.
    Other(String),
}

/// What the stored processor identity says about running `ours` on this state.
#[derive(Debug, Clone, PartialEq)]
pub enum ProcessorVerdict {
    /// As [`Verdict`] says.
    Is(Verdict),
    /// Built by an earlier build of this processor, with the same settings, whose state this
    /// build declares it reads: this build's identity is written.
    Adopted {
        /// The build that built the state.
        from: Build,
    },
}

/// Compares the stored identity `stored` with `ours` (pure).
pub fn judge(task: u32, stored: Option<&[u8]>, ours: &ProcessorIdentity) -> ProcessorVerdict {
    let Some(stored) = stored else {
        return ProcessorVerdict::Is(Verdict::Unmarked);
    };
    let theirs_json = decode(stored);
    let theirs = theirs_json.clone().map(ProcessorIdentity::from_stored);
    let hint = match &theirs {
        Some(theirs) if theirs.settings == ours.settings => {
            if theirs.build == ours.build {
                return ProcessorVerdict::Is(Verdict::Same);
            }
            match (&theirs.build, &ours.build) {
                (Some(from), Some(_)) if ours.reads_state_of.contains(from) => {
                    return ProcessorVerdict::Adopted { from: from.clone() };
                }
                (Some(from), Some(_)) => how_to_declare(from),
                _ => String::new(),
            }
        }
        _ => String::new(),
    };
    let theirs = theirs_json.map_or_else(|| "an unreadable identity".into(), |v| v.to_string());
    let ours = ours.to_stored();
    ProcessorVerdict::Is(Verdict::Other(format!(
        "task {task}'s state was built by processor {theirs}, but this job runs {ours}: state of one processor cannot be read by another.{hint} Delete the old job's data (deletionPolicy: Delete), or give this job other topic names and S3 prefix"
    )))
}

/// How a build declares that it reads the state `from` built.
fn how_to_declare(from: &Build) -> String {
    match from {
        Build::Version(version) => format!(
            " If this version reads the state version {version} built, declare it in the processor's registration (reads_state_of([{version}]))."
        ),
        Build::Module(digest) => format!(
            " If this module reads the state module {digest} built, declare it in the job: spec.processor.wasm.readsStateOf: [\"{digest}\"]."
        ),
    }
}

/// Checks the state restored into `store` against the job's processor, writing the job's
/// identity into a state that has none or that an older version built (in its own
/// transaction, so it reaches the changelog).
pub(in crate::task) fn check(
    task: u32,
    store: &mut RocksStore,
    ours: &ProcessorIdentity,
    active: &ActiveLoop<'_>,
) -> Result<(), TaskError> {
    let stored = store.get(keys::PROCESSOR)?;
    match judge(task, stored.as_deref(), ours) {
        ProcessorVerdict::Is(Verdict::Same) => Ok(()),
        ProcessorVerdict::Is(Verdict::Unmarked) => record(store, ours, active),
        ProcessorVerdict::Adopted { from } => {
            let to = ours
                .build
                .as_ref()
                .map(Build::to_string)
                .unwrap_or_default();
            tracing::info!(
                task,
                %from,
                %to,
                "the state was built by an earlier build of the processor, which this one declares it reads: going on from it, recording this build"
            );
            record(store, ours, active)
        }
        ProcessorVerdict::Is(Verdict::Other(reason)) => Err(TaskError::ProcessorMismatch(reason)),
    }
}

fn record(
    store: &mut RocksStore,
    ours: &ProcessorIdentity,
    active: &ActiveLoop<'_>,
) -> Result<(), TaskError> {
    let mut changes = ChangeSet::new();
    changes.put(keys::PROCESSOR, encode(ours)?);
    active.commit_changes(store, changes, super::sources::Positions::default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn count(key_field: &str) -> ProcessorIdentity {
        ProcessorIdentity {
            settings: serde_json::json!({"keyField": key_field, "kind": "count"}),
            build: None,
            reads_state_of: BTreeSet::new(),
        }
    }

    fn custom(version: u32, reads: &[u32], threshold: u32) -> ProcessorIdentity {
        ProcessorIdentity {
            settings: serde_json::json!({"keyField": "card", "kind": "custom", "name": "velocity-check", "config": {"threshold": threshold}}),
            build: Some(Build::Version(version)),
            reads_state_of: reads.iter().map(|&v| Build::Version(v)).collect(),
        }
    }

    fn wasm(digest: char, reads: &[char], max: u32) -> ProcessorIdentity {
        let module = |c: char| Build::Module(c.to_string().repeat(64));
        ProcessorIdentity {
            settings: serde_json::json!({"keyField": "card", "kind": "wasm", "config": {"maxTransactions": max}}),
            build: Some(module(digest)),
            reads_state_of: reads.iter().map(|&c| module(c)).collect(),
        }
    }

    #[test]
    fn the_same_config_is_the_same_and_another_is_named() {
        let stored = encode(&count("card")).unwrap();
        assert_eq!(
            judge(0, Some(&stored), &count("card")),
            ProcessorVerdict::Is(Verdict::Same)
        );
        assert_eq!(
            judge(0, None, &count("card")),
            ProcessorVerdict::Is(Verdict::Unmarked)
        );
        let ProcessorVerdict::Is(Verdict::Other(reason)) = judge(4, Some(&stored), &count("user"))
        else {
            panic!("must differ");
        };
        assert!(reason.contains("task 4"), "{reason}");
        assert!(
            reason.contains("\"card\"") && reason.contains("\"user\""),
            "{reason}"
        );
        let ProcessorVerdict::Is(Verdict::Other(reason)) =
            judge(0, Some(b"\x09junk"), &count("card"))
        else {
            panic!("an unknown version is not ours");
        };
        assert!(reason.contains("unreadable"), "{reason}");
    }

    #[test]
    fn a_built_in_identity_is_stored_as_before_custom_processors() {
        // A state written before custom processors holds the config's JSON alone.
        let before = [&[1u8][..], br#"{"keyField":"card","kind":"count"}"#].concat();
        assert_eq!(
            judge(0, Some(&before), &count("card")),
            ProcessorVerdict::Is(Verdict::Same)
        );
    }

    #[test]
    fn a_new_version_reads_an_old_state_only_when_it_declares_it() {
        let stored = encode(&custom(1, &[], 3)).unwrap();
        assert_eq!(
            judge(0, Some(&stored), &custom(1, &[], 3)),
            ProcessorVerdict::Is(Verdict::Same)
        );
        assert_eq!(
            judge(0, Some(&stored), &custom(2, &[1], 3)),
            ProcessorVerdict::Adopted {
                from: Build::Version(1)
            }
        );
        let ProcessorVerdict::Is(Verdict::Other(reason)) =
            judge(2, Some(&stored), &custom(2, &[], 3))
        else {
            panic!("an undeclared version must not read the state");
        };
        assert!(
            reason.contains("\"version\":1") && reason.contains("\"version\":2"),
            "{reason}"
        );
        assert!(reason.contains("reads_state_of([1])"), "{reason}");
        // Another config is another processor, whatever the versions declare.
        let ProcessorVerdict::Is(Verdict::Other(reason)) =
            judge(0, Some(&stored), &custom(2, &[1], 5))
        else {
            panic!("another config must not read the state");
        };
        assert!(!reason.contains("reads_state_of"), "{reason}");
        // A built-in processor's state is no custom processor's.
        let counted = encode(&count("card")).unwrap();
        assert!(matches!(
            judge(0, Some(&counted), &custom(1, &[], 3)),
            ProcessorVerdict::Is(Verdict::Other(_))
        ));
    }

    #[test]
    fn a_new_module_reads_an_old_modules_state_only_when_the_job_declares_it() {
        let stored = encode(&wasm('a', &[], 3)).unwrap();
        assert_eq!(
            judge(0, Some(&stored), &wasm('a', &[], 3)),
            ProcessorVerdict::Is(Verdict::Same)
        );
        assert_eq!(
            judge(0, Some(&stored), &wasm('b', &['a'], 3)),
            ProcessorVerdict::Adopted {
                from: Build::Module("a".repeat(64))
            }
        );
        let ProcessorVerdict::Is(Verdict::Other(reason)) =
            judge(1, Some(&stored), &wasm('b', &['c'], 3))
        else {
            panic!("an undeclared module must not read the state");
        };
        let (a, b) = ("a".repeat(64), "b".repeat(64));
        assert!(reason.contains(&a) && reason.contains(&b), "{reason}");
        assert!(
            reason.contains(&format!("spec.processor.wasm.readsStateOf: [\"{a}\"]")),
            "{reason}"
        );
        // Another config is another processor, whatever the job declares.
        let ProcessorVerdict::Is(Verdict::Other(reason)) =
            judge(0, Some(&stored), &wasm('b', &['a'], 4))
        else {
            panic!("another config must not read the state");
        };
        assert!(!reason.contains("readsStateOf"), "{reason}");
    }
}
