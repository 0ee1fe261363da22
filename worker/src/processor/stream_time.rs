//! The task's stream time: the largest event time seen so far, kept in state.
//!
//! Closing windows and expiring dedup entries are decided against stream time, not the
//! wall clock, and it is stored under [`keys::STREAM_TIME`] (changelogged, checkpointed)
//! so a restored or promoted task makes exactly the decisions the old owner would have.
//! It only moves forward; an out-of-order record leaves it unchanged.

use super::api::ProcessError;
use super::codec;
use super::keys;
use super::state::StateAccess;

/// Stream time before and after a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Advance {
    /// Stream time before the record (`None` before the first timed record of the task).
    pub previous: Option<i64>,
    /// Stream time after it.
    pub current: i64,
}

impl Advance {
    /// True when the record moved stream time forward (so more may have closed or expired).
    pub fn moved(&self) -> bool {
        self.previous.is_none_or(|p| self.current > p)
    }
}

/// Reads the stored stream time.
pub fn load(state: &dyn StateAccess) -> Result<Option<i64>, ProcessError> {
    match state.get(keys::STREAM_TIME)? {
        None => Ok(None),
        Some(bytes) => codec::decode_time(&bytes)
            .map(Some)
            .map_err(|e| ProcessError::corrupt(keys::STREAM_TIME, e)),
    }
}

/// Moves stream time to `max(stored, event_time_ms)`, writing only when it changes (every
/// write is a changelog record).
pub fn advance(state: &mut dyn StateAccess, event_time_ms: i64) -> Result<Advance, ProcessError> {
    let previous = load(state)?;
    let current = previous.map_or(event_time_ms, |p| p.max(event_time_ms));
    if previous != Some(current) {
        state.put(keys::STREAM_TIME, codec::encode_time(current))?;
    }
    Ok(Advance { previous, current })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::processor::state::MemoryState;

    #[test]
    fn only_moves_forward_and_survives_in_state() {
        let mut s = MemoryState::new();
        assert_eq!(load(&s).unwrap(), None);
        let a = advance(&mut s, 100).unwrap();
        assert_eq!(
            a,
            Advance {
                previous: None,
                current: 100
            }
        );
        assert!(a.moved());
        let a = advance(&mut s, 50).unwrap();
        assert_eq!(
            a,
            Advance {
                previous: Some(100),
                current: 100
            }
        );
        assert!(!a.moved());
        assert!(advance(&mut s, 101).unwrap().moved());
        // A fresh reader of the same state (a restored task) sees the same stream time.
        let restored = s.clone();
        assert_eq!(load(&restored).unwrap(), Some(101));
    }

    #[test]
    fn unreadable_stream_time_is_corrupt_state() {
        let mut s = MemoryState::new();
        s.put(keys::STREAM_TIME, vec![9, 0, 0, 0, 0, 0, 0, 0, 0])
            .unwrap();
        assert_eq!(load(&s).unwrap_err().category(), "corrupt_state");
    }
}
