//! The differential with three separate `laneledger-cluster` processes on loopback (a scheduler
//! and 2 executors), started and stopped by the test and gated on the scheduler's `/readyz`; then
//! the `query` and `check` commands as an operator runs them.

mod common;

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::*;
use laneledger_query::Session;

const BIN: &str = env!("CARGO_BIN_EXE_laneledger-cluster");

/// The children, killed when the test ends however it ends.
struct Processes(Vec<Child>);

impl Drop for Processes {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn spawn(args: &[&str], log: &Path) -> Child {
    let out = std::fs::File::create(log).unwrap();
    Command::new(BIN)
        .args(args)
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap()
}

/// Runs the binary with `args`, failing after `limit`.
fn run_bounded(args: &[String], limit: Duration) -> Output {
    let mut child = Command::new(BIN)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t.elapsed() > limit {
            let _ = child.kill();
            panic!("laneledger-cluster {args:?} took more than {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

#[test]
fn three_processes_answer_as_the_embedded_session() {
    on_runtime(three_processes_answer_as_the_embedded_session_body())
}

async fn three_processes_answer_as_the_embedded_session_body() {
    let dir = tempfile::tempdir().unwrap();
    let attempts = drill_attempts("p-", 5, 1_200);
    let ledger = ledger_with(&dir.path().join("l.redb"), &attempts);
    // Gate decisions too, so that gate_weekly has a week to show.
    ingest_sample_decisions(&ledger);
    let export_dir = dir.path().join("export");
    export(&ledger, &export_dir);
    let session = Session::new(ledger).await.unwrap();

    let port = free_port();
    let mut procs = Processes(Vec::new());
    let bind = format!("127.0.0.1:{port}");
    procs.0.push(spawn(
        &[
            "scheduler",
            "--bind",
            &bind,
            "--external-host",
            "127.0.0.1",
            "--min-executors",
            "2",
        ],
        &dir.path().join("scheduler.log"),
    ));
    let scheduler = format!("df://127.0.0.1:{port}");
    for i in 0..2 {
        let work = dir.path().join(format!("executor-{i}"));
        std::fs::create_dir_all(&work).unwrap();
        let (p, g) = (free_port().to_string(), free_port().to_string());
        procs.0.push(spawn(
            &[
                "executor",
                "--scheduler",
                &scheduler,
                "--bind-host",
                "127.0.0.1",
                "--external-host",
                "127.0.0.1",
                "--port",
                &p,
                "--grpc-port",
                &g,
                "--vcores",
                "2",
                "--work-dir",
                work.to_str().unwrap(),
            ],
            &dir.path().join(format!("executor-{i}.log")),
        ));
    }
    let ready = tokio::task::spawn_blocking(move || {
        let t = Instant::now();
        wait_ready(port, Duration::from_secs(60));
        t.elapsed()
    })
    .await;
    if ready.is_err() {
        for log in ["scheduler.log", "executor-0.log", "executor-1.log"] {
            eprintln!(
                "--- {log}\n{}",
                std::fs::read_to_string(dir.path().join(log)).unwrap_or_default()
            );
        }
        panic!("the cluster did not get ready");
    }

    let folders = laneledger_cluster::data_folders(std::slice::from_ref(&export_dir)).unwrap();
    for adaptive in [true, false] {
        let ctx = laneledger_cluster::connect(&scheduler, &folders, adaptive)
            .await
            .unwrap();
        let verdicts = tokio::time::timeout(
            QUERY_LIMIT,
            laneledger_cluster::differential(&ctx, |sql| embedded(&session, sql)),
        )
        .await
        .expect("the differential finished in time")
        .unwrap();
        assert_all_same(
            &verdicts,
            &["weekly_metrics", "gate_weekly"],
            &format!("processes, adaptive planning {adaptive}"),
        );
    }

    // `query`: seed 000's q1 as the operator runs it, in CSV, equals the embedded answer.
    let data = export_dir.display().to_string();
    let out = run_bounded(
        &[
            "query".into(),
            "--scheduler".into(),
            scheduler.clone(),
            "--data".into(),
            data.clone(),
            "--format".into(),
            "csv".into(),
            laneledger_query::derived::views::SEED_Q1_TOKENS_PER_ARTIFACT.into(),
        ],
        Duration::from_secs(120),
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let want = session
        .query(laneledger_query::derived::views::SEED_Q1_TOKENS_PER_ARTIFACT)
        .await
        .unwrap();
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        laneledger_query::format_result(&want, laneledger_query::OutputFormat::Csv).unwrap()
    );

    // `query --view` of the views over the exported ledger tables: the embedded rows (sorted).
    let sorted_lines = |text: &str| {
        let mut lines: Vec<String> = text.split("\r\n").map(str::to_string).collect();
        lines[1..].sort();
        lines
    };
    for view in ["weekly_metrics", "gate_weekly"] {
        let out = run_bounded(
            &[
                "query".into(),
                "--scheduler".into(),
                scheduler.clone(),
                "--data".into(),
                data.clone(),
                "--format".into(),
                "csv".into(),
                "--view".into(),
                view.into(),
            ],
            Duration::from_secs(120),
        );
        assert!(out.status.success(), "{view}: {}", String::from_utf8_lossy(&out.stderr));
        let want = session.query(&format!("SELECT * FROM {view}")).await.unwrap();
        let want = laneledger_query::format_result(&want, laneledger_query::OutputFormat::Csv).unwrap();
        assert_eq!(
            sorted_lines(&String::from_utf8(out.stdout).unwrap()),
            sorted_lines(&want),
            "{view}"
        );
    }

    // `query --view` of a ledger-only table is refused with what it needs, and exits 1.
    let out = run_bounded(
        &[
            "query".into(),
            "--scheduler".into(),
            scheduler.clone(),
            "--data".into(),
            data.clone(),
            "--view".into(),
            "verify_run".into(),
        ],
        Duration::from_secs(60),
    );
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8(out.stderr).unwrap(),
        "error: verify_run does not run on the cluster: it needs verify_run (the verify log), which only the ledger \
         holds; the views on the cluster are job_rollup, job_week, week_rollup, duplicate_artifact, weekly_metrics, \
         gate_weekly\n"
    );

    // `check`: every query the same, exit 0.
    let out = run_bounded(
        &[
            "check".into(),
            "--scheduler".into(),
            scheduler.clone(),
            "--data".into(),
            data,
        ],
        Duration::from_secs(300),
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let names: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("same "))
        .map(|l| l[11..35].trim_end())
        .collect();
    assert_eq!(
        names,
        [
            "q1 tokens per artifact",
            "q2 duplicates",
            "job_rollup",
            "week_rollup",
            "duplicate_artifact",
            "day rollup",
            "weekly_metrics",
            "gate_weekly"
        ]
    );
    assert_eq!(stdout.lines().last(), Some("8 same, 0 different"));

    // `check --ledger`: the same against the embedded engine on the ledger itself (closed here first).
    drop(session);
    let out = run_bounded(
        &[
            "check".into(),
            "--scheduler".into(),
            scheduler.clone(),
            "--data".into(),
            export_dir.display().to_string(),
            "--ledger".into(),
            dir.path().join("l.redb").display().to_string(),
        ],
        Duration::from_secs(300),
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        stdout.lines().filter(|l| l.contains(" ms   embedded ")).count(),
        8,
        "{stdout}"
    );
    assert_eq!(stdout.lines().last(), Some("8 same, 0 different"));
    drop(procs);
}
