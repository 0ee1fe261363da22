//! Tests of the join state layout: documented bytes, round trips of every key and value,
//! typed errors for malformed bytes, and the ranges the joins scan.

use proptest::prelude::*;

use super::*;

fn side() -> impl Strategy<Value = Side> {
    prop_oneof![Just(Side::Left), Just(Side::Right)]
}

/// Keys of any length class: empty, short, and past one varint byte (128 bytes and more).
fn join_key() -> impl Strategy<Value = String> {
    prop_oneof![".{0,6}", "[a-z]{120,140}"]
}

fn content() -> impl Strategy<Value = Content> {
    prop_oneof![
        Just(Content::Tombstone),
        proptest::collection::vec(any::<u8>(), 0..20).prop_map(Content::Value),
    ]
}

#[test]
fn keys_are_the_documented_bytes() {
    let at = BufferedAt {
        side: Side::Right,
        key: "k".into(),
        time: 0,
        offset: 1,
    };
    let mut want = vec![b'j', b'r', 1, b'k', 0x80, 0, 0, 0, 0, 0, 0, 0];
    want.extend_from_slice(&[0x80, 0, 0, 0, 0, 0, 0, 1]);
    assert_eq!(at.buffer_key(), want);
    let mut want = vec![b'e', 0x80, 0, 0, 0, 0, 0, 0, 9, b'r'];
    want.extend_from_slice(&[0x80, 0, 0, 0, 0, 0, 0, 0]);
    want.extend_from_slice(&[0x80, 0, 0, 0, 0, 0, 0, 1, b'k']);
    assert_eq!(at.expiry_key(9), want);
    assert_eq!(
        version_key("ab", i64::MAX),
        [&[b'v', 2, b'a', b'b'][..], &[0xff; 8]].concat()
    );
    assert_eq!(
        prune_key(-1, PruneKind::LatestTombstone, "z"),
        vec![
            b'p', 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, b't', b'z'
        ]
    );
    // A 200-byte key's length takes two varint bytes: 200 = 0b1_1001000.
    let long = "x".repeat(200);
    assert_eq!(&version_key(&long, 0)[..3], &[b'v', 0xc8, 0x01]);
}

#[test]
fn values_are_the_documented_bytes() {
    let matched = BufferedRecord {
        matched: true,
        raw: b"{}".to_vec(),
    };
    assert_eq!(matched.encode(), vec![1, 1, b'{', b'}']);
    let tombstone = TableVersion {
        valid_from: 258,
        content: Content::Tombstone,
    };
    assert_eq!(tombstone.encode(), vec![1, 0, 0, 0, 0, 0, 0, 1, 2, 0]);
    let value = TableVersion {
        valid_from: -1,
        content: Content::Value(b"{}".to_vec()),
    };
    assert_eq!(
        value.encode(),
        [&[1][..], &[0xff; 8], &[1, b'{', b'}']].concat()
    );
}

#[test]
fn malformed_values_are_typed_errors() {
    let unknown = StateCodecError::UnknownVersion {
        found: 2,
        supported: 1,
    };
    assert_eq!(BufferedRecord::decode(&[2, 0]), Err(unknown.clone()));
    assert_eq!(TableVersion::decode(&[2; 10]), Err(unknown));
    assert_eq!(BufferedRecord::decode(&[]), Err(StateCodecError::Empty));
    let bad = |why| StateCodecError::BadValue { why };
    let record = |bytes: &[u8]| BufferedRecord::decode(bytes).unwrap_err();
    let version = |bytes: &[u8]| TableVersion::decode(bytes).unwrap_err();
    assert_eq!(record(&[1]), bad("no flags byte"));
    assert_eq!(record(&[1, 2]), bad("unknown flags"));
    assert_eq!(version(&[1, 0, 0]), bad("shorter than valid_from"));
    assert_eq!(version(&[1; 9]), bad("no content kind"));
    let with = |tail: &[u8]| [&[1][..], &[0; 8], tail].concat();
    assert_eq!(version(&with(&[2])), bad("unknown content kind"));
    assert_eq!(version(&with(&[0, 1])), bad("tombstone with content"));
}

#[test]
fn malformed_keys_are_typed_errors() {
    let is_bad_key =
        |r: Result<BufferedAt, StateCodecError>| matches!(r, Err(StateCodecError::BadKey { .. }));
    assert!(is_bad_key(BufferedAt::decode_buffer_key(b"")));
    assert!(is_bad_key(BufferedAt::decode_buffer_key(b"jx\x00")));
    assert!(is_bad_key(BufferedAt::decode_buffer_key(b"jl\x05ab")));
    assert!(is_bad_key(BufferedAt::decode_buffer_key(b"jl\x80")));
    assert!(is_bad_key(BufferedAt::decode_buffer_key(b"jl\x00short")));
    let at = BufferedAt {
        side: Side::Left,
        key: "k".into(),
        time: 1,
        offset: 2,
    };
    assert!(is_bad_key(BufferedAt::decode_buffer_key(&at.expiry_key(3))));
    let mut trailing = at.buffer_key();
    trailing.push(0);
    assert!(is_bad_key(BufferedAt::decode_buffer_key(&trailing)));
    let mut not_utf8 = at.expiry_key(3);
    not_utf8.push(0xff);
    assert!(matches!(
        BufferedAt::decode_expiry_key(&not_utf8),
        Err(StateCodecError::BadKey { .. })
    ));
    assert!(decode_version_key(b"v\x01k").is_err());
    assert!(decode_prune_key(&[b'p', 0, 0, 0, 0, 0, 0, 0, 0, b'?']).is_err());
}

proptest! {
    #[test]
    fn every_key_and_value_round_trips(
        side in side(), key in join_key(), time in any::<i64>(), offset in any::<i64>(),
        expiry in any::<i64>(), matched in any::<bool>(),
        raw in proptest::collection::vec(any::<u8>(), 0..20), content in content(),
    ) {
        let at = BufferedAt { side, key: key.clone(), time, offset };
        prop_assert_eq!(BufferedAt::decode_buffer_key(&at.buffer_key()), Ok(at.clone()));
        prop_assert_eq!(BufferedAt::decode_expiry_key(&at.expiry_key(expiry)), Ok((expiry, at)));
        prop_assert_eq!(decode_version_key(&version_key(&key, time)), Ok((key.clone(), time)));
        for kind in [PruneKind::Ends, PruneKind::LatestTombstone] {
            prop_assert_eq!(decode_prune_key(&prune_key(time, kind, &key)), Ok((time, kind, key.clone())));
        }
        let record = BufferedRecord { matched, raw };
        prop_assert_eq!(BufferedRecord::decode(&record.encode()), Ok(record));
        let version = TableVersion { valid_from: time, content };
        prop_assert_eq!(TableVersion::decode(&version.encode()), Ok(version));
    }

    /// The match lookup's range holds exactly the entries of its side and key with a time in
    /// the inclusive bounds, whatever other keys (prefixes of it included) are stored.
    #[test]
    fn a_buffer_range_holds_exactly_its_side_key_and_times(
        side in side(), key in join_key(), other in join_key(), other_side in side(),
        t in -1000i64..1000, offset in any::<i64>(), from in -1000i64..1000, len in 0i64..500,
    ) {
        let to = from + len;
        let (start, end) = buffer_range(side, &key, from, to);
        let entry = BufferedAt { side: other_side, key: other.clone(), time: t, offset }.buffer_key();
        let inside = start <= entry && entry < end;
        let want = other_side == side && other == key && from <= t && t <= to;
        prop_assert_eq!(inside, want);
    }

    #[test]
    fn buffer_keys_of_one_side_and_key_sort_by_time_then_offset(
        key in join_key(), t1 in any::<i64>(), t2 in any::<i64>(), o1 in any::<i64>(), o2 in any::<i64>(),
    ) {
        let k = |time, offset| BufferedAt { side: Side::Left, key: key.clone(), time, offset }.buffer_key();
        prop_assert_eq!(k(t1, o1).cmp(&k(t2, o2)), (t1, o1).cmp(&(t2, o2)));
    }

    /// The version lookup's range holds exactly the versions of its key ending after `t`.
    #[test]
    fn a_version_range_holds_exactly_the_versions_of_its_key_ending_after(
        key in join_key(), other in join_key(), t in any::<i64>(), valid_to in any::<i64>(),
    ) {
        let (start, end) = versions_ending_after(&key, t);
        let entry = version_key(&other, valid_to);
        prop_assert_eq!(start <= entry && entry < end, other == key && valid_to > t);
    }

    #[test]
    fn index_ranges_hold_exactly_the_entries_due(
        due in any::<i64>(), upto in any::<i64>(), key in join_key(), side in side(),
    ) {
        let at = BufferedAt { side, key: key.clone(), time: 0, offset: 0 };
        let (start, end) = expiring_upto(upto);
        let entry = at.expiry_key(due);
        prop_assert_eq!(start <= entry && entry < end, due <= upto);
        let (start, end) = prunable_upto(upto);
        let entry = prune_key(due, PruneKind::Ends, &key);
        prop_assert_eq!(start <= entry && entry < end, due <= upto);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
        let _ = BufferedRecord::decode(&bytes);
        let _ = TableVersion::decode(&bytes);
        let _ = BufferedAt::decode_buffer_key(&bytes);
        let _ = BufferedAt::decode_expiry_key(&bytes);
        let _ = decode_version_key(&bytes);
        let _ = decode_prune_key(&bytes);
    }
}
