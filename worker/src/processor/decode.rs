//! Decoding raw input values into [`InputRecord`]s, and the typed reasons a record is bad.
//!
//! Input values are JSON objects. The key comes from a configured top-level field (a string,
//! or a number in its JSON text form); the event time, when configured, from another (epoch
//! millis as a number, or an RFC 3339 string). A bad record is never fatal: the loop sends it
//! to the dead-letter topic with [`DecodeError::reason`] in a header and goes on.
//!
//! A join's second input is decoded by a [`RightDecoder`]: another stream's values like the
//! first's (with its own fields), or a table's changelog by a [`TableDecoder`], whose key is
//! the Kafka record key (a tombstone has no value to read one from).

use serde_json::{Map, Value};

use super::record::{InputRecord, KafkaMeta, Side};
use super::rfc3339;

/// Largest accepted |event time| in ms (2^53 - 1, about 285,000 years either side of 1970).
/// Every JSON number up to it is an exact integer, and window arithmetic on it cannot
/// overflow `i64`.
pub const MAX_ABS_EVENT_TIME_MS: i64 = (1 << 53) - 1;

/// Why an input record cannot be processed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The value is not valid JSON (or not UTF-8, or empty).
    #[error("value is not JSON: {detail}")]
    NotJson {
        /// The parser's message with line and column.
        detail: String,
    },
    /// The value is JSON but not an object.
    #[error("value is a JSON {found}, expected an object")]
    NotAnObject {
        /// The JSON type found.
        found: &'static str,
    },
    /// A configured field is absent or `null`.
    #[error("field `{field}` is missing")]
    MissingField {
        /// The field name.
        field: String,
    },
    /// A configured field has the wrong JSON type.
    #[error("field `{field}` is a {found}, expected {expected}")]
    WrongType {
        /// The field name.
        field: String,
        /// What it must be.
        expected: &'static str,
        /// The JSON type found.
        found: &'static str,
    },
    /// The time field has the right type but is not a usable instant.
    #[error("field `{field}` is not a valid timestamp: {detail}")]
    BadTimestamp {
        /// The field name.
        field: String,
        /// Why.
        detail: String,
    },
    /// The event time lies too far ahead of the Kafka record's own timestamp (see
    /// `Pipeline::process`).
    #[error(
        "event time {event_time_ms} ms is more than an hour after the record's Kafka timestamp {record_timestamp_ms} ms"
    )]
    EventTimeTooFarAhead {
        event_time_ms: i64,
        record_timestamp_ms: i64,
    },
    /// The Kafka value is null on an input that is not a table (only a table record can be a
    /// tombstone).
    #[error("value is null, and only a table input may carry tombstones")]
    NullValue,
    /// A table record has no Kafka key (the table's key is the record key).
    #[error("table record has no Kafka key")]
    MissingRecordKey,
    /// A table record's Kafka key is not UTF-8 (join keys are compared as text).
    #[error("table record key is not UTF-8")]
    RecordKeyNotUtf8,
    /// A table record's version time is its Kafka timestamp (no time field configured, or a
    /// tombstone, which has no fields), and the record has none.
    #[error("table record has no Kafka timestamp to take its version time from")]
    MissingRecordTimestamp,
    /// A join's record sits in another partition than the job's partitioner gives its key: it
    /// can never meet its matches, which the other topic holds in that partition.
    #[error(
        "key `{key}` belongs in partition {expected} by {partitioner} (join.partitioner) but was read from partition {partition}; {evidence}"
    )]
    NotCoPartitioned {
        key: String,
        partition: u32,
        expected: u32,
        partitioner: &'static str,
        /// What the placement fits, in words.
        evidence: String,
    },
    /// A WebAssembly processor's call for the record trapped (the guest's own error or a bug).
    #[error("the processor trapped: {detail}")]
    GuestTrapped {
        /// The trap, as Wasmtime tells it.
        detail: String,
    },
    /// A WebAssembly processor's call for the record burnt its whole fuel budget.
    #[error("the processor ran out of fuel: the record's budget is {fuel} (limits.fuelPerRecord)")]
    GuestOutOfFuel { fuel: u64 },
    /// A WebAssembly processor's call for the record wanted more memory than the cap.
    #[error("the processor ran out of memory: the cap is {bytes} bytes (limits.memoryBytes)")]
    GuestOutOfMemory { bytes: u64 },
    /// A custom processor found the record unusable ([`super::ProcessError::rejected`]).
    #[error("the processor rejected the record: {detail}")]
    Rejected {
        /// The processor's reason.
        detail: String,
    },
}

impl DecodeError {
    /// Every [`DecodeError::reason`], so the metrics can start each at 0.
    pub const REASONS: [&'static str; 15] = [
        "not_json",
        "not_an_object",
        "missing_field",
        "wrong_type",
        "bad_timestamp",
        "event_time_too_far_ahead",
        "null_value",
        "missing_record_key",
        "record_key_not_utf8",
        "missing_record_timestamp",
        "not_co_partitioned",
        "rejected",
        "guest_trapped",
        "guest_out_of_fuel",
        "guest_out_of_memory",
    ];

    /// A stable machine-readable reason, used as the dead-letter header value and the metric
    /// label. Never change an existing string: dashboards and consumers match on it.
    pub fn reason(&self) -> &'static str {
        match self {
            DecodeError::NotJson { .. } => "not_json",
            DecodeError::NotAnObject { .. } => "not_an_object",
            DecodeError::MissingField { .. } => "missing_field",
            DecodeError::WrongType { .. } => "wrong_type",
            DecodeError::BadTimestamp { .. } => "bad_timestamp",
            DecodeError::EventTimeTooFarAhead { .. } => "event_time_too_far_ahead",
            DecodeError::NullValue => "null_value",
            DecodeError::MissingRecordKey => "missing_record_key",
            DecodeError::RecordKeyNotUtf8 => "record_key_not_utf8",
            DecodeError::MissingRecordTimestamp => "missing_record_timestamp",
            DecodeError::NotCoPartitioned { .. } => "not_co_partitioned",
            DecodeError::Rejected { .. } => "rejected",
            DecodeError::GuestTrapped { .. } => "guest_trapped",
            DecodeError::GuestOutOfFuel { .. } => "guest_out_of_fuel",
            DecodeError::GuestOutOfMemory { .. } => "guest_out_of_memory",
        }
    }
}

/// The JSON type name of a value, for error messages.
pub fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// A present, non-null field. `null` counts as missing: producers commonly write an absent
/// optional field as `null`, and "missing" is the more useful dead-letter reason for it.
fn field<'v>(obj: &'v Map<String, Value>, name: &str) -> Result<&'v Value, DecodeError> {
    match obj.get(name) {
        None | Some(Value::Null) => Err(DecodeError::MissingField {
            field: name.to_owned(),
        }),
        Some(v) => Ok(v),
    }
}

/// Reads a numeric field as `f64` (the `aggregate` value field).
pub fn number_field(obj: &Map<String, Value>, name: &str) -> Result<f64, DecodeError> {
    let v = field(obj, name)?;
    v.as_f64().ok_or_else(|| DecodeError::WrongType {
        field: name.to_owned(),
        expected: "a number",
        found: json_type(v),
    })
}

/// Reads the key field: strings as is, numbers in their JSON text form (`42`, `1.5`).
pub fn key_field(obj: &Map<String, Value>, name: &str) -> Result<String, DecodeError> {
    match field(obj, name)? {
        Value::String(s) => Ok(s.clone()),
        Value::Number(n) => Ok(n.to_string()),
        other => Err(DecodeError::WrongType {
            field: name.to_owned(),
            expected: "a string or a number",
            found: json_type(other),
        }),
    }
}

/// Reads the time field as epoch millis.
pub fn time_field(obj: &Map<String, Value>, name: &str) -> Result<i64, DecodeError> {
    let bad = |detail: &str| DecodeError::BadTimestamp {
        field: name.to_owned(),
        detail: detail.to_owned(),
    };
    let ms = match field(obj, name)? {
        Value::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => i,
            // Some producers write integral millis as floats (1.7e12); accept those exactly.
            (None, Some(f)) if f.fract() == 0.0 && f.abs() <= MAX_ABS_EVENT_TIME_MS as f64 => {
                f as i64
            }
            (None, Some(f)) if f.fract() != 0.0 => {
                return Err(bad("epoch millis must be an integer"));
            }
            _ => return Err(bad("epoch millis out of range")),
        },
        Value::String(s) => rfc3339::parse_millis(s).map_err(|e| bad(&e.to_string()))?,
        other => {
            return Err(DecodeError::WrongType {
                field: name.to_owned(),
                expected: "epoch millis (number) or an RFC 3339 string",
                found: json_type(other),
            });
        }
    };
    if ms.unsigned_abs() > MAX_ABS_EVENT_TIME_MS.unsigned_abs() {
        return Err(bad("epoch millis out of range"));
    }
    Ok(ms)
}

/// Parses a raw value that must be a JSON object.
fn parse_object(raw: &[u8]) -> Result<Map<String, Value>, DecodeError> {
    let parsed: Value = serde_json::from_slice(raw).map_err(|e| DecodeError::NotJson {
        detail: e.to_string(),
    })?;
    match parsed {
        Value::Object(value) => Ok(value),
        other => Err(DecodeError::NotAnObject {
            found: json_type(&other),
        }),
    }
}

/// Turns raw input values into [`InputRecord`]s according to the configured fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordDecoder {
    key_field: String,
    time_field: Option<String>,
    side: Side,
}

impl RecordDecoder {
    /// A decoder reading the key from `key_field` and, if given, event time from `time_field`.
    /// Its records are of [`Side::Left`].
    pub fn new(key_field: impl Into<String>, time_field: Option<String>) -> Self {
        Self {
            key_field: key_field.into(),
            time_field,
            side: Side::Left,
        }
    }

    /// The same decoder, marking its records as read from `side`.
    pub fn with_side(self, side: Side) -> Self {
        Self { side, ..self }
    }

    /// The configured time field, if any.
    pub fn time_field(&self) -> Option<&str> {
        self.time_field.as_deref()
    }

    /// Decodes one input value read at `partition`/`offset`.
    pub fn decode<'a>(
        &self,
        raw: &'a [u8],
        partition: i32,
        offset: i64,
    ) -> Result<InputRecord<'a>, DecodeError> {
        let value = parse_object(raw)?;
        let key = key_field(&value, &self.key_field)?;
        let event_time_ms = match &self.time_field {
            Some(name) => Some(time_field(&value, name)?),
            None => None,
        };
        Ok(InputRecord {
            side: self.side,
            key,
            value,
            raw,
            tombstone: false,
            partition,
            offset,
            event_time_ms,
            kafka: KafkaMeta::default(),
        })
    }
}

/// The name a Kafka record timestamp goes by in errors about it.
const RECORD_TIMESTAMP: &str = "(kafka record timestamp)";

/// Decodes a table input (the right side of a stream-table join): the key is the Kafka record
/// key as UTF-8, a null value is a tombstone, and the record's time (the start of the version it
/// writes) is read from `time_field` when one is configured, else it is the Kafka record
/// timestamp.
///
/// A tombstone has no fields, so its time is always the Kafka record timestamp: a producer that
/// stamps a table's values with a time field should stamp its deletes the same way.
/// Dead-lettering them instead would make deleting a key impossible.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableDecoder {
    time_field: Option<String>,
}

impl TableDecoder {
    /// A table decoder taking version times from `time_field`, or from Kafka timestamps.
    pub fn new(time_field: Option<String>) -> Self {
        Self { time_field }
    }

    /// Decodes one table record read at `partition`/`offset`; its side is [`Side::Right`].
    pub fn decode<'a>(
        &self,
        kafka_key: Option<&[u8]>,
        payload: Option<&'a [u8]>,
        partition: i32,
        offset: i64,
        record_timestamp_ms: Option<i64>,
    ) -> Result<InputRecord<'a>, DecodeError> {
        let key = kafka_key.ok_or(DecodeError::MissingRecordKey)?;
        let key = String::from_utf8(key.to_vec()).map_err(|_| DecodeError::RecordKeyNotUtf8)?;
        let record_time = || match record_timestamp_ms {
            None => Err(DecodeError::MissingRecordTimestamp),
            Some(ms) if ms.unsigned_abs() > MAX_ABS_EVENT_TIME_MS.unsigned_abs() => {
                Err(DecodeError::BadTimestamp {
                    field: RECORD_TIMESTAMP.to_owned(),
                    detail: "epoch millis out of range".to_owned(),
                })
            }
            Some(ms) => Ok(ms),
        };
        let (value, raw, tombstone, time) = match payload {
            None => (Map::new(), &b""[..], true, record_time()?),
            Some(raw) => {
                let value = parse_object(raw)?;
                let time = match &self.time_field {
                    Some(name) => time_field(&value, name)?,
                    None => record_time()?,
                };
                (value, raw, false, time)
            }
        };
        Ok(InputRecord {
            side: Side::Right,
            key,
            value,
            raw,
            tombstone,
            partition,
            offset,
            event_time_ms: Some(time),
            kafka: KafkaMeta::default(),
        })
    }
}

/// How the second input of a join is decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RightDecoder {
    /// Another stream of JSON objects, with its own key and time fields.
    Stream(RecordDecoder),
    /// A table's changelog.
    Table(TableDecoder),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decoder() -> RecordDecoder {
        RecordDecoder::new("user", Some("ts".to_owned()))
    }

    fn reason_of(raw: &str) -> (&'static str, String) {
        let err = decoder().decode(raw.as_bytes(), 0, 0).unwrap_err();
        (err.reason(), err.to_string())
    }

    #[test]
    fn decodes_string_and_number_keys_and_both_time_forms() {
        let r = decoder()
            .decode(br#"{"user":"ann","ts":1000,"x":1}"#, 3, 42)
            .unwrap();
        assert_eq!(r.key, "ann");
        assert_eq!(r.event_time_ms, Some(1000));
        assert_eq!((r.partition, r.offset), (3, 42));
        assert_eq!(r.value.get("x"), Some(&Value::from(1)));

        let r = decoder()
            .decode(br#"{"user":42,"ts":"1970-01-01T00:00:01.5Z"}"#, 0, 0)
            .unwrap();
        assert_eq!(r.key, "42");
        assert_eq!(r.event_time_ms, Some(1500));

        let r = decoder()
            .decode(br#"{"user":1.5,"ts":1.7e12}"#, 0, 0)
            .unwrap();
        assert_eq!(r.key, "1.5");
        assert_eq!(r.event_time_ms, Some(1_700_000_000_000));
    }

    #[test]
    fn time_field_is_optional_when_not_configured() {
        let d = RecordDecoder::new("user", None);
        let r = d.decode(br#"{"user":"ann"}"#, 0, 0).unwrap();
        assert_eq!(r.event_time_ms, None);
    }

    #[test]
    fn every_bad_record_has_a_precise_reason() {
        let cases = [
            ("", "not_json"),
            ("{\"user\":", "not_json"),
            ("\u{0}", "not_json"),
            ("[1,2]", "not_an_object"),
            ("\"ann\"", "not_an_object"),
            (r#"{"ts":1}"#, "missing_field"),
            (r#"{"user":null,"ts":1}"#, "missing_field"),
            (r#"{"user":"ann"}"#, "missing_field"),
            (r#"{"user":true,"ts":1}"#, "wrong_type"),
            (r#"{"user":{"id":1},"ts":1}"#, "wrong_type"),
            (r#"{"user":"ann","ts":[1]}"#, "wrong_type"),
            (r#"{"user":"ann","ts":1.5}"#, "bad_timestamp"),
            (r#"{"user":"ann","ts":"yesterday"}"#, "bad_timestamp"),
            (r#"{"user":"ann","ts":9007199254740992}"#, "bad_timestamp"),
            (r#"{"user":"ann","ts":-9007199254740992}"#, "bad_timestamp"),
            (
                r#"{"user":"ann","ts":18446744073709551615}"#,
                "bad_timestamp",
            ),
        ];
        for (raw, want) in cases {
            assert_eq!(reason_of(raw).0, want, "{raw}");
            assert!(DecodeError::REASONS.contains(&want), "{want} is listed");
        }
        let too_far = DecodeError::EventTimeTooFarAhead {
            event_time_ms: 0,
            record_timestamp_ms: 0,
        };
        assert!(DecodeError::REASONS.contains(&too_far.reason()));
    }

    #[test]
    fn errors_name_the_field_and_the_types() {
        assert_eq!(
            decoder().decode(br#"{"user":true,"ts":1}"#, 0, 0),
            Err(DecodeError::WrongType {
                field: "user".into(),
                expected: "a string or a number",
                found: "boolean"
            })
        );
        assert_eq!(
            decoder().decode(br#"{"user":"a"}"#, 0, 0),
            Err(DecodeError::MissingField { field: "ts".into() })
        );
        assert_eq!(
            decoder().decode(b"[]", 0, 0),
            Err(DecodeError::NotAnObject { found: "array" })
        );
        let (_, msg) = reason_of(r#"{"user":"a","ts":"2024-13-01T00:00:00Z"}"#);
        assert_eq!(
            msg,
            "field `ts` is not a valid timestamp: not an RFC 3339 timestamp: month out of range"
        );
    }

    #[test]
    fn boundary_event_times_are_accepted() {
        for ts in [MAX_ABS_EVENT_TIME_MS, -MAX_ABS_EVENT_TIME_MS, 0] {
            let raw = format!(r#"{{"user":"a","ts":{ts}}}"#);
            assert_eq!(
                decoder()
                    .decode(raw.as_bytes(), 0, 0)
                    .unwrap()
                    .event_time_ms,
                Some(ts)
            );
        }
    }

    #[test]
    fn number_field_rejects_strings() {
        let obj = serde_json::json!({"v": "3", "n": 2.5});
        let Value::Object(obj) = obj else {
            unreachable!()
        };
        assert_eq!(number_field(&obj, "n"), Ok(2.5));
        assert_eq!(
            number_field(&obj, "v"),
            Err(DecodeError::WrongType {
                field: "v".into(),
                expected: "a number",
                found: "string"
            })
        );
    }

    #[test]
    fn a_record_decoder_marks_its_side() {
        let raw = br#"{"user":"a","ts":1}"#;
        assert_eq!(decoder().decode(raw, 0, 0).unwrap().side, Side::Left);
        let right = decoder().with_side(Side::Right).decode(raw, 0, 0).unwrap();
        assert_eq!((right.side, right.tombstone), (Side::Right, false));
    }

    #[test]
    fn a_table_record_is_keyed_by_its_kafka_key_and_timed_by_field_or_timestamp() {
        let raw = br#"{"name":"ann","ts":40}"#;
        let by_field = TableDecoder::new(Some("ts".into()));
        let r = by_field
            .decode(Some(b"u1"), Some(raw), 2, 7, Some(99))
            .unwrap();
        assert_eq!(
            (r.key.as_str(), r.event_time_ms, r.side),
            ("u1", Some(40), Side::Right)
        );
        assert_eq!(
            (r.raw, r.tombstone, r.partition, r.offset),
            (&raw[..], false, 2, 7)
        );
        let by_timestamp = TableDecoder::new(None);
        let r = by_timestamp
            .decode(Some(b"u1"), Some(raw), 0, 0, Some(99))
            .unwrap();
        assert_eq!(r.event_time_ms, Some(99));
    }

    #[test]
    fn a_null_table_value_is_a_tombstone_timed_by_its_kafka_timestamp() {
        let r = TableDecoder::new(Some("ts".into()))
            .decode(Some(b"u1"), None, 0, 3, Some(55))
            .unwrap();
        assert!(r.tombstone);
        assert!(r.value.is_empty() && r.raw.is_empty());
        assert_eq!((r.key.as_str(), r.event_time_ms), ("u1", Some(55)));
    }

    #[test]
    fn bad_table_records_have_precise_reasons() {
        let d = TableDecoder::new(None);
        let obj = &br#"{"a":1}"#[..];
        // (Kafka key, value, Kafka timestamp, the reason expected)
        type Case<'a> = (Option<&'a [u8]>, Option<&'a [u8]>, Option<i64>, &'a str);
        let cases: [Case<'_>; 6] = [
            (None, Some(obj), Some(1), "missing_record_key"),
            (
                Some(&[0xff, 0xfe]),
                Some(obj),
                Some(1),
                "record_key_not_utf8",
            ),
            (Some(b"k"), Some(obj), None, "missing_record_timestamp"),
            (Some(b"k"), None, None, "missing_record_timestamp"),
            (Some(b"k"), Some(b"[1]"), Some(1), "not_an_object"),
            (Some(b"k"), Some(obj), Some(i64::MAX), "bad_timestamp"),
        ];
        for (key, payload, ts, want) in cases {
            let err = d.decode(key, payload, 0, 0, ts).unwrap_err();
            assert_eq!(err.reason(), want, "{key:?} {payload:?} {ts:?}");
            assert!(DecodeError::REASONS.contains(&want));
        }
        let by_field = TableDecoder::new(Some("ts".into()));
        let err = by_field
            .decode(Some(b"k"), Some(obj), 0, 0, Some(1))
            .unwrap_err();
        assert_eq!(err, DecodeError::MissingField { field: "ts".into() });
    }
}
