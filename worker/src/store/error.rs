//! The store's typed errors, each with its context (task, path, operation) and a stable
//! [`StoreError::category`] for events and metric labels.
//!
//! The engine's own error is carried as an opaque source, so this type (and the
//! [`super::StateStore`] trait that returns it) does not depend on RocksDB.

use std::error::Error as StdError;
use std::path::PathBuf;

/// An engine error, boxed so the interface does not name the engine.
pub type EngineSource = Box<dyn StdError + Send + Sync>;

/// A failure of the local state store of one task.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Another owner (another process, or another store in this process) holds the task's
    /// directory. Two owners of one task must never share its local state.
    #[error(
        "state of task {task} at {path} is locked by another owner (another worker process or \
         another open store); refusing to open it twice"
    )]
    Locked {
        /// The task whose state is locked.
        task: u32,
        /// The lock file that could not be taken.
        path: PathBuf,
    },

    /// A file-system operation on the task's directory failed.
    #[error("{op} failed for task {task} at {path}")]
    Io {
        /// What was being done, e.g. `create task directory`.
        op: &'static str,
        /// The task.
        task: u32,
        /// The path operated on.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },

    /// The storage engine failed (read, write, flush, checkpoint).
    #[error("state engine {op} failed for task {task} at {path}")]
    Engine {
        /// What was being done, e.g. `commit` or `scan`.
        op: &'static str,
        /// The task.
        task: u32,
        /// The database directory.
        path: PathBuf,
        /// The engine's error.
        #[source]
        source: EngineSource,
    },

    /// The engine found its own files damaged while reading or writing (a checksum
    /// mismatch, a missing file). The state cannot be trusted: wipe and rebuild it.
    #[error("state of task {task} at {path} is corrupt ({op})")]
    Corruption {
        /// What was being done.
        op: &'static str,
        /// The task.
        task: u32,
        /// The database directory.
        path: PathBuf,
        /// The engine's error.
        #[source]
        source: EngineSource,
    },

    /// A key of the store's reserved range (the empty key or a key starting with 0x00) was
    /// written or read as processor state.
    #[error("key {key_hex} is reserved for the store's own metadata (task {task})")]
    ReservedKey {
        /// The task.
        task: u32,
        /// The offending key, hex-encoded.
        key_hex: String,
    },

    /// Metadata handed to the store does not belong to this task.
    #[error("metadata for task {found} handed to the store of task {task}")]
    TaskMismatch {
        /// The store's task.
        task: u32,
        /// The task named in the metadata.
        found: u32,
    },

    /// An operation was called in a state that does not allow it, e.g. `commit` while a
    /// restore is unfinished, or any operation on a store found corrupt and not yet wiped.
    #[error("{op} is not allowed for task {task} at {path}: {why}")]
    InvalidState {
        /// The refused operation.
        op: &'static str,
        /// The task.
        task: u32,
        /// The database directory.
        path: PathBuf,
        /// The state that forbids it.
        why: &'static str,
    },
}

impl StoreError {
    /// A stable, low-cardinality name of the error's kind (Event reason, metric label).
    pub fn category(&self) -> &'static str {
        match self {
            StoreError::Locked { .. } => "state_locked",
            StoreError::Io { .. } => "state_io",
            StoreError::Engine { .. } => "state_engine",
            StoreError::Corruption { .. } => "state_corrupt",
            StoreError::ReservedKey { .. } => "state_reserved_key",
            StoreError::TaskMismatch { .. } => "state_task_mismatch",
            StoreError::InvalidState { .. } => "state_invalid_call",
        }
    }
}

/// Lower-case hex of `bytes`, for keys in messages.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn categories_are_stable_and_messages_carry_context() {
        let locked = StoreError::Locked {
            task: 3,
            path: "/state/task-3/owner.lock".into(),
        };
        assert_eq!(locked.category(), "state_locked");
        let text = locked.to_string();
        assert!(
            text.contains("task 3") && text.contains("/state/task-3/owner.lock"),
            "{text}"
        );

        let reserved = StoreError::ReservedKey {
            task: 0,
            key_hex: hex(&[0, 0xab]),
        };
        assert_eq!(reserved.category(), "state_reserved_key");
        assert!(reserved.to_string().contains("00ab"));
    }
}
