//! Decoding raw input values into [`InputRecord`]s, and the typed reasons a record is bad.
//!
//! Input values are JSON objects. The key comes from a configured top-level field (a string,
//! or a number in its JSON text form); the event time, when configured, from another (epoch
//! millis as a number, or an RFC 3339 string). A bad record is never fatal: the loop sends it
//! to the dead-letter topic with [`DecodeError::reason`] in a header and goes on.

use serde_json::{Map, Value};

use super::record::InputRecord;
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
}

impl DecodeError {
    /// Every [`DecodeError::reason`], so the metrics can start each at 0.
    pub const REASONS: [&'static str; 6] = [
        "not_json",
        "not_an_object",
        "missing_field",
        "wrong_type",
        "bad_timestamp",
        "event_time_too_far_ahead",
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

/// Turns raw input values into [`InputRecord`]s according to the configured fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordDecoder {
    key_field: String,
    time_field: Option<String>,
}

impl RecordDecoder {
    /// A decoder reading the key from `key_field` and, if given, event time from `time_field`.
    pub fn new(key_field: impl Into<String>, time_field: Option<String>) -> Self {
        Self {
            key_field: key_field.into(),
            time_field,
        }
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
        let parsed: Value = serde_json::from_slice(raw).map_err(|e| DecodeError::NotJson {
            detail: e.to_string(),
        })?;
        let Value::Object(value) = parsed else {
            return Err(DecodeError::NotAnObject {
                found: json_type(&parsed),
            });
        };
        let key = key_field(&value, &self.key_field)?;
        let event_time_ms = match &self.time_field {
            Some(name) => Some(time_field(&value, name)?),
            None => None,
        };
        Ok(InputRecord {
            key,
            value,
            raw,
            partition,
            offset,
            event_time_ms,
        })
    }
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
}
