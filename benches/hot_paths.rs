//! Micro-benchmarks of the hot paths (issue 6): record decoding, NDJSON/CSV parsing, the
//! redb-to-Arrow scan and its parts, seed 000's q1/q2 on cached batches, one job's attempts, and
//! the weekly review. `harness = false`, no benchmark crate: each case runs once to warm up, then
//! N times, and prints the median, min and max wall time, ns per row and rows/s.
//!
//! ```sh
//! cargo bench --bench hot_paths                                  # 200,000 drill jobs
//! LANELEDGER_HOT_JOBS=20000 LANELEDGER_HOT_ITERS=3 cargo bench --bench hot_paths
//! ```
//!
//! The input is seed 000's "retry free, no pin" drill (`laneledger_store::drill`, seed 1, 28 days,
//! as `benches/ledger.rs`), ingested into a fresh ledger with `ingest_reader` and 10,000-record
//! commits. Every case checks its answer once (row counts, a parse round trip) so a fast wrong
//! path cannot pass for a fast one.

use std::hint::black_box;
use std::io::{BufReader, Cursor};
use std::time::{Duration, Instant};

/// The binary's allocator (src/main.rs), so that records made on one thread and freed on another
/// cost what they cost in `laneledger`.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use laneledger_query::Session;
use laneledger_query::derived::views::{SEED_Q1_TOKENS_PER_ARTIFACT, SEED_Q2_DUPLICATES};
use laneledger_query::review::gate_metrics::GATE_WEEKS_SQL;
use laneledger_query::review::metrics::WEEKS_SQL;
use laneledger_query::tables::job_attempt;
use laneledger_store::drill::{self, DrillConfig, Policy};
use laneledger_store::format::parallel::{CHUNK_BYTES, ParallelLineReader};
use laneledger_store::format::parse::{AttemptDecoder, Framed, attempt_from_csv, attempt_from_json};
use laneledger_store::model::record::ATTEMPT_FIELDS;
use laneledger_store::{
    Attempt, AttemptReader, DEFAULT_BATCH, InputFormat, Ledger, Parsed, StoredAttempt, format_timestamp, ingest_reader,
};

/// Wall times of one case, sorted.
struct Timings(Vec<Duration>);

impl Timings {
    fn median(&self) -> Duration {
        self.0[self.0.len() / 2]
    }
}

/// Runs `f` once to warm up, then `iters` times; prints one row of the table. `rows` is what one
/// call of `f` processes (for ns/row and rows/s); `f` returns a value the optimiser must keep.
fn measure<T>(name: &str, rows: usize, iters: usize, mut f: impl FnMut() -> T) -> Timings {
    black_box(f());
    let mut times: Vec<Duration> = (0..iters.max(1))
        .map(|_| {
            let t = Instant::now();
            black_box(f());
            t.elapsed()
        })
        .collect();
    times.sort();
    let t = Timings(times);
    let med = t.median().as_secs_f64();
    println!(
        "| {name} | {rows} | {} | {:.3} | {:.3} | {:.3} | {:.0} | {:.0} |",
        t.0.len(),
        med * 1e3,
        t.0[0].as_secs_f64() * 1e3,
        t.0[t.0.len() - 1].as_secs_f64() * 1e3,
        med * 1e9 / rows.max(1) as f64,
        rows as f64 / med,
    );
    t
}

/// One job's lookups timed one by one.
const LOOKUPS: usize = 10_000;
/// Of those, the ones also asked through SQL (each scans the cached batches).
const SQL_LOOKUPS: usize = 200;

/// Times `f` on each item after one warm-up call: the sorted latencies.
fn latencies<T>(items: &[T], mut f: impl FnMut(&T)) -> Vec<Duration> {
    f(&items[0]);
    let mut out: Vec<Duration> = items
        .iter()
        .map(|item| {
            let t = Instant::now();
            f(item);
            t.elapsed()
        })
        .collect();
    out.sort();
    out
}

/// The `q` quantile (0 … 1) of sorted latencies, in µs.
fn quantile_us(sorted: &[Duration], q: f64) -> f64 {
    let i = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i].as_secs_f64() * 1e6
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|s| s.replace('_', "").parse().ok())
        .unwrap_or(default)
}

/// The drill's attempts as CSV with a header row: every field of [`ATTEMPT_FIELDS`] but `attrs`
/// (the drill sets none), absent fields as empty cells. The drill's values hold no comma, quote
/// or line break, so no cell needs quoting (asserted).
fn to_csv(attempts: &[Attempt]) -> (Vec<String>, String) {
    let header: Vec<String> = ATTEMPT_FIELDS
        .iter()
        .filter(|f| **f != "attrs")
        .map(|f| f.to_string())
        .collect();
    let mut text = header.join(",");
    text.push('\n');
    for a in attempts {
        assert!(a.attrs.is_none());
        let cells = [
            a.job_id.clone(),
            a.idem_key.clone(),
            a.attempt_no.to_string(),
            a.lane.as_str().to_string(),
            format_timestamp(a.started_at),
            a.ended_at.map(format_timestamp).unwrap_or_default(),
            a.outcome.map(|o| o.as_str().to_string()).unwrap_or_default(),
            a.tokens_in.map(|n| n.to_string()).unwrap_or_default(),
            a.tokens_out.map(|n| n.to_string()).unwrap_or_default(),
            a.artifact_id.clone().unwrap_or_default(),
            a.http_status.map(|n| n.to_string()).unwrap_or_default(),
            a.provider_code.map(|n| n.to_string()).unwrap_or_default(),
            a.key_id.clone().unwrap_or_default(),
            a.pool_id.clone().unwrap_or_default(),
            a.model.clone().unwrap_or_default(),
        ];
        for (i, c) in cells.iter().enumerate() {
            assert!(!c.contains([',', '"', '\n', '\r']), "{c:?} needs quoting");
            if i > 0 {
                text.push(',');
            }
            text.push_str(c);
        }
        text.push('\n');
    }
    (header, text)
}

fn main() {
    let jobs = env_usize("LANELEDGER_HOT_JOBS", 200_000);
    let iters = env_usize("LANELEDGER_HOT_ITERS", 7);
    // The heavy cases (a fresh session, a whole review) run fewer times.
    let heavy_iters = iters.div_ceil(2).max(1);

    // The input: seed 000's no-pin drill over 28 days, as NDJSON lines and as CSV.
    let t = Instant::now();
    let start = laneledger_store::parse_timestamp("2026-11-02T00:00:00Z").unwrap();
    let cfg = DrillConfig {
        policy: Policy::NoPin,
        seed: 1,
        job_prefix: String::new(),
        ids: laneledger_store::drill::DrillIds::Sequential,
    };
    let attempts = drill::synthetic(&cfg, jobs, start, 28.0);
    let lines: Vec<String> = attempts
        .iter()
        .map(|a| serde_json::to_string(&a.to_json()).unwrap())
        .collect();
    let ndjson: String = lines.iter().flat_map(|l| [l.as_str(), "\n"]).collect();
    let (header, csv_text) = to_csv(&attempts);
    let csv_rows: Vec<Vec<&str>> = csv_text.lines().skip(1).map(|l| l.split(',').collect()).collect();
    let n = attempts.len();
    println!(
        "{jobs} drill jobs (no pin, seed 1, 28 days): {n} attempts, {} bytes of NDJSON, {} bytes of CSV; generated in {:.2} s",
        ndjson.len(),
        csv_text.len(),
        t.elapsed().as_secs_f64()
    );

    // The ledger: one durable ingest, timed once for context (benches/ledger.rs measures ingest).
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path().join("hot.redb")).unwrap();
    let t = Instant::now();
    let report = ingest_reader(
        &ledger,
        "drill.ndjson",
        BufReader::with_capacity(1 << 20, Cursor::new(ndjson.as_bytes())),
        InputFormat::Ndjson,
        DEFAULT_BATCH,
        |_| {},
    )
    .unwrap();
    assert_eq!(report.counters.accepted as usize, n, "{}", report.counters);
    println!(
        "ingested (10,000-record fsync'd commits) in {:.2} s, {:.0} rows/s; ledger file {} bytes",
        t.elapsed().as_secs_f64(),
        n as f64 / t.elapsed().as_secs_f64(),
        std::fs::metadata(ledger.path()).unwrap().len()
    );
    println!();
    println!("warm-up 1 run, then {iters} runs ({heavy_iters} for the heavy cases); times in ms");
    println!();
    println!("| case | rows | runs | median ms | min ms | max ms | ns/row | rows/s |");
    println!("|---|---|---|---|---|---|---|---|");

    // --- Record decoding: the stored attempt values, as redb holds them.
    let raw: Vec<Vec<u8>> = {
        let mut raw = Vec::with_capacity(n);
        ledger
            .attempt_chunks(1 << 16, |_, mut chunk| {
                chunk.unpack()?;
                raw.extend(chunk.values().map(<[u8]>::to_vec));
                Ok::<(), laneledger_store::Error>(())
            })
            .unwrap();
        raw
    };
    assert_eq!(raw.len(), n);
    let raw_bytes: usize = raw.iter().map(Vec::len).sum();
    let decoded: Vec<StoredAttempt> = raw
        .iter()
        .map(|b| laneledger_store::storage::ledger::decode_attempt(b).unwrap())
        .collect();
    measure("decode: postcard StoredAttempt from value bytes", n, iters, || {
        let mut tokens = 0u64;
        for b in &raw {
            let s = laneledger_store::storage::ledger::decode_attempt(b).unwrap();
            tokens += s.attempt.tokens_in.unwrap_or(0);
        }
        tokens
    });

    measure("decode: in place (AttemptRef, borrowed strings)", n, iters, || {
        let mut tokens = 0u64;
        for b in &raw {
            let s = laneledger_store::decode_attempt_ref(b).unwrap();
            tokens += s.attempt.tokens_in.unwrap_or(0);
        }
        tokens
    });

    // --- The scan and its parts: redb iteration, redb + decode, Arrow building, all three.
    let mut chunks = Vec::new();
    measure(
        "scan part: redb read of the packed blocks only (Ledger::attempt_chunks)",
        n,
        iters,
        || {
            chunks.clear();
            let mut rows = 0usize;
            ledger
                .attempt_chunks(1 << 16, |_, chunk| {
                    rows += chunk.len();
                    chunks.push(chunk);
                    Ok::<(), laneledger_store::Error>(())
                })
                .unwrap();
            assert_eq!(rows, n);
            rows
        },
    );
    measure(
        "scan part: zstd unpacking of those blocks (a copy, then AttemptChunk::unpack), one thread",
        n,
        iters,
        || {
            let mut bytes = 0usize;
            for chunk in &chunks {
                let mut chunk = chunk.clone();
                chunk.unpack().unwrap();
                bytes += chunk.bytes.len();
            }
            assert_eq!(bytes, raw_bytes);
            bytes
        },
    );
    measure("scan part: Ledger::for_each_attempt (redb + decode)", n, iters, || {
        let mut rows = 0usize;
        ledger.for_each_attempt(|_| rows += 1).unwrap();
        assert_eq!(rows, n);
        rows
    });
    measure(
        "scan part: job_attempt::to_batches (decoded -> Arrow)",
        n,
        iters,
        || {
            let batches = job_attempt::to_batches(&decoded).unwrap();
            assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), n);
            batches
        },
    );
    measure(
        "scan: job_attempt::scan_columns, job_rollup's 7 columns",
        n,
        iters,
        || {
            let batches = job_attempt::scan_columns(&ledger, &job_attempt::ROLLUP_COLUMNS).unwrap();
            batches.iter().map(|b| b.num_rows()).sum::<usize>()
        },
    );
    {
        let columns = job_attempt::scan_columns(&ledger, &job_attempt::ROLLUP_COLUMNS).unwrap();
        measure("aggregate: job_rollup materialized (one sorted pass)", n, iters, || {
            let b = laneledger_query::derived::job_rollup::rollup(&columns).unwrap();
            b.iter().map(|b| b.num_rows()).sum::<usize>()
        });
        measure("aggregate: idem_artifacts materialized (hash pass)", n, iters, || {
            let b = laneledger_query::derived::idem_artifacts::idem_artifacts(&columns).unwrap();
            b.iter().map(|b| b.num_rows()).sum::<usize>()
        });
    }
    measure("scan: job_attempt::scan (redb -> Arrow)", n, iters, || {
        let batches = job_attempt::scan(&ledger).unwrap();
        assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), n);
        batches
    });

    // --- Parsing: the public entry points, per line / per row, and the framing readers.
    for (line, a) in lines.iter().zip(&attempts).take(1000) {
        assert_eq!(&attempt_from_json(line).unwrap(), a);
    }
    for (row, a) in csv_rows.iter().zip(&attempts).take(1000) {
        assert_eq!(&attempt_from_csv(&header, row).unwrap(), a);
    }
    measure("parse: attempt_from_json per NDJSON line", n, iters, || {
        let mut ok = 0usize;
        for l in &lines {
            ok += usize::from(attempt_from_json(l).is_ok());
        }
        assert_eq!(ok, n);
        ok
    });
    measure("parse: attempt_from_csv per pre-split CSV row", n, iters, || {
        let mut ok = 0usize;
        for r in &csv_rows {
            ok += usize::from(attempt_from_csv(&header, r).is_ok());
        }
        assert_eq!(ok, n);
        ok
    });
    let count_records = |format: InputFormat, text: &str| {
        let mut ok = 0usize;
        for p in AttemptReader::new("bench", Cursor::new(text.as_bytes()), format) {
            ok += usize::from(matches!(p.unwrap(), Parsed::Record { .. }));
        }
        assert_eq!(ok, n);
        ok
    };
    measure("parse: AttemptReader NDJSON (framing + parse)", n, iters, || {
        count_records(InputFormat::Ndjson, &ndjson)
    });
    measure("parse: AttemptReader CSV (framing + split + parse)", n, iters, || {
        count_records(InputFormat::Csv, &csv_text)
    });
    // What `ingest` reads an NDJSON input through on more than two cores: lines cut on this
    // thread, decoded on worker threads. Its rate against the NDJSON row above is how far
    // decoding spreads over the cores.
    for threads in [1, 2] {
        measure(
            &format!("parse: ParallelLineReader NDJSON, {threads} decoding thread(s)"),
            n,
            iters,
            || {
                let mut ok = 0usize;
                let reader = ParallelLineReader::<_, AttemptDecoder>::new(
                    "bench",
                    Cursor::new(ndjson.as_bytes()),
                    threads,
                    CHUNK_BYTES,
                );
                for p in reader {
                    ok += usize::from(matches!(p.unwrap(), Framed::Record { .. }));
                }
                assert_eq!(ok, n);
                ok
            },
        );
    }

    // --- Aggregation and lookups through a DataFusion session.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut latency_rows: Vec<(&str, Vec<Duration>)> = Vec::new();
    rt.block_on(async {
        let session = Session::new(ledger.clone()).await.unwrap();
        let t = Instant::now();
        let q1 = session.query(SEED_Q1_TOKENS_PER_ARTIFACT).await.unwrap();
        println!(
            "| q1 cold, first query of a session (scan + plan + run) | {n} | 1 | {:.3} | | | {:.0} | {:.0} |",
            t.elapsed().as_secs_f64() * 1e3,
            t.elapsed().as_secs_f64() * 1e9 / n as f64,
            n as f64 / t.elapsed().as_secs_f64()
        );
        assert_eq!(q1.num_rows(), 1);
        let q2_rows = session.query(SEED_Q2_DUPLICATES).await.unwrap().num_rows();
        for (name, sql, want) in [
            (
                "q1 warm: seed tokens per artifact, cached batches",
                SEED_Q1_TOKENS_PER_ARTIFACT,
                1,
            ),
            ("q2 warm: seed duplicates, cached batches", SEED_Q2_DUPLICATES, q2_rows),
        ] {
            // `measure` is synchronous: block on each run from a blocking thread of the runtime.
            let s = session.clone();
            let handle = tokio::runtime::Handle::current();
            let name = name.to_string();
            let sql = sql.to_string();
            tokio::task::spawn_blocking(move || {
                measure(&name, n, iters, || {
                    let r = handle.block_on(s.query(&sql)).unwrap();
                    assert_eq!(r.num_rows(), want);
                    r.num_rows()
                })
            })
            .await
            .unwrap();
        }

        // One job's attempts, one lookup at a time (issue 6's target: p99 <= 1 ms): by the ledger's
        // primary-key range read, and by SQL on the session's cached batches.
        let mut rows_of: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
        for a in &attempts {
            *rows_of.entry(a.job_id.as_str()).or_default() += 1;
        }
        let probe_jobs: Vec<(String, usize)> = (0..LOOKUPS)
            .map(|k| {
                let job = &attempts[(k * 7919) % n].job_id;
                (job.clone(), rows_of[job.as_str()])
            })
            .collect();
        let l = ledger.clone();
        let jobs_for_ledger = probe_jobs.clone();
        let by_ledger = tokio::task::spawn_blocking(move || {
            latencies(&jobs_for_ledger, |(job, rows)| {
                assert_eq!(l.job_attempts(job).unwrap().len(), *rows);
            })
        })
        .await
        .unwrap();
        let s = session.clone();
        let handle = tokio::runtime::Handle::current();
        let by_sql = tokio::task::spawn_blocking(move || {
            latencies(&probe_jobs[..SQL_LOOKUPS], |(job, rows)| {
                let sql = format!("SELECT job_id, attempt_no, tokens_in FROM job_attempt WHERE job_id = '{job}'");
                assert_eq!(handle.block_on(s.query(&sql)).unwrap().num_rows(), *rows);
            })
        })
        .await
        .unwrap();
        latency_rows.push(("one job by Ledger::job_attempts (redb range read + decode)", by_ledger));
        latency_rows.push(("one job by SQL WHERE job_id = …, cached batches", by_sql));

        // The weekly review of the drill's busiest ISO week (review + audit sections + document).
        let week = "2026-W46";
        let review_once = move |s: Session| async move {
            let (review, sections) = s.review_with_sections(Some(week), &s.thresholds()).await.unwrap();
            let doc = laneledger_query::review_document(&review, &sections);
            (review, sections, doc)
        };
        let (review, sections, _) = review_once(session.clone()).await;
        println!(
            "| (review {week}: {} jobs, {} audit sections) | | | | | | | |",
            review.week.jobs,
            sections.len()
        );
        let handle = tokio::runtime::Handle::current();
        let l = ledger.clone();
        let ro = review_once;
        tokio::task::spawn_blocking(move || {
            measure(
                "review cold: new Session + review + sections (all scans)",
                n,
                heavy_iters,
                || {
                    let s = handle.block_on(Session::new(l.clone())).unwrap();
                    handle.block_on(ro(s)).2
                },
            )
        })
        .await
        .unwrap();
        // The same SQL on the warm session, past the per-generation memo: what a review costs
        // once the batches are cached.
        let mut sqls: Vec<String> = vec![WEEKS_SQL.to_string(), GATE_WEEKS_SQL.to_string()];
        // A section may show two statements (`free_lane_bet` and its slack query).
        sqls.extend(
            sections
                .iter()
                .flat_map(|s| s.sql.split(";\n").map(str::to_string).collect::<Vec<_>>()),
        );
        let s = session.clone();
        let handle = tokio::runtime::Handle::current();
        tokio::task::spawn_blocking(move || {
            measure(
                "review warm: its SQL (weeks + every section) on cached batches",
                n,
                iters,
                || {
                    let mut rows = 0;
                    for sql in &sqls {
                        rows += handle.block_on(s.query(sql)).unwrap().num_rows();
                    }
                    rows
                },
            )
        })
        .await
        .unwrap();
        let s = session.clone();
        let handle = tokio::runtime::Handle::current();
        tokio::task::spawn_blocking(move || {
            measure("review memo hit: same week, no write since", n, iters, || {
                handle.block_on(ro(s.clone())).2
            })
        })
        .await
        .unwrap();
    });
    println!();
    println!("| lookup, one at a time | lookups | p50 µs | p99 µs | max µs |");
    println!("|---|---|---|---|---|");
    for (name, l) in &latency_rows {
        println!(
            "| {name} | {} | {:.1} | {:.1} | {:.1} |",
            l.len(),
            quantile_us(l, 0.50),
            quantile_us(l, 0.99),
            quantile_us(l, 1.0)
        );
    }
    println!();
    println!(
        "stored attempt values: {raw_bytes} bytes, {:.1} B/row on average",
        raw_bytes as f64 / n as f64
    );
}
