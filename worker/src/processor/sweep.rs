//! Bounded sweeps: closing windows and expiring dedup entries a page at a time.
//!
//! A big jump in stream time (honest input after a gap, on a large state) makes a whole range
//! of windows or entries due at once. Sweeping it in one record would hold every entry in
//! memory and put every deletion into one transaction. Instead each record handles at most
//! [`SWEEP_LIMIT`] due entries, and the sweep's position is kept in state (so it travels with
//! the changelog, and a restored or promoted task goes on exactly where the old owner was):
//! every key of the swept space below the cursor has been handled. The position depends only
//! on state and input, so replays decide the same. Entries still due but not yet swept are
//! judged by their own times when read (a record for a window past its grace is late; a dedup
//! entry past its expiry is expired), so a lagging sweep never changes a decision.

use super::api::ProcessError;
use super::state::{Entry, StateAccess};

/// Due entries one record handles at most.
pub const SWEEP_LIMIT: usize = 1_000;

/// The encoding version of a stored sweep position: a version byte, then the key.
const CURSOR_FORMAT_VERSION: u8 = 1;

/// The next due entries of a time-ordered space: those in `[position, due_until)`, at most
/// [`SWEEP_LIMIT`], where the position is the one stored under `cursor_key`, or `start` for a
/// state that has none yet (written before sweeps were bounded). Stores the position after
/// them. The caller handles (and usually deletes) every entry returned.
pub fn next_due(
    state: &mut dyn StateAccess,
    cursor_key: &[u8],
    start: Vec<u8>,
    due_until: Vec<u8>,
) -> Result<Vec<Entry>, ProcessError> {
    let position = match state.get(cursor_key)? {
        None => start,
        Some(raw) => match raw.split_first() {
            Some((&CURSOR_FORMAT_VERSION, key)) => key.to_vec(),
            _ => {
                return Err(ProcessError::corrupt(
                    cursor_key,
                    super::codec::StateCodecError::BadKey {
                        why: "unknown sweep position encoding",
                    },
                ));
            }
        },
    };
    if position >= due_until {
        return Ok(Vec::new());
    }
    let page = state.scan_limited(&position, &due_until, SWEEP_LIMIT)?;
    let next = match page.last() {
        Some((last, _)) if page.len() == SWEEP_LIMIT => [last.as_slice(), &[0]].concat(),
        _ => due_until,
    };
    state.put(cursor_key, [&[CURSOR_FORMAT_VERSION][..], &next].concat())?;
    Ok(page)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::processor::state::MemoryState;

    #[test]
    fn a_large_due_range_is_swept_a_page_per_call_and_then_never_again() {
        let mut s = MemoryState::new();
        let total = SWEEP_LIMIT * 2 + 500;
        for i in 0..total {
            s.put(format!("x{i:06}").as_bytes(), vec![1]).unwrap();
        }
        let mut seen = 0;
        for want in [SWEEP_LIMIT, SWEEP_LIMIT, 500, 0] {
            let page = next_due(&mut s, b"mcursor", b"x".to_vec(), b"y".to_vec()).unwrap();
            assert_eq!(page.len(), want);
            for (key, _) in page {
                s.delete(&key).unwrap();
                seen += 1;
            }
        }
        assert_eq!(seen, total);
        // New entries below the position are not swept again; new due ones above it are.
        s.put(b"y5", vec![1]).unwrap();
        let page = next_due(&mut s, b"mcursor", b"x".to_vec(), b"z".to_vec()).unwrap();
        assert_eq!(page, vec![(b"y5".to_vec(), vec![1])]);
    }
}
