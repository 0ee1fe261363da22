//! Which incarnation of the changelog topic a state, a checkpoint or the topic itself belongs to.
//!
//! Offsets name positions in one topic. After a changelog topic is deleted and created again,
//! and rebuilt by a restore from the input, the old checkpoints' offsets say nothing about the
//! new topic: once its offsets pass theirs, they would look usable (and best: the highest
//! changelog offset wins) and install state from another history. Local state kept on a volume
//! from before the loss is just as foreign. So the rebuild writes a fresh incarnation id as the
//! first record of the new topic ([`keys::CHANGELOG_INCARNATION`] sorts before every other state
//! key, so it leads the rebuild's first transaction), the id travels with the state into every
//! later checkpoint's manifest, and a restore reads the topic's first record (past the operator's
//! owner record, which leads partition 0 and is never state) to learn its
//! incarnation and trusts only local state and checkpoints of the same one. The topic as first
//! created has no id (`None`); so do states and manifests from before this rule.
//!
//! (Kafka's own topic id would say the same, but the client library here does not expose it.)
//!
//! The id is part of the state, so it lives with the store: the checkpoints write it into their
//! manifests and the restore compares it, and neither depends on the other for it.

use super::api::StateStore;
use super::rocks::RocksStore;
use crate::processor::keys;
use sha2::{Digest, Sha256};

/// The incarnation recorded in a state, if any.
pub fn of_state(store: &RocksStore) -> Option<String> {
    store
        .get(keys::CHANGELOG_INCARNATION)
        .ok()
        .flatten()
        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
}

/// The incarnation a changelog's first data record names: `None` unless it is the
/// incarnation record.
pub fn of_first_record(key: &[u8], value: Option<&[u8]>) -> Option<String> {
    (key == keys::CHANGELOG_INCARNATION)
        .then(|| value.map(|v| String::from_utf8_lossy(v).into_owned()))
        .flatten()
}

/// A new incarnation id for task `task`'s rebuilt changelog: unique per rebuild (time, process
/// and task hashed), never derived from the data.
pub fn fresh(task: u32) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let mut hash = Sha256::new();
    hash.update(nanos.to_be_bytes());
    hash.update(std::process::id().to_be_bytes());
    hash.update(task.to_be_bytes());
    hash.finalize()
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_incarnation_record_names_an_incarnation() {
        assert_eq!(
            of_first_record(keys::CHANGELOG_INCARNATION, Some(b"ab12")),
            Some("ab12".into())
        );
        assert_eq!(of_first_record(b"ccard-1", Some(b"ab12")), None);
        assert_eq!(of_first_record(keys::CHANGELOG_INCARNATION, None), None);
    }

    #[test]
    fn the_key_sorts_before_every_processor_key_and_is_not_reserved() {
        for key in [
            keys::INPUT_POSITION,
            keys::PROCESSOR,
            keys::STREAM_TIME,
            b"a",
            b"ccard",
        ] {
            assert!(keys::CHANGELOG_INCARNATION < key);
        }
        assert!(!crate::store::metadata::is_reserved_key(
            keys::CHANGELOG_INCARNATION
        ));
    }

    #[test]
    fn fresh_ids_differ() {
        let (a, b) = (fresh(0), fresh(0));
        assert_eq!(a.len(), 16);
        assert_ne!(a, b);
    }
}
