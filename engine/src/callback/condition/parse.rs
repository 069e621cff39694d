//! Text to tree: a lexer over bytes and a recursive-descent parser, both
//! bounded by [`MAX_BYTES`] and [`MAX_DEPTH`]. Positions are byte offsets
//! from 0.

use serde_json::{Number, Value};

use super::{CmpOp, Expr, Field, MAX_BYTES, MAX_DEPTH};

/// Why a condition did not parse. Every variant with an `at` names the byte
/// offset (from 0) in the text where the problem is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// The text is longer than [`MAX_BYTES`].
    #[error("condition is {len} bytes; the limit is {MAX_BYTES}")]
    TooLong {
        /// The text's length in bytes.
        len: usize,
    },
    /// Parentheses and `!` nest deeper than [`MAX_DEPTH`].
    #[error("nesting deeper than {MAX_DEPTH} at {at}")]
    TooDeep {
        /// Where the limit was passed.
        at: usize,
    },
    /// Something else was found where `what` was needed.
    #[error("expected {what} at {at}")]
    Expected {
        /// What was needed: `a value`, `')'`, `'&&', '||' or the end`, ...
        what: &'static str,
        /// Where.
        at: usize,
    },
    /// A `(` without its `)`.
    #[error("unclosed parenthesis opened at {opened_at}")]
    UnclosedParen {
        /// Where the `(` is.
        opened_at: usize,
    },
    /// A `)` without its `(`.
    #[error("unmatched ')' at {at}")]
    UnmatchedParen {
        /// Where the `)` is.
        at: usize,
    },
    /// A string without its closing quote.
    #[error("unclosed string opened at {opened_at}")]
    UnclosedString {
        /// Where the opening quote is.
        opened_at: usize,
    },
    /// A backslash followed by something other than `\ ' " n r t`.
    #[error("unknown escape in string at {at}; use \\\\ \\' \\\" \\n \\r \\t")]
    UnknownEscape {
        /// Where the backslash is.
        at: usize,
    },
    /// A `{` without its `}`.
    #[error("unclosed field opened at {opened_at}")]
    UnclosedField {
        /// Where the `{` is.
        opened_at: usize,
    },
    /// A `{...}` that is not one of the fields.
    #[error("bad field at {at}: {reason}")]
    BadField {
        /// Where the `{` is.
        at: usize,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// Something that looks like a number but is not one JSON accepts.
    #[error("invalid number at {at}")]
    InvalidNumber {
        /// Where the number starts.
        at: usize,
    },
    /// A word other than `true`, `false`, `null`.
    #[error(
        "unknown word at {at}; values are {{status}}, {{res.code}}, {{res.<path>}}, numbers, quoted strings, true, false, null"
    )]
    UnknownWord {
        /// Where the word starts.
        at: usize,
    },
    /// A character that starts nothing in the language.
    #[error("unexpected character {ch:?} at {at}")]
    UnexpectedChar {
        /// The character.
        ch: char,
        /// Where it is.
        at: usize,
    },
    /// `a == b == c`: comparisons do not chain.
    #[error("comparisons do not chain; add parentheses at {at}")]
    ChainedComparison {
        /// Where the second operator is.
        at: usize,
    },
}

impl ParseError {
    /// The byte offset the error points at, when it points at one.
    pub fn position(&self) -> Option<usize> {
        match *self {
            ParseError::TooLong { .. } => None,
            ParseError::TooDeep { at }
            | ParseError::Expected { at, .. }
            | ParseError::UnmatchedParen { at }
            | ParseError::UnknownEscape { at }
            | ParseError::BadField { at, .. }
            | ParseError::InvalidNumber { at }
            | ParseError::UnknownWord { at }
            | ParseError::UnexpectedChar { at, .. }
            | ParseError::ChainedComparison { at } => Some(at),
            ParseError::UnclosedParen { opened_at }
            | ParseError::UnclosedString { opened_at }
            | ParseError::UnclosedField { opened_at } => Some(opened_at),
        }
    }
}

/// A token and where it starts.
#[derive(Debug)]
struct Token {
    kind: Kind,
    at: usize,
}

#[derive(Debug)]
enum Kind {
    Open,
    Close,
    Not,
    And,
    Or,
    Cmp(CmpOp),
    Value(Expr),
    End,
}

pub(super) fn parse(text: &str) -> Result<Expr, ParseError> {
    if text.len() > MAX_BYTES {
        return Err(ParseError::TooLong { len: text.len() });
    }
    let tokens = lex(text)?;
    let mut parser = Parser {
        tokens,
        next: 0,
        depth: 0,
    };
    let expr = parser.or()?;
    let token = parser.peek();
    match token.kind {
        Kind::End => Ok(expr),
        Kind::Close => Err(ParseError::UnmatchedParen { at: token.at }),
        _ => Err(ParseError::Expected {
            what: "'&&', '||' or the end",
            at: token.at,
        }),
    }
}

struct Parser {
    tokens: Vec<Token>,
    next: usize,
    depth: usize,
}

impl Parser {
    /// The next token; the lexer always ends the list with `End`.
    fn peek(&self) -> &Token {
        &self.tokens[self.next.min(self.tokens.len() - 1)]
    }

    fn bump(&mut self) -> Token {
        let at = self.peek().at;
        if self.next >= self.tokens.len() - 1 {
            return Token {
                kind: Kind::End,
                at,
            };
        }
        let token = std::mem::replace(
            &mut self.tokens[self.next],
            Token {
                kind: Kind::End,
                at,
            },
        );
        self.next += 1;
        token
    }

    fn or(&mut self) -> Result<Expr, ParseError> {
        let mut terms = vec![self.and()?];
        while matches!(self.peek().kind, Kind::Or) {
            self.bump();
            terms.push(self.and()?);
        }
        Ok(if terms.len() == 1 {
            terms.remove(0)
        } else {
            Expr::Or(terms)
        })
    }

    fn and(&mut self) -> Result<Expr, ParseError> {
        let mut terms = vec![self.comparison()?];
        while matches!(self.peek().kind, Kind::And) {
            self.bump();
            terms.push(self.comparison()?);
        }
        Ok(if terms.len() == 1 {
            terms.remove(0)
        } else {
            Expr::And(terms)
        })
    }

    fn comparison(&mut self) -> Result<Expr, ParseError> {
        let left = self.unary()?;
        let Kind::Cmp(op) = self.peek().kind else {
            return Ok(left);
        };
        self.bump();
        let right = self.unary()?;
        if let Kind::Cmp(_) = self.peek().kind {
            return Err(ParseError::ChainedComparison { at: self.peek().at });
        }
        Ok(Expr::Cmp(Box::new(left), op, Box::new(right)))
    }

    fn unary(&mut self) -> Result<Expr, ParseError> {
        let token = self.bump();
        match token.kind {
            Kind::Not => {
                self.enter(token.at)?;
                let inner = self.unary()?;
                self.depth -= 1;
                Ok(Expr::Not(Box::new(inner)))
            }
            Kind::Open => {
                self.enter(token.at)?;
                let inner = self.or()?;
                self.depth -= 1;
                let close = self.peek();
                match close.kind {
                    Kind::Close => {
                        self.bump();
                        Ok(inner)
                    }
                    Kind::End => Err(ParseError::UnclosedParen {
                        opened_at: token.at,
                    }),
                    _ => Err(ParseError::Expected {
                        what: "')'",
                        at: close.at,
                    }),
                }
            }
            Kind::Value(expr) => Ok(expr),
            _ => Err(ParseError::Expected {
                what: "a value",
                at: token.at,
            }),
        }
    }

    fn enter(&mut self, at: usize) -> Result<(), ParseError> {
        if self.depth >= MAX_DEPTH {
            return Err(ParseError::TooDeep { at });
        }
        self.depth += 1;
        Ok(())
    }
}

fn lex(text: &str) -> Result<Vec<Token>, ParseError> {
    let bytes = text.as_bytes();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let at = i;
        let next = bytes.get(i + 1).copied();
        let (kind, len) = match bytes[i] {
            b' ' | b'\t' | b'\n' | b'\r' => {
                i += 1;
                continue;
            }
            b'(' => (Kind::Open, 1),
            b')' => (Kind::Close, 1),
            b'&' if next == Some(b'&') => (Kind::And, 2),
            b'&' => return Err(expected("'&&'", at)),
            b'|' if next == Some(b'|') => (Kind::Or, 2),
            b'|' => return Err(expected("'||'", at)),
            b'=' if next == Some(b'=') => (Kind::Cmp(CmpOp::Eq), 2),
            b'=' => return Err(expected("'=='", at)),
            b'!' if next == Some(b'=') => (Kind::Cmp(CmpOp::Ne), 2),
            b'!' => (Kind::Not, 1),
            b'<' if next == Some(b'=') => (Kind::Cmp(CmpOp::Le), 2),
            b'<' => (Kind::Cmp(CmpOp::Lt), 1),
            b'>' if next == Some(b'=') => (Kind::Cmp(CmpOp::Ge), 2),
            b'>' => (Kind::Cmp(CmpOp::Gt), 1),
            b'{' => {
                let (field, len) = field(text, at)?;
                (Kind::Value(Expr::Field(field)), len)
            }
            quote @ (b'\'' | b'"') => {
                let (s, len) = string(text, at, quote)?;
                (Kind::Value(Expr::Literal(Value::String(s))), len)
            }
            b'-' | b'0'..=b'9' => {
                let (n, len) = number(text, at)?;
                (Kind::Value(Expr::Literal(Value::Number(n))), len)
            }
            b if b.is_ascii_alphabetic() => {
                let len = bytes[at..]
                    .iter()
                    .take_while(|b| b.is_ascii_alphanumeric() || **b == b'_')
                    .count();
                let value = match &text[at..at + len] {
                    "true" => Value::Bool(true),
                    "false" => Value::Bool(false),
                    "null" => Value::Null,
                    _ => return Err(ParseError::UnknownWord { at }),
                };
                (Kind::Value(Expr::Literal(value)), len)
            }
            _ => {
                let ch = text[at..].chars().next().unwrap_or('\u{fffd}');
                return Err(ParseError::UnexpectedChar { ch, at });
            }
        };
        tokens.push(Token { kind, at });
        i += len;
    }
    tokens.push(Token {
        kind: Kind::End,
        at: bytes.len(),
    });
    Ok(tokens)
}

fn expected(what: &'static str, at: usize) -> ParseError {
    ParseError::Expected { what, at }
}

/// `{...}` at `at`; returns the field and the bytes it spans.
fn field(text: &str, at: usize) -> Result<(Field, usize), ParseError> {
    let rest = &text[at + 1..];
    let Some(end) = rest
        .find(['}', '{'])
        .filter(|&e| rest.as_bytes()[e] == b'}')
    else {
        return Err(ParseError::UnclosedField { opened_at: at });
    };
    let inner = &rest[..end];
    let len = end + 2;
    let bad = |reason| Err(ParseError::BadField { at, reason });
    if inner == "status" {
        return Ok((Field::Status, len));
    }
    if inner == "res.code" {
        return Ok((Field::ResCode, len));
    }
    let path = if inner == "res" {
        ""
    } else if let Some(path) = inner.strip_prefix("res.") {
        path
    } else {
        return bad("fields are {status}, {res.code}, {res} and {res.<path>}");
    };
    let mut segments = Vec::new();
    if !path.is_empty() {
        for segment in path.split('.') {
            if segment.is_empty() {
                return bad("empty path segment");
            }
            if segment
                .chars()
                .any(|c| c.is_whitespace() || c.is_control() || c == '{')
            {
                return bad("path segments cannot hold spaces or control characters");
            }
            segments.push(segment.to_owned());
        }
    }
    if segments.first().is_some_and(|s| s == "code") {
        return bad("{res.code} is the HTTP status and has no fields");
    }
    Ok((Field::Body(segments), len))
}

/// A quoted string at `at`; returns it unescaped and the bytes it spans.
fn string(text: &str, at: usize, quote: u8) -> Result<(String, usize), ParseError> {
    let mut out = String::new();
    let mut chars = text[at + 1..].char_indices();
    while let Some((offset, c)) = chars.next() {
        match c {
            '\\' => {
                let escaped = match chars.next() {
                    Some((_, '\\')) => '\\',
                    Some((_, '\'')) => '\'',
                    Some((_, '"')) => '"',
                    Some((_, 'n')) => '\n',
                    Some((_, 'r')) => '\r',
                    Some((_, 't')) => '\t',
                    Some(_) => {
                        return Err(ParseError::UnknownEscape {
                            at: at + 1 + offset,
                        });
                    }
                    None => return Err(ParseError::UnclosedString { opened_at: at }),
                };
                out.push(escaped);
            }
            c if c as u32 == u32::from(quote) => return Ok((out, offset + 2)),
            c => out.push(c),
        }
    }
    Err(ParseError::UnclosedString { opened_at: at })
}

/// A JSON number at `at`; returns it and the bytes it spans.
fn number(text: &str, at: usize) -> Result<(Number, usize), ParseError> {
    let bytes = &text.as_bytes()[at..];
    let len = bytes
        .iter()
        .take_while(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'+' | b'.'))
        .count();
    let digits = &text[at..at + len];
    // Only JSON's grammar: the JSON parser refuses `01`, `1.`, `+1`, `0x1`.
    // Its float reading is not correctly rounded (without the
    // `float_roundtrip` feature), so fractions are read again by `str::parse`,
    // which is: a displayed condition then parses back to the same numbers.
    match serde_json::from_str::<Value>(digits) {
        Ok(Value::Number(n)) if n.is_f64() => digits
            .parse::<f64>()
            .ok()
            .and_then(Number::from_f64)
            .map(|n| (n, len))
            .ok_or(ParseError::InvalidNumber { at }),
        Ok(Value::Number(n)) => Ok((n, len)),
        _ => Err(ParseError::InvalidNumber { at }),
    }
}
