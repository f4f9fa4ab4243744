//! Kubernetes resource quantities (`200m`, `512Mi`, `1e3`), read, added,
//! compared and written back as the API machinery does, so a value we
//! compute prints exactly as OpenKruise's Go code prints it.
//!
//! A quantity is an exact count of nano-units plus the notation it was
//! written in: the notation decides how it prints (`BinarySI` prints `Mi`,
//! `Gi`, … when the value is a whole multiple, else falls back to decimal).

use std::cmp::Ordering;
use std::fmt;

const NANOS_PER_UNIT: i128 = 1_000_000_000;
const NANOS_PER_MILLI: i128 = 1_000_000;
/// The API machinery caps a quantity it cannot hold in an int64 at the
/// largest int64 units; so do we (Go keeps a few larger values written
/// with an `E` suffix, such as `12E`, uncapped).
const MAX_NANOS: i128 = i64::MAX as i128 * NANOS_PER_UNIT;

/// How a quantity was written, which is how it is printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// `1e3`, `5E-2`.
    DecimalExponent,
    /// `Ki`, `Mi`, `Gi`, …
    BinarySI,
    /// `m`, `k`, `M`, `G`, … or no suffix.
    DecimalSI,
    /// The zero value of Go's `resource.Quantity`, which has no format.
    Unset,
}

#[derive(Clone, Copy, Debug)]
pub struct Quantity {
    nanos: i128,
    format: Format,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    #[error(
        "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
    )]
    Format,
    #[error("unable to parse quantity's suffix")]
    Suffix,
}

impl Quantity {
    /// Go's zero `resource.Quantity{}`: zero, with no format of its own.
    pub const ZERO: Self = Self {
        nanos: 0,
        format: Format::Unset,
    };

    /// `resource.NewMilliQuantity(milli, DecimalSI)`.
    pub fn from_milli(milli: i64) -> Self {
        Self {
            nanos: i128::from(milli) * NANOS_PER_MILLI,
            format: Format::DecimalSI,
        }
    }

    /// `resource.NewQuantity(units, DecimalSI)`.
    pub fn from_units(units: i64) -> Self {
        Self {
            nanos: i128::from(units) * NANOS_PER_UNIT,
            format: Format::DecimalSI,
        }
    }

    pub fn format(&self) -> Format {
        self.format
    }

    pub fn is_zero(&self) -> bool {
        self.nanos == 0
    }

    pub fn is_negative(&self) -> bool {
        self.nanos < 0
    }

    /// The value in thousandths, rounded away from zero (`MilliValue`),
    /// saturating at the int64 range.
    pub fn milli(&self) -> i64 {
        let magnitude = (self.nanos.abs() + NANOS_PER_MILLI - 1) / NANOS_PER_MILLI;
        let signed = if self.nanos < 0 {
            -magnitude
        } else {
            magnitude
        };
        i64::try_from(signed).unwrap_or(if signed < 0 { i64::MIN } else { i64::MAX })
    }

    /// The same notation, a new value in thousandths (`SetMilli`).
    #[must_use]
    pub fn with_milli(&self, milli: i64) -> Self {
        Self {
            nanos: i128::from(milli) * NANOS_PER_MILLI,
            format: self.format,
        }
    }

    /// `Add`: a zero left-hand side takes the notation of the right.
    #[must_use]
    pub fn add(&self, other: &Self) -> Self {
        Self {
            nanos: self.nanos.saturating_add(other.nanos),
            format: if self.is_zero() {
                other.format
            } else {
                self.format
            },
        }
    }

    #[must_use]
    pub fn neg(&self) -> Self {
        Self {
            nanos: -self.nanos,
            format: self.format,
        }
    }

    /// Parse as `resource.ParseQuantity` does: sign, digits, fraction,
    /// then a decimal (`m`, `k`, `M`, …), binary (`Ki`, `Mi`, …) or
    /// exponent (`e3`) suffix. Precision below a nano-unit rounds up, and
    /// values beyond the int64 range are capped.
    pub fn parse(text: &str) -> Result<Self, QuantityError> {
        let parts = split(text)?;
        let (base, exponent, format) = interpret_suffix(parts.suffix)?;
        let digits = format!("{}{}", parts.whole, parts.fraction);
        let fraction_digits =
            i64::try_from(parts.fraction.len()).map_err(|_| QuantityError::Format)?;
        let mut nanos = scale_digits(&digits, base, exponent, fraction_digits);
        if !parts.positive {
            nanos = -nanos;
        }
        Ok(Self { nanos, format })
    }
}

impl PartialEq for Quantity {
    fn eq(&self, other: &Self) -> bool {
        self.nanos == other.nanos
    }
}

impl PartialOrd for Quantity {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.nanos.cmp(&other.nanos))
    }
}

struct Parts<'a> {
    positive: bool,
    whole: &'a str,
    fraction: &'a str,
    suffix: &'a str,
}

/// The pieces of `[+-]digits[.digits]suffix`, suffix as Go's parser
/// delimits it: letters of `eEinumkKMGTP`, then an optional signed integer.
fn split(text: &str) -> Result<Parts<'_>, QuantityError> {
    let (positive, rest) = match text.as_bytes().first() {
        Some(b'-') => (false, &text[1..]),
        Some(b'+') => (true, &text[1..]),
        _ => (true, text),
    };
    let digits_end = |s: &str| s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let whole_end = digits_end(rest);
    let (whole, rest) = rest.split_at(whole_end);
    let (fraction, suffix) = match rest.strip_prefix('.') {
        Some(after) => after.split_at(digits_end(after)),
        None => ("", rest),
    };
    if whole.is_empty() && fraction.is_empty() && !rest.starts_with('.') {
        return Err(QuantityError::Format);
    }
    let letters_end = suffix
        .find(|c: char| !"eEinumkKMGTP".contains(c))
        .unwrap_or(suffix.len());
    let tail = &suffix[letters_end..];
    let tail = tail.strip_prefix(['-', '+']).unwrap_or(tail);
    if !tail.bytes().all(|b| b.is_ascii_digit()) {
        return Err(QuantityError::Format);
    }
    Ok(Parts {
        positive,
        whole,
        fraction,
        suffix,
    })
}

/// Base (10 or 2), exponent and notation of a suffix.
fn interpret_suffix(suffix: &str) -> Result<(u32, i64, Format), QuantityError> {
    let decimal = |e| Ok((10, e, Format::DecimalSI));
    let binary = |e| Ok((2, e, Format::BinarySI));
    match suffix {
        "" => decimal(0),
        "n" => decimal(-9),
        "u" => decimal(-6),
        "m" => decimal(-3),
        "k" => decimal(3),
        "M" => decimal(6),
        "G" => decimal(9),
        "T" => decimal(12),
        "P" => decimal(15),
        "E" => decimal(18),
        "Ki" => binary(10),
        "Mi" => binary(20),
        "Gi" => binary(30),
        "Ti" => binary(40),
        "Pi" => binary(50),
        "Ei" => binary(60),
        _ => {
            let exponent = suffix
                .strip_prefix(['e', 'E'])
                .filter(|e| !e.is_empty())
                .and_then(|e| e.parse::<i64>().ok())
                .ok_or(QuantityError::Suffix)?;
            Ok((10, exponent, Format::DecimalExponent))
        }
    }
}

/// `digits × base^exponent / 10^fraction_digits` in nano-units, rounded
/// up to a whole nano-unit and capped at the int64 range of units.
fn scale_digits(digits: &str, base: u32, exponent: i64, fraction_digits: i64) -> i128 {
    let digits = digits.trim_start_matches('0');
    if digits.is_empty() {
        return 0;
    }
    // Digits beyond what i128 holds are certainly over the cap.
    let Ok(mantissa) = digits.parse::<i128>() else {
        return MAX_NANOS;
    };
    let (multiplier, decimal_exponent) = match base {
        2 => (1_i128 << exponent.clamp(0, 60), -fraction_digits + 9),
        _ => (1, exponent - fraction_digits + 9),
    };
    let Some(value) = mantissa.checked_mul(multiplier) else {
        return MAX_NANOS;
    };
    if decimal_exponent >= 0 {
        let power = u32::try_from(decimal_exponent).unwrap_or(u32::MAX);
        match 10_i128
            .checked_pow(power)
            .and_then(|p| value.checked_mul(p))
        {
            Some(nanos) => nanos.min(MAX_NANOS),
            None => MAX_NANOS,
        }
    } else {
        let power = u32::try_from(-decimal_exponent).unwrap_or(u32::MAX);
        match 10_i128.checked_pow(power) {
            Some(divisor) => ((value + divisor - 1) / divisor).min(MAX_NANOS),
            // Far below a nano-unit: rounds up to one.
            None => 1,
        }
    }
}

impl fmt::Display for Quantity {
    /// The canonical form Go's `Quantity.String()` gives.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.nanos == 0 {
            return f.write_str("0");
        }
        let whole_units = self.nanos % NANOS_PER_UNIT == 0;
        let below_1024 = self.nanos.abs() < 1024 * NANOS_PER_UNIT;
        match self.format {
            Format::BinarySI if whole_units && !below_1024 => {
                write_binary(f, self.nanos / NANOS_PER_UNIT)
            }
            Format::BinarySI | Format::DecimalSI => write_decimal(f, self.nanos, false),
            Format::DecimalExponent | Format::Unset => write_decimal(f, self.nanos, true),
        }
    }
}

/// Mantissa and a power of ten that is a multiple of 3, the mantissa as
/// small as that allows.
fn write_decimal(f: &mut fmt::Formatter<'_>, nanos: i128, exponent_form: bool) -> fmt::Result {
    let (mut mantissa, mut exponent) = (nanos, -9_i32);
    while mantissa % 10 == 0 {
        mantissa /= 10;
        exponent += 1;
    }
    while exponent % 3 != 0 || (!exponent_form && exponent > 18) {
        mantissa *= 10;
        exponent -= 1;
    }
    if exponent_form {
        return match exponent {
            0 => write!(f, "{mantissa}"),
            _ => write!(f, "{mantissa}e{exponent}"),
        };
    }
    let suffix = match exponent {
        -9 => "n",
        -6 => "u",
        -3 => "m",
        3 => "k",
        6 => "M",
        9 => "G",
        12 => "T",
        15 => "P",
        18 => "E",
        _ => "",
    };
    write!(f, "{mantissa}{suffix}")
}

fn write_binary(f: &mut fmt::Formatter<'_>, units: i128) -> fmt::Result {
    const SUFFIXES: [&str; 7] = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
    let (mut amount, mut power) = (units, 0);
    while amount % 1024 == 0 && power < SUFFIXES.len() - 1 {
        amount /= 1024;
        power += 1;
    }
    write!(f, "{amount}{}", SUFFIXES[power])
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// Canonical forms as Go's `resource.MustParse(s).String()` gives them.
    #[test]
    fn prints_the_canonical_form() {
        let cases = [
            ("100m", "100m"),
            ("1500m", "1500m"),
            ("2000m", "2"),
            ("0.5", "500m"),
            ("0.1", "100m"),
            ("1.0", "1"),
            ("+1", "1"),
            ("-1", "-1"),
            ("10000", "10k"),
            ("1500", "1500"),
            ("1k", "1k"),
            ("1e3", "1e3"),
            ("1.5e3", "1500"),
            ("5E-2", "50e-3"),
            ("1e-12", "1e-9"),
            ("1n", "1n"),
            ("1u", "1u"),
            ("0.0000000001", "1n"),
            ("1024Mi", "1Gi"),
            ("1.5Gi", "1536Mi"),
            ("0.5Gi", "512Mi"),
            ("1536Ki", "1536Ki"),
            ("1023Ki", "1023Ki"),
            ("1Ki", "1Ki"),
            ("0.1Ki", "102400m"),
            ("512", "512"),
            ("0Mi", "0"),
            ("0", "0"),
            (".", "0"),
            ("1.G", "1G"),
            ("9E", "9E"),
        ];
        for (text, canonical) in cases {
            assert_eq!(
                Quantity::parse(text).unwrap().to_string(),
                canonical,
                "{text}"
            );
        }
    }

    #[test]
    fn refuses_what_go_refuses() {
        for text in [
            "", "Mi", "1Mb", "1e", "1e3m", "1.5.5", "1 Mi", "0x10", "1Ki2",
        ] {
            assert!(Quantity::parse(text).is_err(), "{text}");
        }
    }

    #[test]
    fn huge_values_are_capped_and_tiny_ones_round_up() {
        let cap = Quantity::parse("9223372036854775807").unwrap();
        for text in ["1e100", "99999999999999999999999999999999999999999"] {
            assert_eq!(Quantity::parse(text).unwrap(), cap, "{text}");
        }
        assert_eq!(Quantity::parse("-1e100").unwrap(), cap.neg());
        assert_eq!(Quantity::parse("1e-100").unwrap().to_string(), "1e-9");
    }

    #[test]
    fn milli_rounds_away_from_zero() {
        assert_eq!(Quantity::parse("1n").unwrap().milli(), 1);
        assert_eq!(Quantity::parse("-1n").unwrap().milli(), -1);
        assert_eq!(Quantity::parse("1.5").unwrap().milli(), 1500);
        assert_eq!(
            Quantity::parse("9223372036854775807").unwrap().milli(),
            i64::MAX
        );
    }

    #[test]
    fn a_sum_from_zero_takes_the_notation_of_what_is_added() {
        let sum = Quantity::from_units(0).add(&Quantity::parse("512Mi").unwrap());
        assert_eq!(
            sum.add(&Quantity::parse("512Mi").unwrap()).to_string(),
            "1Gi"
        );
        let mixed = Quantity::parse("1Gi")
            .unwrap()
            .add(&Quantity::parse("1G").unwrap());
        assert_eq!(mixed.to_string(), "2073741824");
        assert_eq!(Quantity::ZERO.with_milli(1500).to_string(), "1500e-3");
    }
}
