//! `laneledger ingest --format sqlite`: a team's seed 000 ledger, built by Python's `sqlite3` with
//! the seed's DDL verbatim (table, index, `job_rollup` view), moves in one command, and the seed's
//! two queries (q1, q2) then answer through `laneledger sql` exactly as SQLite answers on that file.

use std::path::Path;
use std::process::{Command, Output};

/// Seed 000's DDL, verbatim: the table, its index and the `job_rollup` view.
const SEED_DDL: &str = "CREATE TABLE job_attempt (
  job_id      TEXT NOT NULL,
  idem_key    TEXT NOT NULL,
  attempt_no  INTEGER NOT NULL,
  lane        TEXT NOT NULL CHECK (lane IN ('free','paid')),
  started_at  TEXT NOT NULL,
  ended_at    TEXT,
  outcome     TEXT,   -- ok | retryable | ambiguous | permanent
  tokens_in   INTEGER DEFAULT 0,
  tokens_out  INTEGER DEFAULT 0,
  artifact_id TEXT,
  PRIMARY KEY (job_id, attempt_no)
);

CREATE INDEX idx_artifact ON job_attempt(artifact_id);

CREATE VIEW job_rollup AS
SELECT job_id,
       MAX(idem_key)                   AS idem_key,
       SUM(lane = 'free')              AS free_attempts,
       SUM(lane = 'paid')              AS paid_attempts,
       SUM(tokens_in + tokens_out)     AS tokens,
       COUNT(DISTINCT artifact_id)     AS artifacts
FROM job_attempt
GROUP BY job_id;";

/// A week of the seed's two lanes as a team would have logged it: timestamps as SQLite's own
/// `datetime()` writes them (UTC, no offset), one with a fraction, one job in RFC 3339; a retry
/// on free, an ambiguous free try whose late answer duplicates the paid one, a client retry
/// reusing an idempotency key under a new job, tokens left to the column DEFAULT and set NULL,
/// an attempt still in flight.
const ROWS: &str = "
INSERT INTO job_attempt VALUES ('job-001', 'idem-001', 1, 'free', '2026-11-23 09:00:00', '2026-11-23 09:00:04', 'retryable', 800, 0, NULL);
INSERT INTO job_attempt VALUES ('job-001', 'idem-001', 2, 'free', '2026-11-23 09:00:10', '2026-11-23 09:00:41', 'ok', 800, 412, 'art-001');
INSERT INTO job_attempt VALUES ('job-002', 'idem-002', 1, 'free', '2026-11-23 09:05:00', '2026-11-23 09:05:30', 'ambiguous', 800, 350, 'art-002a');
INSERT INTO job_attempt VALUES ('job-002', 'idem-002', 2, 'paid', '2026-11-23 09:05:31', '2026-11-23 09:05:52.250', 'ok', 1200, 505, 'art-002b');
INSERT INTO job_attempt VALUES ('job-003', 'idem-003', 1, 'paid', '2026-11-23T10:00:00Z', '2026-11-23T10:00:21Z', 'ok', 1200, 480, 'art-003');
INSERT INTO job_attempt (job_id, idem_key, attempt_no, lane, started_at, ended_at, outcome)
  VALUES ('job-004', 'idem-004', 1, 'free', '2026-11-24 08:00:00', '2026-11-24 08:00:02', 'permanent');
INSERT INTO job_attempt VALUES ('job-004', 'idem-004', 2, 'paid', '2026-11-24 08:00:05', '2026-11-24 08:00:30', 'ok', 1200, 517, 'art-004');
INSERT INTO job_attempt VALUES ('job-005', 'idem-002', 1, 'free', '2026-11-24 09:00:00', '2026-11-24 09:00:28', 'ok', 800, 398, 'art-002c');
INSERT INTO job_attempt VALUES ('job-006', 'idem-006', 1, 'free', '2026-11-25 12:00:00', NULL, NULL, NULL, NULL, NULL);
INSERT INTO job_attempt VALUES ('job-007', 'idem-007', 1, 'paid', '2026-11-25 13:00:00', '2026-11-25 13:00:19', 'ok', 1200, 466, 'art-007');
";

/// Builds `db` with Python's sqlite3: the DDL, then the rows.
const BUILD: &str = r#"
import sqlite3, sys
con = sqlite3.connect(sys.argv[1])
con.executescript(sys.argv[2])
con.executescript(sys.argv[3])
con.commit()
con.close()
"#;

/// Runs one query with Python's sqlite3 and prints its rows as a JSON array of arrays of text.
const QUERY: &str = r#"
import json, sqlite3, sys
con = sqlite3.connect(sys.argv[1])
rows = con.execute(sys.argv[2]).fetchall()
print(json.dumps([[None if v is None else str(v) for v in r] for r in rows]))
"#;

fn python(args: &[&str]) -> String {
    let o = match Command::new("python3").args(args).output() {
        Ok(o) => o,
        Err(e) => panic!("python3 (with its standard sqlite3 module) is needed to build the seed's ledger: {e}"),
    };
    assert!(o.status.success(), "python3: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap()
}

fn laneledger(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_laneledger"))
        .args(args)
        .output()
        .unwrap()
}

/// `query`'s rows as SQLite gives them on `db`.
fn sqlite_rows(db: &Path, query: &str) -> Vec<Vec<Option<String>>> {
    let out = python(&["-c", QUERY, db.to_str().unwrap(), query]);
    serde_json::from_str(&out).unwrap()
}

/// `query`'s rows through `laneledger sql --format json`, each value as text (`null` is None).
fn ledger_rows(ledger: &Path, query: &str) -> Vec<Vec<Option<String>>> {
    let o = laneledger(&["sql", "--db", ledger.to_str().unwrap(), "--format", "json", query]);
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    let rows: Vec<serde_json::Map<String, serde_json::Value>> = serde_json::from_slice(&o.stdout).unwrap();
    rows.into_iter()
        .map(|row| {
            row.into_iter()
                .map(|(_, v)| match v {
                    serde_json::Value::Null => None,
                    serde_json::Value::String(s) => Some(s),
                    other => Some(other.to_string()),
                })
                .collect()
        })
        .collect()
}

/// Numbers compared as numbers (SQLite prints `1184.0`, a float column may print `1184`), other
/// text as it is.
fn same_value(a: &Option<String>, b: &Option<String>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => match (a.parse::<f64>(), b.parse::<f64>()) {
            (Ok(x), Ok(y)) => x == y,
            _ => a == b,
        },
        (a, b) => a == b,
    }
}

fn assert_same_rows(what: &str, sqlite: &[Vec<Option<String>>], ours: &[Vec<Option<String>>]) {
    let same = sqlite.len() == ours.len()
        && sqlite
            .iter()
            .zip(ours)
            .all(|(s, o)| s.len() == o.len() && s.iter().zip(o).all(|(a, b)| same_value(a, b)));
    assert!(same, "{what}: SQLite gives {sqlite:?}, laneledger {ours:?}");
}

#[test]
fn the_seeds_sqlite_ledger_moves_in_one_command_and_answers_the_seeds_queries_as_sqlite_did() {
    let dir = tempfile::tempdir().unwrap();
    let seed_db = dir.path().join("drill.db");
    let ledger = dir.path().join("ledger.redb");
    python(&["-c", BUILD, seed_db.to_str().unwrap(), SEED_DDL, ROWS]);

    let o = laneledger(&[
        "ingest",
        "--db",
        ledger.to_str().unwrap(),
        "--format",
        "sqlite",
        seed_db.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "accepted 10, completed 0, duplicate deliveries 0, conflicts 0, rejected 0\n"
    );

    // The seed's two queries, verbatim, on both engines.
    for (what, q) in [
        ("q1", laneledger_query::derived::views::SEED_Q1_TOKENS_PER_ARTIFACT),
        ("q2", laneledger_query::derived::views::SEED_Q2_DUPLICATES),
    ] {
        let sqlite = sqlite_rows(&seed_db, q);
        assert!(!sqlite.is_empty(), "{what}: SQLite gives no row");
        assert_same_rows(what, &sqlite, &ledger_rows(&ledger, q));
    }
    // q2 is not empty by accident: idem-002 carries three artifacts across two jobs.
    assert_eq!(
        sqlite_rows(&seed_db, laneledger_query::derived::views::SEED_Q2_DUPLICATES),
        [[Some("idem-002".to_string()), Some("3".to_string())]]
    );

    // Every row, field by field (a NULL token count reads 0 in laneledger, as an absent one does);
    // SQLite's naive timestamps are UTC (strftime reads them so).
    let rows = "SELECT job_id, idem_key, attempt_no, lane, outcome, tokens_in, tokens_out, artifact_id
                FROM job_attempt ORDER BY job_id, attempt_no";
    let sqlite = "SELECT job_id, idem_key, attempt_no, lane, outcome, COALESCE(tokens_in, 0), COALESCE(tokens_out, 0),
                  artifact_id FROM job_attempt ORDER BY job_id, attempt_no";
    assert_same_rows("rows", &sqlite_rows(&seed_db, sqlite), &ledger_rows(&ledger, rows));
    let times = "SELECT CAST(strftime('%s', started_at) AS INTEGER) * 1000 + CAST(substr(strftime('%f', started_at), 4) AS INTEGER),
                        CAST(strftime('%s', ended_at) AS INTEGER) * 1000 + CAST(substr(strftime('%f', ended_at), 4) AS INTEGER)
                 FROM job_attempt ORDER BY job_id, attempt_no";
    let ours = "SELECT CAST(started_at AS BIGINT) / 1000, CAST(ended_at AS BIGINT) / 1000
                FROM job_attempt ORDER BY job_id, attempt_no";
    assert_same_rows(
        "times (ms since the epoch)",
        &sqlite_rows(&seed_db, times),
        &ledger_rows(&ledger, ours),
    );

    // Moving again is all duplicate deliveries: no conflict, no new row.
    let o = laneledger(&[
        "ingest",
        "--db",
        ledger.to_str().unwrap(),
        "--format",
        "sqlite",
        "--table",
        "job_attempt",
        seed_db.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "accepted 0, completed 0, duplicate deliveries 10, conflicts 0, rejected 0\n"
    );
    assert_eq!(
        ledger_rows(&ledger, "SELECT COUNT(*) FROM job_attempt"),
        [[Some("10".to_string())]]
    );
}

#[test]
fn a_bad_row_is_rejected_by_rowid_and_a_missing_table_or_file_is_an_error_before_any_write() {
    let dir = tempfile::tempdir().unwrap();
    let seed_db = dir.path().join("drill.db");
    let ledger = dir.path().join("ledger.redb");
    // SQLite's TEXT affinity keeps a lane the CHECK would refuse only without the CHECK: a copy
    // of the table without constraints, as an older ledger might have it, with one bad row.
    let ddl = "CREATE TABLE attempts_old (job_id TEXT, idem_key TEXT, attempt_no INTEGER, lane TEXT,
               started_at TEXT, ended_at TEXT, outcome TEXT, tokens_in INTEGER, tokens_out INTEGER,
               artifact_id TEXT, worker TEXT);";
    let rows = "INSERT INTO attempts_old VALUES ('j1', 'k1', 1, 'free', '2026-11-23 09:00:00', NULL, 'ok', 10, 5, 'a1', 'w7');
                INSERT INTO attempts_old VALUES ('j2', 'k2', 1, 'cheap', '2026-11-23 09:01:00', NULL, 'ok', 10, 5, NULL, NULL);";
    python(&["-c", BUILD, seed_db.to_str().unwrap(), ddl, rows]);
    let db = seed_db.to_str().unwrap();
    let l = ledger.to_str().unwrap();

    let o = laneledger(&["ingest", "--db", l, "--format", "sqlite", db]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&o.stderr).trim_end(),
        format!("laneledger: {db}: no table \"job_attempt\" (tables: attempts_old); name one with --table")
    );
    let o = laneledger(&["ingest", "--db", l, "--format", "sqlite", "--table", "attempts_old", db]);
    assert_eq!(o.status.code(), Some(3), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "accepted 1, completed 0, duplicate deliveries 0, conflicts 0, rejected 1\n"
    );
    assert_eq!(
        String::from_utf8_lossy(&o.stderr),
        format!("{db}:2: lane: \"cheap\" is not free or paid\n")
    );
    // The extra column went to attrs; the reject keeps the row's text.
    assert_eq!(
        ledger_rows(&ledger, "SELECT job_id, attrs FROM job_attempt"),
        [[Some("j1".to_string()), Some(r#"{"worker":"w7"}"#.to_string())]]
    );
    assert_eq!(
        ledger_rows(&ledger, "SELECT line, field, raw FROM ingest_reject"),
        [[
            Some("2".to_string()),
            Some("lane".to_string()),
            Some(
                r#"{"job_id":"j2","idem_key":"k2","attempt_no":1,"lane":"cheap","started_at":"2026-11-23 09:01:00","outcome":"ok","tokens_in":10,"tokens_out":5}"#
                    .to_string()
            )
        ]]
    );

    // Flags that do not go together are usage errors (exit 2).
    let o = laneledger(&["ingest", "--db", l, "--format", "sqlite", "--kind", "decisions", db]);
    assert_eq!(o.status.code(), Some(2));
    let o = laneledger(&["ingest", "--db", l, "--table", "attempts_old", db]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--table names the table of a SQLite database"));
    let missing = dir.path().join("nope.db");
    let o = laneledger(&["ingest", "--db", l, "--format", "sqlite", missing.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
}
