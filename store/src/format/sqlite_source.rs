//! Reading attempts out of a SQLite database that holds seed 000's `job_attempt` table (its DDL
//! verbatim: `job_id`, `idem_key`, `attempt_no`, `lane`, `started_at`, `ended_at`, `outcome`,
//! `tokens_in`, `tokens_out`, `artifact_id`), so a team with that ledger moves with one command.
//!
//! Each row becomes one JSON object, column name to value in the table's column order (INTEGER
//! and REAL to a number, TEXT to a string, NULL left out), decoded by the native record rules
//! ([`crate::format::parse::attempt_from_json`]): extra columns go to `attrs`, a bad row becomes a reject
//! naming its rowid. The row's JSON text, as stored, is the record's `raw`.
//!
//! Timestamps: the seed keeps them as TEXT. SQLite's own date functions (`datetime('now')`,
//! `CURRENT_TIMESTAMP`) write UTC without an offset, `2026-11-16 09:00:00`; for this source only,
//! `started_at` and `ended_at` in that form (`YYYY-MM-DD HH:MM[:SS[.fff]]`, a space or a `T`) are
//! read as UTC. Text with `Z` or an offset is read as it is.
//!
//! ```no_run
//! use laneledger_store::{Ledger, DEFAULT_BATCH, try_ingest_framed};
//! use laneledger_store::format::sqlite_source::SqliteSource;
//! let ledger = Ledger::open("laneledger.redb")?;
//! let rows = SqliteSource::open("drill.db".as_ref(), "drill.db", "job_attempt").unwrap();
//! let report = try_ingest_framed(&ledger, "drill.db", rows, DEFAULT_BATCH, |_| {})?;
//! println!("{}", report.counters);
//! # Ok::<(), laneledger_store::Error>(())
//! ```

use std::collections::VecDeque;
use std::path::{Path, PathBuf};

use rusqlite::types::ValueRef;
use rusqlite::{Connection, OpenFlags};

use crate::format::parse::{Framed, attempt_from_json};
use crate::model::record::{Attempt, Reject};
use crate::model::time::now_micros;

/// The table read by default: seed 000's.
pub const DEFAULT_TABLE: &str = "job_attempt";

/// Rows read from SQLite per query; the next page starts after the last rowid read.
const PAGE_ROWS: i64 = 4096;

/// Why a SQLite database cannot be read as a source of attempts.
#[derive(Debug, thiserror::Error)]
pub enum SqliteSourceError {
    /// The file cannot be opened, or is not a SQLite database.
    #[error("{path}: cannot be read as a SQLite database: {error}")]
    Open {
        /// The database file.
        path: PathBuf,
        /// SQLite's message.
        error: rusqlite::Error,
    },
    /// The path is missing or is not a regular file.
    #[error("{path}: {error}")]
    Missing {
        /// The path given.
        path: PathBuf,
        /// Why it cannot be opened.
        error: std::io::Error,
    },
    /// The database has no table (or view) of that name.
    #[error("{path}: no table {table:?} (tables: {}); name one with --table", list(tables))]
    NoTable {
        /// The database file.
        path: PathBuf,
        /// The table asked for.
        table: String,
        /// The tables and views the database has.
        tables: Vec<String>,
    },
}

fn list(tables: &[String]) -> String {
    if tables.is_empty() {
        "none".to_string()
    } else {
        tables.join(", ")
    }
}

/// The rows of one table, in rowid order, as framed attempts: an iterator of
/// `io::Result<Framed<Attempt>>` for [`crate::try_ingest_framed`] (an `Err` is SQLite failing
/// mid-read; a bad row is `Ok(Framed::Reject)`).
///
/// A record's `line` is the row's rowid (its 1-based position for a table without rowid).
pub struct SqliteSource {
    conn: Connection,
    source: String,
    /// `"table"`, quoted for SQL.
    quoted: String,
    columns: Vec<String>,
    /// Whether the table has a rowid (pages by rowid) or not (pages by offset).
    rowid: bool,
    /// The last rowid read, or the rows read so far for a table without rowid.
    after: i64,
    page: VecDeque<Framed<Attempt>>,
    done: bool,
}

impl SqliteSource {
    /// Opens `path` read-only and checks that `table` exists; `source` names the input in rejects.
    pub fn open(path: &Path, source: &str, table: &str) -> Result<SqliteSource, SqliteSourceError> {
        let open_error = |error| SqliteSourceError::Open {
            path: path.to_path_buf(),
            error,
        };
        if !path.is_file() {
            // SQLite would report "unable to open database file" without saying why.
            let error = match std::fs::metadata(path) {
                Err(e) => e,
                Ok(_) => std::io::Error::other("not a regular file"),
            };
            return Err(SqliteSourceError::Missing {
                path: path.to_path_buf(),
                error,
            });
        }
        let conn =
            Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX)
                .map_err(open_error)?;
        let tables: Vec<String> = conn
            .prepare("SELECT name FROM sqlite_master WHERE type IN ('table', 'view') ORDER BY name")
            .and_then(|mut s| s.query_map([], |r| r.get::<_, String>(0))?.collect())
            .map_err(open_error)?;
        if !tables.iter().any(|t| t == table) {
            return Err(SqliteSourceError::NoTable {
                path: path.to_path_buf(),
                table: table.to_string(),
                tables,
            });
        }
        let quoted = format!("\"{}\"", table.replace('"', "\"\""));
        let columns: Vec<String> = conn
            .prepare(&format!("SELECT * FROM {quoted} LIMIT 0"))
            .map(|s| s.column_names().map(str::to_string).collect())
            .map_err(open_error)?;
        // A WITHOUT ROWID table (or a view) has no rowid: prepare fails, and pages go by offset.
        let rowid = conn.prepare(&format!("SELECT rowid FROM {quoted} LIMIT 0")).is_ok();
        Ok(SqliteSource {
            conn,
            source: source.to_string(),
            quoted,
            columns,
            rowid,
            after: 0,
            page: VecDeque::new(),
            done: false,
        })
    }

    /// The table's column names, in order.
    pub fn columns(&self) -> &[String] {
        &self.columns
    }

    /// Reads the next page of rows into `self.page`; at the end, sets `done`.
    fn fill(&mut self) -> rusqlite::Result<()> {
        let sql = if self.rowid {
            format!(
                "SELECT rowid, * FROM {} WHERE rowid > ?1 ORDER BY rowid LIMIT ?2",
                self.quoted
            )
        } else {
            format!("SELECT NULL, * FROM {} LIMIT ?2 OFFSET ?1", self.quoted)
        };
        let mut stmt = self.conn.prepare_cached(&sql)?;
        let mut rows = stmt.query(rusqlite::params![self.after, PAGE_ROWS])?;
        let mut n = 0;
        while let Some(row) = rows.next()? {
            n += 1;
            let line = if self.rowid {
                let rowid: i64 = row.get(0)?;
                self.after = rowid;
                u64::try_from(rowid).unwrap_or(0)
            } else {
                self.after += 1;
                self.after as u64
            };
            let mut cells = Vec::with_capacity(self.columns.len());
            for (i, name) in self.columns.iter().enumerate() {
                cells.push((name.as_str(), row.get_ref(i + 1)?));
            }
            self.page.push_back(frame(&self.source, line, &cells));
        }
        if n < PAGE_ROWS {
            self.done = true;
        }
        Ok(())
    }
}

impl Iterator for SqliteSource {
    type Item = std::io::Result<Framed<Attempt>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.page.is_empty()
            && !self.done
            && let Err(e) = self.fill()
        {
            self.done = true;
            return Some(Err(std::io::Error::other(format!(
                "reading table {}: {e}",
                self.quoted
            ))));
        }
        self.page.pop_front().map(Ok)
    }
}

/// One row as a framed attempt: the row's JSON line (its `raw`), decoded with the native rules
/// after naive-UTC timestamps are given their `Z`.
fn frame(source: &str, line: u64, cells: &[(&str, ValueRef<'_>)]) -> Framed<Attempt> {
    let mut raw = String::from("{");
    let mut decoded = String::from("{");
    let mut bad: Vec<(String, String)> = Vec::new();
    for (name, value) in cells {
        let json = match value {
            ValueRef::Null => continue,
            ValueRef::Integer(i) => serde_json::Value::from(*i),
            ValueRef::Real(x) => match serde_json::Number::from_f64(*x) {
                Some(n) => serde_json::Value::Number(n),
                None => {
                    bad.push((name.to_string(), format!("{x} is not a finite number")));
                    continue;
                }
            },
            ValueRef::Text(bytes) => match std::str::from_utf8(bytes) {
                Ok(s) => serde_json::Value::String(s.to_string()),
                Err(_) => {
                    bad.push((name.to_string(), "not valid UTF-8".to_string()));
                    continue;
                }
            },
            ValueRef::Blob(b) => {
                bad.push((
                    name.to_string(),
                    format!("a BLOB ({} bytes); expected TEXT or a number", b.len()),
                ));
                continue;
            }
        };
        let sep = if raw.len() > 1 { "," } else { "" };
        let key = serde_json::to_string(name).expect("a string serializes");
        raw.push_str(&format!("{sep}{key}:{json}"));
        let as_utc = match (&json, *name) {
            (serde_json::Value::String(s), "started_at" | "ended_at") => naive_utc(s),
            _ => None,
        };
        match as_utc {
            Some(t) => decoded.push_str(&format!("{sep}{key}:{}", serde_json::Value::String(t))),
            None => decoded.push_str(&format!("{sep}{key}:{json}")),
        }
    }
    raw.push('}');
    decoded.push('}');
    let reject = |field: Option<String>, reason: String, raw: String| {
        Framed::Reject(Reject {
            source: source.to_string(),
            line,
            field,
            reason,
            raw,
            received_at: now_micros(),
        })
    };
    if !bad.is_empty() {
        let field = bad.iter().map(|(f, _)| f.as_str()).collect::<Vec<_>>().join(", ");
        let reason = bad
            .iter()
            .map(|(f, r)| if bad.len() == 1 { r.clone() } else { format!("{f}: {r}") })
            .collect::<Vec<_>>()
            .join("; ");
        return reject(Some(field), reason, raw);
    }
    match attempt_from_json(&decoded) {
        Ok(record) => Framed::Record { line, raw, record },
        Err((field, reason)) => reject(field, reason, raw),
    }
}

/// `2026-11-16 09:00:00` (SQLite's `datetime()`), `2026-11-16T09:00`, with or without a fraction
/// of a second and with no offset: the same instant in RFC 3339 UTC (`2026-11-16T09:00:00Z`).
/// `None` for any other text (RFC 3339 with an offset is left as it is).
fn naive_utc(s: &str) -> Option<String> {
    let t = s.trim().replacen(' ', "T", 1);
    let parsed = chrono::NaiveDateTime::parse_from_str(&t, "%Y-%m-%dT%H:%M:%S%.f")
        .or_else(|_| chrono::NaiveDateTime::parse_from_str(&t, "%Y-%m-%dT%H:%M"))
        .ok()?;
    Some(parsed.and_utc().to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn naive_timestamps_are_read_as_utc_and_others_are_left_alone() {
        assert_eq!(
            naive_utc("2026-11-16 09:00:00").as_deref(),
            Some("2026-11-16T09:00:00Z")
        );
        assert_eq!(naive_utc("2026-11-16T09:00").as_deref(), Some("2026-11-16T09:00:00Z"));
        assert_eq!(
            naive_utc("2026-11-16 09:00:00.25").as_deref(),
            Some("2026-11-16T09:00:00.250Z")
        );
        assert_eq!(naive_utc("2026-11-16T09:00:00Z"), None);
        assert_eq!(naive_utc("2026-11-16T09:00:00+02:00"), None);
        assert_eq!(naive_utc("yesterday"), None);
    }

    #[test]
    fn a_row_keeps_its_stored_text_as_raw_and_extra_columns_in_attrs() {
        let cells = [
            ("job_id", ValueRef::Text(b"j1")),
            ("idem_key", ValueRef::Text(b"k1")),
            ("attempt_no", ValueRef::Integer(2)),
            ("lane", ValueRef::Text(b"free")),
            ("started_at", ValueRef::Text(b"2026-11-16 09:00:00")),
            ("ended_at", ValueRef::Null),
            ("outcome", ValueRef::Text(b"retryable")),
            ("tokens_in", ValueRef::Integer(800)),
            ("tokens_out", ValueRef::Integer(0)),
            ("worker", ValueRef::Text(b"w7")),
        ];
        let Framed::Record { line, raw, record } = frame("drill.db", 5, &cells) else {
            panic!("rejected");
        };
        assert_eq!(line, 5);
        assert_eq!(
            raw,
            r#"{"job_id":"j1","idem_key":"k1","attempt_no":2,"lane":"free","started_at":"2026-11-16 09:00:00","outcome":"retryable","tokens_in":800,"tokens_out":0,"worker":"w7"}"#
        );
        assert_eq!(
            record.started_at,
            crate::model::time::parse_timestamp("2026-11-16T09:00:00Z").unwrap()
        );
        assert_eq!(record.ended_at, None);
        assert_eq!(record.tokens_in, Some(800));
        assert_eq!(record.attrs.as_deref(), Some(r#"{"worker":"w7"}"#));
    }

    #[test]
    fn a_bad_row_is_a_reject_naming_its_rowid_and_every_unreadable_column() {
        let cells = [
            ("job_id", ValueRef::Blob(b"\x01\x02")),
            ("idem_key", ValueRef::Blob(b"\x03")),
        ];
        let Framed::Reject(r) = frame("drill.db", 9, &cells) else {
            panic!("accepted");
        };
        assert_eq!(
            r.to_string(),
            "drill.db:9: job_id, idem_key: job_id: a BLOB (2 bytes); expected TEXT or a number; idem_key: a BLOB (1 bytes); expected TEXT or a number"
        );
        let cells = [
            ("job_id", ValueRef::Text(b"j1")),
            ("attempt_no", ValueRef::Integer(1)),
            ("lane", ValueRef::Text(b"paid")),
            ("started_at", ValueRef::Text(b"2026-11-16 09:00:00")),
            ("idem_key", ValueRef::Null),
        ];
        let Framed::Reject(r) = frame("drill.db", 3, &cells) else {
            panic!("accepted");
        };
        assert_eq!(r.to_string(), "drill.db:3: idem_key: missing");
        assert_eq!(
            r.raw,
            r#"{"job_id":"j1","attempt_no":1,"lane":"paid","started_at":"2026-11-16 09:00:00"}"#
        );
    }
}
