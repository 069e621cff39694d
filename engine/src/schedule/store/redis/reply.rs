//! Reading what Redis answers: script replies are arrays of bulk strings
//! and integers, decoded here into the store's types.

use redis::Value;

use crate::schedule::entry::Millis;
use crate::schedule::store::StoreError;

/// A number argument (times are clamped by [`super::layout::score`]
/// first).
pub(super) fn num(n: u64) -> Vec<u8> {
    n.to_string().into_bytes()
}

pub(super) fn unexpected(what: &str) -> StoreError {
    StoreError::Unavailable(format!("redis: unexpected answer to {what}"))
}

pub(super) fn array(v: Value) -> Result<Vec<Value>, StoreError> {
    match v {
        Value::Array(items) | Value::Set(items) => Ok(items),
        Value::Nil => Ok(Vec::new()),
        Value::ServerError(e) => Err(StoreError::Unavailable(format!("redis: {e}"))),
        _ => Err(unexpected("a script (not an array)")),
    }
}

/// `flat` in groups of `N` (a script's flat answer of tuples).
pub(super) fn groups<const N: usize>(
    flat: Vec<Value>,
    what: &str,
) -> Result<Vec<[Value; N]>, StoreError> {
    if !flat.len().is_multiple_of(N) {
        return Err(unexpected(what));
    }
    let mut out = Vec::with_capacity(flat.len() / N);
    let mut it = flat.into_iter();
    loop {
        let group: Vec<Value> = it.by_ref().take(N).collect();
        if group.is_empty() {
            break;
        }
        out.push(<[Value; N]>::try_from(group).map_err(|_| unexpected(what))?);
    }
    Ok(out)
}

pub(super) fn blob(v: Value) -> Result<Vec<u8>, StoreError> {
    match v {
        Value::BulkString(b) => Ok(b),
        Value::SimpleString(s) => Ok(s.into_bytes()),
        Value::Nil => Ok(Vec::new()),
        _ => Err(unexpected("a script (not a string)")),
    }
}

pub(super) fn text(v: Value) -> Result<String, StoreError> {
    String::from_utf8(blob(v)?).map_err(|_| unexpected("a script (not UTF-8)"))
}

pub(super) fn int(v: &Value) -> Result<i64, StoreError> {
    match v {
        Value::Int(n) => Ok(*n),
        Value::BulkString(b) => std::str::from_utf8(b)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| unexpected("a script (not a number)")),
        _ => Err(unexpected("a script (not a number)")),
    }
}

/// A sorted-set score as Redis prints it (`%.17g`: integers print exactly).
pub(super) fn parse_score(v: &Value) -> Result<Millis, StoreError> {
    let s = match v {
        Value::BulkString(b) => std::str::from_utf8(b).ok(),
        Value::SimpleString(s) => Some(s.as_str()),
        Value::Double(d) => return Ok(*d as Millis),
        Value::Int(n) => return Ok(u64::try_from(*n).unwrap_or(0)),
        _ => None,
    };
    s.and_then(|s| s.parse::<f64>().ok())
        .map(|f| f as Millis)
        .ok_or_else(|| unexpected("a score"))
}

#[cfg(test)]
mod tests {
    use super::super::layout::MAX_MS;
    use super::*;

    #[test]
    fn scores_parse_as_redis_prints_them() {
        let v = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        assert_eq!(parse_score(&v("1800000000100")).unwrap(), 1_800_000_000_100);
        assert_eq!(parse_score(&v("9007199254740991")).unwrap(), MAX_MS);
        assert!(parse_score(&v("x")).is_err());
    }

    #[test]
    fn flat_answers_split_into_groups_or_fail() {
        let v = |n: i64| Value::Int(n);
        let g = groups::<2>(vec![v(1), v(2), v(3), v(4)], "t").unwrap();
        assert_eq!(g, vec![[v(1), v(2)], [v(3), v(4)]]);
        assert!(groups::<3>(vec![v(1), v(2)], "t").is_err());
    }
}
