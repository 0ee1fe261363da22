//! The state key layout of the built-in processors.
//!
//! A key is one ASCII tag byte naming its space, then fixed-width parts, then the record
//! key's UTF-8 bytes last (so no separator or escaping is needed: everything before it has
//! a fixed width). Times inside keys use [`encode_ordered`], so byte order equals time order
//! and "every window starting at or before T" or "every entry expiring at or before T" is one
//! range scan from the start of the space.
//!
//! | tag | space                    | key                                   | value          |
//! |-----|--------------------------|---------------------------------------|----------------|
//! | `c` | count per key            | `c` key                               | `CountState`   |
//! | `a` | unwindowed aggregate     | `a` key                               | `AggState`     |
//! | `w` | windowed aggregate       | `w` start(8, ordered) key             | `AggState`     |
//! | `d` | dedup first-seen         | `d` key                               | `DedupState`   |
//! | `x` | dedup expiry index       | `x` expiry(8, ordered) key            | `Marker`       |
//! | `j` | join buffered record     | `j` side key-len(varint) key time offset | `BufferedRecord` |
//! | `e` | join expiry index        | `e` expiry side time offset key       | `Marker`       |
//! | `v` | table version            | `v` key-len(varint) key valid-to      | `TableVersion` |
//! | `p` | table pruning index      | `p` due kind key                      | `Marker`       |
//! | `m` | task metadata            | `m` `stream_time`                     | time           |
//! | `m` | applied restore request  | `m` `applied_restore`                 | request id     |
//! | `m` | input position           | `m` `input_position`                  | version, offset|
//! | `m` | processor identity       | `m` `processor`                       | version, config|
//! | `m` | input identity           | `m` `input`                           | version, topic, id|
//! | `m` | a join's right position  | `m` `right_input_position`            | version, offset|
//! | `m` | a join's right identity  | `m` `right_input`                     | version, topic, id|
//! | `m` | a re-keyed side's topic  | `m` `left_source` / `right_source`    | version, topic, id|
//! | `m` | its partitions' positions| `m` `left_source_position/` partition (decimal) | version, offset|
//! | `m` | window sweep position    | `m` `sweep_windows`                   | version, key   |
//! | `m` | expiry sweep position    | `m` `sweep_expiry`                    | version, key   |
//! | `m` | join expiry sweep position | `m` `sweep_join`                    | version, key   |
//! | `m` | table pruning position   | `m` `sweep_table`                     | version, key   |
//! | `m` | table time               | `m` `table_time`                      | time           |
//! | 0x01| changelog incarnation    | 0x01 `changelog_incarnation`          | id (UTF-8)     |
//!
//! The join spaces (`j`, `e`, `v`, `p`) are laid out in `join::layout`, which documents their
//! parts: a join key there sits before fixed-width parts, behind its length, because a lookup
//! needs all entries of one key in time order.

use super::codec::StateCodecError;

/// Tag of the count space.
pub const COUNT: u8 = b'c';
/// Tag of the unwindowed aggregate space.
pub const AGGREGATE: u8 = b'a';
/// Tag of the windowed aggregate space.
pub const WINDOW: u8 = b'w';
/// Tag of the dedup first-seen space.
pub const DEDUP: u8 = b'd';
/// Tag of the dedup expiry index.
pub const EXPIRY: u8 = b'x';
/// Tag of a stream-stream join's buffered records.
pub const JOIN_BUFFER: u8 = b'j';
/// Tag of a stream-stream join's expiry index.
pub const JOIN_EXPIRY: u8 = b'e';
/// Tag of a stream-table join's table versions.
pub const TABLE_VERSION: u8 = b'v';
/// Tag of a stream-table join's pruning index.
pub const TABLE_PRUNE: u8 = b'p';
/// The space of a WebAssembly guest's own keys (`wasm`): each stored behind this prefix, so
/// whatever keys a guest picks, they meet none of the host's.
pub const WASM_GUEST: &[u8] = b"g/";

/// The first key after every key starting with `prefix`; `None` when there is none (the prefix
/// is all `0xff`).
pub fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < u8::MAX {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

/// The key holding the id of the newest restore request applied to the state. Being state, it
/// travels with the changelog and the checkpoints, so a request is applied once wherever the
/// task is restored later.
pub const APPLIED_RESTORE: &[u8] = b"mapplied_restore";

/// The key holding the input offset the state has consumed up to (the next one to read). Every
/// transaction that consumes input writes it, so the changelog, every checkpoint and every
/// restored state know their input position, even when Kafka's committed offsets are gone.
/// Its value is encoded by `task::active::input_position`.
pub const INPUT_POSITION: &[u8] = b"minput_position";

/// The key naming which incarnation of the changelog topic the state belongs to, written when
/// a lost changelog is rebuilt (see `store::incarnation`). It sorts before every processor tag,
/// so in the rebuilt topic it is the first record.
pub const CHANGELOG_INCARNATION: &[u8] = b"\x01changelog_incarnation";

/// The key holding the processor config that built the state (see `task::active::identity`).
pub const PROCESSOR: &[u8] = b"mprocessor";

/// The key holding the input topic (name and Kafka topic id) the state was built from (see
/// `task::active::input_identity`).
pub const INPUT: &[u8] = b"minput";

/// A join's right topic's counterparts of [`INPUT_POSITION`] and [`INPUT`] (see
/// `task::active::sources`).
pub const RIGHT_INPUT_POSITION: &[u8] = b"mright_input_position";
pub const RIGHT_INPUT: &[u8] = b"mright_input";

/// A re-keyed join side's own topic (the join reads its repartition topic under [`INPUT`] or
/// [`RIGHT_INPUT`]): its identity, and the prefix of its partitions' positions, each followed by
/// the partition's number in decimal (see `task::active::sources`).
pub const LEFT_SOURCE: &[u8] = b"mleft_source";
pub const RIGHT_SOURCE: &[u8] = b"mright_source";
pub const LEFT_SOURCE_POSITION: &[u8] = b"mleft_source_position/";
pub const RIGHT_SOURCE_POSITION: &[u8] = b"mright_source_position/";

/// Where the windowed aggregate's bounded sweep of closable windows goes on (`sweep`).
pub const WINDOW_SWEEP: &[u8] = b"msweep_windows";

/// Where dedup's bounded sweep of expired entries goes on (`sweep`).
pub const EXPIRY_SWEEP: &[u8] = b"msweep_expiry";

/// The key holding the task's stream time (max event time seen).
pub const STREAM_TIME: &[u8] = b"mstream_time";

/// Where a stream-stream join's bounded sweep of closed windows goes on (`sweep`).
pub const JOIN_SWEEP: &[u8] = b"msweep_join";

/// Where a stream-table join's bounded pruning of old table versions goes on (`sweep`).
pub const TABLE_SWEEP: &[u8] = b"msweep_table";

/// The key holding a stream-table join's table time (max version time seen on the table).
pub const TABLE_TIME: &[u8] = b"mtable_time";

/// Encodes an `i64` so that unsigned byte order equals signed numeric order: flip the sign
/// bit, big-endian. Negative event times (before 1970) therefore sort first.
pub fn encode_ordered(v: i64) -> [u8; 8] {
    ((v as u64) ^ (1u64 << 63)).to_be_bytes()
}

/// Inverse of [`encode_ordered`].
pub fn decode_ordered(b: [u8; 8]) -> i64 {
    (u64::from_be_bytes(b) ^ (1u64 << 63)) as i64
}

fn tagged(tag: u8, key: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + key.len());
    out.push(tag);
    out.extend_from_slice(key.as_bytes());
    out
}

fn tagged_time(tag: u8, ms: i64, key: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(9 + key.len());
    out.push(tag);
    out.extend_from_slice(&encode_ordered(ms));
    out.extend_from_slice(key.as_bytes());
    out
}

/// Splits a `tag time key` state key.
fn split_tagged_time(tag: u8, raw: &[u8]) -> Result<(i64, String), StateCodecError> {
    let (&found, rest) = raw
        .split_first()
        .ok_or(StateCodecError::BadKey { why: "empty key" })?;
    if found != tag {
        return Err(StateCodecError::BadKey {
            why: "unexpected tag",
        });
    }
    let (time, key) = rest
        .split_first_chunk::<8>()
        .ok_or(StateCodecError::BadKey {
            why: "shorter than tag + time",
        })?;
    let key = String::from_utf8(key.to_vec()).map_err(|_| StateCodecError::BadKey {
        why: "record key is not UTF-8",
    })?;
    Ok((decode_ordered(*time), key))
}

/// The range `[from, to)` of every `tag time ..` key with `after < time <= upto` (`after`
/// `None`: no lower bound).
///
/// Callers pass the bound of their previous sweep as `after`: everything at or below it is
/// already gone, and starting the scan there keeps RocksDB from stepping over the tombstones
/// of every earlier sweep on each record.
pub(crate) fn range_between(tag: u8, after: Option<i64>, upto: i64) -> (Vec<u8>, Vec<u8>) {
    let bound = |exclusive_start: Option<i64>| match exclusive_start.map(|t| t.checked_add(1)) {
        None => vec![tag],
        Some(Some(next)) => {
            let mut key = vec![tag];
            key.extend_from_slice(&encode_ordered(next));
            key
        }
        // Nothing is above i64::MAX: the next tag is an exclusive bound.
        Some(None) => vec![tag.saturating_add(1)],
    };
    let from = bound(after);
    let to = bound(Some(upto));
    if from >= to {
        return (from.clone(), from);
    }
    (from, to)
}

/// `c` key.
pub fn count_key(key: &str) -> Vec<u8> {
    tagged(COUNT, key)
}

/// `a` key.
pub fn aggregate_key(key: &str) -> Vec<u8> {
    tagged(AGGREGATE, key)
}

/// `w` start key.
pub fn window_key(start_ms: i64, key: &str) -> Vec<u8> {
    tagged_time(WINDOW, start_ms, key)
}

/// (window start, record key) of a `w` key.
pub fn decode_window_key(raw: &[u8]) -> Result<(i64, String), StateCodecError> {
    split_tagged_time(WINDOW, raw)
}

/// Scan range of every window starting in `(after, upto]`.
pub fn windows_starting_between(after: Option<i64>, upto: i64) -> (Vec<u8>, Vec<u8>) {
    range_between(WINDOW, after, upto)
}

/// `d` key.
pub fn dedup_key(key: &str) -> Vec<u8> {
    tagged(DEDUP, key)
}

/// `x` expiry key.
pub fn expiry_key(expiry_ms: i64, key: &str) -> Vec<u8> {
    tagged_time(EXPIRY, expiry_ms, key)
}

/// (expiry, record key) of an `x` key.
pub fn decode_expiry_key(raw: &[u8]) -> Result<(i64, String), StateCodecError> {
    split_tagged_time(EXPIRY, raw)
}

/// Scan range of every expiry index entry in `(after, upto]`.
pub fn expiring_between(after: Option<i64>, upto: i64) -> (Vec<u8>, Vec<u8>) {
    range_between(EXPIRY, after, upto)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn window_key_layout_is_documented_bytes() {
        assert_eq!(
            window_key(0, "k"),
            vec![b'w', 0x80, 0, 0, 0, 0, 0, 0, 0, b'k']
        );
        assert_eq!(count_key("ab"), b"cab".to_vec());
        assert_eq!(dedup_key(""), b"d".to_vec());
    }

    #[test]
    fn malformed_keys_are_typed_errors() {
        assert!(matches!(
            decode_window_key(b""),
            Err(StateCodecError::BadKey { .. })
        ));
        assert!(matches!(
            decode_window_key(b"w123"),
            Err(StateCodecError::BadKey { .. })
        ));
        assert!(matches!(
            decode_window_key(&expiry_key(1, "k")),
            Err(StateCodecError::BadKey { .. })
        ));
        let mut bad = window_key(5, "");
        bad.push(0xff);
        assert!(matches!(
            decode_window_key(&bad),
            Err(StateCodecError::BadKey { .. })
        ));
    }

    #[test]
    fn range_upto_max_covers_the_whole_space() {
        let (from, to) = windows_starting_between(None, i64::MAX);
        let k = window_key(i64::MAX, "zzz");
        assert!(from.as_slice() <= k.as_slice() && k.as_slice() < to.as_slice());
    }

    proptest! {
        #[test]
        fn ordered_encoding_preserves_order(a in any::<i64>(), b in any::<i64>()) {
            prop_assert_eq!(a.cmp(&b), encode_ordered(a).cmp(&encode_ordered(b)));
            prop_assert_eq!(decode_ordered(encode_ordered(a)), a);
        }

        #[test]
        fn window_keys_round_trip_and_sort_by_start(
            s1 in any::<i64>(), s2 in any::<i64>(), k1 in ".{0,8}", k2 in ".{0,8}"
        ) {
            prop_assert_eq!(decode_window_key(&window_key(s1, &k1)), Ok((s1, k1.clone())));
            if s1 < s2 {
                prop_assert!(window_key(s1, &k1) < window_key(s2, &k2));
            }
        }

        #[test]
        fn range_contains_exactly_the_times_in_between(t in any::<i64>(), after in proptest::option::of(any::<i64>()), upto in any::<i64>(), k in ".{0,8}") {
            for (from, to) in [expiring_between(after, upto), windows_starting_between(after, upto)] {
                let key = if from[0] == EXPIRY { expiry_key(t, &k) } else { window_key(t, &k) };
                let inside = from.as_slice() <= key.as_slice() && key.as_slice() < to.as_slice();
                prop_assert_eq!(inside, after.is_none_or(|a| a < t) && t <= upto);
            }
        }
    }
}
