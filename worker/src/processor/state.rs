//! The state access a processor is handed: byte keys to byte values, with point reads,
//! writes, deletes and an ordered range scan.
//!
//! The production implementation (the task's uncommitted overlay over RocksDB) lives with
//! the store, behind this trait, so processors never depend on RocksDB. [`MemoryState`] is the
//! in-memory implementation used by tests and by anything that needs a plain map.
//!
//! A processor owns the whole key space of the access it is handed: the runtime must keep
//! its own metadata (committed offsets) outside it, e.g. in another column family.

use std::collections::BTreeMap;
use std::error::Error as StdError;

/// A failure of the state backend (I/O, corruption detected by the engine). Never caused by
/// the record itself, so the loop treats it as fatal for the batch, not as a bad record.
#[derive(Debug, thiserror::Error)]
#[error("state backend failed: {message}")]
pub struct StateError {
    /// What the backend was doing, e.g. `get` or `scan`.
    pub message: String,
    /// The engine's own error.
    #[source]
    pub source: Option<Box<dyn StdError + Send + Sync>>,
}

impl StateError {
    /// A backend error with a source.
    pub fn backend(
        message: impl Into<String>,
        source: impl Into<Box<dyn StdError + Send + Sync>>,
    ) -> Self {
        Self {
            message: message.into(),
            source: Some(source.into()),
        }
    }
}

/// One stored entry: (key, value).
pub type Entry = (Vec<u8>, Vec<u8>);

/// A view of one task's state. Reads see the caller's uncommitted overlay first, then the
/// committed store; writes go to the overlay only (the caller makes them durable after the
/// Kafka transaction commits, and produces each one to the changelog).
pub trait StateAccess {
    /// The current value of `key`, or `None` when absent (or deleted in the overlay).
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StateError>;

    /// Records `key = value` (a full value, never a delta: the changelog carries it as is).
    fn put(&mut self, key: &[u8], value: Vec<u8>) -> Result<(), StateError>;

    /// Records the deletion of `key` (a tombstone in the changelog).
    fn delete(&mut self, key: &[u8]) -> Result<(), StateError>;

    /// Every live entry with `from <= key < to`, in ascending byte order of key.
    ///
    /// A `Vec` rather than an iterator keeps the trait object-safe and lets the caller write
    /// while handling the results; scans are used for closing windows and expiring entries,
    /// whose results all become writes anyway.
    fn scan(&self, from: &[u8], to: &[u8]) -> Result<Vec<Entry>, StateError>;

    /// The first `limit` entries [`StateAccess::scan`] would return, reading no further: a
    /// sweep handles a bounded part of a large range per record (fewer than `limit` entries
    /// means the range is done).
    fn scan_limited(&self, from: &[u8], to: &[u8], limit: usize) -> Result<Vec<Entry>, StateError>;
}

/// State in a `BTreeMap`: the reference implementation of [`StateAccess`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemoryState {
    entries: BTreeMap<Vec<u8>, Vec<u8>>,
}

impl MemoryState {
    /// An empty state.
    pub fn new() -> Self {
        Self::default()
    }

    /// All entries in key order (for comparing states in tests and for debugging).
    pub fn entries(&self) -> &BTreeMap<Vec<u8>, Vec<u8>> {
        &self.entries
    }

    /// Number of live keys.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when no key is stored.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

impl StateAccess for MemoryState {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StateError> {
        Ok(self.entries.get(key).cloned())
    }

    fn put(&mut self, key: &[u8], value: Vec<u8>) -> Result<(), StateError> {
        self.entries.insert(key.to_vec(), value);
        Ok(())
    }

    fn delete(&mut self, key: &[u8]) -> Result<(), StateError> {
        self.entries.remove(key);
        Ok(())
    }

    fn scan(&self, from: &[u8], to: &[u8]) -> Result<Vec<Entry>, StateError> {
        // An empty or inverted range is empty; BTreeMap::range would panic on it.
        if from >= to {
            return Ok(Vec::new());
        }
        Ok(self
            .entries
            .range(from.to_vec()..to.to_vec())
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect())
    }

    fn scan_limited(&self, from: &[u8], to: &[u8], limit: usize) -> Result<Vec<Entry>, StateError> {
        if from >= to {
            return Ok(Vec::new());
        }
        Ok(self
            .entries
            .range(from.to_vec()..to.to_vec())
            .take(limit)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn get_put_delete_round_trip() {
        let mut s = MemoryState::new();
        assert_eq!(s.get(b"a").unwrap(), None);
        s.put(b"a", b"1".to_vec()).unwrap();
        assert_eq!(s.get(b"a").unwrap(), Some(b"1".to_vec()));
        s.put(b"a", b"2".to_vec()).unwrap();
        assert_eq!(s.get(b"a").unwrap(), Some(b"2".to_vec()));
        s.delete(b"a").unwrap();
        assert_eq!(s.get(b"a").unwrap(), None);
        assert!(s.is_empty());
    }

    #[test]
    fn scan_is_half_open_and_ordered() {
        let mut s = MemoryState::new();
        for k in [b"b", b"a", b"d", b"c"] {
            s.put(k, k.to_vec()).unwrap();
        }
        let keys: Vec<Vec<u8>> = s
            .scan(b"b", b"d")
            .unwrap()
            .into_iter()
            .map(|e| e.0)
            .collect();
        assert_eq!(keys, vec![b"b".to_vec(), b"c".to_vec()]);
        assert!(
            s.scan(b"d", b"b").unwrap().is_empty(),
            "inverted range is empty"
        );
        assert!(
            s.scan(b"c", b"c").unwrap().is_empty(),
            "empty range is empty"
        );
    }
}
