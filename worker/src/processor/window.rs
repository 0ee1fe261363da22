//! Window assignment by event time: which windows an event time falls in.
//!
//! Windows are half-open `[start, start + size)` and aligned to the epoch: every start is a
//! multiple of `advance` (for tumbling windows `advance == size`), so two workers, or a
//! replay, always cut the same windows. `size` must be a multiple of `advance`, so every event
//! time falls in exactly `size / advance` windows — no event is counted by fewer windows
//! because of where it lands.

/// Upper bound on window sizes, advances and grace periods (2^53 - 1 ms, about 285,000
/// years). Together with the decoder's event-time bound it keeps all window arithmetic far
/// from `i64` overflow.
pub const MAX_DURATION_MS: u64 = (1 << 53) - 1;

/// Upper bound on `size / advance`: each record updates that many windows, so an unbounded
/// ratio (a day-long window advancing by 1 ms) would make a single record unboundedly costly.
/// The contract's bound, the one the operator checks a spec with.
pub const MAX_WINDOWS_PER_EVENT: u64 = streamkeeper_contract::rules::MAX_WINDOWS_PER_RECORD;

/// Why a window specification is invalid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WindowError {
    /// Size or advance is zero.
    #[error("window {what} must be greater than zero")]
    Zero {
        /// `size_ms` or `advance_ms`.
        what: &'static str,
    },
    /// Size or advance exceeds [`MAX_DURATION_MS`].
    #[error("window {what} of {value} ms exceeds the maximum of {MAX_DURATION_MS} ms")]
    TooLarge {
        /// `size_ms` or `advance_ms`.
        what: &'static str,
        /// The value given.
        value: u64,
    },
    /// The advance is larger than the size, which would leave gaps no window covers.
    #[error("window advance {advance_ms} ms exceeds size {size_ms} ms")]
    AdvanceExceedsSize {
        /// The size.
        size_ms: u64,
        /// The advance.
        advance_ms: u64,
    },
    /// The size is not a multiple of the advance.
    #[error("window size {size_ms} ms is not a multiple of the advance {advance_ms} ms")]
    NotAMultiple {
        /// The size.
        size_ms: u64,
        /// The advance.
        advance_ms: u64,
    },
    /// `size / advance` exceeds [`MAX_WINDOWS_PER_EVENT`].
    #[error("window size / advance = {ratio} exceeds the maximum of {MAX_WINDOWS_PER_EVENT}")]
    TooManyWindows {
        /// `size / advance`.
        ratio: u64,
    },
}

/// One window, `[start_ms, end_ms)` in epoch millis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Window {
    /// First millisecond inside the window.
    pub start_ms: i64,
    /// First millisecond after it.
    pub end_ms: i64,
}

impl Window {
    /// True when `t` is inside the window.
    pub fn contains(&self, t: i64) -> bool {
        self.start_ms <= t && t < self.end_ms
    }
}

/// A validated tumbling or hopping window definition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowAssigner {
    size_ms: i64,
    advance_ms: i64,
}

fn checked_duration(what: &'static str, value: u64) -> Result<i64, WindowError> {
    if value == 0 {
        return Err(WindowError::Zero { what });
    }
    if value > MAX_DURATION_MS {
        return Err(WindowError::TooLarge { what, value });
    }
    i64::try_from(value).map_err(|_| WindowError::TooLarge { what, value })
}

impl WindowAssigner {
    /// Non-overlapping windows of `size_ms`.
    pub fn tumbling(size_ms: u64) -> Result<Self, WindowError> {
        Self::hopping(size_ms, size_ms)
    }

    /// Windows of `size_ms` starting every `advance_ms`.
    pub fn hopping(size_ms: u64, advance_ms: u64) -> Result<Self, WindowError> {
        let size = checked_duration("size_ms", size_ms)?;
        let advance = checked_duration("advance_ms", advance_ms)?;
        if advance > size {
            return Err(WindowError::AdvanceExceedsSize {
                size_ms,
                advance_ms,
            });
        }
        if size % advance != 0 {
            return Err(WindowError::NotAMultiple {
                size_ms,
                advance_ms,
            });
        }
        let ratio = size_ms / advance_ms;
        if ratio > MAX_WINDOWS_PER_EVENT {
            return Err(WindowError::TooManyWindows { ratio });
        }
        Ok(Self {
            size_ms: size,
            advance_ms: advance,
        })
    }

    /// Window length.
    pub fn size_ms(&self) -> i64 {
        self.size_ms
    }

    /// Distance between consecutive window starts.
    pub fn advance_ms(&self) -> i64 {
        self.advance_ms
    }

    /// How many windows contain each event time (`size / advance`).
    pub fn windows_per_event(&self) -> i64 {
        self.size_ms / self.advance_ms
    }

    /// The window starting at `start_ms`.
    pub fn window_at(&self, start_ms: i64) -> Window {
        Window {
            start_ms,
            end_ms: start_ms.saturating_add(self.size_ms),
        }
    }

    /// Every window containing `t`, in ascending order of start.
    ///
    /// Computed in `i128` so no `t` can overflow; a window whose bounds do not fit in `i64`
    /// (only for `t` within `size` of `i64::MIN`/`MAX`, which the decoder never produces)
    /// is left out rather than wrapped.
    pub fn windows_for(&self, t: i64) -> Vec<Window> {
        let size = i128::from(self.size_ms);
        let advance = i128::from(self.advance_ms);
        // The last window containing t starts at the greatest multiple of advance <= t
        // (floor division, so negative times align the same way as positive ones).
        let last_start = i128::from(t.div_euclid(self.advance_ms)) * advance;
        let count = size / advance;
        (0..count)
            .rev()
            .filter_map(|back| {
                let start = last_start - back * advance;
                let end = start + size;
                Some(Window {
                    start_ms: i64::try_from(start).ok()?,
                    end_ms: i64::try_from(end).ok()?,
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn w(start_ms: i64, end_ms: i64) -> Window {
        Window { start_ms, end_ms }
    }

    #[test]
    fn tumbling_assigns_the_aligned_window() {
        let a = WindowAssigner::tumbling(10).unwrap();
        assert_eq!(a.windows_for(0), vec![w(0, 10)]);
        assert_eq!(a.windows_for(9), vec![w(0, 10)]);
        assert_eq!(a.windows_for(10), vec![w(10, 20)], "end is exclusive");
        assert_eq!(
            a.windows_for(-1),
            vec![w(-10, 0)],
            "negative times floor, not truncate"
        );
        assert_eq!(a.windows_for(-10), vec![w(-10, 0)]);
    }

    #[test]
    fn hopping_assigns_every_overlapping_window_in_order() {
        let a = WindowAssigner::hopping(10, 5).unwrap();
        assert_eq!(a.windows_for(7), vec![w(0, 10), w(5, 15)]);
        assert_eq!(a.windows_for(5), vec![w(0, 10), w(5, 15)]);
        assert_eq!(a.windows_for(4), vec![w(-5, 5), w(0, 10)]);
        let a = WindowAssigner::hopping(60_000, 20_000).unwrap();
        assert_eq!(
            a.windows_for(65_000),
            vec![w(20_000, 80_000), w(40_000, 100_000), w(60_000, 120_000)]
        );
    }

    #[test]
    fn invalid_specs_are_rejected_with_the_reason() {
        assert_eq!(
            WindowAssigner::tumbling(0),
            Err(WindowError::Zero { what: "size_ms" })
        );
        assert_eq!(
            WindowAssigner::hopping(10, 0),
            Err(WindowError::Zero { what: "advance_ms" })
        );
        assert_eq!(
            WindowAssigner::hopping(10, 20),
            Err(WindowError::AdvanceExceedsSize {
                size_ms: 10,
                advance_ms: 20
            })
        );
        assert_eq!(
            WindowAssigner::hopping(10, 3),
            Err(WindowError::NotAMultiple {
                size_ms: 10,
                advance_ms: 3
            })
        );
        assert_eq!(
            WindowAssigner::hopping(86_400_000, 1),
            Err(WindowError::TooManyWindows { ratio: 86_400_000 })
        );
        assert!(matches!(
            WindowAssigner::tumbling(u64::MAX),
            Err(WindowError::TooLarge { .. })
        ));
    }

    #[test]
    fn extreme_times_do_not_overflow() {
        let a = WindowAssigner::hopping(10, 5).unwrap();
        // Windows that would not fit in i64 are dropped, never wrapped around.
        for t in [i64::MIN, i64::MIN + 3, i64::MAX, i64::MAX - 3] {
            for win in a.windows_for(t) {
                assert!(win.contains(t));
            }
        }
    }

    /// (size, advance) pairs with size a multiple of advance.
    fn spec() -> impl Strategy<Value = (u64, u64)> {
        (1u64..=100_000, 1u64..=50).prop_map(|(advance, ratio)| (advance * ratio, advance))
    }

    proptest! {
        #[test]
        fn hopping_event_is_in_exactly_size_over_advance_windows(
            (size, advance) in spec(), t in -(1i64 << 53)..(1i64 << 53)
        ) {
            let a = WindowAssigner::hopping(size, advance).unwrap();
            let ws = a.windows_for(t);
            prop_assert_eq!(ws.len() as u64, size / advance);
            for win in &ws {
                prop_assert!(win.contains(t), "{:?} does not contain {}", win, t);
                prop_assert_eq!(win.start_ms.rem_euclid(advance as i64), 0, "start not aligned");
                prop_assert_eq!(win.end_ms - win.start_ms, size as i64);
            }
            // Ascending and distinct.
            prop_assert!(ws.windows(2).all(|p| p[0].start_ms + advance as i64 == p[1].start_ms));
            // Complete: the aligned windows just outside the list do not contain t.
            if let (Some(first), Some(last)) = (ws.first(), ws.last()) {
                prop_assert!(!a.window_at(first.start_ms - advance as i64).contains(t));
                prop_assert!(!a.window_at(last.start_ms + advance as i64).contains(t));
            }
        }

        #[test]
        fn tumbling_event_is_in_exactly_one_aligned_window(
            size in 1u64..=10_000_000, t in -(1i64 << 53)..(1i64 << 53)
        ) {
            let a = WindowAssigner::tumbling(size).unwrap();
            let ws = a.windows_for(t);
            prop_assert_eq!(ws.len(), 1);
            prop_assert!(ws[0].contains(t));
            prop_assert_eq!(ws[0].start_ms.rem_euclid(size as i64), 0);
        }

        #[test]
        fn windows_of_nearby_times_are_shared_consistently(
            (size, advance) in spec(), t in -(1i64 << 40)..(1i64 << 40), d in 0i64..1000
        ) {
            // Two times share a window exactly when that window contains both: assignment is
            // a function of the window grid, not of the order records arrive in.
            let a = WindowAssigner::hopping(size, advance).unwrap();
            let u = t + d;
            for win in a.windows_for(t) {
                prop_assert_eq!(a.windows_for(u).contains(&win), win.contains(u));
            }
        }
    }
}
