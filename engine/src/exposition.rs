//! The two text formats `GET /metrics` answers in (pure), chosen by the
//! request's `Accept` ([`Format::negotiate`]):
//!
//! - OpenMetrics 1.0 (`application/openmetrics-text`), what
//!   `prometheus_client` encodes, for a scraper that asks for it (Prometheus
//!   itself does, with a higher q-value than the rest);
//! - the Prometheus text format 0.0.4 (`text/plain; version=0.0.4`) for
//!   everything else: no `Accept`, `text/plain`, `*/*`, or a type neither
//!   format is (older scrapers, `promtool check metrics`, curl).
//!
//! The 0.0.4 text is made from the OpenMetrics text ([`to_prometheus_text`])
//! family by family: a counter `x` (samples `x_total`) becomes the family
//! `x_total`, so its `# TYPE` and `# HELP` name what its samples are named;
//! an info `x` (sample `x_info`) becomes the gauge `x_info`; `unknown`
//! becomes `untyped`; the `# UNIT`, `# EOF` and `_created` lines, exemplars,
//! and OpenMetrics' `\"` in help text (0.0.4 escapes only `\\` and `\n`)
//! go; timestamps (seconds there, milliseconds here) are converted.

/// A format `/metrics` can answer in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// OpenMetrics 1.0 text.
    OpenMetrics,
    /// Prometheus text format 0.0.4.
    PrometheusText,
}

impl Format {
    /// The `Content-Type` of an answer in this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Format::PrometheusText => "text/plain; version=0.0.4; charset=utf-8",
        }
    }

    /// The format to answer a request whose `Accept` header is `accept`
    /// (None: absent). OpenMetrics when an `application/openmetrics-text`
    /// range (named, not reached through a wildcard) has a q-value above
    /// zero and at least the q-value `text/plain` gets (from `text/plain`,
    /// `text/*` or `*/*`); the 0.0.4 text otherwise, including when nothing
    /// matches either (a scraper gets something it can most likely read
    /// rather than a 406). Unparsable parts of the header are skipped.
    pub fn negotiate(accept: Option<&str>) -> Format {
        let Some(accept) = accept else {
            return Format::PrometheusText;
        };
        let mut openmetrics: Option<f32> = None;
        // (specificity, q) of the most specific range matching text/plain.
        let mut text: Option<(u8, f32)> = None;
        for range in accept.split(',') {
            let mut parts = range.split(';');
            let media = parts.next().unwrap_or("").trim().to_ascii_lowercase();
            let mut q = 1.0_f32;
            for param in parts {
                let Some((name, value)) = param.split_once('=') else {
                    continue;
                };
                if name.trim().eq_ignore_ascii_case("q") {
                    q = match value.trim().trim_matches('"').parse::<f32>() {
                        Ok(v) if (0.0..=1.0).contains(&v) => v,
                        _ => 0.0,
                    };
                }
            }
            match media.as_str() {
                "application/openmetrics-text" => {
                    openmetrics = Some(openmetrics.map_or(q, |o| o.max(q)));
                }
                "text/plain" | "text/*" | "*/*" => {
                    let specificity = match media.as_str() {
                        "text/plain" => 2,
                        "text/*" => 1,
                        _ => 0,
                    };
                    text = match text {
                        Some((s, old)) if s > specificity => Some((s, old)),
                        Some((s, old)) if s == specificity => Some((s, old.max(q))),
                        _ => Some((specificity, q)),
                    };
                }
                _ => {}
            }
        }
        match openmetrics {
            Some(om) if om > 0.0 && om >= text.map_or(0.0, |(_, q)| q) => Format::OpenMetrics,
            _ => Format::PrometheusText,
        }
    }
}

/// One family's kind, as the OpenMetrics text declared it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Counter,
    Info,
    Gauge,
    Histogram,
    Summary,
    Other,
}

/// `openmetrics` (OpenMetrics text, as `prometheus_client` encodes it) in
/// the Prometheus text format 0.0.4; see the module's documentation.
pub fn to_prometheus_text(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len());
    // The HELP line waits for its TYPE line, which says the family's name.
    let mut help: Option<(&str, &str)> = None;
    let mut kind = Kind::Other;
    for line in openmetrics.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, text) = rest.split_once(' ').unwrap_or((rest, ""));
            help = Some((name, text));
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, declared) = rest.split_once(' ').unwrap_or((rest, "unknown"));
            let (family, kind_now, type_04) = match declared.trim() {
                "counter" => (format!("{name}_total"), Kind::Counter, "counter"),
                "info" => (format!("{name}_info"), Kind::Info, "gauge"),
                "gauge" => (name.to_owned(), Kind::Gauge, "gauge"),
                "histogram" => (name.to_owned(), Kind::Histogram, "histogram"),
                "summary" => (name.to_owned(), Kind::Summary, "summary"),
                // stateset, gaugehistogram, unknown: no 0.0.4 equivalent.
                _ => (name.to_owned(), Kind::Other, "untyped"),
            };
            kind = kind_now;
            if let Some((help_name, text)) = help.take()
                && help_name == name
            {
                out.push_str("# HELP ");
                out.push_str(&family);
                out.push(' ');
                push_help(&mut out, text);
                out.push('\n');
            }
            out.push_str("# TYPE ");
            out.push_str(&family);
            out.push(' ');
            out.push_str(type_04);
            out.push('\n');
        } else if line.starts_with('#') || line.trim().is_empty() {
            // # UNIT, # EOF, anything else commented: nothing in 0.0.4.
        } else if let Some(sample) = Sample::parse(line) {
            let created = sample.name.ends_with("_created")
                && matches!(kind, Kind::Counter | Kind::Histogram | Kind::Summary);
            if !created {
                sample.write(&mut out);
            }
        }
    }
    out
}

/// OpenMetrics help text (escapes `\\`, `\n`, `\"`) as 0.0.4 help text
/// (escapes `\\`, `\n`).
fn push_help(out: &mut String, text: &str) {
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some('"') => out.push('"'),
                Some('n') => out.push_str("\\n"),
                Some('\\') | None => out.push_str("\\\\"),
                Some(other) => {
                    out.push_str("\\\\");
                    out.push(other);
                }
            },
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// A sample line's parts: `name{labels} value [timestamp] [# exemplar]`.
struct Sample<'a> {
    name: &'a str,
    /// `{...}` with its braces, or empty.
    labels: &'a str,
    value: &'a str,
    timestamp: Option<&'a str>,
}

impl<'a> Sample<'a> {
    fn parse(line: &'a str) -> Option<Sample<'a>> {
        let name_end = line.find(['{', ' ']).unwrap_or(line.len());
        let name = &line[..name_end];
        let mut rest = &line[name_end..];
        let mut labels = "";
        if rest.starts_with('{') {
            // The closing brace outside a quoted value ends the labels.
            let mut quoted = false;
            let mut escaped = false;
            let mut end = None;
            for (i, c) in rest.char_indices() {
                match c {
                    _ if escaped => escaped = false,
                    '\\' if quoted => escaped = true,
                    '"' => quoted = !quoted,
                    '}' if !quoted => {
                        end = Some(i);
                        break;
                    }
                    _ => {}
                }
            }
            let end = end?;
            labels = &rest[..=end];
            rest = &rest[end + 1..];
        }
        // Whatever follows " # " is an exemplar.
        let rest = rest.split(" # ").next().unwrap_or("");
        let mut fields = rest.split_ascii_whitespace();
        let value = fields.next()?;
        let timestamp = fields.next();
        (!name.is_empty()).then_some(Sample {
            name,
            labels,
            value,
            timestamp,
        })
    }

    fn write(&self, out: &mut String) {
        out.push_str(self.name);
        out.push_str(self.labels);
        out.push(' ');
        out.push_str(self.value);
        // Seconds (a float) in OpenMetrics, integer milliseconds in 0.0.4.
        if let Some(ms) = self
            .timestamp
            .and_then(|t| t.parse::<f64>().ok())
            .map(|s| (s * 1000.0).round())
            .filter(|ms| ms.is_finite())
        {
            out.push(' ');
            out.push_str(&format!("{}", ms as i64));
        }
        out.push('\n');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_accept_or_for_plain_text_the_answer_is_0_0_4() {
        for accept in [
            None,
            Some(""),
            Some("*/*"),
            Some("text/plain"),
            Some("text/plain; version=0.0.4"),
            Some("text/plain;version=0.0.4;q=0.9, */*;q=0.1"),
            Some("application/json"),
            Some("text/*"),
            // Named, but refused.
            Some("application/openmetrics-text;q=0, */*"),
            // Preferred less than the text format.
            Some("application/openmetrics-text;q=0.3, text/plain;q=0.5"),
            // A wildcard does not name OpenMetrics.
            Some("application/*"),
            // Garbage q-values count as 0.
            Some("application/openmetrics-text;q=high, text/plain"),
        ] {
            assert_eq!(
                Format::negotiate(accept),
                Format::PrometheusText,
                "{accept:?}"
            );
        }
    }

    #[test]
    fn openmetrics_when_asked_for_first() {
        for accept in [
            "application/openmetrics-text",
            "Application/OpenMetrics-Text; version=1.0.0",
            // Prometheus 2.x's own scrape header.
            "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
            // An equal q-value goes to the named OpenMetrics.
            "text/plain, application/openmetrics-text",
            // text/plain's own q-value wins over */*'s.
            "application/openmetrics-text;q=0.5, text/plain;q=0.2, */*",
        ] {
            assert_eq!(
                Format::negotiate(Some(accept)),
                Format::OpenMetrics,
                "{accept}"
            );
        }
    }

    #[test]
    fn counters_are_named_by_their_samples_and_the_rest_dropped() {
        let om = "# HELP herald_x Things \\\"quoted\\\" and a \\\\.\n\
                  # TYPE herald_x counter\n\
                  herald_x_total{a=\"1 # {b} \\\"x\\\"\"} 3 # {trace_id=\"t\"} 1.0 1.5\n\
                  herald_x_created{a=\"1\"} 1700000000.5\n\
                  # HELP herald_lat_seconds Latency.\n\
                  # TYPE herald_lat_seconds histogram\n\
                  # UNIT herald_lat_seconds seconds\n\
                  herald_lat_seconds_sum 0.5\n\
                  herald_lat_seconds_count 2\n\
                  herald_lat_seconds_bucket{le=\"0.1\"} 1\n\
                  herald_lat_seconds_bucket{le=\"+Inf\"} 2\n\
                  herald_lat_seconds_created 1.0\n\
                  # HELP herald_build Build.\n\
                  # TYPE herald_build info\n\
                  herald_build_info{version=\"1\"} 1\n\
                  # HELP herald_up Up.\n\
                  # TYPE herald_up gauge\n\
                  herald_up 1 1700000000.25\n\
                  # HELP herald_what What.\n\
                  # TYPE herald_what unknown\n\
                  herald_what NaN\n\
                  # EOF\n";
        let text = to_prometheus_text(om);
        assert_eq!(
            text,
            "# HELP herald_x_total Things \"quoted\" and a \\\\.\n\
             # TYPE herald_x_total counter\n\
             herald_x_total{a=\"1 # {b} \\\"x\\\"\"} 3\n\
             # HELP herald_lat_seconds Latency.\n\
             # TYPE herald_lat_seconds histogram\n\
             herald_lat_seconds_sum 0.5\n\
             herald_lat_seconds_count 2\n\
             herald_lat_seconds_bucket{le=\"0.1\"} 1\n\
             herald_lat_seconds_bucket{le=\"+Inf\"} 2\n\
             # HELP herald_build_info Build.\n\
             # TYPE herald_build_info gauge\n\
             herald_build_info{version=\"1\"} 1\n\
             # HELP herald_up Up.\n\
             # TYPE herald_up gauge\n\
             herald_up 1 1700000000250\n\
             # HELP herald_what What.\n\
             # TYPE herald_what untyped\n\
             herald_what NaN\n"
        );
    }

    /// What the crate really encodes, every metric type Herald uses.
    #[test]
    fn a_real_registry_converts() {
        use prometheus_client::metrics::{
            counter::Counter, family::Family, gauge::Gauge, histogram::Histogram, info::Info,
        };
        let mut registry = prometheus_client::registry::Registry::default();
        let c = Family::<Vec<(String, String)>, Counter>::default();
        c.get_or_create(&vec![("k".into(), "v".into())]).inc();
        registry.register("herald_c", "A counter", c);
        let g = Gauge::<i64>::default();
        g.set(-2);
        registry.register("herald_g", "A gauge", g);
        let h = Histogram::new([0.1, 1.0]);
        h.observe(0.5);
        registry.register_with_unit(
            "herald_h",
            "A histogram",
            prometheus_client::registry::Unit::Seconds,
            h,
        );
        registry.register("herald_i", "An info", Info::new(vec![("v", "1")]));
        let mut om = String::new();
        prometheus_client::encoding::text::encode(&mut om, &registry).unwrap();
        let text = to_prometheus_text(&om);
        for line in [
            "# TYPE herald_c_total counter\n",
            "herald_c_total{k=\"v\"} 1\n",
            "# TYPE herald_g gauge\nherald_g -2\n",
            "# TYPE herald_h_seconds histogram\n",
            "herald_h_seconds_bucket{le=\"1.0\"} 1\n",
            "# TYPE herald_i_info gauge\n",
            "herald_i_info{v=\"1\"} 1\n",
        ] {
            assert!(text.contains(line), "{line}\n---\n{text}");
        }
        for gone in ["# EOF", "# UNIT", "_created"] {
            assert!(!text.contains(gone), "{gone}\n---\n{text}");
        }
    }
}
