//! `laneledger demo`: a ledger built from sample-data/, served.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use laneledger_store::{Counters, DEFAULT_BATCH, InputFormat, Ledger, ingest_reader};

pub fn run(addr: SocketAddr, data: Option<PathBuf>) -> anyhow::Result<ExitCode> {
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
    for f in &files {
        let name = f.display().to_string();
        let reader = std::io::BufReader::new(std::fs::File::open(f).with_context(|| format!("opening {name}"))?);
        let report = ingest_reader(
            &ledger,
            &name,
            reader,
            InputFormat::from_path(&name),
            DEFAULT_BATCH,
            |_| {},
        )?;
        println!("{name}: {}", report.counters);
        total.merge(&report.counters);
    }
    println!("demo ledger {}: {total}", db.display());
    super::serve::serve_ledger(ledger, addr, Some("laneledger demo: open {url}".to_string()))
}
