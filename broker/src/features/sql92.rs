//! RocketMQ's SQL92 property filter (subscription `expressionType` `SQL92`):
//! a lexer, a recursive-descent parser and an evaluator that follow the Java
//! broker's `org.apache.rocketmq.filter` module (`SelectorParser.jj`,
//! `ComparisonExpression`, `LogicExpression`, `UnaryExpression`,
//! `ConstantExpression`, all derived from ActiveMQ's JMS selector).
//!
//! Grammar, loosest binding first (keywords case-insensitive):
//!
//! ```text
//! or         := and (OR and)*
//! and        := equality (AND equality)*
//! equality   := comparison ( '=' comparison | '<>' comparison | IS NULL | IS NOT NULL )*
//! comparison := unary ( ('>' | '>=' | '<' | '<=') unary
//!                     | [NOT] BETWEEN unary AND unary
//!                     | [NOT] IN '(' string (',' string)* ')'
//!                     | [NOT] (CONTAINS | STARTSWITH | ENDSWITH) string )*
//! unary      := '+' unary | '-' unary | NOT unary | primary
//! primary    := string | decimal | float | TRUE | FALSE | NULL | identifier | '(' or ')'
//! ```
//!
//! `NOT` as a prefix binds tighter than comparisons, exactly as in Java:
//! `NOT a > 1` is `(NOT a) > 1` and is rejected; write `NOT (a > 1)`.
//! Identifiers are `[A-Za-z_$][A-Za-z0-9_$]*`; decimal literals are `0` or
//! `[1-9][0-9]*` with an optional `L`, typed `Integer` when they fit 32 bits
//! and `Long` otherwise; float literals are Java doubles (`5.`, `.5`, `5E3`);
//! strings use single quotes with `''` for a quote. `--` line comments and
//! `/* */` block comments are skipped.
//!
//! Semantics (three-valued, as Java's): a missing property is `NULL`;
//! comparisons with `NULL` are unknown, `NOT` unknown is unknown, `AND` and
//! `OR` short-circuit, and only a definite `TRUE` matches. Property values are
//! strings; compared with a numeric literal they are converted to the
//! literal's type (`Integer.valueOf`, `Long.valueOf`, `Double.valueOf`); when
//! the conversion fails Java throws, and the broker counts the message as not
//! matching, whatever the rest of the expression says ([`Filter::matches`]
//! does the same). Two properties compared with `<`, `>`... are both
//! converted to doubles. `IN` compares strings only. `CONTAINS`,
//! `STARTSWITH` and `ENDSWITH` (5.x) are false, not unknown, when the property
//! is missing, also under `NOT`.
//!
//! Checks Java makes while parsing are compile errors here too, with the
//! byte offset of the operator: `a = NULL`, `a > 'x'`, `a > TRUE`,
//! `(a > 1) > 2`, `TRUE = 1`, `5 IN ('x')`, `a BETWEEN 3 AND 1`, a float
//! literal that is zero or infinite (Java's `createFloat` rejects values
//! below `Double.MIN_VALUE`), a decimal literal beyond 64 bits, and any
//! expression that does not give a boolean (`'x'`, `a AND 1`).
//!
//! Known differences from Java: numbers in property values must use ASCII
//! digits (Java's `Integer.valueOf` also takes other Unicode digits) and
//! `Double.valueOf`'s hexadecimal form is not accepted (the message does not
//! match). Expressions longer than [`EXPRESSION_LEN_MAX`], nested deeper
//! than [`NESTING_DEPTH_MAX`] or with more than [`OPERATOR_COUNT_MAX`]
//! operators are refused; Java has no limit.
//!
//! # Invariants
//!
//! - [`compile`] never panics and recursion is bounded: the parser refuses
//!   more than [`NESTING_DEPTH_MAX`] nested parentheses or prefix operators,
//!   and more than [`OPERATOR_COUNT_MAX`] infix or postfix operators, so
//!   the expression tree is at most their sum deep.
//! - [`Expr`]'s `Display` prints an expression that compiles back to an equal
//!   [`Expr`].

use std::cmp::Ordering;
use std::fmt;

/// Longest expression [`compile`] accepts, in bytes. Heartbeats carry the
/// expression, so it is bounded by the frame size anyway; this keeps the
/// left-deep operator chains (and the evaluator's recursion) short.
pub const EXPRESSION_LEN_MAX: usize = 16 * 1024;
/// Most parentheses and prefix operators (`NOT`, `-`, `+`) nested in one
/// another. Each level is a few parser frames.
pub const NESTING_DEPTH_MAX: usize = 64;
/// Most infix and postfix operators (`AND`, `OR`, `=`, `<`, `BETWEEN`, `IN`,
/// `IS NULL`...) in one expression. Operator chains build left-deep trees that
/// the evaluator walks recursively, so together with [`NESTING_DEPTH_MAX`]
/// this bounds its stack depth; real filters have a handful of operators.
pub const OPERATOR_COUNT_MAX: usize = 256;

/// The subscription `expressionType` of SQL92 filters.
pub const EXPRESSION_TYPE_SQL92: &str = "SQL92";

/// Why an expression does not compile. Offsets are byte offsets into the
/// expression.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FilterError {
    /// The expression is longer than [`EXPRESSION_LEN_MAX`].
    #[error("expression of {len} bytes exceeds the {max}-byte limit")]
    TooLong {
        /// Length of the expression.
        len: usize,
        /// [`EXPRESSION_LEN_MAX`].
        max: usize,
    },
    /// Parentheses or prefix operators nest deeper than [`NESTING_DEPTH_MAX`].
    #[error("expression nests deeper than {max} levels at offset {offset}")]
    TooDeep {
        /// Offset of the token that went one level too deep.
        offset: usize,
        /// [`NESTING_DEPTH_MAX`].
        max: usize,
    },
    /// More than [`OPERATOR_COUNT_MAX`] operators.
    #[error("expression has more than {max} operators (offset {offset})")]
    TooManyOperators {
        /// Offset of the first operator over the limit.
        offset: usize,
        /// [`OPERATOR_COUNT_MAX`].
        max: usize,
    },
    /// A character no token starts with, or an unterminated string or comment.
    #[error("lexical error at offset {offset}: {message}")]
    Lexical {
        /// Offset of the offending character.
        offset: usize,
        /// What is wrong.
        message: String,
    },
    /// The tokens do not follow the grammar.
    #[error("syntax error at offset {offset}: expected {expected}, found {found}")]
    Syntax {
        /// Offset of the unexpected token.
        offset: usize,
        /// What the grammar allows there.
        expected: &'static str,
        /// The token found.
        found: String,
    },
    /// The grammar is followed but Java's checks refuse the expression.
    #[error("invalid expression at offset {offset}: {message}")]
    Invalid {
        /// Offset of the operator or literal refused.
        offset: usize,
        /// Why, in Java's words where it has them.
        message: String,
    },
}

/// A constant of the expression language, typed as Java types it.
#[derive(Debug, Clone, PartialEq)]
pub enum Literal {
    /// `NULL`.
    Null,
    /// `TRUE` / `FALSE`.
    Bool(bool),
    /// A decimal literal that fits 32 bits (Java `Integer`).
    Int(i32),
    /// A decimal literal beyond 32 bits (Java `Long`).
    Long(i64),
    /// A floating-point literal (Java `Double`).
    Double(f64),
    /// A string literal.
    Str(String),
}

/// Ordering comparisons.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ordering4 {
    /// `>`.
    Gt,
    /// `>=`.
    Ge,
    /// `<`.
    Lt,
    /// `<=`.
    Le,
}

impl Ordering4 {
    fn symbol(self) -> &'static str {
        match self {
            Ordering4::Gt => ">",
            Ordering4::Ge => ">=",
            Ordering4::Lt => "<",
            Ordering4::Le => "<=",
        }
    }

    fn holds(self, answer: Ordering) -> bool {
        match self {
            Ordering4::Gt => answer == Ordering::Greater,
            Ordering4::Ge => answer != Ordering::Less,
            Ordering4::Lt => answer == Ordering::Less,
            Ordering4::Le => answer != Ordering::Greater,
        }
    }
}

/// The string tests of 5.x.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StringTest {
    /// `CONTAINS`.
    Contains,
    /// `STARTSWITH`.
    StartsWith,
    /// `ENDSWITH`.
    EndsWith,
}

impl StringTest {
    fn keyword(self) -> &'static str {
        match self {
            StringTest::Contains => "CONTAINS",
            StringTest::StartsWith => "STARTSWITH",
            StringTest::EndsWith => "ENDSWITH",
        }
    }

    fn test(self, value: &str, search: &str) -> bool {
        match self {
            StringTest::Contains => value.contains(search),
            StringTest::StartsWith => value.starts_with(search),
            StringTest::EndsWith => value.ends_with(search),
        }
    }
}

/// A parsed expression, one node per construct of the surface syntax.
#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    /// A constant.
    Literal(Literal),
    /// A message property.
    Property(String),
    /// A property used where a boolean is needed (Java's `BooleanCast`).
    BooleanCast(String),
    /// Prefix `-`.
    Negate(Box<Expr>),
    /// Prefix `NOT`.
    Not(Box<Expr>),
    /// `AND`.
    And(Box<Expr>, Box<Expr>),
    /// `OR`.
    Or(Box<Expr>, Box<Expr>),
    /// `=` (`negated`: `<>`).
    Equal {
        /// Left operand.
        left: Box<Expr>,
        /// Right operand.
        right: Box<Expr>,
        /// `<>`.
        negated: bool,
    },
    /// `>`, `>=`, `<`, `<=`.
    Compare(Ordering4, Box<Expr>, Box<Expr>),
    /// `IS NULL` (`negated`: `IS NOT NULL`).
    IsNull {
        /// The operand.
        value: Box<Expr>,
        /// `IS NOT NULL`.
        negated: bool,
    },
    /// `BETWEEN low AND high` (`negated`: `NOT BETWEEN`).
    Between {
        /// The value tested.
        value: Box<Expr>,
        /// Lower bound, inclusive.
        low: Box<Expr>,
        /// Upper bound, inclusive.
        high: Box<Expr>,
        /// `NOT BETWEEN`.
        negated: bool,
    },
    /// `property IN ('a', ...)` (`negated`: `NOT IN`).
    In {
        /// The property tested.
        property: String,
        /// The strings listed, in order.
        list: Vec<String>,
        /// `NOT IN`.
        negated: bool,
    },
    /// `value CONTAINS 'x'` and friends (`negated`: `NOT CONTAINS`...).
    StringTest {
        /// Which test.
        test: StringTest,
        /// The value tested.
        value: Box<Expr>,
        /// The string searched for.
        search: String,
        /// `NOT ...`.
        negated: bool,
    },
}

impl Expr {
    /// Whether Java's node for this is a `BooleanExpression`.
    fn is_boolean(&self) -> bool {
        match self {
            Expr::Literal(literal) => matches!(literal, Literal::Null | Literal::Bool(_)),
            Expr::Property(_) | Expr::Negate(_) => false,
            _ => true,
        }
    }

    fn is_constant(&self) -> bool {
        matches!(self, Expr::Literal(_))
    }
}

/// A compiled SQL92 filter.
#[derive(Debug, Clone, PartialEq)]
pub struct Filter {
    expression: String,
    root: Expr,
}

/// Compiles an SQL92 expression.
///
/// # Errors
///
/// A [`FilterError`] naming the offset of the problem.
pub fn compile(expression: &str) -> Result<Filter, FilterError> {
    if expression.len() > EXPRESSION_LEN_MAX {
        return Err(FilterError::TooLong {
            len: expression.len(),
            max: EXPRESSION_LEN_MAX,
        });
    }
    let tokens = lex(expression)?;
    let mut parser = Parser {
        tokens: &tokens,
        at: 0,
        depth: 0,
        operators: 0,
    };
    let root = parser.or()?;
    let end = parser.peek();
    if end.kind != TokenKind::End {
        return Err(parser.unexpected("AND, OR or the end of the expression"));
    }
    let root = as_boolean(root, 0)?;
    Ok(Filter {
        expression: expression.to_owned(),
        root,
    })
}

impl Filter {
    /// The expression as given to [`compile`].
    pub fn expression(&self) -> &str {
        &self.expression
    }

    /// The parsed expression.
    pub fn root(&self) -> &Expr {
        &self.root
    }

    /// Whether a message whose properties `lookup` returns matches: the
    /// expression is definitely true. An evaluation Java would throw on (a
    /// property that does not convert to the literal's number type) is no
    /// match, as in Java's `ExpressionMessageFilter`.
    pub fn matches<'v>(&self, lookup: impl Fn(&str) -> Option<&'v str>) -> bool {
        fn run<'a>(root: &'a Expr, lookup: Lookup<'_, 'a>) -> bool {
            matches!(evaluate(root, lookup), Ok(Value::Bool(true)))
        }
        run(&self.root, &|key| lookup(key))
    }
}

// ---------------------------------------------------------------- values

/// A runtime value: Java's `Object` results of expression nodes.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Value<'v> {
    Null,
    Bool(bool),
    Int(i32),
    Long(i64),
    Double(f64),
    Str(&'v str),
}

/// Java threw while evaluating: the message does not match.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Fault;

impl<'v> Value<'v> {
    fn of_literal(literal: &'v Literal) -> Value<'v> {
        match literal {
            Literal::Null => Value::Null,
            Literal::Bool(b) => Value::Bool(*b),
            Literal::Int(i) => Value::Int(*i),
            Literal::Long(l) => Value::Long(*l),
            Literal::Double(d) => Value::Double(*d),
            Literal::Str(s) => Value::Str(s),
        }
    }

    /// Java's `equals` (same class and value; `Double.equals` compares bits
    /// after NaN canonicalisation).
    fn java_equals(self, other: Value<'_>) -> bool {
        match (self, other) {
            (Value::Bool(a), Value::Bool(b)) => a == b,
            (Value::Int(a), Value::Int(b)) => a == b,
            (Value::Long(a), Value::Long(b)) => a == b,
            (Value::Double(a), Value::Double(b)) => java_double_cmp(a, b) == Ordering::Equal,
            (Value::Str(a), Value::Str(b)) => a == b,
            _ => false,
        }
    }
}

/// `Double.compareTo`: NaN equals itself and is above everything, -0.0 < 0.0.
fn java_double_cmp(a: f64, b: f64) -> Ordering {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        (false, false) => a.total_cmp(&b),
    }
}

/// `String.compareTo`: UTF-16 code units.
fn java_string_cmp(a: &str, b: &str) -> Ordering {
    a.encode_utf16().cmp(b.encode_utf16())
}

/// `Integer.valueOf` on ASCII input.
fn java_parse_int(text: &str) -> Result<i32, Fault> {
    text.parse().map_err(|_| Fault)
}

/// `Long.valueOf` on ASCII input.
fn java_parse_long(text: &str) -> Result<i64, Fault> {
    text.parse().map_err(|_| Fault)
}

/// `Double.valueOf` without the hexadecimal form: surrounding characters up
/// to U+0020 trimmed, `NaN`, `Infinity`, decimal forms with an optional
/// `f`/`d` suffix.
fn java_parse_double(text: &str) -> Result<f64, Fault> {
    let trimmed = text.trim_matches(|c: char| c <= ' ');
    let (negative, unsigned) = match trimmed.as_bytes().first() {
        Some(b'-') => (true, &trimmed[1..]),
        Some(b'+') => (false, &trimmed[1..]),
        _ => (false, trimmed),
    };
    let magnitude = match unsigned {
        "NaN" => f64::NAN,
        "Infinity" => f64::INFINITY,
        _ => {
            let body = unsigned
                .strip_suffix(['f', 'F', 'd', 'D'])
                .unwrap_or(unsigned);
            if !is_java_decimal_float(body) {
                return Err(Fault);
            }
            body.parse::<f64>().map_err(|_| Fault)?
        }
    };
    Ok(if negative { -magnitude } else { magnitude })
}

/// `digits [. digits] [e [+-] digits]` or `. digits [...]`, unsigned.
fn is_java_decimal_float(text: &str) -> bool {
    let bytes = text.as_bytes();
    let mut i = 0;
    let int_digits = count_digits(&bytes[i..]);
    i += int_digits;
    let mut frac_digits = 0;
    if bytes.get(i) == Some(&b'.') {
        i += 1;
        frac_digits = count_digits(&bytes[i..]);
        i += frac_digits;
    }
    if int_digits + frac_digits == 0 {
        return false;
    }
    if matches!(bytes.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(bytes.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        let exp_digits = count_digits(&bytes[i..]);
        if exp_digits == 0 {
            return false;
        }
        i += exp_digits;
    }
    i == bytes.len()
}

fn count_digits(bytes: &[u8]) -> usize {
    bytes.iter().take_while(|b| b.is_ascii_digit()).count()
}

/// Java's `ComparisonExpression.__compare` with string conversion on (the
/// broker's parser always turns it on).
fn java_compare(left: Value<'_>, right: Value<'_>) -> Result<Ordering, Fault> {
    use Value::*;
    let less = Ordering::Less;
    Ok(match (left, right) {
        (Bool(a), Bool(b)) => a.cmp(&b),
        (Int(a), Int(b)) => a.cmp(&b),
        (Long(a), Long(b)) => a.cmp(&b),
        (Double(a), Double(b)) => java_double_cmp(a, b),
        (Str(a), Str(b)) => java_string_cmp(a, b),
        // Java casts the Boolean to String here and throws.
        (Bool(_), Str(_)) => return Err(Fault),
        (Bool(_), _) => less,
        (Int(a), Long(b)) => i64::from(a).cmp(&b),
        (Int(a), Double(b)) => java_double_cmp(f64::from(a), b),
        (Int(a), Str(b)) => a.cmp(&java_parse_int(b)?),
        (Int(_), _) => less,
        (Long(a), Int(b)) => a.cmp(&i64::from(b)),
        (Long(a), Double(b)) => java_double_cmp(a as f64, b),
        (Long(a), Str(b)) => a.cmp(&java_parse_long(b)?),
        (Long(_), _) => less,
        (Double(a), Int(b)) => java_double_cmp(a, f64::from(b)),
        (Double(a), Long(b)) => java_double_cmp(a, b as f64),
        (Double(a), Str(b)) => java_double_cmp(a, java_parse_double(b)?),
        (Double(_), _) => less,
        (Str(a), Bool(b)) => a.eq_ignore_ascii_case("true").cmp(&b),
        (Str(a), Int(b)) => java_parse_int(a)?.cmp(&b),
        (Str(a), Long(b)) => java_parse_long(a)?.cmp(&b),
        (Str(a), Double(b)) => java_double_cmp(java_parse_double(a)?, b),
        (Str(_), Null) | (Null, _) => less,
    })
}

// ------------------------------------------------------------ evaluation

type Lookup<'a, 'v> = &'a dyn Fn(&str) -> Option<&'v str>;

fn evaluate<'v>(expr: &'v Expr, lookup: Lookup<'_, 'v>) -> Result<Value<'v>, Fault> {
    Ok(match expr {
        Expr::Literal(literal) => Value::of_literal(literal),
        Expr::Property(name) => lookup(name).map_or(Value::Null, Value::Str),
        Expr::BooleanCast(name) => match lookup(name) {
            None => Value::Null,
            // A property is a string, never a Boolean: Java's cast gives false.
            Some(_) => Value::Bool(false),
        },
        Expr::Negate(operand) => match evaluate(operand, lookup)? {
            Value::Int(i) => Value::Int(i.wrapping_neg()),
            Value::Long(l) => Value::Long(l.wrapping_neg()),
            Value::Double(d) => Value::Double(-d),
            _ => Value::Null,
        },
        Expr::Not(operand) => not(evaluate(operand, lookup)?),
        Expr::And(left, right) => and(evaluate(left, lookup)?, || evaluate(right, lookup))?,
        Expr::Or(left, right) => or(evaluate(left, lookup)?, || evaluate(right, lookup))?,
        Expr::Equal {
            left,
            right,
            negated,
        } => {
            let equal = equal(evaluate(left, lookup)?, evaluate(right, lookup)?)?;
            if *negated { not(equal) } else { equal }
        }
        Expr::Compare(op, left, right) => compare(*op, left, right, lookup)?,
        Expr::IsNull { value, negated } => {
            let is_null = Value::Bool(evaluate(value, lookup)? == Value::Null);
            if *negated { not(is_null) } else { is_null }
        }
        Expr::Between {
            value,
            low,
            high,
            negated: false,
        } => and(compare(Ordering4::Ge, value, low, lookup)?, || {
            compare(Ordering4::Le, value, high, lookup)
        })?,
        Expr::Between {
            value,
            low,
            high,
            negated: true,
        } => or(compare(Ordering4::Lt, value, low, lookup)?, || {
            compare(Ordering4::Gt, value, high, lookup)
        })?,
        Expr::In {
            property,
            list,
            negated,
        } => match lookup(property) {
            None => Value::Null,
            Some(value) => Value::Bool(list.iter().any(|item| item == value) != *negated),
        },
        Expr::StringTest {
            test,
            value,
            search,
            negated,
        } => {
            if search.is_empty() {
                Value::Bool(false)
            } else {
                match evaluate(value, lookup)? {
                    Value::Str(text) => Value::Bool(test.test(text, search) != *negated),
                    _ => Value::Bool(false),
                }
            }
        }
    })
}

fn not(value: Value<'_>) -> Value<'_> {
    match value {
        Value::Bool(b) => Value::Bool(!b),
        _ => Value::Null,
    }
}

/// Java's `LogicExpression.createAND`: a definite false on the left skips the right.
fn and<'v>(
    left: Value<'v>,
    right: impl FnOnce() -> Result<Value<'v>, Fault>,
) -> Result<Value<'v>, Fault> {
    if left == Value::Bool(false) {
        return Ok(left);
    }
    let right = right()?;
    if right == Value::Bool(false) {
        return Ok(right);
    }
    Ok(if left == Value::Null || right == Value::Null {
        Value::Null
    } else {
        Value::Bool(true)
    })
}

/// Java's `LogicExpression.createOR`: a definite true on the left skips the right.
fn or<'v>(
    left: Value<'v>,
    right: impl FnOnce() -> Result<Value<'v>, Fault>,
) -> Result<Value<'v>, Fault> {
    if left == Value::Bool(true) {
        return Ok(left);
    }
    let right = right()?;
    if right == Value::Bool(true) {
        return Ok(right);
    }
    Ok(if left == Value::Null || right == Value::Null {
        Value::Null
    } else {
        Value::Bool(false)
    })
}

/// Java's `doCreateEqual`: unknown when only the left is null, false when
/// only the right is.
fn equal<'v>(left: Value<'v>, right: Value<'v>) -> Result<Value<'v>, Fault> {
    Ok(match (left, right) {
        (Value::Null, Value::Null) => Value::Bool(true),
        (Value::Null, _) => Value::Null,
        (_, Value::Null) => Value::Bool(false),
        _ if left.java_equals(right) => Value::Bool(true),
        _ => Value::Bool(java_compare(left, right)? == Ordering::Equal),
    })
}

/// Java's `ComparisonExpression.evaluate` for `>`, `>=`, `<`, `<=`.
fn compare<'v>(
    op: Ordering4,
    left: &'v Expr,
    right: &'v Expr,
    lookup: Lookup<'_, 'v>,
) -> Result<Value<'v>, Fault> {
    let left = evaluate(left, lookup)?;
    if left == Value::Null {
        return Ok(Value::Null);
    }
    let right = evaluate(right, lookup)?;
    if right == Value::Null {
        return Ok(Value::Null);
    }
    let answer = match (left, right) {
        (Value::Str(a), Value::Str(b)) => {
            java_double_cmp(java_parse_double(a)?, java_parse_double(b)?)
        }
        _ => java_compare(left, right)?,
    };
    Ok(Value::Bool(op.holds(answer)))
}

// ------------------------------------------------------------------ lexer

#[derive(Debug, Clone, PartialEq)]
enum TokenKind {
    Not,
    And,
    Or,
    Between,
    In,
    True,
    False,
    Null,
    Is,
    StringTest(StringTest),
    Decimal(String),
    Float(String),
    Str(String),
    Id(String),
    Eq,
    Ne,
    Ordering(Ordering4),
    LeftParen,
    RightParen,
    Comma,
    Plus,
    Minus,
    End,
}

#[derive(Debug, Clone, PartialEq)]
struct Token {
    kind: TokenKind,
    offset: usize,
}

impl TokenKind {
    fn describe(&self) -> String {
        match self {
            TokenKind::Decimal(text) | TokenKind::Float(text) => format!("number {text}"),
            TokenKind::Str(text) => format!("string {}", quote(text)),
            TokenKind::Id(name) => format!("identifier {name}"),
            TokenKind::End => "the end of the expression".to_owned(),
            other => format!("'{}'", other.symbol()),
        }
    }

    fn symbol(&self) -> &'static str {
        match self {
            TokenKind::Not => "NOT",
            TokenKind::And => "AND",
            TokenKind::Or => "OR",
            TokenKind::Between => "BETWEEN",
            TokenKind::In => "IN",
            TokenKind::True => "TRUE",
            TokenKind::False => "FALSE",
            TokenKind::Null => "NULL",
            TokenKind::Is => "IS",
            TokenKind::StringTest(test) => test.keyword(),
            TokenKind::Eq => "=",
            TokenKind::Ne => "<>",
            TokenKind::Ordering(op) => op.symbol(),
            TokenKind::LeftParen => "(",
            TokenKind::RightParen => ")",
            TokenKind::Comma => ",",
            TokenKind::Plus => "+",
            TokenKind::Minus => "-",
            _ => "",
        }
    }
}

fn keyword(word: &str) -> Option<TokenKind> {
    const KEYWORDS: [(&str, TokenKind); 12] = [
        ("NOT", TokenKind::Not),
        ("AND", TokenKind::And),
        ("OR", TokenKind::Or),
        ("BETWEEN", TokenKind::Between),
        ("IN", TokenKind::In),
        ("TRUE", TokenKind::True),
        ("FALSE", TokenKind::False),
        ("NULL", TokenKind::Null),
        ("IS", TokenKind::Is),
        ("CONTAINS", TokenKind::StringTest(StringTest::Contains)),
        ("STARTSWITH", TokenKind::StringTest(StringTest::StartsWith)),
        ("ENDSWITH", TokenKind::StringTest(StringTest::EndsWith)),
    ];
    KEYWORDS
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case(word))
        .map(|(_, kind)| kind.clone())
}

fn lex(text: &str) -> Result<Vec<Token>, FilterError> {
    let bytes = text.as_bytes();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let start = i;
        let byte = bytes[i];
        let kind = match byte {
            b' ' | b'\t' | b'\n' | b'\r' | 0x0c => {
                i += 1;
                continue;
            }
            b'-' if bytes.get(i + 1) == Some(&b'-') => {
                i = skip_line_comment(bytes, i)?;
                continue;
            }
            b'/' if bytes.get(i + 1) == Some(&b'*') => {
                i = skip_block_comment(bytes, i)?;
                continue;
            }
            b'\'' => {
                let (value, end) = lex_string(text, i)?;
                i = end;
                TokenKind::Str(value)
            }
            b'0'..=b'9' | b'.' => {
                let (kind, end) = lex_number(text, i)?;
                i = end;
                kind
            }
            b'a'..=b'z' | b'A'..=b'Z' | b'_' | b'$' => {
                let len = bytes[i..]
                    .iter()
                    .take_while(|b| b.is_ascii_alphanumeric() || **b == b'_' || **b == b'$')
                    .count();
                let word = &text[i..i + len];
                i += len;
                keyword(word).unwrap_or_else(|| TokenKind::Id(word.to_owned()))
            }
            _ => {
                let (kind, len) = lex_operator(bytes, i).ok_or_else(|| FilterError::Lexical {
                    offset: i,
                    message: format!("unexpected character {:?}", char_at(text, i)),
                })?;
                i += len;
                kind
            }
        };
        tokens.push(Token {
            kind,
            offset: start,
        });
    }
    tokens.push(Token {
        kind: TokenKind::End,
        offset: bytes.len(),
    });
    Ok(tokens)
}

fn char_at(text: &str, offset: usize) -> char {
    text[offset..].chars().next().unwrap_or('\u{fffd}')
}

fn lex_operator(bytes: &[u8], i: usize) -> Option<(TokenKind, usize)> {
    let next = bytes.get(i + 1).copied();
    Some(match (bytes[i], next) {
        (b'<', Some(b'>')) => (TokenKind::Ne, 2),
        (b'<', Some(b'=')) => (TokenKind::Ordering(Ordering4::Le), 2),
        (b'>', Some(b'=')) => (TokenKind::Ordering(Ordering4::Ge), 2),
        (b'<', _) => (TokenKind::Ordering(Ordering4::Lt), 1),
        (b'>', _) => (TokenKind::Ordering(Ordering4::Gt), 1),
        (b'=', _) => (TokenKind::Eq, 1),
        (b'(', _) => (TokenKind::LeftParen, 1),
        (b')', _) => (TokenKind::RightParen, 1),
        (b',', _) => (TokenKind::Comma, 1),
        (b'+', _) => (TokenKind::Plus, 1),
        (b'-', _) => (TokenKind::Minus, 1),
        _ => return None,
    })
}

/// Java's `LINE_COMMENT` needs its line end; one at the very end is an error.
fn skip_line_comment(bytes: &[u8], start: usize) -> Result<usize, FilterError> {
    match bytes[start..]
        .iter()
        .position(|b| *b == b'\n' || *b == b'\r')
    {
        Some(end) => Ok(start + end + 1),
        None => Err(FilterError::Lexical {
            offset: start,
            message: "a -- comment must end with a line break".to_owned(),
        }),
    }
}

fn skip_block_comment(bytes: &[u8], start: usize) -> Result<usize, FilterError> {
    bytes[start + 2..]
        .windows(2)
        .position(|w| w == b"*/")
        .map(|end| start + 2 + end + 2)
        .ok_or(FilterError::Lexical {
            offset: start,
            message: "unterminated /* comment".to_owned(),
        })
}

fn lex_string(text: &str, start: usize) -> Result<(String, usize), FilterError> {
    let bytes = text.as_bytes();
    let mut value = String::new();
    let mut i = start + 1;
    let mut run_start = i;
    loop {
        match bytes.get(i) {
            None => {
                return Err(FilterError::Lexical {
                    offset: start,
                    message: "unterminated string literal".to_owned(),
                });
            }
            Some(b'\'') if bytes.get(i + 1) == Some(&b'\'') => {
                value.push_str(&text[run_start..=i]);
                i += 2;
                run_start = i;
            }
            Some(b'\'') => {
                value.push_str(&text[run_start..i]);
                return Ok((value, i + 1));
            }
            Some(_) => i += 1,
        }
    }
}

/// Longest match between `DECIMAL_LITERAL` and `FLOATING_POINT_LITERAL`.
fn lex_number(text: &str, start: usize) -> Result<(TokenKind, usize), FilterError> {
    let bytes = text.as_bytes();
    let int_digits = count_digits(&bytes[start..]);
    let mut i = start + int_digits;
    let mut is_float = false;
    if bytes.get(i) == Some(&b'.') {
        let frac_digits = count_digits(&bytes[i + 1..]);
        if int_digits == 0 && frac_digits == 0 {
            return Err(FilterError::Lexical {
                offset: start,
                message: "'.' must be followed by a digit".to_owned(),
            });
        }
        i += 1 + frac_digits;
        is_float = true;
    }
    if matches!(bytes.get(i), Some(b'e' | b'E')) {
        let mut j = i + 1;
        if matches!(bytes.get(j), Some(b'+' | b'-')) {
            j += 1;
        }
        let exp_digits = count_digits(&bytes[j..]);
        if exp_digits > 0 {
            i = j + exp_digits;
            is_float = true;
        }
    }
    if is_float {
        return Ok((TokenKind::Float(text[start..i].to_owned()), i));
    }
    // "0" is a literal of its own: "07" lexes as "0" then "7".
    let mut end = if bytes[start] == b'0' {
        start + 1
    } else {
        start + int_digits
    };
    if bytes[start] != b'0' && matches!(bytes.get(end), Some(b'l' | b'L')) {
        end += 1;
    }
    Ok((TokenKind::Decimal(text[start..end].to_owned()), end))
}

// ----------------------------------------------------------------- parser

struct Parser<'t> {
    tokens: &'t [Token],
    at: usize,
    depth: usize,
    operators: usize,
}

impl<'t> Parser<'t> {
    fn peek(&self) -> &'t Token {
        &self.tokens[self.at.min(self.tokens.len() - 1)]
    }

    fn peek_second(&self) -> &'t Token {
        &self.tokens[(self.at + 1).min(self.tokens.len() - 1)]
    }

    fn advance(&mut self) -> &'t Token {
        let token = self.peek();
        if token.kind != TokenKind::End {
            self.at += 1;
        }
        token
    }

    fn unexpected(&self, expected: &'static str) -> FilterError {
        let token = self.peek();
        FilterError::Syntax {
            offset: token.offset,
            expected,
            found: token.kind.describe(),
        }
    }

    fn expect(&mut self, kind: TokenKind, expected: &'static str) -> Result<(), FilterError> {
        if self.peek().kind == kind {
            self.advance();
            Ok(())
        } else {
            Err(self.unexpected(expected))
        }
    }

    fn enter(&mut self, offset: usize) -> Result<(), FilterError> {
        if self.depth >= NESTING_DEPTH_MAX {
            return Err(FilterError::TooDeep {
                offset,
                max: NESTING_DEPTH_MAX,
            });
        }
        self.depth += 1;
        Ok(())
    }

    fn count_operator(&mut self, offset: usize) -> Result<(), FilterError> {
        if self.operators >= OPERATOR_COUNT_MAX {
            return Err(FilterError::TooManyOperators {
                offset,
                max: OPERATOR_COUNT_MAX,
            });
        }
        self.operators += 1;
        Ok(())
    }

    fn or(&mut self) -> Result<Expr, FilterError> {
        let mut left = self.and()?;
        while self.peek().kind == TokenKind::Or {
            let offset = self.advance().offset;
            self.count_operator(offset)?;
            let right = self.and()?;
            left = Expr::Or(
                Box::new(as_boolean(left, offset)?),
                Box::new(as_boolean(right, offset)?),
            );
        }
        Ok(left)
    }

    fn and(&mut self) -> Result<Expr, FilterError> {
        let mut left = self.equality()?;
        while self.peek().kind == TokenKind::And {
            let offset = self.advance().offset;
            self.count_operator(offset)?;
            let right = self.equality()?;
            left = Expr::And(
                Box::new(as_boolean(left, offset)?),
                Box::new(as_boolean(right, offset)?),
            );
        }
        Ok(left)
    }

    fn equality(&mut self) -> Result<Expr, FilterError> {
        let mut left = self.comparison()?;
        loop {
            let token = self.peek();
            let offset = token.offset;
            if matches!(token.kind, TokenKind::Eq | TokenKind::Ne | TokenKind::Is) {
                self.count_operator(offset)?;
            }
            left = match token.kind {
                TokenKind::Eq | TokenKind::Ne => {
                    let negated = token.kind == TokenKind::Ne;
                    self.advance();
                    let right = self.comparison()?;
                    check_equal_operands(&left, &right, offset)?;
                    Expr::Equal {
                        left: Box::new(left),
                        right: Box::new(right),
                        negated,
                    }
                }
                TokenKind::Is => {
                    self.advance();
                    let negated = self.peek().kind == TokenKind::Not;
                    if negated {
                        self.advance();
                    }
                    self.expect(TokenKind::Null, "NULL after IS or IS NOT")?;
                    Expr::IsNull {
                        value: Box::new(left),
                        negated,
                    }
                }
                _ => return Ok(left),
            };
        }
    }

    fn comparison(&mut self) -> Result<Expr, FilterError> {
        let mut left = self.unary()?;
        loop {
            let token = self.peek();
            let offset = token.offset;
            let negated = token.kind == TokenKind::Not
                && matches!(
                    self.peek_second().kind,
                    TokenKind::Between | TokenKind::In | TokenKind::StringTest(_)
                );
            if negated {
                self.advance();
            }
            let kind = self.peek().kind.clone();
            if matches!(
                kind,
                TokenKind::Ordering(_)
                    | TokenKind::Between
                    | TokenKind::In
                    | TokenKind::StringTest(_)
            ) {
                self.count_operator(offset)?;
            }
            left = match kind {
                TokenKind::Ordering(op) if !negated => {
                    self.advance();
                    let right = self.unary()?;
                    check_ordering_operand(&left, offset)?;
                    check_ordering_operand(&right, offset)?;
                    Expr::Compare(op, Box::new(left), Box::new(right))
                }
                TokenKind::Between => {
                    self.advance();
                    let low = self.unary()?;
                    self.expect(TokenKind::And, "AND between the bounds of BETWEEN")?;
                    let high = self.unary()?;
                    check_between(&left, &low, &high, negated, offset)?;
                    Expr::Between {
                        value: Box::new(left),
                        low: Box::new(low),
                        high: Box::new(high),
                        negated,
                    }
                }
                TokenKind::In => {
                    self.advance();
                    let list = self.string_list()?;
                    let Expr::Property(property) = left else {
                        return Err(FilterError::Invalid {
                            offset,
                            message: format!("Expected a property for In expression, got: {left}"),
                        });
                    };
                    Expr::In {
                        property,
                        list,
                        negated,
                    }
                }
                TokenKind::StringTest(test) => {
                    self.advance();
                    let search = self.string("a string literal")?;
                    Expr::StringTest {
                        test,
                        value: Box::new(left),
                        search,
                        negated,
                    }
                }
                _ => return Ok(left),
            };
        }
    }

    fn string(&mut self, expected: &'static str) -> Result<String, FilterError> {
        match &self.peek().kind {
            TokenKind::Str(value) => {
                let value = value.clone();
                self.advance();
                Ok(value)
            }
            _ => Err(self.unexpected(expected)),
        }
    }

    fn string_list(&mut self) -> Result<Vec<String>, FilterError> {
        self.expect(TokenKind::LeftParen, "'(' after IN")?;
        let mut list = vec![self.string("a string literal in the IN list")?];
        while self.peek().kind == TokenKind::Comma {
            self.advance();
            list.push(self.string("a string literal in the IN list")?);
        }
        self.expect(TokenKind::RightParen, "',' or ')' in the IN list")?;
        Ok(list)
    }

    fn unary(&mut self) -> Result<Expr, FilterError> {
        let token = self.peek();
        match token.kind {
            TokenKind::Plus | TokenKind::Minus | TokenKind::Not => {
                self.enter(token.offset)?;
                self.advance();
                let operand = self.unary()?;
                self.depth -= 1;
                Ok(match token.kind {
                    TokenKind::Plus => operand,
                    TokenKind::Minus => Expr::Negate(Box::new(operand)),
                    _ => Expr::Not(Box::new(as_boolean(operand, token.offset)?)),
                })
            }
            _ => self.primary(),
        }
    }

    fn primary(&mut self) -> Result<Expr, FilterError> {
        let token = self.advance();
        let literal = match &token.kind {
            TokenKind::Str(value) => Literal::Str(value.clone()),
            TokenKind::Decimal(text) => decimal_literal(text, token.offset)?,
            TokenKind::Float(text) => float_literal(text, token.offset)?,
            TokenKind::True => Literal::Bool(true),
            TokenKind::False => Literal::Bool(false),
            TokenKind::Null => Literal::Null,
            TokenKind::Id(name) => return Ok(Expr::Property(name.clone())),
            TokenKind::LeftParen => {
                self.enter(token.offset)?;
                let inner = self.or()?;
                self.expect(TokenKind::RightParen, "')'")?;
                self.depth -= 1;
                return Ok(inner);
            }
            _ => {
                self.at -= usize::from(token.kind != TokenKind::End);
                return Err(self.unexpected("a literal, a property or '('"));
            }
        };
        Ok(Expr::Literal(literal))
    }
}

/// Java's `createFromDecimal`: `Integer` when it fits, else `Long`.
fn decimal_literal(text: &str, offset: usize) -> Result<Literal, FilterError> {
    let digits = text.trim_end_matches(['l', 'L']);
    let value: i64 = digits.parse().map_err(|_| FilterError::Invalid {
        offset,
        message: format!("{text} does not fit a 64-bit integer"),
    })?;
    Ok(match i32::try_from(value) {
        Ok(small) => Literal::Int(small),
        Err(_) => Literal::Long(value),
    })
}

/// Java's `createFloat`, which refuses infinity and anything below
/// `Double.MIN_VALUE` (so zero too: literals are never negative).
fn float_literal(text: &str, offset: usize) -> Result<Literal, FilterError> {
    let value: f64 = text.parse().map_err(|_| FilterError::Invalid {
        offset,
        message: format!("{text} is not a number"),
    })?;
    if value.is_infinite() {
        return Err(FilterError::Invalid {
            offset,
            message: format!("{text} is greater than {}", f64::MAX),
        });
    }
    if value < f64::from_bits(1) {
        return Err(FilterError::Invalid {
            offset,
            message: format!("{text} is less than 4.9E-324"),
        });
    }
    Ok(Literal::Double(value))
}

/// Java's `asBooleanExpression`.
fn as_boolean(expr: Expr, offset: usize) -> Result<Expr, FilterError> {
    match expr {
        Expr::Property(name) => Ok(Expr::BooleanCast(name)),
        e if e.is_boolean() => Ok(e),
        e => Err(FilterError::Invalid {
            offset,
            message: format!("Expression will not result in a boolean value: {e}"),
        }),
    }
}

/// Java's `checkEqualOperand` and `checkEqualOperandCompatability`.
fn check_equal_operands(left: &Expr, right: &Expr, offset: usize) -> Result<(), FilterError> {
    for operand in [left, right] {
        if *operand == Expr::Literal(Literal::Null) {
            return Err(FilterError::Invalid {
                offset,
                message: "'NULL' cannot be compared; use IS NULL".to_owned(),
            });
        }
    }
    if left.is_constant() && right.is_constant() && left.is_boolean() && !right.is_boolean() {
        return Err(FilterError::Invalid {
            offset,
            message: format!("'{left}' cannot be compared with '{right}'"),
        });
    }
    Ok(())
}

/// Java's `checkLessThanOperand`: numbers only among constants, and no
/// boolean expressions.
fn check_ordering_operand(operand: &Expr, offset: usize) -> Result<(), FilterError> {
    let refused = match operand {
        Expr::Literal(literal) => !matches!(
            literal,
            Literal::Int(_) | Literal::Long(_) | Literal::Double(_)
        ),
        other => other.is_boolean(),
    };
    if refused {
        return Err(FilterError::Invalid {
            offset,
            message: format!("Value '{operand}' cannot be compared."),
        });
    }
    Ok(())
}

/// Java's `createBetween` / `createNotBetween` checks.
fn check_between(
    value: &Expr,
    low: &Expr,
    high: &Expr,
    negated: bool,
    offset: usize,
) -> Result<(), FilterError> {
    if let (false, Expr::Literal(low_literal), Expr::Literal(high_literal)) = (negated, low, high) {
        let low_value = Value::of_literal(low_literal);
        let high_value = Value::of_literal(high_literal);
        if low_value == Value::Null || high_value == Value::Null {
            return Err(FilterError::Invalid {
                offset,
                message: "Illegal values of between, values can not be null!".to_owned(),
            });
        }
        let order = java_compare(high_value, low_value).map_err(|_| FilterError::Invalid {
            offset,
            message: format!("Illegal values of between: {low} and {high} do not compare"),
        })?;
        if order == Ordering::Less {
            return Err(FilterError::Invalid {
                offset,
                message: format!(
                    "Illegal values of between, left value({low}) must less than or equal to \
                     right value({high})"
                ),
            });
        }
    }
    for operand in [value, low, high] {
        check_ordering_operand(operand, offset)?;
    }
    Ok(())
}

// --------------------------------------------------------------- printing

fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

impl fmt::Display for Literal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Literal::Null => f.write_str("NULL"),
            Literal::Bool(true) => f.write_str("TRUE"),
            Literal::Bool(false) => f.write_str("FALSE"),
            Literal::Int(i) => write!(f, "{i}"),
            Literal::Long(l) => write!(f, "{l}"),
            // Debug prints the shortest text that parses back to the same
            // double, always with a '.' or an exponent.
            Literal::Double(d) => write!(f, "{d:?}"),
            Literal::Str(s) => f.write_str(&quote(s)),
        }
    }
}

/// Prints with every operand parenthesised, so precedence never matters.
impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let not = |negated: bool| if negated { "NOT " } else { "" };
        match self {
            Expr::Literal(literal) => write!(f, "{literal}"),
            Expr::Property(name) | Expr::BooleanCast(name) => f.write_str(name),
            Expr::Negate(operand) => write!(f, "-({operand})"),
            Expr::Not(operand) => write!(f, "NOT ({operand})"),
            Expr::And(left, right) => write!(f, "({left}) AND ({right})"),
            Expr::Or(left, right) => write!(f, "({left}) OR ({right})"),
            Expr::Equal {
                left,
                right,
                negated,
            } => {
                let op = if *negated { "<>" } else { "=" };
                write!(f, "({left}) {op} ({right})")
            }
            Expr::Compare(op, left, right) => write!(f, "({left}) {} ({right})", op.symbol()),
            Expr::IsNull { value, negated } => write!(f, "({value}) IS {}NULL", not(*negated)),
            Expr::Between {
                value,
                low,
                high,
                negated,
            } => write!(f, "({value}) {}BETWEEN ({low}) AND ({high})", not(*negated)),
            Expr::In {
                property,
                list,
                negated,
            } => {
                write!(f, "{property} {}IN (", not(*negated))?;
                for (index, item) in list.iter().enumerate() {
                    if index > 0 {
                        f.write_str(", ")?;
                    }
                    f.write_str(&quote(item))?;
                }
                f.write_str(")")
            }
            Expr::StringTest {
                test,
                value,
                search,
                negated,
            } => write!(
                f,
                "({value}) {}{} {}",
                not(*negated),
                test.keyword(),
                quote(search)
            ),
        }
    }
}

// ------------------------------------------------------ subscriptions

/// The expression type of tag filters.
pub const EXPRESSION_TYPE_TAG: &str = "TAG";

/// Java's `ExpressionType.isTagType`: absent, empty or `TAG`.
pub fn is_tag_type(expression_type: Option<&str>) -> bool {
    matches!(expression_type, None | Some("") | Some(EXPRESSION_TYPE_TAG))
}

/// Why a subscription's filter is refused, as the broker answers
/// CHECK_CLIENT_CONFIG (and a pull with a new subscription).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubscriptionRefusal {
    /// The response code.
    pub code: i32,
    /// The remark.
    pub remark: String,
}

/// Java's `ClientManageProcessor.checkClientConfig`: a tag subscription
/// needs nothing (`Ok(None)`); anything else needs `enablePropertyFilter`
/// (else SYSTEM_ERROR `The broker does not support consumer to filter
/// message by <type>`) and must compile (else SUBSCRIPTION_PARSE_FAILED with
/// the compile error). SQL92 is the only other type Java's broker knows; an
/// unknown type is refused as not parsing (Java fails the same way, with a
/// null remark).
///
/// # Errors
///
/// A [`SubscriptionRefusal`] to answer with.
pub fn check_subscription(
    expression_type: Option<&str>,
    expression: &str,
    enable_property_filter: bool,
) -> Result<Option<Filter>, SubscriptionRefusal> {
    use ringmq_protocol::code::response_code;
    if is_tag_type(expression_type) {
        return Ok(None);
    }
    let expression_type = expression_type.unwrap_or_default();
    if !enable_property_filter {
        return Err(SubscriptionRefusal {
            code: response_code::SYSTEM_ERROR,
            remark: format!(
                "The broker does not support consumer to filter message by {expression_type}"
            ),
        });
    }
    if expression_type != EXPRESSION_TYPE_SQL92 {
        return Err(SubscriptionRefusal {
            code: response_code::SUBSCRIPTION_PARSE_FAILED,
            remark: format!("unknown expression type {expression_type}"),
        });
    }
    compile(expression)
        .map(Some)
        .map_err(|error| SubscriptionRefusal {
            code: response_code::SUBSCRIPTION_PARSE_FAILED,
            remark: error.to_string(),
        })
}

impl Filter {
    /// [`Filter::matches`] over a stored message's properties string.
    pub fn matches_properties(&self, properties: ringmq_protocol::message::Properties<'_>) -> bool {
        self.matches(|key| properties.get(key))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use proptest::prelude::*;

    use super::*;

    fn props<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<&'a str> + 'a {
        move |key| pairs.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
    }

    fn check(expression: &str, pairs: &[(&str, &str)]) -> bool {
        compile(expression)
            .unwrap_or_else(|e| panic!("{expression}: {e}"))
            .matches(props(pairs))
    }

    #[test]
    fn numeric_comparisons_convert_the_property_to_the_literal_type() {
        assert!(check("a > 5", &[("a", "10")]));
        assert!(!check("a > 5", &[("a", "5")]));
        assert!(check("a >= 5", &[("a", "5")]));
        assert!(check("a < 5.5", &[("a", "5")]));
        assert!(check("a <= -3", &[("a", "-3")]));
        assert!(check("a = 10", &[("a", "10")]));
        assert!(check("a = 10", &[("a", "+10")]));
        assert!(check("a = 2.5", &[("a", " 2.5 ")]));
        assert!(check("a > 3000000000", &[("a", "3000000001")]));
    }

    #[test]
    fn a_property_that_does_not_convert_fails_the_whole_expression() {
        // Integer.valueOf("5.5") throws, and the broker drops the message even
        // though the OR's other side is true.
        assert!(!check("a > 5 OR b = 'x'", &[("a", "5.5"), ("b", "x")]));
        assert!(!check("a = 1", &[("a", "abc")]));
        // Short-circuit: the right side is never evaluated.
        assert!(check("b = 'x' OR a > 5", &[("a", "abc"), ("b", "x")]));
        assert!(!check("a > 5", &[("a", "3000000000")]));
    }

    #[test]
    fn missing_properties_are_unknown_and_never_match() {
        assert!(!check("a = 1", &[]));
        assert!(!check("a <> 1", &[]));
        assert!(!check("NOT (a = 1)", &[]));
        assert!(!check("a > 1", &[]));
        assert!(!check("a IN ('x')", &[]));
        assert!(!check("a NOT IN ('x')", &[]));
        assert!(check("a IS NULL", &[]));
        assert!(!check("a IS NOT NULL", &[]));
        assert!(check("a IS NULL OR a = 1", &[]));
        assert!(!check("a = 1 AND TRUE", &[]));
        assert!(check("a = 1 OR TRUE", &[]));
        // Java's equality is false, not unknown, when only the right is null.
        assert!(check("'x' <> a", &[]));
    }

    #[test]
    fn strings_compare_for_equality_and_membership() {
        assert!(check("a = 'x'", &[("a", "x")]));
        assert!(check("a <> 'x'", &[("a", "y")]));
        assert!(check("a IN ('x', 'y')", &[("a", "y")]));
        assert!(check("a NOT IN ('x', 'y')", &[("a", "z")]));
        assert!(check("a = 'it''s'", &[("a", "it's")]));
        assert!(check("a = TRUE", &[("a", "TRUE")]));
        assert!(check("a = FALSE", &[("a", "yes")]));
    }

    #[test]
    fn two_properties_order_as_doubles() {
        assert!(check("a < b", &[("a", "9"), ("b", "10")]));
        assert!(!check("a < b", &[("a", "x"), ("b", "10")]));
    }

    #[test]
    fn between_is_inclusive_and_not_between_is_its_complement() {
        for (value, inside) in [("0", true), ("3", true), ("-1", false), ("4", false)] {
            assert_eq!(
                check("a BETWEEN 0 AND 3", &[("a", value)]),
                inside,
                "{value}"
            );
            assert_eq!(
                check("a NOT BETWEEN 0 AND 3", &[("a", value)]),
                !inside,
                "{value}"
            );
        }
        assert!(!check("a BETWEEN 0 AND 3", &[]));
        assert!(!check("a NOT BETWEEN 0 AND 3", &[]));
    }

    #[test]
    fn string_tests_are_false_on_missing_properties_even_negated() {
        assert!(check("a CONTAINS 'bc'", &[("a", "abcd")]));
        assert!(check("a STARTSWITH 'ab'", &[("a", "abcd")]));
        assert!(check("a ENDSWITH 'cd'", &[("a", "abcd")]));
        assert!(check("a NOT ENDSWITH 'x'", &[("a", "abcd")]));
        assert!(!check("a NOT CONTAINS 'x'", &[]));
        assert!(!check("a CONTAINS ''", &[("a", "abcd")]));
        assert!(!check("a NOT CONTAINS ''", &[("a", "abcd")]));
    }

    #[test]
    fn precedence_is_not_then_and_then_or() {
        assert!(check("TRUE OR TRUE AND FALSE", &[]));
        assert!(!check("(TRUE OR TRUE) AND FALSE", &[]));
        assert!(check("NOT FALSE AND TRUE", &[]));
        assert!(check(
            "not (a = 1) and b is not null",
            &[("a", "2"), ("b", "")]
        ));
    }

    #[test]
    fn comments_and_case_are_accepted() {
        assert!(check(
            "a = 1 /* one */ and -- the rest\n b between 1 and 2",
            &[("a", "1"), ("b", "2")]
        ));
        assert!(check("A is NULL", &[("a", "1")]));
    }

    #[test]
    fn java_parse_checks_are_compile_errors_with_offsets() {
        let cases = [
            ("a = NULL", 2),
            ("a > 'x'", 2),
            ("a > TRUE", 2),
            ("(a > 1) > 2", 8),
            ("TRUE = 1", 5),
            ("5 IN ('x')", 2),
            ("a BETWEEN 3 AND 1", 2),
            ("a > 0.0", 4),
            ("a > 9223372036854775808", 4),
            ("'x'", 0),
            ("a AND 1", 2),
            ("NOT a > 1", 6),
        ];
        for (expression, offset) in cases {
            match compile(expression) {
                Err(FilterError::Invalid { offset: at, .. }) => {
                    assert_eq!(at, offset, "{expression}")
                }
                other => panic!("{expression}: {other:?}"),
            }
        }
    }

    #[test]
    fn syntax_and_lexical_errors_name_the_position() {
        let error = compile("a = 1 AND").unwrap_err();
        assert_eq!(
            error.to_string(),
            "syntax error at offset 9: expected a literal, a property or '(', found the end of \
             the expression"
        );
        assert!(matches!(
            compile("a = 'x"),
            Err(FilterError::Lexical { offset: 4, .. })
        ));
        assert!(matches!(
            compile("a # 1"),
            Err(FilterError::Lexical { offset: 2, .. })
        ));
        assert!(matches!(
            compile("a = 1 -- no newline"),
            Err(FilterError::Lexical { offset: 6, .. })
        ));
        assert!(matches!(
            compile("a = 1 b"),
            Err(FilterError::Syntax { offset: 6, .. })
        ));
        assert!(matches!(
            compile("a IN ()"),
            Err(FilterError::Syntax { offset: 6, .. })
        ));
        assert!(matches!(
            compile("a = 07"),
            Err(FilterError::Syntax { offset: 5, .. })
        ));
    }

    #[test]
    fn subscriptions_need_the_property_filter_and_a_valid_expression() {
        use ringmq_protocol::code::response_code;
        assert_eq!(check_subscription(None, "*", false), Ok(None));
        assert_eq!(check_subscription(Some("TAG"), "a || b", false), Ok(None));
        let refused = check_subscription(Some("SQL92"), "a > 1", false).unwrap_err();
        assert_eq!(refused.code, response_code::SYSTEM_ERROR);
        assert_eq!(
            refused.remark,
            "The broker does not support consumer to filter message by SQL92"
        );
        let bad = check_subscription(Some("SQL92"), "a >", true).unwrap_err();
        assert_eq!(bad.code, response_code::SUBSCRIPTION_PARSE_FAILED);
        assert!(bad.remark.contains("offset 3"), "{}", bad.remark);
        let unknown = check_subscription(Some("XPATH"), "a", true).unwrap_err();
        assert_eq!(unknown.code, response_code::SUBSCRIPTION_PARSE_FAILED);
        let filter = check_subscription(Some("SQL92"), "a > 1", true)
            .unwrap()
            .unwrap();
        let props = ringmq_protocol::message::Properties::new(b"a\x012\x02");
        assert!(filter.matches_properties(props));
        let props = ringmq_protocol::message::Properties::new(b"a\x010\x02");
        assert!(!filter.matches_properties(props));
    }

    #[test]
    fn length_limit_is_enforced() {
        let at_limit = format!("a = '{}'", "x".repeat(EXPRESSION_LEN_MAX - 6));
        assert_eq!(at_limit.len(), EXPRESSION_LEN_MAX);
        assert!(compile(&at_limit).is_ok());
        let over = format!("{at_limit} ");
        assert_eq!(
            compile(&over),
            Err(FilterError::TooLong {
                len: EXPRESSION_LEN_MAX + 1,
                max: EXPRESSION_LEN_MAX
            })
        );
    }

    #[test]
    fn nesting_limit_is_enforced() {
        let nested = |depth: usize| format!("{}a = 1{}", "(".repeat(depth), ")".repeat(depth));
        assert!(compile(&nested(NESTING_DEPTH_MAX)).is_ok());
        assert_eq!(
            compile(&nested(NESTING_DEPTH_MAX + 1)),
            Err(FilterError::TooDeep {
                offset: NESTING_DEPTH_MAX,
                max: NESTING_DEPTH_MAX
            })
        );
        let nots = format!("{}TRUE", "NOT ".repeat(NESTING_DEPTH_MAX + 1));
        assert!(matches!(compile(&nots), Err(FilterError::TooDeep { .. })));
    }

    #[test]
    fn operator_limit_is_enforced_and_the_longest_chain_evaluates() {
        // n comparisons joined by AND have 2n - 1 operators.
        let chain = |n: usize| vec!["a = 1"; n].join(" AND ");
        let longest = chain(OPERATOR_COUNT_MAX.div_ceil(2));
        assert!(check(&longest, &[("a", "1")]));
        let deepest = format!("{}({longest})", "NOT NOT ".repeat(20));
        assert!(check(&deepest, &[("a", "1")]));
        let over = chain(OPERATOR_COUNT_MAX.div_ceil(2) + 1);
        assert!(matches!(
            compile(&over),
            Err(FilterError::TooManyOperators {
                max: OPERATOR_COUNT_MAX,
                ..
            })
        ));
    }

    // ------------------------------------------------ property tests

    const NAMES: [&str; 3] = ["a", "b", "c"];
    const VALUES: [&str; 10] = [
        "1",
        "-3",
        "2.5",
        "abc",
        "true",
        "",
        "2147483648",
        "0",
        "NaN",
        "x'y",
    ];

    fn name() -> impl Strategy<Value = String> {
        proptest::sample::select(&NAMES[..]).prop_map(str::to_owned)
    }

    fn string() -> impl Strategy<Value = String> {
        proptest::sample::select(&VALUES[..]).prop_map(str::to_owned)
    }

    fn number() -> impl Strategy<Value = Expr> {
        prop_oneof![
            (0..=i32::MAX).prop_map(Literal::Int),
            (i64::from(i32::MAX) + 1..=i64::MAX).prop_map(Literal::Long),
            (1e-3..1e6f64).prop_map(Literal::Double),
        ]
        .prop_map(Expr::Literal)
    }

    /// Operands `<`, `>` and BETWEEN accept.
    fn ordered_operand() -> impl Strategy<Value = Expr> {
        let base = prop_oneof![name().prop_map(Expr::Property), number()];
        base.prop_recursive(2, 4, 1, |inner| {
            inner.prop_map(|e| Expr::Negate(Box::new(e)))
        })
    }

    /// Operands `=` accepts on its right (and its left, with `boolean_left`).
    fn any_operand(boolean_left: bool) -> BoxedStrategy<Expr> {
        let mut options = vec![
            ordered_operand().boxed(),
            string()
                .prop_map(|s| Expr::Literal(Literal::Str(s)))
                .boxed(),
        ];
        if boolean_left {
            options.push(
                any::<bool>()
                    .prop_map(|b| Expr::Literal(Literal::Bool(b)))
                    .boxed(),
            );
        }
        proptest::strategy::Union::new(options).boxed()
    }

    fn leaf() -> impl Strategy<Value = Expr> {
        prop_oneof![
            prop_oneof![
                Just(Literal::Bool(true)),
                Just(Literal::Bool(false)),
                Just(Literal::Null)
            ]
            .prop_map(Expr::Literal),
            name().prop_map(Expr::BooleanCast),
            (
                prop_oneof![
                    Just(Ordering4::Gt),
                    Just(Ordering4::Ge),
                    Just(Ordering4::Lt),
                    Just(Ordering4::Le)
                ],
                ordered_operand(),
                ordered_operand()
            )
                .prop_map(|(op, l, r)| Expr::Compare(op, Box::new(l), Box::new(r))),
            (any_operand(false), any_operand(true), any::<bool>()).prop_map(|(l, r, negated)| {
                Expr::Equal {
                    left: Box::new(l),
                    right: Box::new(r),
                    negated,
                }
            }),
            (any_operand(true), any::<bool>()).prop_map(|(v, negated)| Expr::IsNull {
                value: Box::new(v),
                negated
            }),
            (
                name(),
                proptest::collection::vec(string(), 1..7),
                any::<bool>()
            )
                .prop_map(|(property, list, negated)| Expr::In {
                    property,
                    list,
                    negated
                }),
            (
                prop_oneof![
                    Just(StringTest::Contains),
                    Just(StringTest::StartsWith),
                    Just(StringTest::EndsWith)
                ],
                any_operand(true),
                string(),
                any::<bool>()
            )
                .prop_map(|(test, v, search, negated)| Expr::StringTest {
                    test,
                    value: Box::new(v),
                    search,
                    negated
                }),
            (ordered_operand(), -5i32..5, 0i32..5, any::<bool>()).prop_map(
                |(v, low, span, negated)| Expr::Between {
                    value: Box::new(v),
                    low: Box::new(int_operand(low)),
                    high: Box::new(int_operand(low + span)),
                    negated
                }
            ),
            (ordered_operand(), ordered_operand(), ordered_operand()).prop_map(|(v, l, h)| {
                // Non-literal bounds skip Java's ordering check.
                Expr::Between {
                    value: Box::new(v),
                    low: Box::new(Expr::Negate(Box::new(l))),
                    high: Box::new(h),
                    negated: true,
                }
            }),
        ]
    }

    /// A literal as the parser builds it: negative numbers are negations.
    fn int_operand(value: i32) -> Expr {
        let literal = Expr::Literal(Literal::Int(value.abs()));
        if value < 0 {
            Expr::Negate(Box::new(literal))
        } else {
            literal
        }
    }

    fn boolean() -> impl Strategy<Value = Expr> {
        leaf().prop_recursive(5, 48, 2, |inner| {
            prop_oneof![
                inner.clone().prop_map(|e| Expr::Not(Box::new(e))),
                (inner.clone(), inner.clone())
                    .prop_map(|(l, r)| Expr::And(Box::new(l), Box::new(r))),
                (inner.clone(), inner).prop_map(|(l, r)| Expr::Or(Box::new(l), Box::new(r))),
            ]
        })
    }

    fn message() -> impl Strategy<Value = HashMap<String, String>> {
        proptest::collection::hash_map(name(), string(), 0..=3)
    }

    proptest! {
        #[test]
        fn printed_expressions_parse_back_to_the_same_tree(expr in boolean()) {
            let text = expr.to_string();
            let filter = compile(&text);
            prop_assert!(filter.is_ok(), "{text}: {filter:?}");
            let filter = filter.unwrap();
            prop_assert_eq!(filter.root(), &expr, "{}", text);
        }

        #[test]
        fn evaluation_agrees_with_the_reference_evaluator(
            expr in boolean(),
            message in message(),
        ) {
            let filter = compile(&expr.to_string()).unwrap();
            let expected = matches!(
                reference::eval(&reference::desugar(&expr), &message),
                Ok(Some(reference::Obj::Bool(true)))
            );
            let actual = filter.matches(|key| message.get(key).map(String::as_str));
            prop_assert_eq!(actual, expected, "{} on {:?}", expr, message);
        }

        #[test]
        fn arbitrary_text_never_panics(text in "[ -~]{0,64}") {
            let _ = compile(&text);
        }
    }

    /// A naive evaluator written from Java's class structure: surface forms
    /// are first rewritten into the core nodes Java's parser builds
    /// (`NOT BETWEEN` = `<` OR `>`, `<>` = NOT `=`...), then evaluated with
    /// `Option<Obj>` as Java's nullable `Object`.
    mod reference {
        use std::collections::HashMap;

        use super::super::{Expr, Literal, Ordering4, StringTest};

        #[derive(Debug, Clone, PartialEq)]
        pub enum Obj {
            Bool(bool),
            Int(i32),
            Long(i64),
            Double(f64),
            Str(String),
        }

        pub enum Core {
            Const(Option<Obj>),
            Prop(String),
            Cast(String),
            Neg(Box<Core>),
            Not(Box<Core>),
            And(Box<Core>, Box<Core>),
            Or(Box<Core>, Box<Core>),
            Eq(Box<Core>, Box<Core>),
            Cmp(Ordering4, Box<Core>, Box<Core>),
            In(String, Vec<String>, bool),
            Test(StringTest, Box<Core>, String, bool),
        }

        pub fn desugar(expr: &Expr) -> Core {
            let b = |e: &Expr| Box::new(desugar(e));
            match expr {
                Expr::Literal(l) => Core::Const(match l {
                    Literal::Null => None,
                    Literal::Bool(v) => Some(Obj::Bool(*v)),
                    Literal::Int(v) => Some(Obj::Int(*v)),
                    Literal::Long(v) => Some(Obj::Long(*v)),
                    Literal::Double(v) => Some(Obj::Double(*v)),
                    Literal::Str(v) => Some(Obj::Str(v.clone())),
                }),
                Expr::Property(n) => Core::Prop(n.clone()),
                Expr::BooleanCast(n) => Core::Cast(n.clone()),
                Expr::Negate(e) => Core::Neg(b(e)),
                Expr::Not(e) => Core::Not(b(e)),
                Expr::And(l, r) => Core::And(b(l), b(r)),
                Expr::Or(l, r) => Core::Or(b(l), b(r)),
                Expr::Equal {
                    left,
                    right,
                    negated,
                } => {
                    let eq = Core::Eq(b(left), b(right));
                    if *negated {
                        Core::Not(Box::new(eq))
                    } else {
                        eq
                    }
                }
                Expr::Compare(op, l, r) => Core::Cmp(*op, b(l), b(r)),
                Expr::IsNull { value, negated } => {
                    let eq = Core::Eq(b(value), Box::new(Core::Const(None)));
                    if *negated {
                        Core::Not(Box::new(eq))
                    } else {
                        eq
                    }
                }
                Expr::Between {
                    value,
                    low,
                    high,
                    negated: false,
                } => Core::And(
                    Box::new(Core::Cmp(Ordering4::Ge, b(value), b(low))),
                    Box::new(Core::Cmp(Ordering4::Le, b(value), b(high))),
                ),
                Expr::Between {
                    value,
                    low,
                    high,
                    negated: true,
                } => Core::Or(
                    Box::new(Core::Cmp(Ordering4::Lt, b(value), b(low))),
                    Box::new(Core::Cmp(Ordering4::Gt, b(value), b(high))),
                ),
                Expr::In {
                    property,
                    list,
                    negated,
                } => Core::In(property.clone(), list.clone(), *negated),
                Expr::StringTest {
                    test,
                    value,
                    search,
                    negated,
                } => Core::Test(*test, b(value), search.clone(), *negated),
            }
        }

        type R = Result<Option<Obj>, ()>;

        fn dbl(text: &str) -> Result<f64, ()> {
            let t = text.trim_matches(|c: char| c <= ' ');
            match t {
                "NaN" | "+NaN" | "-NaN" => return Ok(f64::NAN),
                "Infinity" | "+Infinity" => return Ok(f64::INFINITY),
                "-Infinity" => return Ok(f64::NEG_INFINITY),
                _ => {}
            }
            if t.chars()
                .any(|c| c.is_ascii_alphabetic() && c != 'e' && c != 'E')
            {
                return Err(());
            }
            t.parse().map_err(|_| ())
        }

        fn dcmp(a: f64, b: f64) -> i32 {
            if a.is_nan() || b.is_nan() {
                return if a.is_nan() && b.is_nan() {
                    0
                } else if a.is_nan() {
                    1
                } else {
                    -1
                };
            }
            if a < b {
                -1
            } else if a > b {
                1
            } else {
                // -0.0 sorts before 0.0.
                (a.is_sign_positive() as i32) - (b.is_sign_positive() as i32)
            }
        }

        fn sign<T: PartialOrd>(a: T, b: T) -> i32 {
            if a < b {
                -1
            } else if a > b {
                1
            } else {
                0
            }
        }

        /// `__compare` with string conversion on.
        fn jcmp(l: &Obj, r: &Obj) -> Result<i32, ()> {
            use Obj::*;
            let int = |s: &str| s.parse::<i32>().map_err(|_| ());
            let long = |s: &str| s.parse::<i64>().map_err(|_| ());
            Ok(match l {
                Bool(a) => match r {
                    Bool(b) => sign(*a, *b),
                    Str(_) => return Err(()),
                    _ => -1,
                },
                Int(a) => match r {
                    Int(b) => sign(*a, *b),
                    Long(b) => sign(*a as i64, *b),
                    Double(b) => dcmp(*a as f64, *b),
                    Str(b) => sign(*a, int(b)?),
                    Bool(_) => -1,
                },
                Long(a) => match r {
                    Int(b) => sign(*a, *b as i64),
                    Long(b) => sign(*a, *b),
                    Double(b) => dcmp(*a as f64, *b),
                    Str(b) => sign(*a, long(b)?),
                    Bool(_) => -1,
                },
                Double(a) => match r {
                    Int(b) => dcmp(*a, *b as f64),
                    Long(b) => dcmp(*a, *b as f64),
                    Double(b) => dcmp(*a, *b),
                    Str(b) => dcmp(*a, dbl(b)?),
                    Bool(_) => -1,
                },
                Str(a) => match r {
                    Bool(b) => sign(a.eq_ignore_ascii_case("true"), *b),
                    Int(b) => sign(int(a)?, *b),
                    Long(b) => sign(long(a)?, *b),
                    Double(b) => dcmp(dbl(a)?, *b),
                    Str(b) => sign(
                        a.encode_utf16().collect::<Vec<_>>(),
                        b.encode_utf16().collect(),
                    ),
                },
            })
        }

        fn as_bool(v: Option<Obj>) -> Option<bool> {
            match v {
                Some(Obj::Bool(b)) => Some(b),
                _ => None,
            }
        }

        pub fn eval(c: &Core, p: &HashMap<String, String>) -> R {
            let prop = |n: &str| p.get(n).map(|v| Obj::Str(v.clone()));
            Ok(match c {
                Core::Const(v) => v.clone(),
                Core::Prop(n) => prop(n),
                Core::Cast(n) => match prop(n) {
                    None => None,
                    Some(Obj::Bool(b)) => Some(Obj::Bool(b)),
                    Some(_) => Some(Obj::Bool(false)),
                },
                Core::Neg(e) => match eval(e, p)? {
                    Some(Obj::Int(v)) => Some(Obj::Int(v.wrapping_neg())),
                    Some(Obj::Long(v)) => Some(Obj::Long(v.wrapping_neg())),
                    Some(Obj::Double(v)) => Some(Obj::Double(-v)),
                    _ => None,
                },
                Core::Not(e) => as_bool(eval(e, p)?).map(|b| Obj::Bool(!b)),
                Core::And(l, r) => {
                    let lv = as_bool(eval(l, p)?);
                    if lv == Some(false) {
                        return Ok(Some(Obj::Bool(false)));
                    }
                    let rv = as_bool(eval(r, p)?);
                    if rv == Some(false) {
                        return Ok(Some(Obj::Bool(false)));
                    }
                    if lv.is_none() || rv.is_none() {
                        None
                    } else {
                        Some(Obj::Bool(true))
                    }
                }
                Core::Or(l, r) => {
                    let lv = as_bool(eval(l, p)?);
                    if lv == Some(true) {
                        return Ok(Some(Obj::Bool(true)));
                    }
                    let rv = as_bool(eval(r, p)?);
                    if rv == Some(true) {
                        return Ok(Some(Obj::Bool(true)));
                    }
                    if lv.is_none() || rv.is_none() {
                        None
                    } else {
                        Some(Obj::Bool(false))
                    }
                }
                Core::Eq(l, r) => {
                    let lv = eval(l, p)?;
                    let rv = eval(r, p)?;
                    match (lv, rv) {
                        (None, None) => Some(Obj::Bool(true)),
                        (None, Some(_)) => None,
                        (Some(_), None) => Some(Obj::Bool(false)),
                        (Some(a), Some(b)) => {
                            let same = match (&a, &b) {
                                (Obj::Double(x), Obj::Double(y)) => dcmp(*x, *y) == 0,
                                _ => a == b,
                            };
                            Some(Obj::Bool(same || jcmp(&a, &b)? == 0))
                        }
                    }
                }
                Core::Cmp(op, l, r) => {
                    let Some(lv) = eval(l, p)? else {
                        return Ok(None);
                    };
                    let Some(rv) = eval(r, p)? else {
                        return Ok(None);
                    };
                    let answer = match (&lv, &rv) {
                        (Obj::Str(a), Obj::Str(b)) => dcmp(dbl(a)?, dbl(b)?),
                        _ => jcmp(&lv, &rv)?,
                    };
                    Some(Obj::Bool(match op {
                        Ordering4::Gt => answer > 0,
                        Ordering4::Ge => answer >= 0,
                        Ordering4::Lt => answer < 0,
                        Ordering4::Le => answer <= 0,
                    }))
                }
                Core::In(n, list, not) => match prop(n) {
                    Some(Obj::Str(v)) => Some(Obj::Bool(list.contains(&v) ^ not)),
                    _ => None,
                },
                Core::Test(test, e, search, not) => {
                    if search.is_empty() {
                        return Ok(Some(Obj::Bool(false)));
                    }
                    match eval(e, p)? {
                        Some(Obj::Str(v)) => {
                            let hit = match test {
                                StringTest::Contains => v.contains(search.as_str()),
                                StringTest::StartsWith => v.starts_with(search.as_str()),
                                StringTest::EndsWith => v.ends_with(search.as_str()),
                            };
                            Some(Obj::Bool(hit ^ not))
                        }
                        _ => Some(Obj::Bool(false)),
                    }
                }
            })
        }
    }
}
