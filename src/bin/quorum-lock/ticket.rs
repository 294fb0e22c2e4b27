//! Lock tickets on the command line: `run --detach` prints one, `run --ticket` runs under
//! the lock it hands on, `release --ticket` releases it. A ticket is a secret (whoever has
//! it may extend and release the lock): it is printed on stdout only, never in a message.

use std::io::BufRead as _;

use quorum_lock::{Error, LockTicket, Redlock};

use crate::{EX_SOFTWARE, EX_UNAVAILABLE, Failure, say};

/// The ticket `arg` gives: its text, or with `-` the first line of stdin.
pub(crate) fn read_ticket(arg: &str) -> Result<LockTicket, Failure> {
    let text = match arg {
        "-" => {
            let mut line = String::new();
            std::io::stdin()
                .lock()
                .read_line(&mut line)
                .map_err(|e| Failure::usage(format!("cannot read the ticket from stdin: {e}")))?;
            line
        }
        text => text.to_owned(),
    };
    LockTicket::parse(&text).map_err(|e| Failure::usage(e.to_string()))
}

/// `run --detach`: prints the ticket, the lock left held; exit 0.
pub(crate) fn print_ticket(ticket: LockTicket) -> u8 {
    say(&ticket.to_text());
    0
}

/// The failure of an adoption: 70 when the ticket's lock is no longer held (it expired,
/// was taken over or released, or the ticket was forged), 69 when too few nodes answered
/// in time (the ticket may still be good), 64 otherwise.
pub(crate) fn adopt_failure(err: &Error) -> Failure {
    let report = err.report().map(|r| format!(": {r}")).unwrap_or_default();
    match err {
        Error::NotHeld { .. } => Failure::new(
            EX_SOFTWARE,
            format!(
                "the ticket's lock is no longer held (it expired, was taken over or released){report}"
            ),
        ),
        Error::Unavailable { .. } | Error::ValiditySpent { .. } => Failure::new(
            EX_UNAVAILABLE,
            format!("could not confirm the ticket's lock on a majority in time: {err}{report}"),
        ),
        _ => Failure::from_error(err),
    }
}

/// `release --ticket`: adopts the ticket's lock, then releases it on every node.
pub(crate) async fn release_by_ticket(
    redlock: &Redlock,
    ticket: &LockTicket,
) -> Result<u8, Failure> {
    let _ = redlock.connect().await;
    let guard = redlock.adopt(ticket).await.map_err(|e| adopt_failure(&e))?;
    let report = guard.release().await.map_err(|e| adopt_failure(&e))?;
    say(&format!("{}: released: {report}", ticket.resource()));
    Ok(0)
}
