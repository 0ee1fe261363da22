//! The task metadata the store keeps next to the state (offsets, restore marker), its
//! reserved key and its versioned binary encoding.
//!
//! The metadata is written in the same atomic write as the state changes it describes, so
//! after any crash the stored offsets say exactly which input and changelog records the
//! stored state includes.
//!
//! Encoding, version 1 (30 bytes, integers big-endian):
//!
//! | bytes  | field                                                         |
//! |--------|---------------------------------------------------------------|
//! | 0      | format version (`1`)                                          |
//! | 1      | flags: bit 0 `restoring`, bit 1 timestamp present; others 0   |
//! | 2..6   | task (u32)                                                    |
//! | 6..14  | next input offset (i64, >= 0)                                 |
//! | 14..22 | next changelog offset (i64, >= 0)                             |
//! | 22..30 | newest changelog record timestamp, ms (i64; 0 when absent)    |
//!
//! A new layout gets a new version byte; a decoder never guesses at a version it does not know.

/// The metadata encoding this build writes and the only one it reads.
pub const METADATA_FORMAT_VERSION: u8 = 1;

/// The key the metadata is stored under. It starts with 0x00, inside the reserved range.
pub const METADATA_KEY: &[u8] = b"\x00streamkeeper.task-metadata";

/// The smallest key a processor may use: every key below it (the empty key and all keys
/// starting with 0x00) is reserved for the store. Processor keys start with an ASCII tag.
pub const FIRST_STATE_KEY: &[u8] = &[0x01];

/// True when `key` lies in the store's reserved range.
pub fn is_reserved_key(key: &[u8]) -> bool {
    key < FIRST_STATE_KEY
}

const ENCODED_LEN: usize = 30;
const FLAG_RESTORING: u8 = 0b01;
const FLAG_HAS_TIMESTAMP: u8 = 0b10;

/// What the stored state of one task includes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskMetadata {
    /// The task (= input partition) this state belongs to.
    pub task: u32,
    /// The input offset to consume next: every input record before it is reflected.
    pub next_input_offset: i64,
    /// The changelog offset after the last changelog record this state includes: a delta
    /// replay starts here.
    pub next_changelog_offset: i64,
    /// Timestamp (ms) of the newest changelog record applied, if any. Decides whether a
    /// delta replay is still exact (tombstones older than `delete.retention.ms` may be gone).
    pub newest_changelog_timestamp_ms: Option<i64>,
    /// A restore is writing this state and has not finished: the state is consistent up to
    /// `next_changelog_offset` but must not be used for processing until the restore finishes.
    pub restoring: bool,
}

impl TaskMetadata {
    /// The metadata of a state that has consumed nothing yet.
    pub fn initial(task: u32) -> Self {
        Self {
            task,
            next_input_offset: 0,
            next_changelog_offset: 0,
            newest_changelog_timestamp_ms: None,
            restoring: false,
        }
    }

    /// The versioned binary encoding (see the module docs).
    pub fn encode(&self) -> Vec<u8> {
        let mut flags = 0;
        if self.restoring {
            flags |= FLAG_RESTORING;
        }
        if self.newest_changelog_timestamp_ms.is_some() {
            flags |= FLAG_HAS_TIMESTAMP;
        }
        let mut out = Vec::with_capacity(ENCODED_LEN);
        out.push(METADATA_FORMAT_VERSION);
        out.push(flags);
        out.extend_from_slice(&self.task.to_be_bytes());
        out.extend_from_slice(&self.next_input_offset.to_be_bytes());
        out.extend_from_slice(&self.next_changelog_offset.to_be_bytes());
        out.extend_from_slice(
            &self
                .newest_changelog_timestamp_ms
                .unwrap_or(0)
                .to_be_bytes(),
        );
        out
    }

    /// Decodes [`TaskMetadata::encode`]'s output; anything else is an error, never a guess.
    pub fn decode(raw: &[u8]) -> Result<Self, MetadataError> {
        let (&version, rest) = raw.split_first().ok_or(MetadataError::Empty)?;
        if version != METADATA_FORMAT_VERSION {
            return Err(MetadataError::UnknownVersion {
                found: version,
                supported: METADATA_FORMAT_VERSION,
            });
        }
        let fixed: &[u8; ENCODED_LEN - 1] = rest.try_into().map_err(|_| MetadataError::Length {
            expected: ENCODED_LEN,
            found: raw.len(),
        })?;
        let (&[flags], rest) = fixed
            .split_first_chunk::<1>()
            .ok_or(MetadataError::Length {
                expected: ENCODED_LEN,
                found: raw.len(),
            })?;
        if flags & !(FLAG_RESTORING | FLAG_HAS_TIMESTAMP) != 0 {
            return Err(MetadataError::UnknownFlags { flags });
        }
        let mut reader = Reader(rest);
        let task = u32::from_be_bytes(reader.take()?);
        let next_input_offset = offset(i64::from_be_bytes(reader.take()?), "next input offset")?;
        let next_changelog_offset =
            offset(i64::from_be_bytes(reader.take()?), "next changelog offset")?;
        let timestamp = i64::from_be_bytes(reader.take()?);
        let newest_changelog_timestamp_ms = if flags & FLAG_HAS_TIMESTAMP != 0 {
            Some(timestamp)
        } else if timestamp == 0 {
            None
        } else {
            return Err(MetadataError::Malformed {
                why: "timestamp bytes set without the timestamp flag",
            });
        };
        Ok(Self {
            task,
            next_input_offset,
            next_changelog_offset,
            newest_changelog_timestamp_ms,
            restoring: flags & FLAG_RESTORING != 0,
        })
    }
}

fn offset(value: i64, field: &'static str) -> Result<i64, MetadataError> {
    if value < 0 {
        return Err(MetadataError::NegativeOffset { field, value });
    }
    Ok(value)
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N], MetadataError> {
        let (head, rest) = self
            .0
            .split_first_chunk::<N>()
            .ok_or(MetadataError::Malformed { why: "truncated" })?;
        self.0 = rest;
        Ok(*head)
    }
}

/// Why stored metadata could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MetadataError {
    /// The value is empty.
    #[error("metadata value is empty")]
    Empty,
    /// Written by a format this build does not know.
    #[error("metadata format version {found} is not supported (this build reads {supported})")]
    UnknownVersion {
        /// The version byte found.
        found: u8,
        /// The version this build reads.
        supported: u8,
    },
    /// Wrong length for the version.
    #[error("metadata is {found} bytes, expected {expected}")]
    Length {
        /// Expected length.
        expected: usize,
        /// Actual length.
        found: usize,
    },
    /// Flag bits this version does not define.
    #[error("metadata has unknown flag bits {flags:#04x}")]
    UnknownFlags {
        /// The flags byte.
        flags: u8,
    },
    /// A next offset below zero.
    #[error("metadata {field} is negative ({value})")]
    NegativeOffset {
        /// Which offset.
        field: &'static str,
        /// Its value.
        value: i64,
    },
    /// Any other inconsistency.
    #[error("metadata is malformed: {why}")]
    Malformed {
        /// What is wrong.
        why: &'static str,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample() -> TaskMetadata {
        TaskMetadata {
            task: 7,
            next_input_offset: 1_234,
            next_changelog_offset: 99,
            newest_changelog_timestamp_ms: Some(1_700_000_000_000),
            restoring: true,
        }
    }

    #[test]
    fn layout_is_the_documented_bytes() {
        let raw = sample().encode();
        assert_eq!(raw.len(), ENCODED_LEN);
        assert_eq!(raw[0], 1, "version byte first");
        assert_eq!(raw[1], 0b11, "restoring + timestamp present");
        assert_eq!(&raw[2..6], &7u32.to_be_bytes());
        assert_eq!(&raw[6..14], &1_234i64.to_be_bytes());
        assert_eq!(&raw[14..22], &99i64.to_be_bytes());
        assert_eq!(&raw[22..30], &1_700_000_000_000i64.to_be_bytes());
        assert_eq!(TaskMetadata::initial(3).encode()[1], 0, "no flags");
    }

    #[test]
    fn unknown_versions_and_malformed_values_are_rejected() {
        let mut raw = sample().encode();
        raw[0] = 2;
        assert_eq!(
            TaskMetadata::decode(&raw),
            Err(MetadataError::UnknownVersion {
                found: 2,
                supported: 1
            })
        );
        assert_eq!(TaskMetadata::decode(&[]), Err(MetadataError::Empty));
        let good = sample().encode();
        assert!(matches!(
            TaskMetadata::decode(&good[..ENCODED_LEN - 1]),
            Err(MetadataError::Length { .. })
        ));
        let mut long = good.clone();
        long.push(0);
        assert!(matches!(
            TaskMetadata::decode(&long),
            Err(MetadataError::Length { .. })
        ));
        let mut flags = good.clone();
        flags[1] = 0b100;
        assert_eq!(
            TaskMetadata::decode(&flags),
            Err(MetadataError::UnknownFlags { flags: 0b100 })
        );
        let mut negative = good.clone();
        negative[6..14].copy_from_slice(&(-1i64).to_be_bytes());
        assert!(matches!(
            TaskMetadata::decode(&negative),
            Err(MetadataError::NegativeOffset { value: -1, .. })
        ));
        let mut stray = TaskMetadata::initial(0).encode();
        stray[29] = 1;
        assert!(matches!(
            TaskMetadata::decode(&stray),
            Err(MetadataError::Malformed { .. })
        ));
    }

    #[test]
    fn the_reserved_range_is_below_every_processor_tag() {
        assert!(is_reserved_key(METADATA_KEY));
        assert!(is_reserved_key(b""));
        assert!(is_reserved_key(&[0x00, 0xff, 0xff]));
        assert!(!is_reserved_key(FIRST_STATE_KEY));
        for tag in [b'c', b'a', b'w', b'd', b'x', b'm'] {
            assert!(!is_reserved_key(&[tag]), "tag {}", tag as char);
        }
        assert!(!is_reserved_key(crate::processor::keys::STREAM_TIME));
    }

    proptest! {
        #[test]
        fn round_trips(
            task in any::<u32>(),
            input in 0..=i64::MAX,
            changelog in 0..=i64::MAX,
            ts in proptest::option::of(any::<i64>()),
            restoring in any::<bool>(),
        ) {
            let meta = TaskMetadata {
                task,
                next_input_offset: input,
                next_changelog_offset: changelog,
                newest_changelog_timestamp_ms: ts,
                restoring,
            };
            prop_assert_eq!(TaskMetadata::decode(&meta.encode()), Ok(meta));
        }
    }
}
