//! [`Overlay`]: the open transaction's uncommitted changes over a task's committed
//! [`StateStore`], handed to processors as their [`StateAccess`].
//!
//! Reads see the overlay first, then the store; writes go to the overlay only. The loop
//! produces one changelog record per changed key from [`Overlay::changes`] and, once the
//! Kafka transaction committed, hands [`Overlay::into_changes`] to [`StateStore::commit`].
//! On abort it calls [`Overlay::clear`]. The overlay never writes to the store itself.
//!
//! It also remembers what each key it wrote held before its first write, so the writes made
//! through this overlay alone (one input record's) can be undone ([`Overlay::undo`]) when the
//! loop refuses that record, leaving the rest of the transaction as it was.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::iter::Peekable;

use super::api::StateStore;
use super::changes::ChangeSet;
use super::error::{StoreError, hex};
use super::metadata::is_reserved_key;
use crate::processor::{Entry, StateAccess, StateError};

/// Uncommitted changes over a committed base.
pub struct Overlay<'a> {
    base: &'a dyn StateStore,
    changes: ChangeSet,
    /// Per key written through this overlay, its change before the first write.
    before: BTreeMap<Vec<u8>, Option<Option<Vec<u8>>>>,
}

impl std::fmt::Debug for Overlay<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Overlay")
            .field("task", &self.base.task())
            .field("changed_keys", &self.changes.len())
            .finish()
    }
}

impl<'a> Overlay<'a> {
    /// An empty overlay over `base`.
    pub fn new(base: &'a dyn StateStore) -> Self {
        Self::with_changes(base, ChangeSet::new())
    }

    /// An overlay over `base` holding `changes` (e.g. a cleared set reused for its
    /// allocation, or changes carried across a borrow of the store).
    pub fn with_changes(base: &'a dyn StateStore, changes: ChangeSet) -> Self {
        Self {
            base,
            changes,
            before: BTreeMap::new(),
        }
    }

    /// The keys written through this overlay, with their change now (`None`: deleted).
    pub fn written(&self) -> impl Iterator<Item = (&[u8], Option<&[u8]>)> + '_ {
        self.before.keys().map(|key| {
            let now = self.changes.get(key).flatten();
            (key.as_slice(), now)
        })
    }

    /// Takes back every write made through this overlay; earlier changes stay.
    pub fn undo(&mut self) {
        for (key, before) in std::mem::take(&mut self.before) {
            self.changes.restore(key, before);
        }
    }

    fn remember(&mut self, key: &[u8]) {
        if !self.before.contains_key(key) {
            self.before.insert(key.to_vec(), self.changes.entry(key));
        }
    }

    /// The coalesced changes so far, in key order (last write per key wins).
    pub fn changes(&self) -> &ChangeSet {
        &self.changes
    }

    /// The changes, ending the overlay's borrow of the store so they can be committed.
    pub fn into_changes(self) -> ChangeSet {
        self.changes
    }

    /// Forgets every uncommitted change (the transaction was aborted).
    pub fn clear(&mut self) {
        self.changes.clear();
        self.before.clear();
    }

    fn check_key(&self, op: &'static str, key: &[u8]) -> Result<(), StateError> {
        if is_reserved_key(key) {
            let error = StoreError::ReservedKey {
                task: self.base.task(),
                key_hex: hex(key),
            };
            return Err(StateError::backend(op, error));
        }
        Ok(())
    }
}

impl StateAccess for Overlay<'_> {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StateError> {
        self.check_key("get", key)?;
        match self.changes.get(key) {
            Some(change) => Ok(change.map(<[u8]>::to_vec)),
            None => self
                .base
                .get(key)
                .map_err(|e| StateError::backend("get", e)),
        }
    }

    fn put(&mut self, key: &[u8], value: Vec<u8>) -> Result<(), StateError> {
        self.check_key("put", key)?;
        self.remember(key);
        self.changes.put(key, value);
        Ok(())
    }

    fn delete(&mut self, key: &[u8]) -> Result<(), StateError> {
        self.check_key("delete", key)?;
        self.remember(key);
        self.changes.delete(key);
        Ok(())
    }

    fn scan(&self, from: &[u8], to: &[u8]) -> Result<Vec<Entry>, StateError> {
        if from >= to {
            return Ok(Vec::new());
        }
        let base = self
            .base
            .scan(from, to)
            .map_err(|e| StateError::backend("scan", e))?;
        Ok(merge(base, self.changes.range(from, to)))
    }

    fn scan_limited(&self, from: &[u8], to: &[u8], limit: usize) -> Result<Vec<Entry>, StateError> {
        // Pages of the base merged with the changes up to the page's last key; deletions in
        // the overlay can hide base entries, so another page is read until `limit` live
        // entries are found or the base is exhausted ("fewer than `limit`" means done).
        let mut out: Vec<Entry> = Vec::new();
        let mut start = from.to_vec();
        while out.len() < limit && start.as_slice() < to {
            let want = limit - out.len();
            let base = self
                .base
                .scan_limited(&start, to, want)
                .map_err(|e| StateError::backend("scan", e))?;
            let exhausted = base.len() < want;
            let upto = match base.last() {
                Some((last, _)) if !exhausted => [last.as_slice(), &[0]].concat(),
                _ => to.to_vec(),
            };
            out.extend(merge(base, self.changes.range(&start, &upto)));
            if exhausted {
                break;
            }
            start = upto;
        }
        out.truncate(limit);
        Ok(out)
    }
}

/// Merges committed entries with overlay changes, both in ascending key order: an overlay
/// change replaces the committed entry of the same key, and a deletion hides it.
fn merge<'c>(
    base: Vec<Entry>,
    changes: impl Iterator<Item = (&'c [u8], Option<&'c [u8]>)>,
) -> Vec<Entry> {
    let mut out = Vec::with_capacity(base.len());
    let mut base = base.into_iter().peekable();
    let mut changes: Peekable<_> = changes.peekable();
    loop {
        let order = match (base.peek(), changes.peek()) {
            (None, None) => break,
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (Some((bk, _)), Some((ck, _))) => bk.as_slice().cmp(ck),
        };
        if order != Ordering::Greater {
            // The base entry comes first, or is replaced by the change to the same key.
            let entry = base.next();
            if order == Ordering::Less {
                out.extend(entry);
                continue;
            }
        }
        if let Some((key, Some(value))) = changes.next() {
            out.push((key.to_vec(), value.to_vec()));
        }
    }
    out
}

#[cfg(test)]
#[path = "overlay_tests.rs"]
mod tests;
