//! Durations written the way Kubernetes writes them (Go's `time.ParseDuration` syntax:
//! "100ms", "30s", "1h30m"), so a value the apiserver's CEL `duration()` accepts is exactly a
//! value the operator and worker accept.

use std::time::Duration;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error("empty duration")]
    Empty,
    #[error("`{0}` is not a duration like 100ms, 30s, 5m or 1h30m")]
    Malformed(String),
    #[error("`{0}` is out of range")]
    Overflow(String),
}

/// Regular expression for the CRD schema, matching what [`parse_go_duration`] accepts.
pub const GO_DURATION_PATTERN: &str = r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$";

/// Event-time durations (windows, grace, TTL) in the CRD: Go syntax where every term is a whole
/// number of milliseconds by its form (`ms` without a fraction, `s` with up to 3 decimals, `m` up
/// to 4, `h` up to 5), so the apiserver refuses what [`crate::rules::event_duration`] refuses
/// without CEL arithmetic (its cost budget refuses a rule that parses a built string). Stricter
/// only on odd spellings such as `1000us`.
pub const EVENT_DURATION_PATTERN: &str =
    r"^([0-9]+(\.[0-9]{1,5})?h|[0-9]+(\.[0-9]{1,4})?m|[0-9]+(\.[0-9]{1,3})?s|[0-9]+ms)+$";

const UNITS: &[(&str, u128)] = &[
    ("ns", 1),
    ("us", 1_000),
    ("µs", 1_000),
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60_000_000_000),
    ("h", 3_600_000_000_000),
];

/// Parses a non-negative Go-style duration. Signs and the bare "0" are refused on purpose:
/// every duration in our API is a positive amount of time with a unit.
pub fn parse_go_duration(text: &str) -> Result<Duration, DurationError> {
    if text.is_empty() {
        return Err(DurationError::Empty);
    }
    let malformed = || DurationError::Malformed(text.to_string());
    let mut rest = text;
    let mut total_nanos: u128 = 0;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(malformed)?;
        let (number, after) = rest.split_at(number_len);
        let unit_len = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_len);
        let scale = UNITS
            .iter()
            .find(|(name, _)| *name == unit)
            .map(|(_, scale)| *scale)
            .ok_or_else(malformed)?;
        total_nanos = total_nanos
            .checked_add(scaled(number, scale).ok_or_else(malformed)?)
            .ok_or_else(|| DurationError::Overflow(text.to_string()))?;
        rest = next;
    }
    let nanos =
        u64::try_from(total_nanos).map_err(|_| DurationError::Overflow(text.to_string()))?;
    Ok(Duration::from_nanos(nanos))
}

/// `number` is "12" or "1.5"; returns number × scale in nanoseconds.
fn scaled(number: &str, scale: u128) -> Option<u128> {
    let (whole, fraction) = match number.split_once('.') {
        Some((whole, fraction)) if !fraction.is_empty() => (whole, fraction),
        Some(_) => return None,
        None => (number, ""),
    };
    if whole.is_empty() {
        return None;
    }
    let whole: u128 = whole.parse().ok()?;
    let mut result = whole.checked_mul(scale)?;
    let mut place = scale;
    for digit in fraction.chars() {
        place /= 10;
        result += u128::from(digit.to_digit(10)?) * place;
    }
    Some(result)
}

/// Formats a duration in the shortest Go-style form ("1h30m", "250ms").
pub fn format_go_duration(duration: Duration) -> String {
    let mut nanos = duration.as_nanos();
    if nanos == 0 {
        return "0s".into();
    }
    let mut out = String::new();
    for (name, scale) in [
        ("h", 3_600_000_000_000u128),
        ("m", 60_000_000_000),
        ("s", 1_000_000_000),
        ("ms", 1_000_000),
        ("us", 1_000),
        ("ns", 1),
    ] {
        if nanos >= scale {
            out.push_str(&format!("{}{name}", nanos / scale));
            nanos %= scale;
        }
    }
    out
}

/// Serde helpers that store a `Duration` as a Go-style string.
pub mod serde_go {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(value: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&super::format_go_duration(*value))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        let text = String::deserialize(deserializer)?;
        super::parse_go_duration(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_the_forms_kubernetes_uses() {
        assert_eq!(parse_go_duration("100ms"), Ok(Duration::from_millis(100)));
        assert_eq!(parse_go_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_go_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_go_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_go_duration("2µs"), Ok(Duration::from_micros(2)));
    }

    #[test]
    fn refuses_what_go_or_our_api_refuses() {
        for bad in [
            "", "30", "s", "1d", "-5s", "1.s", ".5s", "5 s", "1h30", "abc",
        ] {
            assert!(parse_go_duration(bad).is_err(), "{bad:?} should be refused");
        }
        assert!(matches!(
            parse_go_duration("99999999999999h"),
            Err(DurationError::Overflow(_))
        ));
    }

    proptest! {
        #[test]
        fn format_then_parse_is_identity(nanos in 1u64..=u64::MAX / 4) {
            let duration = Duration::from_nanos(nanos);
            prop_assert_eq!(parse_go_duration(&format_go_duration(duration)), Ok(duration));
        }
    }
}
