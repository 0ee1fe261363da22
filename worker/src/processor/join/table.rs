//! The stream-table join over a versioned table: table records write versions of their key,
//! and each stream record is answered with the version valid at its own time. The rules are in
//! the module doc of `join`.
//!
//! The versions of a key are contiguous: each ends where the next starts, the newest ends at
//! `i64::MAX`. A table record at `f` lands in the version `V` that contains `f` (splitting it
//! in two, or replacing it when it starts at `f`), or before the oldest one.

use super::layout::{self, Content, PruneKind, TableVersion};
use super::spec::{self, JoinConfigError, JoinMode};
use crate::processor::api::ProcessError;
use crate::processor::codec::{self, Marker};
use crate::processor::keys;
use crate::processor::record::{DropReason, InputRecord, ProcessOutput, Side};
use crate::processor::state::StateAccess;
use crate::processor::sweep;

/// A validated stream-table join.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct TableJoin {
    mode: JoinMode,
    history_ms: i64,
}

/// One stored version, with its end.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Version {
    from: i64,
    /// `i64::MAX` for the newest version of its key.
    to: i64,
    content: Content,
}

impl Version {
    /// Its pruning index entry: (due, kind). The newest version with a value is never pruned.
    fn prune_entry(&self) -> Option<(i64, PruneKind)> {
        match (self.to, &self.content) {
            (i64::MAX, Content::Value(_)) => None,
            (i64::MAX, Content::Tombstone) => Some((self.from, PruneKind::LatestTombstone)),
            (to, _) => Some((to, PruneKind::Ends)),
        }
    }

    /// False when no lookup at or after `cutoff` can need it (see [`PruneKind`]).
    fn needed(&self, cutoff: i64) -> bool {
        self.prune_entry().is_none_or(|(due, _)| due > cutoff)
    }

    fn stored(&self) -> TableVersion {
        TableVersion {
            valid_from: self.from,
            content: self.content.clone(),
        }
    }
}

fn load_table_time(state: &dyn StateAccess) -> Result<Option<i64>, ProcessError> {
    match state.get(keys::TABLE_TIME)? {
        None => Ok(None),
        Some(bytes) => codec::decode_time(&bytes)
            .map(Some)
            .map_err(|e| ProcessError::corrupt(keys::TABLE_TIME, e)),
    }
}

/// The first stored version of `key` ending after `t`: the one valid at `t` if it starts at or
/// before `t`, else the oldest one (and nothing is valid at `t`).
fn version_ending_after(
    state: &dyn StateAccess,
    key: &str,
    t: i64,
) -> Result<Option<Version>, ProcessError> {
    let (from, to) = layout::versions_ending_after(key, t);
    let Some((state_key, bytes)) = state.scan_limited(&from, &to, 1)?.into_iter().next() else {
        return Ok(None);
    };
    let corrupt = |e| ProcessError::corrupt(&state_key, e);
    let (_, valid_to) = layout::decode_version_key(&state_key).map_err(corrupt)?;
    let stored = TableVersion::decode(&bytes).map_err(corrupt)?;
    Ok(Some(Version {
        from: stored.valid_from,
        to: valid_to,
        content: stored.content,
    }))
}

impl TableJoin {
    pub(super) fn new(mode: JoinMode, history_ms: u64) -> Result<Self, JoinConfigError> {
        Ok(Self {
            mode,
            history_ms: spec::duration("history_ms", history_ms, 1)?,
        })
    }

    /// The oldest stream time answered exactly at table time `table_time`.
    fn cutoff(&self, table_time: i64) -> i64 {
        table_time.saturating_sub(self.history_ms)
    }

    /// Applies one record: a table record (right) or a stream record (left) at time `t`.
    pub(super) fn process(
        &self,
        record: &InputRecord<'_>,
        t: i64,
        state: &mut dyn StateAccess,
    ) -> Result<ProcessOutput, ProcessError> {
        match record.side {
            Side::Right => self.update(record, t, state),
            Side::Left => self.look_up(record, t, state),
        }
    }

    /// Answers a stream record with the version of its key valid at `t`.
    fn look_up(
        &self,
        record: &InputRecord<'_>,
        t: i64,
        state: &mut dyn StateAccess,
    ) -> Result<ProcessOutput, ProcessError> {
        if let Some(table_time) = load_table_time(state)? {
            let cutoff = self.cutoff(table_time);
            // Versions before the cutoff may be pruned: the answer could be wrong.
            if t < cutoff {
                return Ok(ProcessOutput::dropped(DropReason::Late));
            }
            self.prune(state, cutoff)?;
        }
        let right = match version_ending_after(state, &record.key, t)? {
            Some(Version {
                from,
                content: Content::Value(raw),
                ..
            }) if from <= t => Some(raw),
            _ => None,
        };
        let output = match (right, self.mode) {
            (Some(raw), _) => {
                super::joined(&record.key, Side::Left, record.raw, Some(raw.as_slice()))
            }
            (None, JoinMode::Left) => super::unmatched(&record.key, Side::Left, record.raw),
            (None, _) => return Ok(ProcessOutput::default()),
        };
        Ok(ProcessOutput::emit(vec![output]))
    }

    /// Writes the version a table record starts at `f`, valid until the next version's start.
    ///
    /// A record older than the cutoff is dropped as late, nothing written (Kafka Streams'
    /// versioned stores drop such puts too). Applying it could not be exact: the version that
    /// would bound it may be pruned already. A key's newest tombstone is pruned once the cutoff
    /// reaches its start, and a value older than the tombstone, applied afterwards, would then
    /// revive a deleted key. Refusing every record below the cutoff keeps each answer at or
    /// after it exact against the table records accepted.
    fn update(
        &self,
        record: &InputRecord<'_>,
        f: i64,
        state: &mut dyn StateAccess,
    ) -> Result<ProcessOutput, ProcessError> {
        let stored_time = load_table_time(state)?;
        let table_time = stored_time.map_or(f, |previous| previous.max(f));
        let cutoff = self.cutoff(table_time);
        if f < cutoff {
            return Ok(ProcessOutput::dropped(DropReason::Late));
        }
        if stored_time != Some(table_time) {
            state.put(keys::TABLE_TIME, codec::encode_time(table_time))?;
        }
        let current = version_ending_after(state, &record.key, f)?;
        let to = match &current {
            None => i64::MAX,
            Some(v) if v.from <= f => v.to,
            Some(v) => v.from,
        };
        let content = if record.tombstone {
            Content::Tombstone
        } else {
            Content::Value(record.raw.to_vec())
        };
        let new = Version {
            from: f,
            to,
            content,
        };
        self.insert(state, &record.key, new, current, cutoff)?;
        self.prune(state, cutoff)?;
        Ok(ProcessOutput::default())
    }

    /// Stores `new`: when `current` contains its start, `current` is replaced by its part before
    /// it (if any) and `new` (which ends where `current` did); else `new` ends where `current`
    /// starts and `current` stays. Versions no lookup at or after `cutoff` can need (a part
    /// ending at the cutoff, a tombstone starting at it) are not written, so every index entry
    /// written is due after the cutoff, above the pruning's position; and only keys that
    /// change are written.
    fn insert(
        &self,
        state: &mut dyn StateAccess,
        key: &str,
        new: Version,
        current: Option<Version>,
        cutoff: i64,
    ) -> Result<(), ProcessError> {
        let replaced = current.filter(|v| v.from <= new.from);
        let mut written = Vec::with_capacity(2);
        if let Some(old) = replaced.as_ref().filter(|v| v.from < new.from) {
            written.push(Version {
                from: old.from,
                to: new.from,
                content: old.content.clone(),
            });
        }
        written.push(new);
        written.retain(|v| v.needed(cutoff));
        let old_entry = replaced.as_ref().and_then(Version::prune_entry);
        if let Some(old) = &replaced {
            if !written.iter().any(|v| v.to == old.to) {
                state.delete(&layout::version_key(key, old.to))?;
            }
            if let Some((due, kind)) = old_entry
                && !written.iter().any(|v| v.prune_entry() == old_entry)
            {
                state.delete(&layout::prune_key(due, kind, key))?;
            }
        }
        for v in &written {
            state.put(&layout::version_key(key, v.to), v.stored().encode())?;
            if let Some((due, kind)) = v.prune_entry()
                && old_entry != Some((due, kind))
            {
                state.put(&layout::prune_key(due, kind, key), Marker.encode())?;
            }
        }
        Ok(())
    }

    /// Deletes the versions no lookup at or after `cutoff` needs (their pruning entry is due at
    /// or before it), at most [`sweep::SWEEP_LIMIT`] per record from where the last pruning
    /// stopped. Lookups do not depend on it: the version valid at a time at or after the
    /// cutoff ends after the cutoff, so it is never one of these, pruned or not.
    fn prune(&self, state: &mut dyn StateAccess, cutoff: i64) -> Result<(), ProcessError> {
        let (from, to) = layout::prunable_upto(cutoff);
        for (index_key, marker) in sweep::next_due(state, keys::TABLE_SWEEP, from, to)? {
            Marker::decode(&marker).map_err(|e| ProcessError::corrupt(&index_key, e))?;
            let (due, kind, key) = layout::decode_prune_key(&index_key)
                .map_err(|e| ProcessError::corrupt(&index_key, e))?;
            let version_key = match kind {
                PruneKind::Ends => layout::version_key(&key, due),
                PruneKind::LatestTombstone => layout::version_key(&key, i64::MAX),
            };
            if let Some(bytes) = state.get(&version_key)? {
                let stored = TableVersion::decode(&bytes)
                    .map_err(|e| ProcessError::corrupt(&version_key, e))?;
                // A newest tombstone is only pruned if it is still the one indexed.
                let still_indexed = match kind {
                    PruneKind::Ends => true,
                    PruneKind::LatestTombstone => {
                        stored.valid_from == due && stored.content == Content::Tombstone
                    }
                };
                if still_indexed {
                    state.delete(&version_key)?;
                }
            }
            state.delete(&index_key)?;
        }
        Ok(())
    }
}
