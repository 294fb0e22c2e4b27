//! Two holders of one lock, the first paused past its validity, and a SQLite row that
//! takes only the current holder's write: `cargo run -p quorum-lock-fenced-sqlite`.
//!
//! Starts three `redis-server` nodes and a SQLite file in a temporary directory, and removes
//! them when it ends, also on SIGINT, SIGTERM or SIGHUP.

use std::process::ExitCode;
use std::time::Duration;

use tokio::signal::unix::{SignalKind, signal};

use quorum_lock_fenced_sqlite::{Ledger, Nodes, Pattern, client, fencing_token, until_not_held_by};

const RESOURCE: &str = "fenced-sqlite:account-7";
const ROW: &str = "account-7";

async fn run() -> Result<(), String> {
    let nodes = Nodes::start(3)?;
    let redlock = client(&nodes.urls())?;
    let path = nodes.dir().join("ledger.sqlite3");
    let sql = |e: rusqlite::Error| e.to_string();
    let (a_db, b_db) = (
        Ledger::open(&path).map_err(sql)?,
        Ledger::open(&path).map_err(sql)?,
    );
    a_db.create(ROW).map_err(sql)?;
    println!("three lock nodes up; SQLite file {}", path.display());
    println!("(fresh nodes vote after about one TTL: restart quarantine)");

    let lock = |ttl| {
        redlock
            .lock(RESOURCE, ttl)
            .fencing()
            .wait(Duration::from_secs(30))
    };
    let a = lock(Duration::from_millis(500))
        .await
        .map_err(|e| e.to_string())?;
    let a_token = fencing_token(&a)?;
    let a_seen = a_db.read(Pattern::ClaimOnRead, ROW, a_token).map_err(sql)?;
    println!(
        "A holds the lock with token {a_token}, claims the row and reads {}",
        shown(a_seen)
    );

    println!("A pauses (a GC pause, a stalled VM) until its lock has expired ...");
    until_not_held_by(&redlock, RESOURCE, a.token(), Duration::from_secs(30)).await?;

    let b = lock(Duration::from_secs(5))
        .await
        .map_err(|e| e.to_string())?;
    let b_token = fencing_token(&b)?;
    let b_seen = b_db.read(Pattern::ClaimOnRead, ROW, b_token).map_err(sql)?;
    println!(
        "B holds the lock with token {b_token}, claims the row and reads {}",
        shown(b_seen)
    );
    let b_value = b_seen.ok_or("B could not claim the row")? + 1;
    let b_wrote = b_db
        .write(Pattern::ClaimOnRead, ROW, b_token, b_value)
        .map_err(sql)?;
    println!("B writes {b_value} WHERE fence = {b_token}: accepted = {b_wrote}");

    let a_value = a_seen.ok_or("A could not claim the row")? + 1;
    let a_wrote = a_db
        .write(Pattern::ClaimOnRead, ROW, a_token, a_value)
        .map_err(sql)?;
    println!("A resumes and writes {a_value} WHERE fence = {a_token}: accepted = {a_wrote}");

    let (value, fence) = a_db.peek(ROW).map_err(sql)?;
    println!("the row: value {value}, fence {fence} (B's increment, and only B's, landed)");
    let _ = a.release().await; // expired already: nothing of A's is left to remove
    b.release().await.map_err(|e| e.to_string())?;
    if a_wrote || !b_wrote || value != 1 {
        return Err("unexpected outcome: see above".into());
    }
    Ok(())
}

/// A claim's result as a person reads it.
fn shown(read: Option<i64>) -> String {
    read.map_or("nothing (a newer holder claimed the row)".into(), |v| {
        v.to_string()
    })
}

#[tokio::main]
async fn main() -> ExitCode {
    let (Ok(mut term), Ok(mut hup)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::hangup()),
    ) else {
        eprintln!("fenced-sqlite: cannot install signal handlers");
        return ExitCode::FAILURE;
    };
    // On a signal `run` is dropped, and with it the nodes and their directory.
    tokio::select! {
        result = run() => match result {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("fenced-sqlite: {e}");
                ExitCode::FAILURE
            }
        },
        _ = tokio::signal::ctrl_c() => ExitCode::from(130),
        _ = term.recv() => ExitCode::from(143),
        _ = hup.recv() => ExitCode::from(129),
    }
}
