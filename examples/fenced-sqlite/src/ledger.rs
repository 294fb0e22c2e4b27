//! A table of counters in SQLite, each row with the fencing token of its last claim, and the
//! two ways a lock holder can do a fenced read-modify-write on it.

use std::path::Path;
use std::time::Duration;

use quorum_lock::FencingToken;
use rusqlite::{Connection, OptionalExtension, params};

/// One connection to the SQLite file. Open one per worker: a `Connection` is not `Sync`.
///
/// Every statement is a transaction of its own and finishes before the call returns, so no
/// SQLite lock is ever held across an `.await` of the caller.
#[derive(Debug)]
pub struct Ledger {
    conn: Connection,
}

/// How a holder reads and writes a row under its fencing token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pattern {
    /// Safe. Read: `UPDATE counters SET fence = $t WHERE id = ? AND fence < $t RETURNING
    /// value`, which claims the row for `$t`. Write: `UPDATE counters SET value = ? WHERE
    /// id = ? AND fence = $t`. Once a newer holder has claimed the row, `fence` never equals
    /// an older token again, so the older holder's write matches no row.
    ClaimOnRead,
    /// Unsafe for a read-modify-write, kept to show why. Read: a plain `SELECT`. Write:
    /// `UPDATE counters SET value = ?, fence = $t WHERE id = ? AND fence <= $t`. An old
    /// holder's write that lands after a newer holder read, but before it wrote, is
    /// accepted, and the newer holder's write then overwrites it: one update is lost.
    FenceAtMost,
}

impl Ledger {
    /// Opens (creating if needed) the database at `path`, in WAL mode, with the `counters`
    /// table. Waits up to 5 s for another connection's write to finish.
    ///
    /// # Errors
    ///
    /// Whatever SQLite reports.
    pub fn open(path: &Path) -> rusqlite::Result<Ledger> {
        let conn = Connection::open(path)?;
        conn.busy_timeout(Duration::from_secs(5))?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS counters (
                 id    TEXT PRIMARY KEY,
                 value INTEGER NOT NULL,
                 fence INTEGER NOT NULL DEFAULT 0
             )",
        )?;
        Ok(Ledger { conn })
    }

    /// Creates the row `id` with value 0 and fence 0, unless it exists.
    ///
    /// # Errors
    ///
    /// Whatever SQLite reports.
    pub fn create(&self, id: &str) -> rusqlite::Result<()> {
        self.conn.execute(
            "INSERT INTO counters (id, value, fence) VALUES (?1, 0, 0) ON CONFLICT (id) DO NOTHING",
            params![id],
        )?;
        Ok(())
    }

    /// Reads the row for a read-modify-write under `token`. With
    /// [`Pattern::ClaimOnRead`] this also claims it; `None` means a holder with a larger
    /// token claimed it first (or the row does not exist): the caller must stop.
    ///
    /// # Errors
    ///
    /// Whatever SQLite reports.
    pub fn read(
        &self,
        pattern: Pattern,
        id: &str,
        token: FencingToken,
    ) -> rusqlite::Result<Option<i64>> {
        let read = |sql: &str, params: &[&dyn rusqlite::ToSql]| {
            self.conn
                .query_row(sql, params, |row| row.get(0))
                .optional()
        };
        match pattern {
            Pattern::ClaimOnRead => read(
                "UPDATE counters SET fence = ?2 WHERE id = ?1 AND fence < ?2 RETURNING value",
                params![id, token.as_i64()],
            ),
            Pattern::FenceAtMost => read("SELECT value FROM counters WHERE id = ?1", params![id]),
        }
    }

    /// Writes `value` to the row under `token`; returns whether a row was updated. `false`
    /// (0 rows) means a newer holder has claimed or written the row: the value read
    /// before is stale and the caller must stop.
    ///
    /// # Errors
    ///
    /// Whatever SQLite reports.
    pub fn write(
        &self,
        pattern: Pattern,
        id: &str,
        token: FencingToken,
        value: i64,
    ) -> rusqlite::Result<bool> {
        let sql = match pattern {
            Pattern::ClaimOnRead => "UPDATE counters SET value = ?3 WHERE id = ?1 AND fence = ?2",
            Pattern::FenceAtMost => {
                "UPDATE counters SET value = ?3, fence = ?2 WHERE id = ?1 AND fence <= ?2"
            }
        };
        let rows = self.conn.execute(sql, params![id, token.as_i64(), value])?;
        Ok(rows == 1)
    }

    /// The row's value and fence, read without claiming (for checks and display).
    ///
    /// # Errors
    ///
    /// Whatever SQLite reports, including no such row.
    pub fn peek(&self, id: &str) -> rusqlite::Result<(i64, i64)> {
        self.conn.query_row(
            "SELECT value, fence FROM counters WHERE id = ?1",
            params![id],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
    }
}
