//! Decimal text to the nearest `f64`, ties to even: the number
//! `str::parse::<f64>` gives for the same text, without std's tables.
//!
//! std's parser keeps 11 KB of powers of five for its fast path on long
//! inputs; with the code around it that was 14 KB of the JS package's
//! gzipped download (wasm-tests/README.md, "Size"). The numbers read here
//! (fractional percentages, the numbers of resource expressions) are short,
//! so plain exact arithmetic does: up to 15 digits go through one exact
//! float operation, longer ones through a division of big integers.

/// The nearest `f64` to `text`, a decimal `[+-]digits[.digits][e[+-]digits]`
/// with a digit on at least one side of the point. A number too large for
/// `f64` is infinite, as with `str::parse`. `None` for any other text,
/// including the words `inf` and `nan` that `str::parse` also accepts
/// (every caller refuses a number that is not finite).
pub(crate) fn parse_f64(text: &str) -> Option<f64> {
    let (negative, unsigned) = split_sign(text);
    let magnitude = Decimal::read(unsigned)?.nearest();
    Some(if negative { -magnitude } else { magnitude })
}

/// Whether `text` starts with `-`, and the text after its sign.
fn split_sign(text: &str) -> (bool, &str) {
    match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    }
}

/// Digits beyond this many only tell whether the number lies above the
/// digits kept: a point halfway between two doubles has at most 767
/// significant digits, so the rounding cannot turn on a later one.
const MAX_DIGITS: usize = 800;

/// `digits × 10^exponent`, the digits without leading or trailing zeros.
struct Decimal {
    digits: Vec<u8>,
    exponent: i64,
}

impl Decimal {
    fn read(text: &str) -> Option<Decimal> {
        let (mantissa, exponent) = match text.find(['e', 'E']) {
            Some(at) => (&text[..at], read_exponent(&text[at + 1..])?),
            None => (text, 0),
        };
        let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
        let all_digits = |part: &str| part.bytes().all(|b| b.is_ascii_digit());
        if (whole.is_empty() && fraction.is_empty()) || !all_digits(whole) || !all_digits(fraction)
        {
            return None;
        }
        let mut digits: Vec<u8> = whole
            .bytes()
            .chain(fraction.bytes())
            .map(|b| b - b'0')
            .collect();
        let leading_zeros = digits.iter().take_while(|&&d| d == 0).count();
        digits.drain(..leading_zeros);
        let mut exponent = exponent - count(fraction.len());
        while digits.last() == Some(&0) {
            digits.pop();
            exponent += 1;
        }
        if digits.len() > MAX_DIGITS {
            // The last digit is not zero, so the number lies strictly above
            // the digits kept: a 1 after them says just that.
            exponent += count(digits.len() - MAX_DIGITS) - 1;
            digits.truncate(MAX_DIGITS);
            digits.push(1);
        }
        Some(Decimal { digits, exponent })
    }

    fn nearest(&self) -> f64 {
        let magnitude = count(self.digits.len()) + self.exponent;
        if self.digits.is_empty() || magnitude <= -324 {
            // Below 1e-324, under half the smallest subnormal.
            return 0.0;
        }
        if magnitude >= 310 {
            // At least 1e309, past the largest double.
            return f64::INFINITY;
        }
        self.exactly_in_one_step()
            .unwrap_or_else(|| self.by_big_division())
    }

    /// Up to 15 digits are an exact double, and so is every power of ten
    /// up to 10^22: one multiplication or division then rounds once.
    fn exactly_in_one_step(&self) -> Option<f64> {
        if self.digits.len() > 15 || self.exponent.abs() > 22 {
            return None;
        }
        let whole = self.digits.iter().fold(0u64, |n, &d| n * 10 + u64::from(d));
        #[allow(clippy::cast_precision_loss)] // below 10^15 < 2^53: exact
        let whole = whole as f64;
        let power = (0..self.exponent.abs()).fold(1.0, |p, _| p * 10.0);
        Some(if self.exponent < 0 {
            whole / power
        } else {
            whole * power
        })
    }

    /// `numerator / denominator` to 65 or 66 bits, the rest as a sticky bit,
    /// then rounded.
    fn by_big_division(&self) -> f64 {
        let mut numerator = Big::from_digits(&self.digits);
        let mut denominator = Big::one();
        let tens = if self.exponent < 0 {
            &mut denominator
        } else {
            &mut numerator
        };
        for _ in 0..self.exponent.abs() {
            tens.mul_add(10, 0);
        }
        // With 2^shift scaling the numerator, the quotient lies in
        // [2^64, 2^66).
        let shift = denominator.bits() - numerator.bits() + 65;
        if shift >= 0 {
            numerator = numerator.shl(shift);
        } else {
            denominator = denominator.shl(-shift);
        }
        let mut quotient = 0u128;
        for bit in (0..66).rev() {
            let part = denominator.shl(bit);
            if numerator.at_least(&part) {
                numerator.sub(&part);
                quotient |= 1 << bit;
            }
        }
        round(quotient, !numerator.is_zero(), -shift)
    }
}

/// The exponent after `e`: digits with an optional sign, held to ±10^12
/// (far past any double; the digits count towards the magnitude too).
fn read_exponent(text: &str) -> Option<i64> {
    let (negative, digits) = split_sign(text);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let value = digits.bytes().fold(0i64, |n, b| {
        (n * 10 + i64::from(b - b'0')).min(1_000_000_000_000)
    });
    Some(if negative { -value } else { value })
}

/// A length as a signed count (lengths of text never reach `i64::MAX`).
fn count(length: usize) -> i64 {
    i64::try_from(length).unwrap_or(i64::MAX)
}

/// The double nearest `quotient × 2^scale`, where `sticky` says the exact
/// value lies a little above that (`quotient` has 65 or 66 bits).
fn round(quotient: u128, sticky: bool, scale: i64) -> f64 {
    let bits = i64::from(128 - quotient.leading_zeros());
    let top = bits - 1 + scale;
    // The unit of the last bit kept: 53 bits, or fewer below the normal
    // range, down to the smallest subnormal, 2^-1074.
    let unit = (top - 52).max(-1074);
    let dropped = u32::try_from(unit - scale).unwrap_or(u32::MAX);
    if dropped > 100 {
        // Cannot happen after the range check in `nearest`: below half of
        // 2^-1074.
        return 0.0;
    }
    let rest = quotient & ((1 << dropped) - 1);
    let half = 1u128 << (dropped - 1);
    let mut mantissa = u64::try_from(quotient >> dropped).unwrap_or(u64::MAX);
    let mut unit = unit;
    if rest > half || (rest == half && (sticky || mantissa & 1 == 1)) {
        mantissa += 1;
        if mantissa == 1 << 53 {
            mantissa = 1 << 52;
            unit += 1;
        }
    }
    if mantissa < 1 << 52 {
        // Subnormal: the exponent field is zero.
        return f64::from_bits(mantissa);
    }
    let biased = unit + 52 + 1023;
    if biased >= 2047 {
        return f64::INFINITY;
    }
    let biased = u64::try_from(biased).unwrap_or(0);
    f64::from_bits((biased << 52) | (mantissa - (1 << 52)))
}

/// The low and high 32 bits of `value`.
#[allow(clippy::cast_possible_truncation)] // cutting in two is the point
fn halves(value: u64) -> (u32, u32) {
    (value as u32, (value >> 32) as u32)
}

/// A natural number in base 2^32, least significant limb first, no zero
/// limbs on top.
struct Big(Vec<u32>);

impl Big {
    fn one() -> Big {
        Big(vec![1])
    }

    fn from_digits(digits: &[u8]) -> Big {
        let mut big = Big(Vec::new());
        for &digit in digits {
            big.mul_add(10, u32::from(digit));
        }
        big
    }

    fn mul_add(&mut self, factor: u32, add: u32) {
        let mut carry = u64::from(add);
        for limb in &mut self.0 {
            let (low, high) = halves(u64::from(*limb) * u64::from(factor) + carry);
            *limb = low;
            carry = u64::from(high);
        }
        if carry > 0 {
            self.0.push(halves(carry).0);
        }
    }

    fn bits(&self) -> i64 {
        match self.0.last() {
            Some(top) => count(self.0.len()) * 32 - i64::from(top.leading_zeros()),
            None => 0,
        }
    }

    fn shl(&self, by: i64) -> Big {
        let by = usize::try_from(by).unwrap_or(0);
        let (limbs, bits) = (by / 32, by % 32);
        let mut shifted = vec![0; limbs];
        let mut carry = 0u32;
        for &limb in &self.0 {
            let (low, high) = halves((u64::from(limb) << bits) | u64::from(carry));
            shifted.push(low);
            carry = high;
        }
        if carry > 0 {
            shifted.push(carry);
        }
        Big(shifted)
    }

    fn at_least(&self, other: &Big) -> bool {
        if self.0.len() != other.0.len() {
            return self.0.len() > other.0.len();
        }
        self.0.iter().rev().cmp(other.0.iter().rev()).is_ge()
    }

    /// `self - other`, for `other <= self`.
    fn sub(&mut self, other: &Big) {
        let mut borrow = false;
        for (at, limb) in self.0.iter_mut().enumerate() {
            let take = other.0.get(at).copied().unwrap_or(0);
            let (value, under) = limb.overflowing_sub(take);
            let (value, under_again) = value.overflowing_sub(u32::from(borrow));
            *limb = value;
            borrow = under || under_again;
        }
        while self.0.last() == Some(&0) {
            self.0.pop();
        }
    }

    fn is_zero(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::parse_f64;
    use proptest::prelude::*;

    /// Ours against std's, bit for bit (signed zeros included).
    fn agrees(text: &str) {
        let ours = parse_f64(text).map(f64::to_bits);
        let std = text.parse::<f64>().ok().map(f64::to_bits);
        assert_eq!(ours, std, "{text:?}");
    }

    #[test]
    fn plain_numbers_and_the_edges_of_the_range() {
        for text in [
            "0",
            "-0",
            "+0",
            "0.0",
            "000",
            "1",
            "12.5",
            "-12.5",
            "+3",
            ".5",
            "5.",
            "0.1",
            "0.3",
            "1e0",
            "1E+2",
            "2.5e-3",
            "123456789012345",
            "1234567890123456",
            "9007199254740993",
            "0.000000000000000000000000000001",
            "1e22",
            "1e23",
            "8.98846567431158e307",
            "1.7976931348623157e308",
            "1.7976931348623158e308",
            "1.797693134862315807e308",
            "1.7976931348623159e308",
            "1e308",
            "1e309",
            "1e400",
            "-1e400",
            "2.2250738585072014e-308",
            "2.2250738585072011e-308",
            "4.9406564584124654e-324",
            "2.4703282292062327e-324",
            "2.4703282292062328e-324",
            "3e-324",
            "1e-324",
            "1e-400",
            "1e1000000000000000000000",
            "1e-1000000000000000000000",
            "0e999999",
        ] {
            agrees(text);
        }
    }

    #[test]
    fn what_is_not_a_decimal_is_refused() {
        for text in [
            "", "+", "-", ".", "e5", ".e5", "1e", "1e+", "1.2.3", "1e5.5", "+-1", "1 ", " 1",
            "0x10", "1_000", "1%", "12a",
        ] {
            assert_eq!(parse_f64(text), None, "{text:?}");
            assert!(text.parse::<f64>().is_err(), "std reads {text:?}");
        }
        for word in ["inf", "nan", "infinity"] {
            assert_eq!(parse_f64(word), None, "{word:?}");
        }
    }

    /// `(2m + 1) × 2^(e - 1)`, halfway between `m × 2^e` and the next
    /// double, written out exactly: an integer for `e >= 1`, else the
    /// integer `(2m + 1) × 5^(1 - e)` over `10^(1 - e)`.
    fn halfway(mantissa: u64, exponent: i32) -> (String, i32) {
        let odd = u128::from(mantissa) * 2 + 1;
        if exponent >= 1 {
            ((odd << (exponent - 1)).to_string(), 0)
        } else {
            let fives = 5u128.pow(exponent.unsigned_abs() + 1);
            ((odd * fives).to_string(), exponent - 1)
        }
    }

    #[test]
    fn numbers_past_eight_hundred_digits_round_by_what_follows() {
        // An even mantissa: the tie rounds down to it, a hair above rounds up.
        let (digits, exponent) = halfway((1 << 52) + 12344, -20);
        let tie = format!("{digits}{}e{}", "0".repeat(900), exponent - 900);
        let above = format!("{digits}{}1e{}", "0".repeat(900), exponent - 901);
        agrees(&tie);
        agrees(&above);
        assert_ne!(parse_f64(&tie), parse_f64(&above));
    }

    proptest! {
        #[test]
        fn agrees_with_std_on_decimal_text(
            text in "[+-]?[0-9]{0,25}(\\.[0-9]{0,25})?([eE][+-]?[0-9]{1,3})?"
        ) {
            agrees(&text);
        }

        #[test]
        fn agrees_with_std_on_any_mix_of_the_characters(text in "[0-9.eE+-]{0,10}") {
            agrees(&text);
        }

        #[test]
        fn reads_back_what_rust_prints(bits in any::<u64>(), precision in 0usize..40) {
            let value = f64::from_bits(bits);
            prop_assume!(value.is_finite());
            agrees(&format!("{value:e}"));
            agrees(&format!("{value:.precision$e}"));
            agrees(&format!("{value:.precision$}"));
        }

        #[test]
        fn halfway_points_and_their_neighbours_round_as_std_does(
            mantissa in (1u64 << 52)..(1 << 53),
            exponent in -26i32..74,
        ) {
            let (digits, power) = halfway(mantissa, exponent);
            agrees(&format!("{digits}e{power}"));
            let below: u128 = digits.parse::<u128>().unwrap_or_default() - 1;
            agrees(&format!("{below}e{power}"));
            agrees(&format!("{}e{power}", below + 2));
        }
    }
}
