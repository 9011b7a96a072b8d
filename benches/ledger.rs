//! Ingest and seed 000's two rollup queries on N drill jobs, laneledger beside SQLite running the
//! seed's schema on the same file. `harness = false`: run with
//! `cargo bench --bench ledger` (N = 1,000,000 jobs) or `LANELEDGER_BENCH_JOBS=100000 cargo bench --bench ledger`.
//! Prints a Markdown table for BENCHMARKS.md.

use std::io::{BufRead, BufReader, Write};
use std::time::Instant;

use laneledger_query::Session;
use laneledger_query::derived::views::{SEED_JOB_ROLLUP_VIEW, SEED_Q1_TOKENS_PER_ARTIFACT, SEED_Q2_DUPLICATES};
use laneledger_store::drill::{self, DrillConfig, Policy};
use laneledger_store::{DEFAULT_BATCH, InputFormat, Ledger, ingest_reader};

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

fn secs(t: Instant) -> f64 {
    t.elapsed().as_secs_f64()
}

fn main() {
    let jobs: usize = std::env::var("LANELEDGER_BENCH_JOBS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("drill.ndjson");

    // The input: seed 000's no-pin drill (it has duplicates), over 28 days.
    {
        let start = laneledger_store::parse_timestamp("2026-11-02T00:00:00Z").unwrap();
        let cfg = DrillConfig {
            policy: Policy::NoPin,
            seed: 1,
            job_prefix: String::new(),
            ids: laneledger_store::drill::DrillIds::Sequential,
        };
        let attempts = drill::synthetic(&cfg, jobs, start, 28.0);
        let mut w = std::io::BufWriter::new(std::fs::File::create(&input).unwrap());
        for a in &attempts {
            serde_json::to_writer(&mut w, &a.to_json()).unwrap();
            w.write_all(b"\n").unwrap();
        }
    }
    let input_bytes = std::fs::metadata(&input).unwrap().len();

    // laneledger: durable ingest (one fsync'd redb commit per 10,000 records), then the queries.
    let db = dir.path().join("bench.redb");
    let ledger = Ledger::open(&db).unwrap();
    let t = Instant::now();
    let reader = BufReader::with_capacity(1 << 20, std::fs::File::open(&input).unwrap());
    let report = ingest_reader(
        &ledger,
        "drill.ndjson",
        reader,
        InputFormat::Ndjson,
        DEFAULT_BATCH,
        |_| {},
    )
    .unwrap();
    let ll_ingest = secs(t);
    let rows = report.counters.accepted;
    let ll_bytes = std::fs::metadata(&db).unwrap().len();

    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let (ll_q1, ll_q2, q1_rows, q2_rows) = rt.block_on(async {
        let session = Session::new(ledger.clone()).await.unwrap();
        let t = Instant::now();
        let q1 = session.query(SEED_Q1_TOKENS_PER_ARTIFACT).await.unwrap();
        let ll_q1 = secs(t);
        let t = Instant::now();
        let q2 = session.query(SEED_Q2_DUPLICATES).await.unwrap();
        let ll_q2 = secs(t);
        (
            ll_q1,
            ll_q2,
            laneledger_query::format_result(&q1, laneledger_query::OutputFormat::Csv).unwrap(),
            q2.num_rows(),
        )
    });

    // SQLite with the seed's DDL: WAL, synchronous=FULL, 10,000-row transactions.
    let sq_path = dir.path().join("bench.sqlite");
    let conn = rusqlite::Connection::open(&sq_path).unwrap();
    conn.execute_batch("PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;")
        .unwrap();
    conn.execute_batch(SEED_DDL).unwrap();
    conn.execute_batch(SEED_JOB_ROLLUP_VIEW).unwrap();
    let t = Instant::now();
    {
        let reader = BufReader::with_capacity(1 << 20, std::fs::File::open(&input).unwrap());
        let mut lines = reader.lines();
        loop {
            let tx = conn.unchecked_transaction().unwrap();
            let mut n = 0;
            {
                let mut ins = tx
                    .prepare_cached(
                        "INSERT OR IGNORE INTO job_attempt VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
                    )
                    .unwrap();
                for line in lines.by_ref() {
                    let v: serde_json::Value = serde_json::from_str(&line.unwrap()).unwrap();
                    ins.execute(rusqlite::params![
                        v["job_id"].as_str(),
                        v["idem_key"].as_str(),
                        v["attempt_no"].as_i64(),
                        v["lane"].as_str(),
                        v["started_at"].as_str(),
                        v["ended_at"].as_str(),
                        v["outcome"].as_str(),
                        v["tokens_in"].as_i64().unwrap_or(0),
                        v["tokens_out"].as_i64().unwrap_or(0),
                        v["artifact_id"].as_str(),
                    ])
                    .unwrap();
                    n += 1;
                    if n == 10_000 {
                        break;
                    }
                }
            }
            tx.commit().unwrap();
            if n < 10_000 {
                break;
            }
        }
    }
    let sq_ingest = secs(t);
    conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE);").unwrap();
    let sq_bytes = std::fs::metadata(&sq_path).unwrap().len();
    let t = Instant::now();
    let sq_q1: (f64, f64) = conn
        .query_row(SEED_Q1_TOKENS_PER_ARTIFACT, [], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap();
    let sq_q1_s = secs(t);
    let t = Instant::now();
    let sq_q2 = conn
        .prepare(SEED_Q2_DUPLICATES)
        .unwrap()
        .query_map([], |_| Ok(()))
        .unwrap()
        .count();
    let sq_q2_s = secs(t);

    assert_eq!(q2_rows, sq_q2, "both engines find the same duplicates");
    assert_eq!(
        q1_rows.lines().nth(1).unwrap(),
        format!("{:?},{:?}", sq_q1.0, sq_q1.1),
        "both engines agree on q1"
    );

    let rps = |s: f64| format!("{:.0}", rows as f64 / s);
    println!("{jobs} drill jobs, {rows} attempts, input {input_bytes} bytes of NDJSON");
    println!();
    println!("| engine | durable ingest | rows/s | seed q1 | seed q2 | file | bytes/row |");
    println!("|---|---|---|---|---|---|---|");
    println!(
        "| laneledger (redb, 10k-record commits) | {ll_ingest:.2} s | {} | {ll_q1:.2} s | {ll_q2:.2} s | {ll_bytes} B | {:.0} |",
        rps(ll_ingest),
        ll_bytes as f64 / rows as f64
    );
    println!(
        "| SQLite {} (seed DDL, WAL, synchronous=FULL, 10k-row transactions) | {sq_ingest:.2} s | {} | {sq_q1_s:.2} s | {sq_q2_s:.2} s | {sq_bytes} B | {:.0} |",
        rusqlite::version(),
        rps(sq_ingest),
        sq_bytes as f64 / rows as f64
    );
    println!();
    println!(
        "q1 answer (both): {:?}; q2 duplicate idem_keys (both): {q2_rows}",
        sq_q1
    );
}
