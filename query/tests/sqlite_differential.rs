//! The seed's own SQL on the same rows in bundled SQLite and in laneledger must agree (SPEC 3).
//!
//! SQLite gets seed 000's `CREATE TABLE job_attempt`, index and `CREATE VIEW job_rollup` verbatim;
//! the rows are read back out of the ledger, so both engines see exactly what was accepted.

mod common;

use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Float64Type, Int64Type, TimestampMicrosecondType, UInt64Type};
use laneledger_query::Session;
use laneledger_query::derived::views::{
    JOB_WEEK_VIEW, SEED_JOB_ROLLUP_VIEW, SEED_Q1_TOKENS_PER_ARTIFACT, SEED_Q2_DUPLICATES, WEEK_ROLLUP_VIEW,
};
use laneledger_store::Ledger;
use laneledger_store::drill::Policy;

/// Seed 000's DDL, verbatim.
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

CREATE INDEX idx_artifact ON job_attempt(artifact_id);";

fn sqlite_of(ledger: &Ledger) -> rusqlite::Connection {
    let conn = rusqlite::Connection::open_in_memory().unwrap();
    conn.execute_batch(SEED_DDL).unwrap();
    conn.execute_batch(SEED_JOB_ROLLUP_VIEW).unwrap();
    let tx = conn.unchecked_transaction().unwrap();
    {
        let mut ins = tx
            .prepare(
                "INSERT INTO job_attempt (job_id, idem_key, attempt_no, lane, started_at, ended_at, outcome,
                 tokens_in, tokens_out, artifact_id) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
            )
            .unwrap();
        ledger
            .for_each_attempt(|s| {
                let a = &s.attempt;
                let ts = laneledger_store::format_timestamp;
                ins.execute(rusqlite::params![
                    a.job_id,
                    a.idem_key,
                    a.attempt_no,
                    a.lane.as_str(),
                    ts(a.started_at),
                    a.ended_at.map(ts),
                    a.outcome.map(|o| o.as_str()),
                    a.tokens_in.unwrap_or(0) as i64,
                    a.tokens_out.unwrap_or(0) as i64,
                    a.artifact_id,
                ])
                .unwrap();
            })
            .unwrap();
    }
    tx.commit().unwrap();
    conn
}

/// A value both engines print the same way.
fn cell_df(col: &dyn Array, row: usize) -> String {
    if col.is_null(row) {
        return "NULL".into();
    }
    match col.data_type() {
        DataType::Int64 => col.as_primitive::<Int64Type>().value(row).to_string(),
        DataType::UInt64 => col.as_primitive::<UInt64Type>().value(row).to_string(),
        DataType::Float64 => format!("{:?}", col.as_primitive::<Float64Type>().value(row)),
        DataType::Utf8 => col.as_string::<i32>().value(row).to_string(),
        DataType::Utf8View => col.as_string_view().value(row).to_string(),
        DataType::Timestamp(_, _) => col.as_primitive::<TimestampMicrosecondType>().value(row).to_string(),
        other => panic!("unexpected type {other}"),
    }
}

fn rows_df(batches: &[RecordBatch]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for b in batches {
        for r in 0..b.num_rows() {
            out.push(b.columns().iter().map(|c| cell_df(c.as_ref(), r)).collect());
        }
    }
    out
}

fn rows_sqlite(conn: &rusqlite::Connection, sql: &str) -> Vec<Vec<String>> {
    let mut stmt = conn.prepare(sql).unwrap();
    let n = stmt.column_count();
    stmt.query_map([], |row| {
        Ok((0..n)
            .map(|i| match row.get_ref(i).unwrap() {
                rusqlite::types::ValueRef::Null => "NULL".to_string(),
                rusqlite::types::ValueRef::Integer(v) => v.to_string(),
                rusqlite::types::ValueRef::Real(v) => format!("{v:?}"),
                rusqlite::types::ValueRef::Text(t) => String::from_utf8_lossy(t).into_owned(),
                rusqlite::types::ValueRef::Blob(_) => "BLOB".to_string(),
            })
            .collect())
    })
    .unwrap()
    .map(Result::unwrap)
    .collect()
}

/// A plain DataFusion context over the same attempts, with SQLite's `SUM` and the seed's
/// `CREATE VIEW job_rollup` text run verbatim: no materialized `job_rollup`, no `idem_artifacts`
/// rewrite. laneledger's answers must equal these too. `job_week` and `week_rollup` are created
/// from their SQL text as well, for [`assert_weeks_match_their_sql`].
async fn seed_text_context(ledger: &Ledger) -> datafusion::prelude::SessionContext {
    let ctx = datafusion::prelude::SessionContext::new();
    ctx.register_udaf(laneledger_query::sqlite_sum());
    let batches = laneledger_query::tables::job_attempt::scan(ledger).unwrap();
    let table =
        datafusion::datasource::MemTable::try_new(laneledger_query::tables::job_attempt::schema(), vec![batches])
            .unwrap();
    ctx.register_table("job_attempt", std::sync::Arc::new(table)).unwrap();
    for view in [SEED_JOB_ROLLUP_VIEW, JOB_WEEK_VIEW, WEEK_ROLLUP_VIEW] {
        ctx.sql(view).await.unwrap().collect().await.unwrap();
    }
    ctx
}

/// `job_week` and `week_rollup`, materialized in one pass each, equal DataFusion running their
/// SQL text (SQLite has no `date_trunc('week')` or ISO week format, so it is left out).
async fn assert_weeks_match_their_sql(session: &Session, plain: &datafusion::prelude::SessionContext) {
    for sql in [
        "SELECT * FROM job_week",
        "SELECT * FROM week_rollup",
        "SELECT * FROM weekly_metrics",
    ] {
        let mut ours = rows_df(&session.query(sql).await.unwrap().batches);
        // weekly_metrics is week_rollup while no sweep has run.
        let text = sql.replace("weekly_metrics", "week_rollup");
        let mut theirs = rows_df(&plain.sql(&text).await.unwrap().collect().await.unwrap());
        ours.sort();
        theirs.sort();
        assert!(!ours.is_empty(), "{sql}");
        assert_eq!(ours, theirs, "{sql}: materialized versus its SQL text in DataFusion");
    }
}

/// Runs each query in both engines and asserts identical rows (sorted: SQL sets have no order),
/// and the same rows from DataFusion running the seed's view text ([`seed_text_context`]).
/// Returns laneledger's rows of seed query 1 for further checks.
async fn assert_same(ledger: Ledger) -> Vec<Vec<String>> {
    let conn = sqlite_of(&ledger);
    let plain = seed_text_context(&ledger).await;
    let session = Session::new(ledger).await.unwrap();
    assert_weeks_match_their_sql(&session, &plain).await;
    let queries = [
        SEED_Q1_TOKENS_PER_ARTIFACT,
        SEED_Q2_DUPLICATES,
        "SELECT * FROM job_rollup",
        "SELECT COUNT(*), SUM(free_attempts), SUM(paid_attempts), SUM(tokens), SUM(artifacts) FROM job_rollup",
    ];
    let mut q1 = Vec::new();
    for (i, sql) in queries.iter().enumerate() {
        let mut ours = rows_df(&session.query(sql).await.unwrap().batches);
        let mut theirs = rows_sqlite(&conn, sql);
        ours.sort();
        theirs.sort();
        assert_eq!(ours.len(), theirs.len(), "row count of {sql}");
        assert_eq!(ours, theirs, "{sql}");
        let mut seed_text = rows_df(&plain.sql(sql).await.unwrap().collect().await.unwrap());
        seed_text.sort();
        assert_eq!(
            ours, seed_text,
            "{sql}: materialized versus the seed's view text in DataFusion"
        );
        if i == 0 {
            q1 = ours;
        }
    }
    q1
}

#[tokio::test]
async fn seed_sql_matches_sqlite_on_the_nopin_drill() {
    let (_d, ledger) = common::ledger_from(&["drill-nopin-2026-W47.ndjson"]);
    let q1 = assert_same(ledger).await;
    // 334,000 tokens over SUM(artifacts) = 321 (300 jobs + 21 duplicates); 5 cross-lane jobs of 300.
    assert_eq!(q1, [["1040.5", "0.017"]]);
}

#[tokio::test]
async fn seed_sql_matches_sqlite_on_the_pin_drill() {
    let (_d, ledger) = common::ledger_from(&["drill-pin-2026-W48.ndjson"]);
    let q1 = assert_same(ledger).await;
    assert_eq!(q1, [["1184.0", "0.147"]]);
}

#[tokio::test]
async fn seed_sql_matches_sqlite_on_the_trace_week() {
    let (_d, ledger) = common::ledger_from(&["trace-code-2023-11-16.ndjson", "trace-conv-2023-11-16.ndjson"]);
    assert_same(ledger).await;
}

#[tokio::test]
async fn seed_sql_matches_sqlite_on_100k_generated_attempts() {
    let (_d, ledger) = common::ledger_from_drill(75_000, Policy::NoPin, 42);
    assert!(
        ledger.attempt_count().unwrap() >= 100_000,
        "{}",
        ledger.attempt_count().unwrap()
    );
    assert_same(ledger).await;
}

/// Issue 6's "still passes at 1 M attempts": 705,000 jobs of the no-pin drill (seed 42, 14 days)
/// give 1,002,223 attempts; both engines must agree on every seed query, `job_rollup`'s 705,000
/// rows included, and q1 is pinned.
///
/// Slow in a debug build: 127 s with the 2-core machine shared (load ~3) and 337 s with it
/// saturated (load ~5); 13 s in release (`cargo test --release --workspace --test
/// sqlite_differential`). Most of the debug time is writing the ledger and running DataFusion
/// unoptimised.
#[tokio::test]
async fn seed_sql_matches_sqlite_on_1m_generated_attempts() {
    let (_d, ledger) = common::ledger_from_drill(705_000, Policy::NoPin, 42);
    assert_eq!(ledger.attempt_count().unwrap(), 1_002_223);
    let q1 = assert_same(ledger).await;
    assert_eq!(q1, [["1090.4", "0.02"]]);
}
