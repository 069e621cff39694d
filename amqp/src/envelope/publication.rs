//! A publication's callback headers, and the publication as a router
//! takes it (the notification with them: a delay-queue job when it names
//! no recipients and calls back).

use super::*;

/// The callback headers of a publication (none set: no callback of its
/// own). Their types are checked here; their values by
/// [`target::check`] (whose field names [`target_header`] maps back).
pub fn target_from_amqp(properties: &BasicProperties) -> Result<TargetRequest, Rejection> {
    let empty = FieldTable::default();
    let table = properties.headers().as_ref().unwrap_or(&empty);
    let get = |name: &str| table.inner().get(name);
    let callback_url = get(headers::CALLBACK_URL)
        .map(|v| string(headers::CALLBACK_URL, v))
        .transpose()?;
    let recheck_url = get(headers::RECHECK_URL)
        .map(|v| string(headers::RECHECK_URL, v))
        .transpose()?;
    let browsers = match get(headers::BROWSERS) {
        None => None,
        Some(AMQPValue::Boolean(b)) => Some(*b),
        Some(v) => match as_text(v) {
            Some(Ok("true")) => Some(true),
            Some(Ok("false")) => Some(false),
            Some(Ok(other)) => {
                return Err(Rejection::invalid(
                    headers::BROWSERS,
                    format!("must be true or false, not {other:?}"),
                ));
            }
            Some(Err(_)) => {
                return Err(Rejection::invalid(headers::BROWSERS, "must be UTF-8 text"));
            }
            None => {
                return Err(Rejection::invalid(
                    headers::BROWSERS,
                    format!(
                        "must be a boolean or the string true or false, not {}",
                        type_name(v)
                    ),
                ));
            }
        },
    };
    Ok(TargetRequest {
        callback_url,
        recheck_url,
        browsers,
    })
}

/// A publication as a router takes it: the notification and its callback
/// settings ([`target_from_amqp`]). One that names no recipients (no
/// `scope`, `users` or `clients` header) and calls back (its own
/// `callback-url`, or its topic's: `topic_calls_back`) is a delay-queue
/// job, as the field reports' delay services send them (a topic, a body, a
/// delay): its callback alone, `browsers` false unless the header says
/// true (then the missing recipients are refused as usual), scope `global`
/// so it reaches nobody's mailbox. Without an `event` header, the event is
/// the topic.
pub fn publication_from_amqp_bytes(
    properties: &BasicProperties,
    body: Bytes,
    limits: &Limits,
    new_id: impl FnOnce() -> String,
    topic_calls_back: impl FnOnce(Option<&str>) -> bool,
) -> Result<(Notification, TargetRequest), Rejection> {
    let mut target = target_from_amqp(properties)?;
    let mut job = false;
    let wants_browsers = target.browsers == Some(true);
    let own_callback = target.callback_url.is_some();
    let n = read(
        properties,
        body,
        limits,
        new_id,
        Notification::validate,
        |topic| {
            job = !wants_browsers && (own_callback || topic_calls_back(topic));
            job
        },
    )?;
    if job {
        target.browsers = Some(false);
    }
    Ok((n, target))
}
