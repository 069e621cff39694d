//! Reading query strings: [`query_params`] for any endpoint's parameters
//! (serde, with errors naming the parameter), and [`raw_params`] for the
//! envelope of a raw-body publication, read directly when the query is well
//! formed (the path every raw publication takes) and through serde
//! otherwise, so that its errors are serde's.

use serde::Deserialize;

use super::error::ApiError;

/// The envelope fields of a raw-body publication, from the query string.
#[derive(Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawParams {
    pub(super) id: Option<String>,
    pub(super) scope: Option<String>,
    pub(super) users: Option<String>,
    pub(super) clients: Option<String>,
    pub(super) sites: Option<String>,
    pub(super) event: Option<String>,
    pub(super) topic: Option<String>,
    pub(super) ttl_ms: Option<u64>,
    pub(super) delay_ms: Option<i64>,
    pub(super) deliver_at: Option<String>,
    pub(super) when_online: Option<bool>,
    pub(super) callback_url: Option<String>,
    pub(super) recheck_url: Option<String>,
    pub(super) browsers: Option<bool>,
}

/// The field serde names in the text of a "missing field" or "duplicate
/// field" error (its path stops at the object holding it).
pub(super) fn field_in_message(message: &str) -> Option<&str> {
    let rest = ["missing field `", "duplicate field `"]
        .iter()
        .find_map(|prefix| message.strip_prefix(prefix))?;
    rest.split('`').next()
}

/// The parameters of a query string, or a 422 naming the parameter that
/// is wrong (unknown, or of the wrong type). No query, or an empty one, is
/// every parameter unset.
pub(crate) fn query_params<T: serde::de::DeserializeOwned + Default>(
    query: Option<&str>,
) -> Result<T, ApiError> {
    let Some(q) = query.filter(|q| !q.is_empty()) else {
        return Ok(T::default());
    };
    let de = serde_urlencoded::Deserializer::new(form_urlencoded::parse(q.as_bytes()));
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let message = e.into_inner().to_string();
        let field = match path.trim_start_matches('.') {
            "" => field_in_message(&message).unwrap_or_default().to_owned(),
            named => named.to_owned(),
        };
        ApiError::invalid(field, format!("bad query string: {message}"))
    })
}

/// The envelope fields of a well-formed query string, read directly: every
/// key known and given once, every value of its type. `None` for anything
/// else, and the caller reads the query through [`query_params`] instead,
/// whose errors name what is wrong: the two agree on every query this
/// accepts (tested), and this one skips serde's machinery on the path every
/// raw publication takes (a tenth of a request's instructions).
fn raw_params_direct(query: &str) -> Option<RawParams> {
    fn once<T>(slot: &mut Option<T>, value: Option<T>) -> Option<()> {
        if slot.is_some() {
            return None;
        }
        *slot = Some(value?);
        Some(())
    }
    fn boolean(v: &str) -> Option<bool> {
        v.parse().ok()
    }
    let mut p = RawParams::default();
    for (key, value) in form_urlencoded::parse(query.as_bytes()) {
        match &*key {
            "id" => once(&mut p.id, Some(value.into_owned()))?,
            "scope" => once(&mut p.scope, Some(value.into_owned()))?,
            "users" => once(&mut p.users, Some(value.into_owned()))?,
            "clients" => once(&mut p.clients, Some(value.into_owned()))?,
            "sites" => once(&mut p.sites, Some(value.into_owned()))?,
            "event" => once(&mut p.event, Some(value.into_owned()))?,
            "topic" => once(&mut p.topic, Some(value.into_owned()))?,
            "ttl_ms" => once(&mut p.ttl_ms, value.parse().ok())?,
            "delay_ms" => once(&mut p.delay_ms, value.parse().ok())?,
            "deliver_at" => once(&mut p.deliver_at, Some(value.into_owned()))?,
            "when_online" => once(&mut p.when_online, boolean(&value))?,
            "callback_url" => once(&mut p.callback_url, Some(value.into_owned()))?,
            "recheck_url" => once(&mut p.recheck_url, Some(value.into_owned()))?,
            "browsers" => once(&mut p.browsers, boolean(&value))?,
            _ => return None,
        }
    }
    Some(p)
}

/// The envelope of a raw-body publication from its query string, or a 422
/// naming the parameter that is wrong.
pub(super) fn raw_params(query: Option<&str>) -> Result<RawParams, ApiError> {
    match query.filter(|q| !q.is_empty()).and_then(raw_params_direct) {
        Some(params) => Ok(params),
        None => query_params(query),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The direct reading of a query string agrees with serde's on every
    /// query it accepts, and leaves every other to it.
    #[test]
    fn the_direct_query_reading_agrees_with_serde() {
        let accepted = [
            "event=e&users=a",
            "users=a,b&event=chat.message&id=x1&topic=t&ttl_ms=5000",
            "event=e&scope=global&sites=s1,s2&clients=c",
            "event=e&users=a&delay_ms=-5&when_online=true&browsers=false",
            "event=e&users=a&deliver_at=2030-01-01T00:00:00Z",
            "event=e&users=a&callback_url=https%3A%2F%2Fx.example%2Fcb&recheck_url=https://y",
            "event=a+b&users=%C3%A9t%C3%A9&%74opic=t", // keys and values decoded
            "event=&users=",
            "event=e&&users=a&",
            "event",
            "ttl_ms=0&event=e",
        ];
        let refused = [
            "event=e&event=f",
            "event=e&userz=a",
            "event=e&ttl_ms=abc",
            "event=e&ttl_ms=-1",
            "event=e&delay_ms=1.5",
            "event=e&when_online=yes",
            "event=e&browsers=1",
            "event=e&=x",
            "event=e&users=a&users=b",
            "event=e&us%65rs2=", // an unknown key, decoded
        ];
        for q in accepted.iter().chain(&refused) {
            let direct = raw_params_direct(q);
            let serde: Result<RawParams, ApiError> = query_params(Some(q));
            match (&direct, &serde) {
                (Some(d), Ok(s)) => assert_eq!(d, s, "{q}"),
                (None, _) => {}
                (Some(d), Err(e)) => panic!("{q}: direct {d:?}, serde refused: {e:?}"),
            }
        }
        for q in accepted {
            assert!(
                raw_params_direct(q).is_some(),
                "{q} should be read directly"
            );
        }
        for q in refused {
            assert!(raw_params_direct(q).is_none(), "{q} should go to serde");
        }
    }

    /// The same over queries put together at random from keys (known,
    /// unknown, encoded) and values (text, numbers, booleans, escapes).
    #[test]
    fn the_direct_query_reading_agrees_with_serde_on_random_queries() {
        const KEYS: &[&str] = &[
            "id",
            "scope",
            "users",
            "event",
            "topic",
            "ttl_ms",
            "delay_ms",
            "deliver_at",
            "when_online",
            "browsers",
            "sites",
            "clients",
            "callback_url",
            "recheck_url",
            "%65vent",
            "userz",
            "",
            "ttl%5Fms",
        ];
        const VALUES: &[&str] = &[
            "",
            "a",
            "a,b",
            "5",
            "-5",
            "1.5",
            "true",
            "false",
            "TRUE",
            "x+y",
            "%C3%A9",
            "%ZZ",
            "18446744073709551616",
            "-9223372036854775808",
            "global",
        ];
        let mut read_directly = 0;
        for _ in 0..5_000 {
            let n = rand::random::<u32>() % 5;
            let query: Vec<String> = (0..n)
                .map(|_| {
                    let k = KEYS[rand::random::<u32>() as usize % KEYS.len()];
                    let v = VALUES[rand::random::<u32>() as usize % VALUES.len()];
                    format!("{k}={v}")
                })
                .collect();
            let q = query.join("&");
            let serde: Result<RawParams, ApiError> = query_params(Some(&q));
            if let Some(direct) = raw_params_direct(&q) {
                read_directly += 1;
                match serde {
                    Ok(s) => assert_eq!(direct, s, "{q}"),
                    Err(e) => panic!("{q}: direct {direct:?}, serde refused: {e:?}"),
                }
            }
        }
        assert!(read_directly > 500, "only {read_directly} read directly");
    }
}
