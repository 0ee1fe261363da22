//! Versioned binary encodings of every value the built-in processors store.
//!
//! Every value starts with one version byte, then a fixed-width big-endian body. The bytes
//! go to RocksDB, to the compacted changelog and into checkpoints, and must be readable by
//! any later worker, so a layout is never changed in place: a new layout gets a new version
//! byte and the decoder keeps reading the old ones. An unknown version is an error, never a
//! guess.
//!
//! Version 1 layouts (all integers big-endian, `f64` as its IEEE-754 bits big-endian, so
//! a value round-trips bit for bit, `-0.0` included):
//!
//! | type          | bytes | layout                                                   |
//! |---------------|-------|----------------------------------------------------------|
//! | [`CountState`]| 9     | `01`, count `u64`                                        |
//! | [`AggState`]  | 33    | `01`, count `u64`, sum `f64`, min `f64`, max `f64`       |
//! | [`DedupState`]| 9     | `01`, first-seen event time `i64` (epoch millis)         |
//! | stream time   | 9     | `01`, max event time seen `i64` (epoch millis)           |
//! | [`Marker`]    | 1     | `01` (an index entry whose key carries all the data)     |

/// The value layout version written by this build.
pub const STATE_FORMAT_VERSION: u8 = 1;

/// Why stored bytes could not be decoded. Any of these means the state is not what this
/// worker wrote, so the task must stop rather than overwrite it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateCodecError {
    /// Zero bytes: not even a version byte.
    #[error("empty state value: no version byte")]
    Empty,
    /// A version this build does not know (written by a newer worker, or garbage).
    #[error("unknown state value version {found} (this worker reads version {supported})")]
    UnknownVersion {
        /// The version byte found.
        found: u8,
        /// The newest version this build reads.
        supported: u8,
    },
    /// The body has the wrong size for its version.
    #[error("state value of version {version} has {found} body bytes, expected {expected}")]
    WrongLength {
        /// The version byte.
        version: u8,
        /// Expected body length.
        expected: usize,
        /// Actual body length.
        found: usize,
    },
    /// A state key does not follow the documented layout.
    #[error("malformed state key: {why}")]
    BadKey {
        /// What is wrong with it.
        why: &'static str,
    },
    /// A variable-length state value does not follow the documented layout.
    #[error("malformed state value: {why}")]
    BadValue {
        /// What is wrong with it.
        why: &'static str,
    },
}

/// Checks the version byte and the body length, and returns the body as a fixed array.
fn body<const N: usize>(bytes: &[u8]) -> Result<[u8; N], StateCodecError> {
    let (&version, rest) = bytes.split_first().ok_or(StateCodecError::Empty)?;
    if version != STATE_FORMAT_VERSION {
        return Err(StateCodecError::UnknownVersion {
            found: version,
            supported: STATE_FORMAT_VERSION,
        });
    }
    <[u8; N]>::try_from(rest).map_err(|_| StateCodecError::WrongLength {
        version,
        expected: N,
        found: rest.len(),
    })
}

/// Reads the `i`-th 8-byte big-endian word of `b`.
fn word(b: &[u8], i: usize) -> [u8; 8] {
    let mut out = [0u8; 8];
    if let Some(src) = b.get(i * 8..i * 8 + 8) {
        out.copy_from_slice(src);
    }
    out
}

fn with_version(body: &[&[u8; 8]]) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + body.len() * 8);
    out.push(STATE_FORMAT_VERSION);
    for w in body {
        out.extend_from_slice(&w[..]);
    }
    out
}

/// Running count of one key (`count` processor).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CountState {
    /// Records seen for the key.
    pub count: u64,
}

impl CountState {
    /// Encodes as version 1.
    pub fn encode(&self) -> Vec<u8> {
        with_version(&[&self.count.to_be_bytes()])
    }

    /// Decodes any supported version.
    pub fn decode(bytes: &[u8]) -> Result<Self, StateCodecError> {
        let b: [u8; 8] = body(bytes)?;
        Ok(Self {
            count: u64::from_be_bytes(b),
        })
    }
}

/// Count, sum, min and max of one key or one window (`aggregate` processor). The mean is
/// derived (`sum / count`) so that it is never stored twice and can never disagree.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AggState {
    /// Values aggregated.
    pub count: u64,
    /// Their sum.
    pub sum: f64,
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
}

impl AggState {
    /// The state after a single value.
    pub fn first(value: f64) -> Self {
        Self {
            count: 1,
            sum: value,
            min: value,
            max: value,
        }
    }

    /// The state after also aggregating `value`. Additions happen in input order, so a
    /// replay of the same input produces bit-identical sums.
    pub fn add(&self, value: f64) -> Self {
        Self {
            count: self.count.saturating_add(1),
            sum: self.sum + value,
            min: self.min.min(value),
            max: self.max.max(value),
        }
    }

    /// `sum / count` (never divides by zero: a stored state has count >= 1).
    pub fn mean(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum / self.count as f64
        }
    }

    /// Encodes as version 1.
    pub fn encode(&self) -> Vec<u8> {
        with_version(&[
            &self.count.to_be_bytes(),
            &self.sum.to_bits().to_be_bytes(),
            &self.min.to_bits().to_be_bytes(),
            &self.max.to_bits().to_be_bytes(),
        ])
    }

    /// Decodes any supported version.
    pub fn decode(bytes: &[u8]) -> Result<Self, StateCodecError> {
        let b: [u8; 32] = body(bytes)?;
        Ok(Self {
            count: u64::from_be_bytes(word(&b, 0)),
            sum: f64::from_bits(u64::from_be_bytes(word(&b, 1))),
            min: f64::from_bits(u64::from_be_bytes(word(&b, 2))),
            max: f64::from_bits(u64::from_be_bytes(word(&b, 3))),
        })
    }
}

/// When a key was first seen in its current TTL period (`dedup` processor).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DedupState {
    /// Event time (epoch millis) of the occurrence that was emitted.
    pub first_seen_ms: i64,
}

impl DedupState {
    /// Encodes as version 1.
    pub fn encode(&self) -> Vec<u8> {
        with_version(&[&self.first_seen_ms.to_be_bytes()])
    }

    /// Decodes any supported version.
    pub fn decode(bytes: &[u8]) -> Result<Self, StateCodecError> {
        let b: [u8; 8] = body(bytes)?;
        Ok(Self {
            first_seen_ms: i64::from_be_bytes(b),
        })
    }
}

/// Encodes an event time value (stream time). Same layout as [`DedupState`], its own type
/// at the call sites.
pub fn encode_time(ms: i64) -> Vec<u8> {
    with_version(&[&ms.to_be_bytes()])
}

/// Decodes a value written by [`encode_time`].
pub fn decode_time(bytes: &[u8]) -> Result<i64, StateCodecError> {
    body::<8>(bytes).map(i64::from_be_bytes)
}

/// The value of an index entry: only a version byte, because the key holds the data. Still
/// versioned so that every stored value can be checked the same way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Marker;

impl Marker {
    /// Encodes as version 1.
    pub fn encode(&self) -> Vec<u8> {
        vec![STATE_FORMAT_VERSION]
    }

    /// Decodes any supported version.
    pub fn decode(bytes: &[u8]) -> Result<Self, StateCodecError> {
        body::<0>(bytes).map(|_| Marker)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn layouts_are_the_documented_bytes() {
        assert_eq!(
            CountState { count: 258 }.encode(),
            vec![1, 0, 0, 0, 0, 0, 0, 1, 2]
        );
        assert_eq!(
            DedupState { first_seen_ms: -1 }.encode(),
            vec![1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]
        );
        let agg = AggState::first(1.0).encode();
        assert_eq!(agg.len(), 33);
        assert_eq!(agg[0], 1);
        assert_eq!(&agg[9..17], &1.0f64.to_bits().to_be_bytes());
        assert_eq!(Marker.encode(), vec![1]);
    }

    #[test]
    fn unknown_version_is_rejected_for_every_type() {
        let mut v = CountState { count: 3 }.encode();
        v[0] = 2;
        let want = StateCodecError::UnknownVersion {
            found: 2,
            supported: 1,
        };
        assert_eq!(CountState::decode(&v), Err(want.clone()));
        assert_eq!(DedupState::decode(&v), Err(want.clone()));
        assert_eq!(decode_time(&v), Err(want.clone()));
        let mut a = AggState::first(2.0).encode();
        a[0] = 2;
        assert_eq!(AggState::decode(&a), Err(want.clone()));
        assert_eq!(Marker::decode(&[2]), Err(want));
        assert_eq!(
            CountState::decode(&[0, 0, 0, 0, 0, 0, 0, 0, 0]),
            Err(StateCodecError::UnknownVersion {
                found: 0,
                supported: 1
            })
        );
    }

    #[test]
    fn empty_and_truncated_values_are_rejected() {
        assert_eq!(CountState::decode(&[]), Err(StateCodecError::Empty));
        assert_eq!(Marker::decode(&[]), Err(StateCodecError::Empty));
        assert_eq!(
            AggState::decode(&[1, 0, 0]),
            Err(StateCodecError::WrongLength {
                version: 1,
                expected: 32,
                found: 2
            })
        );
        assert_eq!(
            Marker::decode(&[1, 0]),
            Err(StateCodecError::WrongLength {
                version: 1,
                expected: 0,
                found: 1
            })
        );
    }

    #[test]
    fn aggregate_accumulates_and_derives_mean() {
        let s = AggState::first(4.0).add(-2.0).add(10.0);
        assert_eq!(s.count, 3);
        assert_eq!(s.sum, 12.0);
        assert_eq!(s.min, -2.0);
        assert_eq!(s.max, 10.0);
        assert_eq!(s.mean(), 4.0);
    }

    proptest! {
        #[test]
        fn count_round_trips(count in any::<u64>()) {
            let s = CountState { count };
            prop_assert_eq!(CountState::decode(&s.encode()), Ok(s));
        }

        #[test]
        fn dedup_and_time_round_trip(ms in any::<i64>()) {
            let s = DedupState { first_seen_ms: ms };
            prop_assert_eq!(DedupState::decode(&s.encode()), Ok(s));
            prop_assert_eq!(decode_time(&encode_time(ms)), Ok(ms));
        }

        #[test]
        fn aggregate_round_trips_bit_for_bit(
            count in any::<u64>(), sum in any::<f64>(), min in any::<f64>(), max in any::<f64>()
        ) {
            let s = AggState { count, sum, min, max };
            let back = AggState::decode(&s.encode()).unwrap();
            prop_assert_eq!(back.count, count);
            prop_assert_eq!(back.sum.to_bits(), sum.to_bits());
            prop_assert_eq!(back.min.to_bits(), min.to_bits());
            prop_assert_eq!(back.max.to_bits(), max.to_bits());
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
            // Decoding must fail with a typed error or succeed; it must never panic.
            let _ = AggState::decode(&bytes);
            let _ = CountState::decode(&bytes);
            let _ = Marker::decode(&bytes);
        }
    }
}
