//! The expressions of a sidecar's `resourcesPolicy` (`max(cpu*50%, 50m)`),
//! evaluated with OpenKruise's calculator rules: `+ - * /`, parentheses,
//! unary minus, `max`/`min` of two arguments, numbers (`2`, `0.5`, `50%`),
//! quantities (`40m`, `100Mi`) and one variable (`cpu` or `memory`).
//!
//! Mixing follows the calculator: a sum with a quantity is a quantity (a
//! number counts as that many cores, in thousandths); a quantity may be
//! multiplied or divided by a number only; scaling goes through the
//! quantity's thousandths in floating point, as OpenKruise's does, so the
//! results agree to the last digit. A negative result is refused.
//!
//! Deliberate difference: a malformed number (`2x`) is an error here;
//! OpenKruise's lexer reads it as 0.

use std::fmt;

use crate::quantity::Quantity;

#[derive(Clone, Copy, Debug)]
pub enum Value {
    Number(f64),
    Quantity(Quantity),
}

/// Evaluate `expression` with `variable` (compared case-insensitively)
/// bound to `value`.
pub fn evaluate(expression: &str, variable: &str, value: Value) -> Result<Value, String> {
    let tokens = lex(expression)?;
    let mut parser = Parser {
        tokens: &tokens,
        at: 0,
        variable,
        value,
    };
    let result = parser.expr()?;
    if let Some(token) = parser.tokens.get(parser.at) {
        return Err(format!("parse error: unexpected {token}"));
    }
    let negative = match result {
        Value::Number(n) => n < 0.0,
        Value::Quantity(q) => q.is_negative(),
    };
    if negative {
        return Err(format!(
            "calculation result is negative: {}",
            display(result)
        ));
    }
    Ok(result)
}

fn display(value: Value) -> String {
    match value {
        Value::Number(n) => n.to_string(),
        Value::Quantity(q) => q.to_string(),
    }
}

#[derive(Clone, Debug, PartialEq)]
enum Token {
    Number(f64),
    Quantity(Quantity),
    Ident(String),
    Symbol(char),
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Number(n) => write!(f, "number {n}"),
            Self::Quantity(q) => write!(f, "quantity {q}"),
            Self::Ident(name) => write!(f, "{name:?}"),
            Self::Symbol(c) => write!(f, "{c:?}"),
        }
    }
}

/// Units the calculator reads as a quantity; other letters after a
/// number make it a (malformed) number.
const UNITS: [&str; 11] = ["m", "k", "M", "G", "T", "P", "Ki", "Mi", "Gi", "Ti", "Pi"];

fn lex(input: &str) -> Result<Vec<Token>, String> {
    let chars: Vec<char> = input.chars().collect();
    let mut tokens = Vec::new();
    let mut at = 0;
    while at < chars.len() {
        let c = chars[at];
        if c.is_whitespace() {
            at += 1;
        } else if c.is_ascii_digit() || c == '.' {
            let end = number_end(&chars, at);
            let text: String = chars[at..end].iter().collect();
            tokens.push(number_token(&text)?);
            at = end;
        } else if c.is_alphabetic() {
            let end = (at..chars.len())
                .find(|&i| !(chars[i].is_alphanumeric() || chars[i] == '_'))
                .unwrap_or(chars.len());
            tokens.push(Token::Ident(chars[at..end].iter().collect()));
            at = end;
        } else {
            tokens.push(Token::Symbol(c));
            at += 1;
        }
    }
    Ok(tokens)
}

/// Where a number starting at `start` ends: digits, one `.`, one
/// exponent (`e`, `E`, then an optional sign), one `%`, and trailing
/// letters (a unit).
fn number_end(chars: &[char], start: usize) -> usize {
    let (mut dot, mut exponent, mut percent, mut after_e) = (false, false, false, false);
    let mut at = start;
    while let Some(&c) = chars.get(at) {
        match c {
            '0'..='9' => after_e = false,
            '.' if !(dot || exponent || percent) => dot = true,
            'e' | 'E' if !(exponent || percent) => (exponent, after_e) = (true, true),
            '+' | '-' if after_e => after_e = false,
            '%' if !percent => percent = true,
            c if c.is_alphabetic() && !after_e => {
                while chars.get(at).is_some_and(|c| c.is_alphabetic()) {
                    at += 1;
                }
                return at;
            }
            _ => return at,
        }
        at += 1;
    }
    at
}

fn number_token(text: &str) -> Result<Token, String> {
    let unit_at = text
        .find(|c: char| !(c.is_ascii_digit() || ".eE+-".contains(c)))
        .unwrap_or(0);
    if unit_at > 0 && UNITS.contains(&&text[unit_at..]) {
        return Quantity::parse(text)
            .map(Token::Quantity)
            .map_err(|e| format!("{text:?}: {e}"));
    }
    let (digits, scale) = match text.strip_suffix('%') {
        Some(digits) => (digits, 100.0),
        None => (text, 1.0),
    };
    crate::decimal::parse_f64(digits)
        .map(|n| Token::Number(n / scale))
        .ok_or_else(|| format!("{text:?} is neither a number nor a quantity"))
}

struct Parser<'a> {
    tokens: &'a [Token],
    at: usize,
    variable: &'a str,
    value: Value,
}

impl Parser<'_> {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.at)
    }

    fn next(&mut self) -> Option<Token> {
        let token = self.tokens.get(self.at).cloned();
        self.at += 1;
        token
    }

    fn eat(&mut self, symbol: char) -> bool {
        let found = self.peek() == Some(&Token::Symbol(symbol));
        if found {
            self.at += 1;
        }
        found
    }

    fn expect(&mut self, symbol: char) -> Result<(), String> {
        if self.eat(symbol) {
            Ok(())
        } else {
            Err(format!("parse error: expected {symbol:?}"))
        }
    }

    fn expr(&mut self) -> Result<Value, String> {
        let mut left = self.term()?;
        loop {
            if self.eat('+') {
                left = add(left, self.term()?);
            } else if self.eat('-') {
                left = add(left, negate(self.term()?));
            } else {
                return Ok(left);
            }
        }
    }

    fn term(&mut self) -> Result<Value, String> {
        let mut left = self.factor()?;
        loop {
            if self.eat('*') {
                left = multiply(left, self.factor()?)?;
            } else if self.eat('/') {
                left = divide(left, self.factor()?)?;
            } else {
                return Ok(left);
            }
        }
    }

    fn factor(&mut self) -> Result<Value, String> {
        match self.next() {
            Some(Token::Number(n)) => Ok(Value::Number(n)),
            Some(Token::Quantity(q)) => Ok(Value::Quantity(q)),
            Some(Token::Symbol('(')) => {
                let inner = self.expr()?;
                self.expect(')')?;
                Ok(inner)
            }
            Some(Token::Symbol('-')) => Ok(negate(self.factor()?)),
            Some(Token::Ident(name)) if self.eat('(') => self.call(&name),
            Some(Token::Ident(name)) if name.eq_ignore_ascii_case(self.variable) => Ok(self.value),
            Some(Token::Ident(name)) => Err(format!("undefined variable: {name}")),
            Some(token) => Err(format!("parse error: unexpected {token}")),
            None => Err("parse error: unexpected end of expression".to_owned()),
        }
    }

    /// `max(a, b)` or `min(a, b)`, the opening parenthesis already read.
    fn call(&mut self, name: &str) -> Result<Value, String> {
        let mut args = vec![self.expr()?];
        if self.eat(',') {
            args.push(self.expr()?);
        }
        self.expect(')')?;
        let pick_larger = match name.to_ascii_lowercase().as_str() {
            "max" => true,
            "min" => false,
            _ => return Err(format!("unknown function: {name}")),
        };
        let [left, right] = args[..] else {
            return Err(format!(
                "{} function requires exactly 2 arguments, got {}",
                name.to_ascii_lowercase(),
                args.len()
            ));
        };
        Ok(extreme(left, right, pick_larger))
    }
}

/// A number taken as cores, in thousandths (`NewMilliQuantity`).
fn as_quantity(value: Value) -> Quantity {
    match value {
        Value::Quantity(q) => q,
        Value::Number(n) => Quantity::from_milli(go_int64(n * 1000.0)),
    }
}

fn add(left: Value, right: Value) -> Value {
    match (left, right) {
        (Value::Number(a), Value::Number(b)) => Value::Number(a + b),
        _ => Value::Quantity(as_quantity(left).add(&as_quantity(right))),
    }
}

fn negate(value: Value) -> Value {
    match value {
        Value::Number(n) => Value::Number(-n),
        Value::Quantity(q) => Value::Quantity(q.neg()),
    }
}

fn multiply(left: Value, right: Value) -> Result<Value, String> {
    match (left, right) {
        (Value::Quantity(_), Value::Quantity(_)) => {
            Err("multiplication of two quantities".to_owned())
        }
        (Value::Quantity(q), Value::Number(n)) | (Value::Number(n), Value::Quantity(q)) => Ok(
            Value::Quantity(q.with_milli(go_int64(go_float64(q.milli()) * n))),
        ),
        (Value::Number(a), Value::Number(b)) => Ok(Value::Number(a * b)),
    }
}

fn divide(left: Value, right: Value) -> Result<Value, String> {
    match (left, right) {
        (_, Value::Quantity(_)) => Err("division by quantity".to_owned()),
        (_, Value::Number(0.0)) => Err("division by zero".to_owned()),
        (Value::Quantity(q), Value::Number(n)) => Ok(Value::Quantity(
            q.with_milli(go_int64(go_float64(q.milli()) / n)),
        )),
        (Value::Number(a), Value::Number(b)) => Ok(Value::Number(a / b)),
    }
}

/// `max`/`min`: ties keep the left argument; with one quantity the
/// number is compared (and returned) as a quantity.
fn extreme(left: Value, right: Value, pick_larger: bool) -> Value {
    if let (Value::Number(a), Value::Number(b)) = (left, right) {
        let keep_left = if pick_larger { a >= b } else { a <= b };
        return Value::Number(if keep_left { a } else { b });
    }
    let (a, b) = (as_quantity(left), as_quantity(right));
    let keep_left = if pick_larger { a >= b } else { a <= b };
    Value::Quantity(if keep_left { a } else { b })
}

/// Go's `int64(x)` of a float: truncated toward zero (saturating here,
/// where Go leaves out-of-range values unspecified).
#[allow(clippy::cast_possible_truncation)]
pub(super) fn go_int64(x: f64) -> i64 {
    x as i64
}

/// Go's `float64(x)`: the nearest double, as OpenKruise scales quantities.
#[allow(clippy::cast_precision_loss)]
fn go_float64(x: i64) -> f64 {
    x as f64
}
