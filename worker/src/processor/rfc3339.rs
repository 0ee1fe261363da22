//! RFC 3339 timestamps (`2024-05-01T12:30:00.250+02:00`) to epoch milliseconds.
//!
//! Hand-written so the worker needs no date crate for this one conversion. Accepts the
//! RFC 3339 `date-time` production: `T`, `t` or a space between date and time, an optional
//! fraction of any length (truncated to milliseconds, i.e. rounded toward the past), and `Z`,
//! `z` or a numeric offset. Leap second `:60` is accepted and counts as the next second.

/// Why a string is not an RFC 3339 timestamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("not an RFC 3339 timestamp: {0}")]
pub struct Rfc3339Error(pub &'static str);

struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl Cursor<'_> {
    fn digits(&mut self, n: usize, what: &'static str) -> Result<i64, Rfc3339Error> {
        let mut v = 0i64;
        for _ in 0..n {
            match self.bytes.get(self.pos) {
                Some(b) if b.is_ascii_digit() => v = v * 10 + i64::from(b - b'0'),
                _ => return Err(Rfc3339Error(what)),
            }
            self.pos += 1;
        }
        Ok(v)
    }

    fn expect(&mut self, allowed: &[u8], what: &'static str) -> Result<u8, Rfc3339Error> {
        match self.bytes.get(self.pos) {
            Some(b) if allowed.contains(b) => {
                self.pos += 1;
                Ok(*b)
            }
            _ => Err(Rfc3339Error(what)),
        }
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn days_in_month(year: i64, month: i64) -> i64 {
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    match month {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Parses an RFC 3339 timestamp to milliseconds since the Unix epoch.
pub fn parse_millis(s: &str) -> Result<i64, Rfc3339Error> {
    let mut c = Cursor {
        bytes: s.as_bytes(),
        pos: 0,
    };
    let year = c.digits(4, "year must be 4 digits")?;
    c.expect(b"-", "expected '-' after year")?;
    let month = c.digits(2, "month must be 2 digits")?;
    c.expect(b"-", "expected '-' after month")?;
    let day = c.digits(2, "day must be 2 digits")?;
    c.expect(b"Tt ", "expected 'T' between date and time")?;
    let hour = c.digits(2, "hour must be 2 digits")?;
    c.expect(b":", "expected ':' after hour")?;
    let minute = c.digits(2, "minute must be 2 digits")?;
    c.expect(b":", "expected ':' after minute")?;
    let second = c.digits(2, "second must be 2 digits")?;

    if !(1..=12).contains(&month) {
        return Err(Rfc3339Error("month out of range"));
    }
    if day < 1 || day > days_in_month(year, month) {
        return Err(Rfc3339Error("day out of range for the month"));
    }
    if hour > 23 || minute > 59 || second > 60 {
        return Err(Rfc3339Error("time of day out of range"));
    }

    let mut millis = 0i64;
    if c.peek() == Some(b'.') {
        c.pos += 1;
        let mut n = 0;
        while let Some(b) = c.peek().filter(u8::is_ascii_digit) {
            if n < 3 {
                millis = millis * 10 + i64::from(b - b'0');
            }
            n += 1;
            c.pos += 1;
        }
        if n == 0 {
            return Err(Rfc3339Error("fraction needs at least one digit"));
        }
        for _ in n..3 {
            millis *= 10;
        }
    }

    let offset_minutes = match c.expect(b"Zz+-", "expected 'Z' or a numeric offset")? {
        sign @ (b'+' | b'-') => {
            let oh = c.digits(2, "offset hour must be 2 digits")?;
            c.expect(b":", "expected ':' in offset")?;
            let om = c.digits(2, "offset minute must be 2 digits")?;
            if oh > 23 || om > 59 {
                return Err(Rfc3339Error("offset out of range"));
            }
            let m = oh * 60 + om;
            if sign == b'-' { -m } else { m }
        }
        _ => 0,
    };
    if c.pos != c.bytes.len() {
        return Err(Rfc3339Error("trailing characters"));
    }

    let days = days_from_civil(year, month, day);
    // Local time minus its offset is UTC. All terms are small (year <= 9999), no overflow.
    let seconds = days * 86_400 + hour * 3_600 + minute * 60 + second - offset_minutes * 60;
    Ok(seconds * 1_000 + millis)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn known_instants() {
        assert_eq!(parse_millis("1970-01-01T00:00:00Z"), Ok(0));
        assert_eq!(
            parse_millis("2024-05-01T12:30:00.250Z"),
            Ok(1_714_566_600_250)
        );
        assert_eq!(
            parse_millis("2024-05-01T14:30:00.250+02:00"),
            Ok(1_714_566_600_250)
        );
        assert_eq!(
            parse_millis("2024-05-01t10:30:00.250-02:00"),
            Ok(1_714_566_600_250)
        );
        assert_eq!(
            parse_millis("2024-05-01 12:30:00.250z"),
            Ok(1_714_566_600_250)
        );
        assert_eq!(parse_millis("1969-12-31T23:59:59.999Z"), Ok(-1));
        assert_eq!(parse_millis("2000-02-29T00:00:00Z"), Ok(951_782_400_000));
    }

    #[test]
    fn fraction_is_truncated_to_millis() {
        assert_eq!(parse_millis("1970-01-01T00:00:00.1Z"), Ok(100));
        assert_eq!(parse_millis("1970-01-01T00:00:00.12Z"), Ok(120));
        assert_eq!(parse_millis("1970-01-01T00:00:00.123999999Z"), Ok(123));
    }

    #[test]
    fn leap_second_is_the_next_second() {
        assert_eq!(
            parse_millis("2016-12-31T23:59:60Z"),
            parse_millis("2017-01-01T00:00:00Z")
        );
    }

    #[test]
    fn malformed_strings_say_why() {
        let cases = [
            ("", "year must be 4 digits"),
            ("2024-13-01T00:00:00Z", "month out of range"),
            ("2023-02-29T00:00:00Z", "day out of range for the month"),
            ("2024-01-01T24:00:00Z", "time of day out of range"),
            ("2024-01-01T00:00:00", "expected 'Z' or a numeric offset"),
            ("2024-01-01T00:00:00.Z", "fraction needs at least one digit"),
            ("2024-01-01T00:00:00Zjunk", "trailing characters"),
            ("2024-01-01T00:00:00+2:00", "offset hour must be 2 digits"),
            ("2024-01-01", "expected 'T' between date and time"),
            ("1700000000000", "expected '-' after year"),
        ];
        for (input, why) in cases {
            assert_eq!(parse_millis(input), Err(Rfc3339Error(why)), "{input}");
        }
    }

    proptest! {
        #[test]
        fn agrees_with_a_day_by_day_count(
            days in 0i64..2_932_896, ms_of_day in 0i64..86_400_000
        ) {
            // Walk forward from 0001-01-01 by whole years and months to the date, an
            // independent way of computing the same calendar.
            let (mut y, mut m, mut rest) = (1i64, 1i64, days);
            loop {
                let year_len = if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 { 366 } else { 365 };
                if rest < year_len { break; }
                rest -= year_len;
                y += 1;
            }
            loop {
                let len = days_in_month(y, m);
                if rest < len { break; }
                rest -= len;
                m += 1;
            }
            let d = rest + 1;
            let s = format!(
                "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
                ms_of_day / 3_600_000, ms_of_day / 60_000 % 60, ms_of_day / 1000 % 60, ms_of_day % 1000
            );
            // 0001-01-01 is 719162 days before 1970-01-01.
            let want = (days - 719_162) * 86_400_000 + ms_of_day;
            prop_assert_eq!(parse_millis(&s), Ok(want));
        }
    }
}
