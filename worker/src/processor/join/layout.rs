//! The state layout of the joins: keys and versioned values.
//!
//! Keys start with a tag of `keys` and hold times and offsets in `keys::encode_ordered` form
//! (byte order = numeric order). A lookup needs every entry of one join key in time order, so
//! in the `j` and `v` spaces the join key comes *before* the times, behind its byte length as
//! an unsigned LEB128 varint. That makes (length, key) prefix-free: the entries of one key share
//! a prefix no other key's entries start with, and the fixed-width parts after it sort by time.
//! The index spaces (`e`, `p`) are scanned by time alone and keep the key last, as `keys` does.
//!
//! | space                  | key                                                        | value            |
//! |------------------------|------------------------------------------------------------|------------------|
//! | buffered stream record | `j` side(1: `l`/`r`) len key time(8) offset(8)             | [`BufferedRecord`] |
//! | expiry index           | `e` expiry(8) side(1) time(8) offset(8) key                | `Marker`         |
//! | table version          | `v` len key valid_to(8)                                    | [`TableVersion`] |
//! | pruning index          | `p` due(8) kind(1: `f` ends / `t` latest tombstone) key    | `Marker`         |
//!
//! Values, version 1 (integers big-endian):
//!
//! | type               | layout                                                                |
//! |--------------------|-----------------------------------------------------------------------|
//! | [`BufferedRecord`] | `01`, flags(1: bit 0 = matched, others 0), the record's raw JSON       |
//! | [`TableVersion`]   | `01`, valid_from `i64`, content(1: 0 tombstone, 1 value), raw JSON (none for a tombstone) |
//!
//! A table version is keyed by where it *ends* (`valid_to`, `i64::MAX` for the newest), so the
//! version valid at `t` is the first entry of its key ending after `t`: one forward scan of one
//! entry, with no reverse iteration (which `StateAccess` does not offer).

use crate::processor::codec::{STATE_FORMAT_VERSION, StateCodecError};
use crate::processor::keys::{self, decode_ordered, encode_ordered};
use crate::processor::record::Side;

fn bad_key(why: &'static str) -> StateCodecError {
    StateCodecError::BadKey { why }
}

fn bad_value(why: &'static str) -> StateCodecError {
    StateCodecError::BadValue { why }
}

fn side_byte(side: Side) -> u8 {
    match side {
        Side::Left => b'l',
        Side::Right => b'r',
    }
}

fn side_of(byte: u8) -> Result<Side, StateCodecError> {
    match byte {
        b'l' => Ok(Side::Left),
        b'r' => Ok(Side::Right),
        _ => Err(bad_key("unknown join side")),
    }
}

/// Appends `key` behind its length (unsigned LEB128: 7 bits a byte, low bits first, the high
/// bit set on every byte but the last).
fn push_key(out: &mut Vec<u8>, key: &str) {
    let mut len = key.len() as u64;
    loop {
        let low = (len & 0x7f) as u8;
        len >>= 7;
        if len == 0 {
            out.push(low);
            break;
        }
        out.push(low | 0x80);
    }
    out.extend_from_slice(key.as_bytes());
}

/// Splits a length-prefixed key off the front of `raw`.
fn split_key(raw: &[u8]) -> Result<(String, &[u8]), StateCodecError> {
    let mut len: u64 = 0;
    let mut used = None;
    // A u64 needs at most 10 bytes of 7 bits.
    for (i, &byte) in raw.iter().enumerate().take(10) {
        len |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            used = Some(i + 1);
            break;
        }
    }
    let used = used.ok_or(bad_key("unterminated key length"))?;
    let rest = raw.get(used..).unwrap_or_default();
    let len = usize::try_from(len).map_err(|_| bad_key("key length out of range"))?;
    let (key, rest) = rest
        .split_at_checked(len)
        .ok_or(bad_key("shorter than its key length"))?;
    let key = String::from_utf8(key.to_vec()).map_err(|_| bad_key("join key is not UTF-8"))?;
    Ok((key, rest))
}

fn split_tag(tag: u8, raw: &[u8]) -> Result<&[u8], StateCodecError> {
    match raw.split_first() {
        Some((&found, rest)) if found == tag => Ok(rest),
        Some(_) => Err(bad_key("unexpected tag")),
        None => Err(bad_key("empty key")),
    }
}

fn split_time(raw: &[u8]) -> Result<(i64, &[u8]), StateCodecError> {
    let (time, rest) = raw
        .split_first_chunk::<8>()
        .ok_or(bad_key("shorter than its fixed-width parts"))?;
    Ok((decode_ordered(*time), rest))
}

fn split_byte(raw: &[u8]) -> Result<(u8, &[u8]), StateCodecError> {
    raw.split_first()
        .map(|(&b, rest)| (b, rest))
        .ok_or(bad_key("shorter than its fixed-width parts"))
}

/// The prefix shared by every `j` entry of one side and join key.
fn buffer_prefix(side: Side, key: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(3 + key.len() + 16);
    out.push(keys::JOIN_BUFFER);
    out.push(side_byte(side));
    push_key(&mut out, key);
    out
}

/// Where a buffered stream record sits: which input, its join key, event time and input offset
/// (unique within its input, and its arrival order).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BufferedAt {
    /// The input the record came from.
    pub side: Side,
    /// Its join key.
    pub key: String,
    /// Its event time.
    pub time: i64,
    /// Its input offset.
    pub offset: i64,
}

impl BufferedAt {
    /// The `j` key of the buffered record.
    pub fn buffer_key(&self) -> Vec<u8> {
        let mut out = buffer_prefix(self.side, &self.key);
        out.extend_from_slice(&encode_ordered(self.time));
        out.extend_from_slice(&encode_ordered(self.offset));
        out
    }

    /// The `e` key indexing the record under `expiry`.
    pub fn expiry_key(&self, expiry: i64) -> Vec<u8> {
        let mut out = Vec::with_capacity(26 + self.key.len());
        out.push(keys::JOIN_EXPIRY);
        out.extend_from_slice(&encode_ordered(expiry));
        out.push(side_byte(self.side));
        out.extend_from_slice(&encode_ordered(self.time));
        out.extend_from_slice(&encode_ordered(self.offset));
        out.extend_from_slice(self.key.as_bytes());
        out
    }

    /// Reads a `j` key.
    pub fn decode_buffer_key(raw: &[u8]) -> Result<Self, StateCodecError> {
        let (side, rest) = split_byte(split_tag(keys::JOIN_BUFFER, raw)?)?;
        let side = side_of(side)?;
        let (key, rest) = split_key(rest)?;
        let (time, rest) = split_time(rest)?;
        let (offset, rest) = split_time(rest)?;
        if !rest.is_empty() {
            return Err(bad_key("bytes after the offset"));
        }
        Ok(Self {
            side,
            key,
            time,
            offset,
        })
    }

    /// Reads an `e` key: (expiry, record).
    pub fn decode_expiry_key(raw: &[u8]) -> Result<(i64, Self), StateCodecError> {
        let (expiry, rest) = split_time(split_tag(keys::JOIN_EXPIRY, raw)?)?;
        let (side, rest) = split_byte(rest)?;
        let side = side_of(side)?;
        let (time, rest) = split_time(rest)?;
        let (offset, key) = split_time(rest)?;
        let key = String::from_utf8(key.to_vec()).map_err(|_| bad_key("join key is not UTF-8"))?;
        let at = Self {
            side,
            key,
            time,
            offset,
        };
        Ok((expiry, at))
    }
}

/// Scan range of the records of `side` and `key` buffered with a time in `[from, to]`.
pub fn buffer_range(side: Side, key: &str, from: i64, to: i64) -> (Vec<u8>, Vec<u8>) {
    let prefix = buffer_prefix(side, key);
    let start = [prefix.as_slice(), &encode_ordered(from)].concat();
    let end = match to.checked_add(1) {
        Some(next) => [prefix.as_slice(), &encode_ordered(next)].concat(),
        // Every time is <= i64::MAX: past the last possible entry of the prefix.
        None => [prefix.as_slice(), &[0xff; 16], &[0]].concat(),
    };
    (start, end)
}

/// Scan range of every expiry index entry with `expiry <= upto`.
pub fn expiring_upto(upto: i64) -> (Vec<u8>, Vec<u8>) {
    keys::range_between(keys::JOIN_EXPIRY, None, upto)
}

fn version_prefix(key: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(3 + key.len() + 8);
    out.push(keys::TABLE_VERSION);
    push_key(&mut out, key);
    out
}

/// The `v` key of the version of `key` ending at `valid_to` (`i64::MAX`: the newest).
pub fn version_key(key: &str, valid_to: i64) -> Vec<u8> {
    let mut out = version_prefix(key);
    out.extend_from_slice(&encode_ordered(valid_to));
    out
}

/// Reads a `v` key: (join key, valid_to).
pub fn decode_version_key(raw: &[u8]) -> Result<(String, i64), StateCodecError> {
    let (key, rest) = split_key(split_tag(keys::TABLE_VERSION, raw)?)?;
    let (valid_to, rest) = split_time(rest)?;
    if !rest.is_empty() {
        return Err(bad_key("bytes after valid_to"));
    }
    Ok((key, valid_to))
}

/// Scan range of the versions of `key` ending after `t` (the first is the one valid at `t`,
/// when it starts at or before `t`).
pub fn versions_ending_after(key: &str, t: i64) -> (Vec<u8>, Vec<u8>) {
    let prefix = version_prefix(key);
    let start = [prefix.as_slice(), &encode_ordered(t.saturating_add(1))].concat();
    // Every entry of the prefix is the prefix and 8 bytes, at most 0xff * 8.
    let end = [prefix.as_slice(), &[0xff; 8], &[0]].concat();
    (start, end)
}

/// What a pruning index entry stands for, and so when its version stops being needed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PruneKind {
    /// A version that ends (a newer one follows): needless once the cutoff reaches its end.
    Ends,
    /// The newest version of a key, a tombstone: needless once the cutoff reaches its start,
    /// since from then on every lookup that is not late finds no value, as with no version.
    LatestTombstone,
}

impl PruneKind {
    fn byte(self) -> u8 {
        match self {
            PruneKind::Ends => b'f',
            PruneKind::LatestTombstone => b't',
        }
    }

    fn of(byte: u8) -> Result<Self, StateCodecError> {
        match byte {
            b'f' => Ok(PruneKind::Ends),
            b't' => Ok(PruneKind::LatestTombstone),
            _ => Err(bad_key("unknown pruning kind")),
        }
    }
}

/// The `p` key of a version of `key` needless from cutoff `due` on.
pub fn prune_key(due: i64, kind: PruneKind, key: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(10 + key.len());
    out.push(keys::TABLE_PRUNE);
    out.extend_from_slice(&encode_ordered(due));
    out.push(kind.byte());
    out.extend_from_slice(key.as_bytes());
    out
}

/// Reads a `p` key: (due, kind, join key).
pub fn decode_prune_key(raw: &[u8]) -> Result<(i64, PruneKind, String), StateCodecError> {
    let (due, rest) = split_time(split_tag(keys::TABLE_PRUNE, raw)?)?;
    let (kind, key) = split_byte(rest)?;
    let key = String::from_utf8(key.to_vec()).map_err(|_| bad_key("join key is not UTF-8"))?;
    Ok((due, PruneKind::of(kind)?, key))
}

/// Scan range of every pruning index entry with `due <= cutoff`.
pub fn prunable_upto(cutoff: i64) -> (Vec<u8>, Vec<u8>) {
    keys::range_between(keys::TABLE_PRUNE, None, cutoff)
}

/// The version byte, checked, and the body after it.
fn versioned(bytes: &[u8]) -> Result<&[u8], StateCodecError> {
    let (&version, body) = bytes.split_first().ok_or(StateCodecError::Empty)?;
    if version != STATE_FORMAT_VERSION {
        return Err(StateCodecError::UnknownVersion {
            found: version,
            supported: STATE_FORMAT_VERSION,
        });
    }
    Ok(body)
}

const MATCHED: u8 = 0b1;

/// A buffered stream record: its raw JSON (emitted byte for byte in every output it is part
/// of) and whether it has found a partner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BufferedRecord {
    /// True once the record was part of a pair. Kept up to date only on the sides whose
    /// unmatched records the mode emits (it is never read on the others).
    pub matched: bool,
    /// The record's value as read from the input.
    pub raw: Vec<u8>,
}

impl BufferedRecord {
    /// Encodes as version 1.
    pub fn encode(&self) -> Vec<u8> {
        let flags = if self.matched { MATCHED } else { 0 };
        [&[STATE_FORMAT_VERSION, flags][..], &self.raw].concat()
    }

    /// Decodes any supported version.
    pub fn decode(bytes: &[u8]) -> Result<Self, StateCodecError> {
        let (&flags, raw) = versioned(bytes)?
            .split_first()
            .ok_or(bad_value("no flags byte"))?;
        if flags & !MATCHED != 0 {
            return Err(bad_value("unknown flags"));
        }
        Ok(Self {
            matched: flags & MATCHED != 0,
            raw: raw.to_vec(),
        })
    }
}

/// What a table version holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Content {
    /// The key is deleted.
    Tombstone,
    /// The table record's raw JSON object.
    Value(Vec<u8>),
}

/// One version of a table key (its end is in its key).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableVersion {
    /// The first time the version is valid at.
    pub valid_from: i64,
    /// Its content.
    pub content: Content,
}

impl TableVersion {
    /// Encodes as version 1.
    pub fn encode(&self) -> Vec<u8> {
        let (kind, raw): (u8, &[u8]) = match &self.content {
            Content::Tombstone => (0, &[]),
            Content::Value(raw) => (1, raw.as_slice()),
        };
        let mut out = Vec::with_capacity(10 + raw.len());
        out.push(STATE_FORMAT_VERSION);
        out.extend_from_slice(&self.valid_from.to_be_bytes());
        out.push(kind);
        out.extend_from_slice(raw);
        out
    }

    /// Decodes any supported version.
    pub fn decode(bytes: &[u8]) -> Result<Self, StateCodecError> {
        let body = versioned(bytes)?;
        let (from, rest) = body
            .split_first_chunk::<8>()
            .ok_or(bad_value("shorter than valid_from"))?;
        let content = match rest.split_first() {
            Some((0, [])) => Content::Tombstone,
            Some((0, _)) => return Err(bad_value("tombstone with content")),
            Some((1, raw)) => Content::Value(raw.to_vec()),
            Some(_) => return Err(bad_value("unknown content kind")),
            None => return Err(bad_value("no content kind")),
        };
        Ok(Self {
            valid_from: i64::from_be_bytes(*from),
            content,
        })
    }
}

#[cfg(test)]
#[path = "layout_tests.rs"]
mod tests;
