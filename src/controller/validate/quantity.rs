//! Kubernetes `Quantity` strings ("64Mi", "1.5Gi", "500M", "1e6") read as a whole number of
//! bytes, for the sizes the worker needs as numbers (RocksDB cache and memtable). The PVC size is
//! handed to Kubernetes as written; it is parsed here only to refuse a size that is not one.

/// Why a quantity is not a size in bytes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    #[error("`{0}` is not a quantity like 64Mi, 1Gi, 500M or 1048576")]
    Malformed(String),
    #[error("`{0}` is negative; a size must not be")]
    Negative(String),
    #[error(
        "`{0}` is not a whole number of bytes (for mebibytes write Mi; a lowercase m means milli)"
    )]
    Fractional(String),
    #[error("`{0}` is larger than 2^64 - 1 bytes")]
    Overflow(String),
}

/// Decimal digits that fit in a `u128` with room for the suffix multiplication to be checked.
const MAX_DIGITS: usize = 38;

/// Parses a Kubernetes quantity into bytes. Accepts the binary suffixes (Ki Mi Gi Ti Pi Ei), the
/// decimal ones (k M G T P E, and m u n when the result is still whole bytes), decimal exponents
/// (`1e6`), a leading `+`, and decimals (`1.5Gi`). Refuses anything that is not a whole number
/// of bytes instead of rounding, because a fractional byte count is always a typo (`100m`).
pub fn quantity_to_bytes(text: &str) -> Result<u64, QuantityError> {
    let malformed = || QuantityError::Malformed(text.to_string());
    let unsigned = match text.as_bytes().first() {
        Some(b'-') => return Err(QuantityError::Negative(text.to_string())),
        Some(b'+') => &text[1..],
        Some(_) => text,
        None => return Err(malformed()),
    };
    let number_len = unsigned
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(unsigned.len());
    let (number, suffix) = unsigned.split_at(number_len);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if (whole.is_empty() && fraction.is_empty()) || fraction.contains('.') {
        return Err(malformed());
    }
    let digits = format!("{whole}{fraction}");
    let digits = digits.trim_start_matches('0');
    if digits.len() > MAX_DIGITS {
        return Err(QuantityError::Overflow(text.to_string()));
    }
    let mantissa: u128 = if digits.is_empty() {
        0
    } else {
        digits.parse().map_err(|_| malformed())?
    };
    let (multiplier, divisor_exponent) = suffix_scale(suffix).ok_or_else(malformed)?;
    let multiplier = multiplier.ok_or_else(|| QuantityError::Overflow(text.to_string()))?;
    let scaled = mantissa
        .checked_mul(multiplier)
        .ok_or_else(|| QuantityError::Overflow(text.to_string()))?;
    let divisor_exponent = divisor_exponent.saturating_add(fraction.len() as u32);
    let bytes = if scaled == 0 {
        0
    } else {
        // Past 10^38 no non-zero u128 is a multiple of the divisor: the result is fractional.
        let divisor = 10u128
            .checked_pow(divisor_exponent)
            .ok_or_else(|| QuantityError::Fractional(text.to_string()))?;
        if !scaled.is_multiple_of(divisor) {
            return Err(QuantityError::Fractional(text.to_string()));
        }
        scaled / divisor
    };
    u64::try_from(bytes).map_err(|_| QuantityError::Overflow(text.to_string()))
}

/// `(multiplier, power of ten to divide by)` of a suffix; `None` when it is not a suffix, a
/// `None` multiplier when the exponent is too large for any size.
fn suffix_scale(suffix: &str) -> Option<(Option<u128>, u32)> {
    let binary = |power: u32| Some((Some(1u128 << power), 0));
    let decimal = |power: u32| Some((10u128.checked_pow(power), 0));
    match suffix {
        "" => decimal(0),
        "Ki" => binary(10),
        "Mi" => binary(20),
        "Gi" => binary(30),
        "Ti" => binary(40),
        "Pi" => binary(50),
        "Ei" => binary(60),
        "n" => Some((Some(1), 9)),
        "u" => Some((Some(1), 6)),
        "m" => Some((Some(1), 3)),
        "k" => decimal(3),
        "M" => decimal(6),
        "G" => decimal(9),
        "T" => decimal(12),
        "P" => decimal(15),
        // A bare "E" is exa; "E" or "e" followed by a number is a decimal exponent.
        "E" => decimal(18),
        _ => {
            let exponent = suffix
                .strip_prefix('e')
                .or_else(|| suffix.strip_prefix('E'))?;
            let (negative, magnitude) = match exponent.as_bytes().first() {
                Some(b'-') => (true, &exponent[1..]),
                Some(b'+') => (false, &exponent[1..]),
                _ => (false, exponent),
            };
            if magnitude.is_empty() || !magnitude.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            let power: u32 = magnitude.parse().unwrap_or(u32::MAX);
            if negative {
                Some((Some(1), power))
            } else {
                decimal(power)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_binary_decimal_and_plain_sizes() {
        for (text, bytes) in [
            ("0", 0),
            ("1048576", 1 << 20),
            ("+5", 5),
            ("1Ki", 1024),
            ("64Mi", 64 << 20),
            ("1Gi", 1 << 30),
            ("2Ti", 2 << 40),
            ("1k", 1_000),
            ("500M", 500_000_000),
            ("1G", 1_000_000_000),
            ("1.5Gi", 1_610_612_736),
            ("0.5Ki", 512),
            (".5Ki", 512),
            ("5.", 5),
            ("1e3", 1_000),
            ("1E6", 1_000_000),
            ("150e-1", 15),
            ("1E", 1_000_000_000_000_000_000),
            ("1000m", 1),
            ("007Mi", 7 << 20),
            ("15Ei", 15 << 60),
        ] {
            assert_eq!(quantity_to_bytes(text), Ok(bytes), "{text}");
        }
    }

    #[test]
    fn refuses_what_is_not_whole_bytes() {
        for text in [
            "", "Mi", ".", "1KiB", "1 Mi", "1.2.3", "1e", "1e+", "0x10", "ten", "1mi", "1e3k",
        ] {
            assert_eq!(
                quantity_to_bytes(text),
                Err(QuantityError::Malformed(text.into())),
                "{text}"
            );
        }
        assert_eq!(
            quantity_to_bytes("-1Mi"),
            Err(QuantityError::Negative("-1Mi".into()))
        );
        for text in ["1.5", "100m", "0.3Ki", "1e-1", "1e-50"] {
            assert_eq!(
                quantity_to_bytes(text),
                Err(QuantityError::Fractional(text.into())),
                "{text}"
            );
        }
        for text in ["16Ei", "18446744073709551616", "1e40", "1e99999999999"] {
            assert_eq!(
                quantity_to_bytes(text),
                Err(QuantityError::Overflow(text.into())),
                "{text}"
            );
        }
    }

    #[test]
    fn largest_size_fits() {
        assert_eq!(quantity_to_bytes("18446744073709551615"), Ok(u64::MAX));
    }
}
