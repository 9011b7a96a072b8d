//! Shared test helpers: drill ledgers, their Parquet exports, the embedded session's answers,
//! free ports, and an in-process cluster (1 scheduler + 2 executors on loopback).

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use arrow::array::RecordBatch;
use laneledger_cluster::{ExecutorOptions, Policy, SchedulerOptions, Verdict};
use laneledger_query::{ExportFormat, Session};
use laneledger_store::drill::{self, DrillConfig, DrillIds};
use laneledger_store::{DEFAULT_BATCH, Incoming, Ledger};

/// The first job's start: Monday 2026-11-02 00:00 UTC.
pub const START: &str = "2026-11-02T00:00:00Z";

/// The drill attempts of `jobs` jobs over 12 days under the no-pin policy (it writes duplicate
/// artifacts), ids prefixed with `prefix`.
pub fn drill_attempts(prefix: &str, seed: u64, jobs: usize) -> Vec<laneledger_store::Attempt> {
    let cfg = DrillConfig {
        policy: drill::Policy::NoPin,
        seed,
        job_prefix: prefix.into(),
        ids: DrillIds::Random,
    };
    let start = laneledger_store::parse_timestamp(START).unwrap();
    drill::synthetic(&cfg, jobs, start, 12.0)
}

/// A new ledger at `path` holding `attempts`.
pub fn ledger_with(path: &Path, attempts: &[laneledger_store::Attempt]) -> Ledger {
    let ledger = Ledger::open(path).unwrap();
    for chunk in attempts.chunks(DEFAULT_BATCH) {
        let batch = chunk
            .iter()
            .map(|a| Incoming::Attempt {
                source: "drill".into(),
                line: 0,
                raw: String::new(),
                attempt: a.clone(),
            })
            .collect();
        ledger.write_batch(batch).unwrap();
    }
    ledger
}

/// Exports `ledger` as Parquet into `out` (`out/day=YYYY-MM-DD/attempts.parquet`, and the
/// ledger's tables under `out/ledger/`); returns the attempts written.
pub fn export(ledger: &Ledger, out: &Path) -> u64 {
    laneledger_query::archive::export::export(ledger, ExportFormat::Parquet, out, None, None)
        .unwrap()
        .rows
}

/// The embedded session's answer to `sql`.
pub async fn embedded(session: &Session, sql: &str) -> laneledger_cluster::Result<Vec<RecordBatch>> {
    Ok(session.query(sql).await.unwrap().batches)
}

/// A port free right now on 127.0.0.1.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// The HTTP status of `GET path` on 127.0.0.1:port, or `None` when nothing answers.
pub fn http_status(port: u16, path: &str) -> Option<u16> {
    let mut s = TcpStream::connect_timeout(&SocketAddr::from(([127, 0, 0, 1], port)), Duration::from_secs(1)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").ok()?;
    let mut head = [0u8; 12];
    s.read_exact(&mut head).ok()?;
    std::str::from_utf8(&head[9..12]).ok()?.parse().ok()
}

/// Waits until the scheduler's `/readyz` answers 200 (its executors are registered), or panics
/// after `limit`.
pub fn wait_ready(port: u16, limit: Duration) {
    let t = Instant::now();
    loop {
        if http_status(port, "/readyz") == Some(200) {
            return;
        }
        assert!(
            t.elapsed() < limit,
            "the scheduler on port {port} was not ready after {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Starts, on the current tokio runtime, a scheduler that needs 2 executors and 2 executors of 2
/// vcores each, all on loopback and free ports; returns the scheduler URL once `/readyz` says 200.
pub async fn in_process_cluster(work: &Path) -> String {
    let port = free_port();
    let bind: SocketAddr = ([127, 0, 0, 1], port).into();
    tokio::spawn(laneledger_cluster::run_scheduler(SchedulerOptions {
        bind,
        external_host: "127.0.0.1".into(),
        min_executors: 2,
        policy: Policy::PushStaged,
    }));
    for i in 0..2 {
        let work_dir = work.join(format!("executor-{i}"));
        std::fs::create_dir_all(&work_dir).unwrap();
        tokio::spawn(laneledger_cluster::run_executor(ExecutorOptions {
            scheduler_host: "127.0.0.1".into(),
            scheduler_port: port,
            bind_host: "127.0.0.1".into(),
            port: free_port(),
            grpc_port: free_port(),
            external_host: Some("127.0.0.1".into()),
            vcores: 2,
            work_dir: Some(work_dir),
            policy: Policy::PushStaged,
        }));
    }
    tokio::task::spawn_blocking(move || wait_ready(port, Duration::from_secs(60)))
        .await
        .unwrap();
    format!("df://127.0.0.1:{port}")
}

/// Asserts the verdicts are those of every [`laneledger_cluster::CHECKS`] query then of the
/// `ledger_checks` named (of [`laneledger_cluster::LEDGER_CHECKS`]), and that every one is "same",
/// naming those that are not.
pub fn assert_all_same(verdicts: &[Verdict], ledger_checks: &[&str], what: &str) {
    let names: Vec<&str> = verdicts.iter().map(|v| v.name).collect();
    let expected: Vec<&str> = laneledger_cluster::CHECKS
        .iter()
        .map(|c| c.name)
        .chain(ledger_checks.iter().copied())
        .collect();
    assert_eq!(names, expected, "{what}");
    let different: Vec<String> = verdicts
        .iter()
        .filter_map(|v| v.difference.as_ref().map(|d| format!("{}: {d}", v.name)))
        .collect();
    assert!(different.is_empty(), "{what}: {different:#?}");
}

/// Every query of the differential bounded in time, so that a hung job fails the test.
pub const QUERY_LIMIT: Duration = Duration::from_secs(300);

/// Ingests sample-data/decisions-2026-W48.ndjson (41 gate decisions of ISO week 2026-W48) into
/// `ledger`.
pub fn ingest_sample_decisions(ledger: &Ledger) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../sample-data/decisions-2026-W48.ndjson");
    let reader = std::io::BufReader::new(std::fs::File::open(&path).unwrap());
    let report = laneledger_store::ingest_decisions_reader(
        ledger,
        "decisions",
        reader,
        laneledger_store::InputFormat::Ndjson,
        DEFAULT_BATCH,
        |_| {},
    )
    .unwrap();
    assert_eq!(report.counters.accepted, 41, "{:?}", report.problems);
}

/// A multi-thread runtime of 4 workers with [`laneledger_cluster::STACK_BYTES`] stacks, as the
/// binary's: the in-process scheduler and executors run on it.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .thread_stack_size(laneledger_cluster::STACK_BYTES)
        .build()
        .unwrap()
}

/// Runs `test` on a worker of [`runtime`] (not on the test's own thread, whose stack is small),
/// and returns when it ends; a panic in it fails the test.
pub fn on_runtime(test: impl std::future::Future<Output = ()> + Send + 'static) {
    let rt = runtime();
    let handle = rt.spawn(test);
    if let Err(e) = rt.block_on(handle) {
        std::panic::resume_unwind(e.into_panic());
    }
}
