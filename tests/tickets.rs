//! Lock tickets: a held lock detached from its guard and adopted by another client (as
//! another process would, from the ticket's text), which extends and releases it; stale,
//! forged and taken-over tickets refused without a change on the nodes. Against real
//! `redis-server` processes.

mod common;

use std::time::{Duration, SystemTime};

use common::{Cluster, NODE_TIMEOUT, RedisServer, ServerOptions, unique};
use quorum_lock::{AutoExtend, Error, LockTicket, LostReason, Redlock, Verdict};

const TTL: Duration = Duration::from_secs(10);

fn client(urls: &[String]) -> Redlock {
    Redlock::builder()
        // Fresh test servers: quarantine would hold every vote for one TTL.
        .restart_quarantine(false)
        .nodes(urls)
        .node_timeout(Duration::from_millis(500))
        .retry_delay(Duration::from_millis(2))
        .max_retry_delay(Duration::from_millis(20))
        .build()
        .unwrap()
}

/// What one node holds at `key`: its value and remaining milliseconds.
fn stored(node: &RedisServer, key: &str) -> (Option<String>, i64) {
    let mut conn = node.conn();
    let value: Option<String> = redis::cmd("GET").arg(key).query(&mut conn).unwrap();
    let pttl: i64 = redis::cmd("PTTL").arg(key).query(&mut conn).unwrap();
    (value, pttl)
}

/// `text` with its field `index` (0: the version) replaced by `field`.
fn with_field(text: &str, index: usize, field: &str) -> String {
    let mut fields: Vec<&str> = text.split(':').collect();
    fields[index] = field;
    fields.join(":")
}

/// A fenced lock detached in one client is adopted from the ticket's text by another:
/// same token on the nodes, same fencing token, extended and released by the adopter, and
/// nothing left behind. The detaching guard's signal says why it lets go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ticket_moves_a_held_lock_to_another_client() {
    // Durable nodes: fencing needs them with restart quarantine off.
    let durable = ServerOptions {
        appendonly: true,
        ..ServerOptions::default()
    };
    let cluster = Cluster::start_with(3, durable);
    let (dispatcher, worker) = (client(&cluster.urls()), client(&cluster.urls()));
    let resource = unique("ticket");
    let guard = dispatcher.lock(&resource, TTL).fenced().await.unwrap();
    let (guard, fence) = guard.into_parts();
    let (token, signal) = (guard.token().to_owned(), guard.lost_signal());
    // A context of the guard keeps its lease alive past the detach.
    let context = guard.context();
    // Logs of the guard and its context show the token's first digits, never the whole
    // value a forged ticket would need.
    for shown in [format!("{guard:?}"), format!("{context:?}")] {
        assert!(!shown.contains(&token[..32]), "{shown}");
        assert!(shown.contains(&token[..8]), "{shown}");
    }
    let text = guard.detach().to_text();
    assert_eq!(signal.lost().await, LostReason::Detached);
    // The dispatcher's shutdown leaves a detached lock alone.
    assert_eq!(dispatcher.shutdown().await, 0);
    drop(context);
    let status = worker.status(&resource).await.unwrap();
    assert_eq!(
        status.verdict,
        Verdict::Held {
            token: token.clone()
        }
    );

    let ticket = LockTicket::parse(&text).unwrap();
    assert_eq!(ticket.resource(), resource);
    assert_eq!(ticket.fencing_token(), Some(fence));
    assert!(!format!("{ticket:?}").contains(&token[..32]));
    let adopted = worker.adopt(&ticket).await.unwrap();
    assert_eq!(adopted.token(), token);
    assert!(adopted.validity() > TTL / 2, "{:?}", adopted.validity());
    assert!(adopted.extend(TTL * 2).await.unwrap() > TTL);
    // The extension answered on a majority; the third node's renewal lands within the node
    // timeout. A node the first SET missed holds no copy, and gets none.
    let extended = |(value, pttl): &(Option<String>, i64)| {
        value.as_deref() == Some(token.as_str()) && *pttl > TTL.as_millis() as i64
    };
    let settled = tokio::time::Instant::now() + NODE_TIMEOUT * 2;
    while tokio::time::Instant::now() < settled
        && !(cluster.nodes.iter()).all(|n| extended(&stored(n, &resource)))
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let copies: Vec<_> = cluster.nodes.iter().map(|n| stored(n, &resource)).collect();
    assert!(
        copies.iter().filter(|c| extended(c)).count() >= 2,
        "{copies:?}"
    );
    for copy in &copies {
        assert!(extended(copy) || *copy == (None, -2), "{copies:?}");
    }
    adopted.release().await.unwrap();
    let status = worker.status(&resource).await.unwrap();
    assert_eq!(status.verdict, Verdict::Free);
    // Only the fencing counter stays (it never expires, so tokens never go back).
    let stray: Vec<_> = (cluster.keys_everywhere(&format!("*{resource}")).into_iter())
        .filter(|(_, key)| *key != format!("quorum-lock:fence:{resource}"))
        .collect();
    assert!(stray.is_empty(), "{stray:?}");
}

/// An adopted lock lives as any other: auto-extended past its TTL, it stays held, and
/// another client cannot take it meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_adopted_lock_is_auto_extended() {
    let cluster = Cluster::start(3);
    let (first, second) = (client(&cluster.urls()), client(&cluster.urls()));
    let resource = unique("ticket-extend");
    let ttl = Duration::from_millis(600);
    let ticket = first.lock(&resource, ttl).await.unwrap().detach();
    let mut adopted = second.adopt(&ticket).await.unwrap();
    adopted.auto_extend(AutoExtend::default());
    let until = tokio::time::Instant::now() + ttl * 3;
    while tokio::time::Instant::now() < until {
        assert!(first.try_lock(&resource, ttl).await.unwrap().is_none());
        tokio::time::sleep(ttl / 4).await;
    }
    assert!(adopted.is_valid());
    adopted.release().await.unwrap();
}

/// Refused tickets change nothing: a forged token, a lock another client took over after
/// the ticket's lock expired (its text claiming a later end, as a fast clock would), and a
/// ticket whose validity has ended (nothing is even sent). The holder's value and TTL
/// stay as they were: no extension, no release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_forged_and_taken_over_tickets_are_refused() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster.urls());
    let resource = unique("ticket-refused");
    let short = Duration::from_secs(1);
    let text = redlock
        .lock(&resource, short)
        .await
        .unwrap()
        .detach()
        .to_text();
    let ticket = LockTicket::parse(&text).unwrap();
    // Expired on the nodes, then taken by another holder for a long TTL.
    let taker = client(&cluster.urls());
    let start = tokio::time::Instant::now();
    let holder = loop {
        if let Some(guard) = taker.try_lock(&resource, TTL * 6).await.unwrap() {
            break guard;
        }
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "the ticket's lock expires"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // A majority answered; a SET still on its way to the third node lands within the node
    // timeout (or the node has no copy of this holder).
    let settled = tokio::time::Instant::now() + NODE_TIMEOUT * 2;
    while tokio::time::Instant::now() < settled
        && (cluster.nodes.iter()).any(|n| stored(n, &resource).1 <= 0)
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let before: Vec<_> = cluster.nodes.iter().map(|n| stored(n, &resource)).collect();

    let later = (SystemTime::now() + Duration::from_secs(60))
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_millis()
        .to_string();
    let taken_over = LockTicket::parse(&with_field(&text, 2, &later)).unwrap();
    let forged_token = with_field(&with_field(&text, 2, &later), 5, "0123456789abcdef");
    let forged = LockTicket::parse(&forged_token).unwrap();
    for (what, ticket) in [
        ("taken over", taken_over),
        ("forged", forged),
        ("ended", ticket),
    ] {
        let err = redlock.adopt(&ticket).await.unwrap_err();
        assert!(matches!(err, Error::NotHeld { .. }), "{what}: {err:?}");
    }
    // A validity end and a TTL at the edge of what the text holds: refused, never a panic.
    let far = u64::MAX.to_string();
    let extreme = LockTicket::parse(&with_field(&with_field(&forged_token, 2, &far), 3, &far));
    let err = redlock.adopt(&extreme.unwrap()).await.unwrap_err();
    assert!(
        matches!(err, Error::NotHeld { .. } | Error::Config(_)),
        "{err:?}"
    );
    // The holder needs a majority only: a node its SET missed has no copy (-2) and must
    // get none; every copy it has keeps running down.
    let copies = before.iter().filter(|(_, pttl)| *pttl > 0).count();
    assert!(copies >= 2, "the holder's copies: {before:?}");
    for (node, (value, pttl)) in cluster.nodes.iter().zip(before) {
        let (now_value, now_pttl) = stored(node, &resource);
        assert_eq!(now_value, value, "the holder's value");
        match pttl > 0 {
            true => assert!(
                now_pttl <= pttl && now_pttl > 0,
                "not extended: {now_pttl} > {pttl}"
            ),
            false => assert_eq!(now_pttl, -2, "no copy written"),
        }
    }
    assert!(holder.is_valid());
    holder.release().await.unwrap();
}

/// A semaphore's permit travels as a ticket too: adopted, it still counts against the
/// permits, and its release frees the slot for another holder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_ticket_keeps_its_slot() {
    let cluster = Cluster::start(3);
    let (dispatcher, worker) = (client(&cluster.urls()), client(&cluster.urls()));
    let name = unique("ticket-permits");
    let permits = dispatcher.semaphore(&name, 1).unwrap();
    let ticket = permits.acquire(TTL).await.unwrap().into_guard().detach();
    let text = ticket.to_text();
    assert!(text.starts_with("qlt1:p1:"), "{}", &text[..8]);
    let adopted = worker
        .adopt(&LockTicket::parse(&text).unwrap())
        .await
        .unwrap();
    let again = worker.semaphore(&name, 1).unwrap();
    assert!(
        again.try_acquire(TTL).await.unwrap().is_none(),
        "the one permit is held"
    );
    adopted.release().await.unwrap();
    let permit = again
        .try_acquire(TTL)
        .await
        .unwrap()
        .expect("the permit is free");
    permit.release().await.unwrap();
}

/// A reader of a read-write lock travels as a ticket: adopted, it still keeps writers out,
/// and its release lets one in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_ticket_keeps_writers_out() {
    let cluster = Cluster::start(3);
    let (dispatcher, worker) = (client(&cluster.urls()), client(&cluster.urls()));
    let name = unique("ticket-reader");
    let reading = dispatcher.rwlock(&name).unwrap().read(TTL).await.unwrap();
    let text = reading.into_guard().detach().to_text();
    assert!(text.starts_with("qlt1:r:"), "{}", &text[..7]);
    let adopted = worker
        .adopt(&LockTicket::parse(&text).unwrap())
        .await
        .unwrap();
    let schema = worker.rwlock(&name).unwrap();
    assert!(
        schema.try_write(TTL).await.unwrap().is_none(),
        "a reader holds"
    );
    adopted.release().await.unwrap();
    let writing = schema
        .try_write(TTL)
        .await
        .unwrap()
        .expect("no reader left");
    writing.release().await.unwrap();
}
