//! The `retry_if` condition of a topic: a small expression over the answer
//! of a callback, e.g.
//! `{res.code}!=200 && {res.data.status}!=2 || {res.data.msg}=='failed'`.
//! When it holds, the attempt counts as failed and is retried.
//!
//! # Language
//! - Fields: `{status}` and `{res.code}` (the HTTP status), `{res}` (the
//!   whole JSON body) and `{res.<path>}`, a dotted path into the JSON body
//!   (`{res.items.0.id}`: a segment of digits indexes an array, and names a
//!   key in an object). `{res.code}` is always the status, so a top-level
//!   body key `code` cannot be read. A path that leads nowhere is `null`.
//! - Literals: numbers as in JSON (`200`, `-1.5`, `1e3`), strings in single
//!   or double quotes (escapes `\\`, `\'`, `\"`, `\n`, `\r`, `\t`), `true`,
//!   `false`, `null`.
//! - Operators, tightest first: `!`; `== != < > <= >=` (they do not chain:
//!   `a == b == c` is an error, `(a == b) == c` is not); `&&`; `||`.
//!   Parentheses group.
//!
//! # Meaning
//! - Only the boolean `true` is true: `!x` is true unless `x` is `true`,
//!   `a && b` needs both `true`, and the condition holds when the whole
//!   expression is `true`. So a bare `{res.data.retry}` holds only when the
//!   body says `true` there, and `!{res.data.ok}` holds when it does not.
//! - `==`/`!=` compare values of the same type (numbers by value, so `200`
//!   equals `200.0`; arrays and objects structurally). Between different
//!   types every comparison is false except `!=`, which is true: the string
//!   `"200"` is not the number `200`.
//! - `<`, `>`, `<=`, `>=` order numbers, and strings by their bytes; on any
//!   other pair they are false.
//!
//! # Bounds
//! A condition is at most [`MAX_BYTES`] bytes and nests parentheses and `!`
//! at most [`MAX_DEPTH`] deep, so parsing and evaluation cost at most a few
//! thousand steps. Nothing is ever executed or matched as a pattern: the
//! text becomes this module's small tree and only that is evaluated.
//!
//! # Empty and non-JSON bodies
//! [`Condition::eval`] with `body: None` sees `null` for every `{res...}`
//! path. The callback's caller (see `answer`) counts an empty or non-JSON
//! body as a failure whenever the condition reads the body
//! ([`Condition::reads_body`]), so an endpoint cannot pass a condition like
//! `{res.data.status}!=2` by answering nothing.

use std::cmp::Ordering;
use std::fmt;

use serde_json::{Number, Value};

mod parse;

pub use parse::ParseError;

/// The longest condition text accepted, in bytes: a topic setting written by
/// a person, with room to spare.
pub const MAX_BYTES: usize = 1024;

/// The deepest nesting of parentheses and `!` accepted, which bounds the
/// recursion of parsing, evaluation and display.
pub const MAX_DEPTH: usize = 32;

/// A parsed `retry_if` condition. Build it with [`Condition::parse`]; its
/// [`Display`](fmt::Display) form parses back to the same condition.
#[derive(Debug, Clone, PartialEq)]
pub struct Condition {
    expr: Expr,
}

/// One node of the expression tree.
#[derive(Debug, Clone, PartialEq)]
enum Expr {
    /// `null`, `true`, `false`, a number or a string.
    Literal(Value),
    /// A `{...}` field.
    Field(Field),
    /// `!x`.
    Not(Box<Expr>),
    /// `a <op> b`.
    Cmp(Box<Expr>, CmpOp, Box<Expr>),
    /// `a && b && ...`, two or more terms.
    And(Vec<Expr>),
    /// `a || b || ...`, two or more terms.
    Or(Vec<Expr>),
}

/// What a `{...}` field reads.
#[derive(Debug, Clone, PartialEq)]
enum Field {
    /// `{status}`.
    Status,
    /// `{res.code}`: the same status, spelled as in field report 3.
    ResCode,
    /// `{res}` (empty path) or `{res.a.b}`: a path into the JSON body.
    Body(Vec<String>),
}

/// A comparison operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CmpOp {
    Eq,
    Ne,
    Lt,
    Gt,
    Le,
    Ge,
}

impl CmpOp {
    fn as_str(self) -> &'static str {
        match self {
            CmpOp::Eq => "==",
            CmpOp::Ne => "!=",
            CmpOp::Lt => "<",
            CmpOp::Gt => ">",
            CmpOp::Le => "<=",
            CmpOp::Ge => ">=",
        }
    }
}

impl Condition {
    /// Parses `text`; the error names the byte offset (from 0) of what is
    /// wrong.
    pub fn parse(text: &str) -> Result<Condition, ParseError> {
        parse::parse(text).map(|expr| Condition { expr })
    }

    /// Whether the condition holds for an answer with `status` and, when the
    /// body is JSON, `body`. With `body: None` every `{res...}` path is
    /// `null`; see the module docs for how callers treat such bodies.
    pub fn eval(&self, status: u16, body: Option<&Value>) -> bool {
        let input = Input { status, body };
        is_true(&input.value(&self.expr))
    }

    /// Whether any part of the condition reads the body (`{res}` or
    /// `{res.<path>}` other than `{res.code}`).
    pub fn reads_body(&self) -> bool {
        self.expr.reads_body()
    }
}

impl std::str::FromStr for Condition {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Condition::parse(s)
    }
}

impl Expr {
    fn reads_body(&self) -> bool {
        match self {
            Expr::Literal(_) => false,
            Expr::Field(field) => matches!(field, Field::Body(_)),
            Expr::Not(inner) => inner.reads_body(),
            Expr::Cmp(a, _, b) => a.reads_body() || b.reads_body(),
            Expr::And(terms) | Expr::Or(terms) => terms.iter().any(Expr::reads_body),
        }
    }
}

/// What an evaluation reads.
struct Input<'a> {
    status: u16,
    body: Option<&'a Value>,
}

/// A value during evaluation: borrowed from the body or the tree, or made.
enum Val<'a> {
    Ref(&'a Value),
    Owned(Value),
}

impl Val<'_> {
    fn get(&self) -> &Value {
        match self {
            Val::Ref(v) => v,
            Val::Owned(v) => v,
        }
    }
}

static NULL: Value = Value::Null;

impl<'a> Input<'a> {
    fn value<'e>(&self, expr: &'e Expr) -> Val<'e>
    where
        'a: 'e,
    {
        match expr {
            Expr::Literal(v) => Val::Ref(v),
            Expr::Field(Field::Status | Field::ResCode) => {
                Val::Owned(Value::Number(self.status.into()))
            }
            Expr::Field(Field::Body(path)) => Val::Ref(lookup(self.body, path)),
            Expr::Not(inner) => Val::Owned(Value::Bool(!is_true(&self.value(inner)))),
            Expr::Cmp(a, op, b) => {
                let (a, b) = (self.value(a), self.value(b));
                Val::Owned(Value::Bool(compare(a.get(), *op, b.get())))
            }
            Expr::And(terms) => {
                Val::Owned(Value::Bool(terms.iter().all(|t| is_true(&self.value(t)))))
            }
            Expr::Or(terms) => {
                Val::Owned(Value::Bool(terms.iter().any(|t| is_true(&self.value(t)))))
            }
        }
    }
}

fn is_true(v: &Val<'_>) -> bool {
    matches!(v.get(), Value::Bool(true))
}

/// The value at `path` in `body`, or `null` when there is none.
fn lookup<'a>(body: Option<&'a Value>, path: &[String]) -> &'a Value {
    let Some(mut at) = body else {
        return &NULL;
    };
    for segment in path {
        let next = match at {
            Value::Object(map) => map.get(segment),
            Value::Array(items) => index(segment).and_then(|i| items.get(i)),
            _ => None,
        };
        match next {
            Some(v) => at = v,
            None => return &NULL,
        }
    }
    at
}

/// A segment of ASCII digits as an array index.
fn index(segment: &str) -> Option<usize> {
    if segment.bytes().all(|b| b.is_ascii_digit()) {
        segment.parse().ok()
    } else {
        None
    }
}

fn compare(a: &Value, op: CmpOp, b: &Value) -> bool {
    let ordering = match (a, b) {
        (Value::Null, Value::Null) => Some(Ordering::Equal).filter(|_| is_equality(op)),
        (Value::Bool(x), Value::Bool(y)) => Some(x.cmp(y)).filter(|_| is_equality(op)),
        (Value::Number(x), Value::Number(y)) => compare_numbers(x, y),
        (Value::String(x), Value::String(y)) => Some(x.as_str().cmp(y.as_str())),
        (Value::Array(_), Value::Array(_)) | (Value::Object(_), Value::Object(_)) => {
            return match op {
                CmpOp::Eq => a == b,
                CmpOp::Ne => a != b,
                _ => false,
            };
        }
        _ => None,
    };
    match ordering {
        None => op == CmpOp::Ne,
        Some(o) => match op {
            CmpOp::Eq => o == Ordering::Equal,
            CmpOp::Ne => o != Ordering::Equal,
            CmpOp::Lt => o == Ordering::Less,
            CmpOp::Gt => o == Ordering::Greater,
            CmpOp::Le => o != Ordering::Greater,
            CmpOp::Ge => o != Ordering::Less,
        },
    }
}

fn is_equality(op: CmpOp) -> bool {
    matches!(op, CmpOp::Eq | CmpOp::Ne)
}

/// Numbers by value: exactly when both are integers, as `f64` otherwise.
fn compare_numbers(x: &Number, y: &Number) -> Option<Ordering> {
    if let (Some(a), Some(b)) = (x.as_i64(), y.as_i64()) {
        return Some(a.cmp(&b));
    }
    if let (Some(a), Some(b)) = (x.as_u64(), y.as_u64()) {
        return Some(a.cmp(&b));
    }
    match (x.as_i64(), y.as_u64(), x.as_u64(), y.as_i64()) {
        // A negative i64 against a u64 beyond i64::MAX, either way round.
        (Some(_), Some(_), None, None) => return Some(Ordering::Less),
        (None, None, Some(_), Some(_)) => return Some(Ordering::Greater),
        _ => {}
    }
    x.as_f64()?.partial_cmp(&y.as_f64()?)
}

/// How tightly a node binds, for deciding where display needs parentheses.
fn precedence(expr: &Expr) -> u8 {
    match expr {
        Expr::Or(_) => 1,
        Expr::And(_) => 2,
        Expr::Cmp(..) => 3,
        Expr::Not(_) | Expr::Literal(_) | Expr::Field(_) => 4,
    }
}

/// Writes `expr`, in parentheses unless it binds tighter than `min`.
fn write_operand(f: &mut fmt::Formatter<'_>, expr: &Expr, min: u8) -> fmt::Result {
    if precedence(expr) > min {
        write_expr(f, expr)
    } else {
        f.write_str("(")?;
        write_expr(f, expr)?;
        f.write_str(")")
    }
}

fn write_expr(f: &mut fmt::Formatter<'_>, expr: &Expr) -> fmt::Result {
    match expr {
        Expr::Literal(Value::String(s)) => write_string(f, s),
        Expr::Literal(v) => write!(f, "{v}"),
        Expr::Field(Field::Status) => f.write_str("{status}"),
        Expr::Field(Field::ResCode) => f.write_str("{res.code}"),
        Expr::Field(Field::Body(path)) => {
            f.write_str("{res")?;
            for segment in path {
                write!(f, ".{segment}")?;
            }
            f.write_str("}")
        }
        Expr::Not(inner) => {
            f.write_str("!")?;
            write_operand(f, inner, 3)
        }
        Expr::Cmp(a, op, b) => {
            write_operand(f, a, 3)?;
            write!(f, " {} ", op.as_str())?;
            write_operand(f, b, 3)
        }
        Expr::And(terms) => write_terms(f, terms, " && ", 2),
        Expr::Or(terms) => write_terms(f, terms, " || ", 1),
    }
}

fn write_terms(f: &mut fmt::Formatter<'_>, terms: &[Expr], sep: &str, min: u8) -> fmt::Result {
    for (i, term) in terms.iter().enumerate() {
        if i > 0 {
            f.write_str(sep)?;
        }
        write_operand(f, term, min)?;
    }
    Ok(())
}

fn write_string(f: &mut fmt::Formatter<'_>, s: &str) -> fmt::Result {
    f.write_str("\"")?;
    for c in s.chars() {
        match c {
            '"' => f.write_str("\\\"")?,
            '\\' => f.write_str("\\\\")?,
            '\n' => f.write_str("\\n")?,
            '\r' => f.write_str("\\r")?,
            '\t' => f.write_str("\\t")?,
            c => write!(f, "{c}")?,
        }
    }
    f.write_str("\"")
}

impl fmt::Display for Condition {
    /// The canonical text: single spaces around binary operators, strings in
    /// double quotes, parentheses only where the tree needs them.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_expr(f, &self.expr)
    }
}

#[cfg(test)]
mod tests;
