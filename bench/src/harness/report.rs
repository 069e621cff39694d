//! What every command's report shares: printing it (`--json` or text) and its number formats.

use serde::Serialize;

use crate::harness::outcome::Outcome;

/// Print a finished report (one JSON object with `json`, else its human
/// text) and turn its completeness into the run's outcome.
pub(crate) fn emit(
    report: &impl Serialize,
    human: impl FnOnce() -> String,
    complete: bool,
    json: bool,
) -> Outcome {
    if json {
        println!(
            "{}",
            serde_json::to_string(report).unwrap_or_else(|_| "{}".into())
        );
    } else {
        print!("{}", human());
    }
    if complete {
        Outcome::AllOpened
    } else {
        Outcome::SomeFailed
    }
}

/// `62,305`: an integer rate with thousands separators.
pub(crate) fn grouped(value: f64) -> String {
    let digits = format!("{:.0}", value.max(0.0));
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `1.9` or `?`.
pub(crate) fn maybe(value: Option<f64>, decimals: usize) -> String {
    value.map_or_else(|| "?".into(), |v| format!("{v:.decimals$}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grouped_numbers() {
        assert_eq!(grouped(0.0), "0");
        assert_eq!(grouped(999.4), "999");
        assert_eq!(grouped(62_305.2), "62,305");
        assert_eq!(grouped(1_234_567.0), "1,234,567");
    }
}
