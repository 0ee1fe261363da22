//! [`ChangeSet`]: the coalesced writes of one transaction (or one restore batch), key to new
//! value or deletion, in key order. The last write to a key wins.
//!
//! It is a plain container: the store checks keys when a change set is written, the
//! overlay when a processor writes.

use std::collections::BTreeMap;
use std::collections::btree_map;
use std::ops::Bound;

/// Writes keyed by state key: `Some(value)` puts, `None` deletes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChangeSet {
    entries: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
}

impl ChangeSet {
    /// No changes.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records `key = value`, replacing any earlier change to `key`.
    pub fn put(&mut self, key: &[u8], value: Vec<u8>) {
        self.entries.insert(key.to_vec(), Some(value));
    }

    /// Records the deletion of `key`, replacing any earlier change to `key`.
    pub fn delete(&mut self, key: &[u8]) {
        self.entries.insert(key.to_vec(), None);
    }

    /// Records `key = value` (`None` deletes).
    pub fn set(&mut self, key: Vec<u8>, value: Option<Vec<u8>>) {
        self.entries.insert(key, value);
    }

    /// The change to `key`: `None` when unchanged, `Some(None)` when deleted.
    pub fn get(&self, key: &[u8]) -> Option<Option<&[u8]>> {
        self.entries.get(key).map(Option::as_deref)
    }

    /// Every change in ascending key order: one changelog record each (a tombstone for
    /// `None`).
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], Option<&[u8]>)> + '_ {
        self.entries
            .iter()
            .map(|(k, v)| (k.as_slice(), v.as_deref()))
    }

    /// The changes with `from <= key < to`, in key order (empty when `from >= to`).
    pub fn range<'a>(
        &'a self,
        from: &[u8],
        to: &[u8],
    ) -> impl Iterator<Item = (&'a [u8], Option<&'a [u8]>)> + 'a {
        // BTreeMap::range panics on an inverted range; an empty one yields nothing anyway.
        let range = (from < to).then(|| {
            self.entries
                .range::<[u8], _>((Bound::Included(from), Bound::Excluded(to)))
        });
        range
            .into_iter()
            .flatten()
            .map(|(k, v)| (k.as_slice(), v.as_deref()))
    }

    /// The change to `key` as owned data: `None` when unchanged (for [`ChangeSet::restore`]).
    pub fn entry(&self, key: &[u8]) -> Option<Option<Vec<u8>>> {
        self.entries.get(key).cloned()
    }

    /// Puts back what [`ChangeSet::entry`] returned: `None` removes the change to `key`.
    pub fn restore(&mut self, key: Vec<u8>, entry: Option<Option<Vec<u8>>>) {
        match entry {
            Some(value) => {
                self.entries.insert(key, value);
            }
            None => {
                self.entries.remove(&key);
            }
        }
    }

    /// Number of changed keys.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when nothing changed.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Forgets every change.
    pub fn clear(&mut self) {
        self.entries.clear();
    }
}

impl IntoIterator for ChangeSet {
    type Item = (Vec<u8>, Option<Vec<u8>>);
    type IntoIter = btree_map::IntoIter<Vec<u8>, Option<Vec<u8>>>;

    fn into_iter(self) -> Self::IntoIter {
        self.entries.into_iter()
    }
}

impl FromIterator<(Vec<u8>, Option<Vec<u8>>)> for ChangeSet {
    /// Later items win over earlier ones for the same key (changelog order).
    fn from_iter<I: IntoIterator<Item = (Vec<u8>, Option<Vec<u8>>)>>(iter: I) -> Self {
        Self {
            entries: iter.into_iter().collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_write_wins_and_order_is_by_key() {
        let mut c = ChangeSet::new();
        c.put(b"b", b"1".to_vec());
        c.put(b"a", b"1".to_vec());
        c.delete(b"b");
        c.put(b"a", b"2".to_vec());
        let all: Vec<_> = c.iter().collect();
        assert_eq!(all, vec![(&b"a"[..], Some(&b"2"[..])), (&b"b"[..], None)]);
        assert_eq!(c.get(b"b"), Some(None));
        assert_eq!(c.get(b"z"), None);
        assert_eq!(c.len(), 2);
    }

    #[test]
    fn from_iter_keeps_the_last_change_per_key() {
        let c: ChangeSet = [
            (b"k".to_vec(), Some(b"1".to_vec())),
            (b"k".to_vec(), None),
            (b"j".to_vec(), None),
            (b"j".to_vec(), Some(b"2".to_vec())),
        ]
        .into_iter()
        .collect();
        assert_eq!(c.get(b"k"), Some(None));
        assert_eq!(c.get(b"j"), Some(Some(&b"2"[..])));
    }

    #[test]
    fn range_is_half_open_and_tolerates_inverted_bounds() {
        let c: ChangeSet = [b"a", b"b", b"c"]
            .into_iter()
            .map(|k| (k.to_vec(), None))
            .collect();
        let keys: Vec<_> = c.range(b"b", b"c").map(|e| e.0).collect();
        assert_eq!(keys, vec![&b"b"[..]]);
        assert_eq!(c.range(b"c", b"a").count(), 0);
        assert_eq!(c.range(b"b", b"b").count(), 0);
    }
}
