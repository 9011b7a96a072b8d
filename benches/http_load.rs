//! HTTP ingest under load (issue 4): a `laneledger serve` process (release build) on loopback,
//! and from this second process N clients posting B-attempt NDJSON batches for S seconds.
//! Prints sustained rows/s, p50/p99/max acknowledgement latency and the error count, then checks
//! that the ledger holds exactly the acknowledged rows.
//!
//! `cargo bench --bench http_load` (LANELEDGER_LOAD_CLIENTS=16, LANELEDGER_LOAD_BATCH=500,
//! LANELEDGER_LOAD_SECONDS=60).

#[path = "../tests/support/server.rs"]
mod server;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use server::{ServerProcess, agent, attempt_line, binary, post};

fn env(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` would too. Nothing else to parse.
    let clients = env("LANELEDGER_LOAD_CLIENTS", 16);
    let batch = env("LANELEDGER_LOAD_BATCH", 500);
    let seconds = env("LANELEDGER_LOAD_SECONDS", 60);
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("load.redb");
    let mut srv = ServerProcess::start(&binary(), &db, &["--write-queue", "256"], Duration::from_secs(120))
        .expect("laneledger serve did not start");
    let next = Arc::new(AtomicUsize::new(0));
    let errors = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let deadline = start + Duration::from_secs(seconds as u64);
    let threads: Vec<_> = (0..clients)
        .map(|_| {
            let (next, errors, base) = (next.clone(), errors.clone(), srv.base.clone());
            std::thread::spawn(move || {
                let agent = agent(Duration::from_secs(60));
                let mut latencies = Vec::new();
                let mut rows = 0usize;
                while Instant::now() < deadline {
                    let b = next.fetch_add(1, Ordering::Relaxed);
                    let body: String = (b * batch..(b + 1) * batch)
                        .map(|i| attempt_line("load-", i) + "\n")
                        .collect();
                    let t = Instant::now();
                    match post(&agent, &base, "/v1/attempts", body.as_bytes()) {
                        Ok((200, _)) => {
                            latencies.push(t.elapsed());
                            rows += batch;
                        }
                        Ok((status, text)) => {
                            eprintln!("batch {b}: {status} {}", &text[..text.len().min(200)]);
                            errors.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => {
                            eprintln!("batch {b}: {e}");
                            errors.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
                (latencies, rows)
            })
        })
        .collect();
    let mut latencies = Vec::new();
    let mut rows = 0;
    for t in threads {
        let (l, r) = t.join().unwrap();
        latencies.extend(l);
        rows += r;
    }
    let elapsed = start.elapsed().as_secs_f64();
    assert!(srv.terminate().success());
    latencies.sort();
    let pct = |p: f64| {
        latencies
            .get(((latencies.len() as f64 * p).ceil() as usize).saturating_sub(1))
            .map_or(f64::NAN, |d| d.as_secs_f64() * 1e3)
    };
    let ledger = laneledger_store::Ledger::open(&db).unwrap();
    let held = ledger.attempt_count().unwrap() as usize;
    println!(
        "http_load: {clients} clients x {batch}-attempt batches for {elapsed:.1} s: {rows} attempts acknowledged, \
         {:.0} rows/s sustained; ack latency p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms; errors {}; \
         {} requests; ledger holds {held} rows, {} bytes",
        rows as f64 / elapsed,
        pct(0.50),
        pct(0.99),
        pct(1.0),
        errors.load(Ordering::Relaxed),
        latencies.len(),
        std::fs::metadata(&db).map(|m| m.len()).unwrap_or(0),
    );
    assert_eq!(held, rows, "the ledger holds exactly the acknowledged rows");
    assert_eq!(errors.load(Ordering::Relaxed), 0, "errors under load");
}
