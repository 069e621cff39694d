//! herald-amqp's own client ([`herald_amqp::wire`]) against the real
//! RabbitMQ on 127.0.0.1:5672 (scripts/test.sh starts it).

use std::time::Duration;

use herald_amqp::wire::{Assembled, Wire, WireConfig, WireError};
use lapin::BasicProperties;
use lapin::types::{AMQPValue, FieldTable, ShortString};

const AMQP: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";

fn config(url: &str, max_body: u64) -> WireConfig {
    WireConfig {
        url: url.to_owned(),
        connection_name: "herald-amqp wire test".to_owned(),
        max_body,
    }
}

/// A queue of this test's own, forgotten by the broker a minute after the
/// test's connections end.
fn queue_name(test: &str) -> String {
    format!("herald.test.wire.{test}.{}", std::process::id())
}

fn expiring() -> FieldTable {
    let mut args = FieldTable::default();
    args.insert("x-expires".into(), AMQPValue::LongLongInt(60_000));
    args
}

/// A connection consuming a fresh queue of its own.
async fn consuming(test: &str, url: &str, max_body: u64) -> (Wire, String) {
    let mut wire = Wire::open(&config(url, max_body)).await.expect("open");
    let queue = queue_name(test);
    wire.declare_queue(&queue, expiring()).await.unwrap();
    wire.consume(&queue, &format!("{queue}.consumer"), 16)
        .await
        .unwrap();
    (wire, queue)
}

async fn next(wire: &mut Wire) -> Assembled {
    tokio::time::timeout(Duration::from_secs(10), wire.next())
        .await
        .expect("a delivery within 10 s")
        .expect("a delivery")
}

fn delivery(a: Assembled) -> herald_amqp::wire::Delivery {
    match a {
        Assembled::Delivery(d) => *d,
        other => panic!("expected a delivery, got {other:?}"),
    }
}

#[tokio::test]
async fn a_published_message_comes_back_with_its_properties_and_is_acked() {
    let (mut wire, queue) = consuming("roundtrip", AMQP, 1 << 20).await;
    let props = BasicProperties::default().with_type(ShortString::from("herald.bundle"));
    wire.publish("", &queue, &props, b"hello").await.unwrap();
    wire.publish("", &queue, &props, b"").await.unwrap();
    let first = delivery(next(&mut wire).await);
    assert_eq!(&first.body[..], b"hello");
    assert_eq!(
        first.properties.kind().as_ref().map(|k| k.as_str()),
        Some("herald.bundle")
    );
    assert!(!first.redelivered);
    let second = delivery(next(&mut wire).await);
    assert!(second.body.is_empty());
    wire.ack(second.delivery_tag, true).await.unwrap();
    wire.close(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test]
async fn a_body_larger_than_a_frame_is_put_back_together() {
    // frame_max 4096 (the least allowed): a 100 KB body comes in 25 frames.
    let url = format!("{AMQP}?frame_max=4096");
    let (mut wire, queue) = consuming("frames", &url, 1 << 20).await;
    assert_eq!(wire.frame_max(), 4096);
    let body: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    wire.publish("", &queue, &BasicProperties::default(), &body)
        .await
        .unwrap();
    let d = delivery(next(&mut wire).await);
    assert_eq!(&d.body[..], &body[..]);
    wire.ack(d.delivery_tag, false).await.unwrap();
    wire.close(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test]
async fn a_body_above_the_bound_is_dropped_named_and_the_next_one_arrives() {
    let (mut wire, queue) = consuming("bound", AMQP, 1000).await;
    let props = BasicProperties::default();
    wire.publish("", &queue, &props, &[7u8; 5000])
        .await
        .unwrap();
    wire.publish("", &queue, &props, b"small").await.unwrap();
    match next(&mut wire).await {
        Assembled::TooLarge { size, .. } => assert_eq!(size, 5000),
        other => panic!("expected TooLarge, got {other:?}"),
    }
    let d = delivery(next(&mut wire).await);
    assert_eq!(&d.body[..], b"small");
    wire.ack(d.delivery_tag, true).await.unwrap();
    wire.close(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test]
async fn unacknowledged_deliveries_go_back_to_the_queue_on_close() {
    let (mut wire, queue) = consuming("requeue", AMQP, 1 << 20).await;
    wire.publish("", &queue, &BasicProperties::default(), b"once")
        .await
        .unwrap();
    assert!(!delivery(next(&mut wire).await).redelivered);
    wire.close(Duration::from_secs(5)).await.unwrap();
    let mut again = Wire::open(&config(AMQP, 1 << 20)).await.unwrap();
    again.consume(&queue, "again", 16).await.unwrap();
    let d = delivery(next(&mut again).await);
    assert_eq!((&d.body[..], d.redelivered), (&b"once"[..], true));
    again.ack(d.delivery_tag, false).await.unwrap();
    again.close(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test]
async fn a_declaration_the_broker_refuses_is_a_channel_error_with_its_reason() {
    let mut wire = Wire::open(&config(AMQP, 1 << 20)).await.unwrap();
    let queue = queue_name("refused");
    wire.declare_queue(&queue, expiring()).await.unwrap();
    let mut other = FieldTable::default();
    other.insert("x-expires".into(), AMQPValue::LongLongInt(30_000));
    match wire.declare_queue(&queue, other).await {
        Err(WireError::ChannelClosed { code, text }) => {
            assert_eq!(code, 406, "{text}");
            assert!(text.contains("x-expires"), "{text}");
        }
        other => panic!("expected a channel error, got {other:?}"),
    }
}

#[tokio::test]
async fn a_missing_queue_is_told_and_the_connection_goes_on() {
    let mut wire = Wire::open(&config(AMQP, 1 << 20)).await.expect("open");
    let queue = queue_name("exists");
    // The broker closes the channel of a passive declare of a missing
    // queue; the client opens it again.
    assert!(!wire.queue_exists(&queue).await.unwrap());
    wire.declare_queue(&queue, expiring()).await.unwrap();
    assert!(wire.queue_exists(&queue).await.unwrap());
    wire.consume(&queue, &format!("{queue}.consumer"), 16)
        .await
        .unwrap();
    wire.publish("", &queue, &BasicProperties::default(), b"after")
        .await
        .unwrap();
    assert_eq!(&delivery(next(&mut wire).await).body[..], b"after");
    wire.close(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test]
async fn wrong_credentials_are_refused_with_the_brokers_reason() {
    let url = "amqp://guest:not-the-password@127.0.0.1:5672/%2f";
    match Wire::open(&config(url, 1 << 20)).await {
        Err(WireError::ConnectionClosed { code, text }) => {
            assert_eq!(code, 403, "{text}");
            assert!(text.contains("ACCESS_REFUSED"), "{text}");
        }
        other => panic!("expected access refused, got {other:?}"),
    }
}

#[tokio::test]
async fn urls_it_cannot_serve_are_named() {
    for (url, says) in [
        ("amqps://guest:guest@127.0.0.1:5671/%2f", "amqps"),
        (
            "amqp://guest:guest@127.0.0.1:5672/%2f?auth_mechanism=external",
            "EXTERNAL",
        ),
        ("http://127.0.0.1:5672", "scheme"),
    ] {
        match Wire::open(&config(url, 1 << 20)).await {
            Err(WireError::Url(text)) => assert!(text.contains(says), "{url}: {text}"),
            other => panic!("{url}: expected a URL error, got {other:?}"),
        }
    }
}

/// With a 1 s heartbeat the broker closes a connection that sends nothing
/// for 2 s; an idle consumer here stays up 3.5 s (the wait is the test:
/// time passing with no traffic) and then still gets what is published.
#[tokio::test]
async fn heartbeats_keep_an_idle_connection_up() {
    let url = format!("{AMQP}?heartbeat=1");
    let (mut wire, queue) = consuming("heartbeat", &url, 1 << 20).await;
    assert_eq!(wire.heartbeat(), Some(Duration::from_secs(1)));
    let idle = tokio::time::timeout(Duration::from_millis(3500), wire.next()).await;
    assert!(idle.is_err(), "nothing was published: {idle:?}");
    wire.publish("", &queue, &BasicProperties::default(), b"still here")
        .await
        .unwrap();
    let d = delivery(next(&mut wire).await);
    assert_eq!(&d.body[..], b"still here");
    wire.close(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test]
async fn a_consumer_the_broker_cancels_is_named() {
    let (mut wire, queue) = consuming("cancel", AMQP, 1 << 20).await;
    let other = lapin::Connection::connect(AMQP, lapin::ConnectionProperties::default())
        .await
        .unwrap();
    let channel = other.create_channel().await.unwrap();
    channel
        .queue_delete(queue.as_str().into(), Default::default())
        .await
        .unwrap();
    match tokio::time::timeout(Duration::from_secs(10), wire.next()).await {
        Ok(Err(WireError::ConsumerCancelled)) => {}
        other => panic!("expected the consumer cancelled, got {other:?}"),
    }
    // The connection itself still works: it closes cleanly.
    wire.close(Duration::from_secs(5)).await.unwrap();
}

/// `rabbitmqctl close_connection`: the broker's reason reaches the client.
#[tokio::test]
async fn a_connection_the_broker_closes_is_named_with_its_reason() {
    let name = format!("herald-amqp wire test close {}", std::process::id());
    let mut wire = Wire::open(&WireConfig {
        url: AMQP.to_owned(),
        connection_name: name.clone(),
        max_body: 1 << 20,
    })
    .await
    .unwrap();
    let listing = std::process::Command::new("rabbitmqctl")
        .args(["list_connections", "--silent", "pid", "client_properties"])
        .output()
        .expect("rabbitmqctl");
    let listing = String::from_utf8_lossy(&listing.stdout);
    let pid = listing
        .lines()
        .find(|l| l.contains(&name))
        .and_then(|l| l.split_whitespace().next())
        .unwrap_or_else(|| panic!("no connection named {name:?} in:\n{listing}"))
        .to_owned();
    let status = std::process::Command::new("rabbitmqctl")
        .args(["close_connection", &pid, "herald wire test"])
        .status()
        .expect("rabbitmqctl");
    assert!(status.success());
    match tokio::time::timeout(Duration::from_secs(10), wire.next()).await {
        Ok(Err(WireError::ConnectionClosed { code, text })) => {
            assert_eq!(code, 320, "{text}");
            assert!(text.contains("herald wire test"), "{text}");
        }
        other => panic!("expected the connection closed, got {other:?}"),
    }
}

/// `next` dropped by a `select!` at any point (as a root link's loop does
/// when a report is due) loses no delivery and breaks no frame: 2,000
/// messages arrive whole and in order while the loop keeps abandoning the
/// read and writing acks and publications of its own in between.
#[tokio::test]
async fn next_dropped_by_a_select_loses_nothing() {
    let (mut wire, queue) = consuming("cancel-safe", AMQP, 1 << 20).await;
    let mut publisher = Wire::open(&config(AMQP, 1 << 20)).await.unwrap();
    let sink = queue_name("cancel-safe-sink");
    publisher.declare_queue(&sink, expiring()).await.unwrap();
    let n = 2_000u32;
    let send = tokio::spawn(async move {
        let body = vec![b'x'; 3_000];
        for i in 0..n {
            let mut b = i.to_be_bytes().to_vec();
            b.extend_from_slice(&body[..(i as usize * 7) % body.len()]);
            publisher
                .publish("", &queue, &BasicProperties::default(), &b)
                .await
                .unwrap();
        }
        publisher
    });
    let mut next_expected = 0u32;
    let mut abandoned = 0u32;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while next_expected < n {
        assert!(
            tokio::time::Instant::now() < deadline,
            "only {next_expected} of {n} arrived"
        );
        tokio::select! {
            d = wire.next() => {
                let d = delivery(d.unwrap());
                let i = u32::from_be_bytes(d.body[..4].try_into().unwrap());
                assert_eq!(i, next_expected);
                assert_eq!(d.body.len(), 4 + (i as usize * 7) % 3_000);
                next_expected += 1;
                if next_expected.is_multiple_of(8) {
                    wire.ack(d.delivery_tag, true).await.unwrap();
                    wire.publish("", &sink, &BasicProperties::default(), b"report")
                        .await
                        .unwrap();
                }
            }
            _ = tokio::time::sleep(Duration::from_micros(100)) => abandoned += 1,
        }
    }
    assert!(abandoned > 0, "the read was never abandoned");
    send.await
        .unwrap()
        .close(Duration::from_secs(5))
        .await
        .unwrap();
    wire.close(Duration::from_secs(5)).await.unwrap();
}

/// Issue 36, item 2: a broker whose `connection.start` holds server
/// properties nested 3,000 levels deep (about 15 KB, one frame) is refused
/// with the reason before anything recursive reads it; the client does not
/// overflow its stack. The broker here is a loopback listener that answers
/// the protocol header with that frame.
#[tokio::test]
async fn a_broker_with_a_nested_handshake_is_refused_with_the_reason() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let broker = tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut header = [0u8; 8];
        socket.read_exact(&mut header).await.unwrap();
        assert_eq!(&header, b"AMQP\x00\x00\x09\x01");
        let table = herald_amqp::wire::nesting::hostile_table(3_000);
        let mut payload = vec![0, 10, 0, 10, 0, 9];
        payload.extend_from_slice(&table);
        payload.extend_from_slice(&[0, 0, 0, 5]);
        payload.extend_from_slice(b"PLAIN");
        payload.extend_from_slice(&[0, 0, 0, 5]);
        payload.extend_from_slice(b"en_US");
        let mut frame = vec![1, 0, 0];
        frame.extend_from_slice(&(payload.len() as u32).to_be_bytes());
        frame.extend_from_slice(&payload);
        frame.push(0xCE);
        socket.write_all(&frame).await.unwrap();
        // The client hangs up.
        let mut rest = Vec::new();
        let _ = socket.read_to_end(&mut rest).await;
    });
    let url = format!("amqp://guest:guest@{addr}/%2f");
    let err = Wire::open(&config(&url, 1 << 20)).await.unwrap_err();
    assert!(
        matches!(err, WireError::Frame(_)) && err.to_string().contains("nested deeper than 32"),
        "{err}"
    );
    broker.await.unwrap();
}
