//! HTTP ingest under load (issue 4), and the live run of "fast on real traffic": a `laneledger
//! serve` process (release build) on loopback, and from this second process N clients posting
//! B-attempt NDJSON batches for S seconds while one more client opens the week page the attempts
//! land in once a second while they post. Prints the rows/s acknowledged over the clients' time,
//! p50/p99/max acknowledgement latency, the page's p50/p99/max (a load past the server's request
//! limit, answered 408, counts at the time it took, and the count of those is printed), the
//! server's peak RSS and the error count, then checks that the ledger holds exactly the preloaded
//! and acknowledged rows.
//!
//! `cargo bench --bench http_load`, with LANELEDGER_LOAD_CLIENTS (16), LANELEDGER_LOAD_BATCH (500),
//! LANELEDGER_LOAD_SECONDS (60), LANELEDGER_LOAD_PRELOAD (0: attempts ingested with `laneledger
//! ingest` before the server starts, so that the page has a ledger's worth to read) and
//! LANELEDGER_LOAD_IDS (`sequential`, or `random`: job ids, idempotency keys and artifact ids as
//! 24 random hex digits, as routers write them; the attempts still arrive in time order).
//! LANELEDGER_SERVE_LOG names a file for the server's log (its warnings and errors).

#[path = "../tests/support/server.rs"]
mod server;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use server::{ServerProcess, agent, attempt_line, binary, post};

/// The ISO week of every generated attempt (they all start on Monday 2026-11-23).
const WEEK: &str = "2026-W48";

fn env(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// SplitMix64: a random-looking 64 bits for each `i`, the same in every run.
fn mix(i: u64) -> u64 {
    let mut z = i.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Attempt `i`'s NDJSON line: [`attempt_line`]'s, with random ids when `random`.
fn line(i: usize, random: bool) -> String {
    let text = attempt_line("load-", i);
    if !random {
        return text;
    }
    let hex = |salt: u64| format!("{:016x}{:08x}", mix(i as u64 ^ salt), mix(!(i as u64) ^ salt) as u32);
    text.replace(&format!("\"load-{i:08}\""), &format!("\"req_{}\"", hex(1)))
        .replace(&format!("load-idem-{i:08}"), &format!("idem_{}", hex(2)))
        .replace(&format!("load-art-{i:08}"), &format!("art_{}", hex(3)))
}

/// A process's peak resident set (VmHWM), MiB.
fn peak_rss_mib(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

/// The `p` quantile (0 to 1) of sorted durations, ms.
fn pct(sorted: &[Duration], p: f64) -> f64 {
    sorted
        .get(((sorted.len() as f64 * p).ceil() as usize).saturating_sub(1))
        .map_or(f64::NAN, |d| d.as_secs_f64() * 1e3)
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` would too. Nothing else to parse.
    let clients = env("LANELEDGER_LOAD_CLIENTS", 16);
    let batch = env("LANELEDGER_LOAD_BATCH", 500);
    let seconds = env("LANELEDGER_LOAD_SECONDS", 60);
    let preload = env("LANELEDGER_LOAD_PRELOAD", 0);
    let random = std::env::var("LANELEDGER_LOAD_IDS").is_ok_and(|v| v == "random");
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("load.redb");
    if preload > 0 {
        let file = dir.path().join("preload.ndjson");
        let text: String = (0..preload).map(|i| line(i, random) + "\n").collect();
        std::fs::write(&file, text).unwrap();
        let t = Instant::now();
        let status = std::process::Command::new(binary())
            .args(["ingest", "--db"])
            .arg(&db)
            .arg(&file)
            .stdout(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "laneledger ingest of the preload");
        println!(
            "http_load: {preload} attempts ingested before the run in {:.1} s",
            t.elapsed().as_secs_f64()
        );
    }
    let mut srv = ServerProcess::start(&binary(), &db, &["--write-queue", "256"], Duration::from_secs(120))
        .expect("laneledger serve did not start");
    let page = format!("{}/weeks/{WEEK}", srv.base);
    let first = Instant::now();
    let status = agent(Duration::from_secs(600))
        .get(&page)
        .call()
        .map(|r| r.status().as_u16());
    println!(
        "http_load: first load of the week page: {status:?} in {:.0} ms",
        first.elapsed().as_secs_f64() * 1e3
    );
    let next = Arc::new(AtomicUsize::new(preload.div_ceil(batch)));
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
                    let body: String = (b * batch..(b + 1) * batch).map(|i| line(i, random) + "\n").collect();
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
    let reader = {
        let (errors, page) = (errors.clone(), page.clone());
        std::thread::spawn(move || {
            let agent = agent(Duration::from_secs(60));
            let (mut loads, mut timeouts) = (Vec::new(), 0usize);
            let mut due = Instant::now();
            // Only while the clients post: a load begun after the deadline would time a quiet server.
            while Instant::now() < deadline {
                let t = Instant::now();
                match agent.get(&page).call() {
                    Ok(mut r) => {
                        let read = r.body_mut().read_to_string().is_ok();
                        if r.status() == 200 && read {
                            loads.push(t.elapsed());
                        } else if r.status() == 408 {
                            // Past the server's request limit: a load that slow, counted as one.
                            loads.push(t.elapsed());
                            timeouts += 1;
                        } else {
                            eprintln!("week page: {}", r.status());
                            errors.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    Err(e) => {
                        eprintln!("week page: {e}");
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
                due += Duration::from_secs(1);
                std::thread::sleep(due.saturating_duration_since(Instant::now()));
            }
            (loads, timeouts)
        })
    };
    let mut latencies = Vec::new();
    let mut rows = 0;
    for t in threads {
        let (l, r) = t.join().unwrap();
        latencies.extend(l);
        rows += r;
    }
    // The clients' time: from the first post to the answer of the last (the page's last load may
    // end later; it does not count in the rate).
    let elapsed = start.elapsed().as_secs_f64();
    let (mut loads, timeouts) = reader.join().unwrap();
    let rss = peak_rss_mib(srv.pid());
    assert!(srv.terminate().success());
    latencies.sort();
    loads.sort();
    let ledger = laneledger_store::Ledger::open(&db).unwrap();
    let held = ledger.attempt_count().unwrap() as usize;
    println!(
        "http_load: {clients} clients x {batch}-attempt batches ({} ids) for {elapsed:.1} s after {preload} preloaded: \
         {rows} attempts acknowledged, {:.0} rows/s sustained; ack latency p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms; \
         {} requests; week page ({WEEK}, once a second) {} loads ({timeouts} past the request limit), p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms; \
         serve peak RSS {rss:.0} MiB; errors {}; ledger holds {held} rows, {} bytes",
        if random { "random" } else { "sequential" },
        rows as f64 / elapsed,
        pct(&latencies, 0.50),
        pct(&latencies, 0.99),
        pct(&latencies, 1.0),
        latencies.len(),
        loads.len(),
        pct(&loads, 0.50),
        pct(&loads, 0.99),
        pct(&loads, 1.0),
        errors.load(Ordering::Relaxed),
        std::fs::metadata(&db).map(|m| m.len()).unwrap_or(0),
    );
    assert_eq!(
        held,
        preload + rows,
        "the ledger holds exactly the preloaded and acknowledged rows"
    );
    assert_eq!(errors.load(Ordering::Relaxed), 0, "errors under load");
}
