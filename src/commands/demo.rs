//! `laneledger demo`: a ledger built from sample-data/, served.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use laneledger_store::{Counters, InputFormat, Ledger};

use crate::cli::{KindArg, ServerArgs};

pub fn run(addr: SocketAddr, data: Option<PathBuf>, server: &ServerArgs) -> anyhow::Result<ExitCode> {
    let data = data.unwrap_or_else(|| {
        let here = PathBuf::from("sample-data");
        if here.is_dir() {
            here
        } else {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("sample-data")
        }
    });
    let mut files: Vec<PathBuf> = std::fs::read_dir(&data)
        .with_context(|| format!("reading {}", data.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| matches!(p.extension().and_then(|e| e.to_str()), Some("ndjson" | "csv")))
        .collect();
    files.sort();
    if files.is_empty() {
        bail!("no .ndjson or .csv files in {}", data.display());
    }
    let dir = std::env::temp_dir().join(format!("laneledger-demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let db = dir.join("demo.redb");
    let ledger = Ledger::open(&db)?;
    let mut total = Counters::default();
    let reporter = crate::progress::Reporter::new("ingest");
    for f in &files {
        let name = f.display().to_string();
        // Files named decisions-* hold gate decisions (seed 003); the rest hold attempts.
        let decisions = f
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("decisions"));
        let kind = if decisions {
            KindArg::Decisions
        } else {
            KindArg::Attempts
        };
        let counters = super::ingest::ingest_one(
            &ledger,
            &name,
            kind,
            InputFormat::from_path(&name),
            laneledger_store::DEFAULT_BATCH,
            &reporter,
            super::ingest::rows(&total),
        )?;
        println!("{name}: {counters}");
        total.merge(&counters);
    }
    reporter.finish();
    println!("demo ledger {}: {total}", db.display());
    let lane_yaml = data.join("lane.yaml");
    let config = super::load_config(lane_yaml.exists().then_some(lane_yaml.as_path()))?;
    let served = super::serve::serve_ledger(
        ledger,
        config,
        lane_yaml.exists().then_some(lane_yaml.as_path()),
        addr,
        server,
        // The sample data is older than any retention window: the demo never sweeps it.
        None,
        Some("laneledger demo: open {url}".to_string()),
    );
    // The demo ledger is scratch: remove it once the server has stopped.
    let _ = std::fs::remove_dir_all(&dir);
    served
}
