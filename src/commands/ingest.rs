//! `laneledger ingest`.

use std::fs::File;
use std::io::{BufRead, BufReader, IsTerminal};
use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};
use laneledger_store::{Counters, InputFormat, Ledger, ingest_decisions_reader, ingest_reader};

use crate::cli::{FormatArg, KindArg};

/// Inputs at least this large get a progress bar (when stderr is a terminal).
const PROGRESS_BYTES: u64 = 8 << 20;
/// Problems printed per input; the rest are counted and kept in the ledger.
const PRINT_PROBLEMS: usize = 50;

pub fn run(
    db: &Path,
    kind: KindArg,
    format: Option<FormatArg>,
    batch: usize,
    compact: bool,
    files: &[String],
) -> anyhow::Result<ExitCode> {
    // Every input must open before anything is written, so a typo cannot leave half an ingest.
    for name in files.iter().filter(|n| *n != "-") {
        File::open(name).with_context(|| format!("opening {name}"))?;
    }
    let ledger = super::open(db)?;
    let mut total = Counters::default();
    for name in files {
        let fmt = match format {
            Some(FormatArg::Csv) => InputFormat::Csv,
            Some(FormatArg::Ndjson) => InputFormat::Ndjson,
            None => InputFormat::from_path(name),
        };
        let counters = ingest_one(&ledger, name, kind, fmt, batch)?;
        total.merge(&counters);
    }
    // Copy-on-write commits and a file grown ahead of its pages leave space unused; give it back
    // once, at the end, when something was written.
    if compact && total.accepted + total.completed > 0 {
        ledger
            .compact()
            .with_context(|| format!("compacting {} after the ingest", db.display()))?;
    }
    println!("{total}");
    Ok(if total.rejected > 0 || total.conflicts > 0 {
        ExitCode::from(3)
    } else {
        ExitCode::SUCCESS
    })
}

pub fn ingest_one(
    ledger: &Ledger,
    name: &str,
    kind: KindArg,
    fmt: InputFormat,
    batch: usize,
) -> anyhow::Result<Counters> {
    let (reader, size): (Box<dyn BufRead>, Option<u64>) = if name == "-" {
        (Box::new(BufReader::new(std::io::stdin().lock())), None)
    } else {
        let f = File::open(name).with_context(|| format!("opening {name}"))?;
        let size = f.metadata().ok().map(|m| m.len());
        (Box::new(BufReader::with_capacity(1 << 16, f)), size)
    };
    let bar = match size {
        Some(n) if n >= PROGRESS_BYTES && std::io::stderr().is_terminal() => {
            let bar = ProgressBar::new(n).with_message(name.to_string());
            bar.set_style(
                ProgressStyle::with_template("{msg} [{bar:40}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}")
                    .expect("a fixed template parses")
                    .progress_chars("=> "),
            );
            Some(bar)
        }
        _ => None,
    };
    let progress = |bytes| {
        if let Some(b) = &bar {
            b.set_position(bytes);
        }
    };
    let report = match kind {
        KindArg::Attempts => ingest_reader(ledger, name, reader, fmt, batch, progress)?,
        KindArg::Decisions => ingest_decisions_reader(ledger, name, reader, fmt, batch, progress)?,
    };
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    for p in report.problems.iter().take(PRINT_PROBLEMS) {
        eprintln!("{p}");
    }
    if report.problems.len() > PRINT_PROBLEMS {
        eprintln!(
            "{name}: … and {} more (all kept: SELECT * FROM ingest_reject / attempt_conflict)",
            report.problems.len() - PRINT_PROBLEMS
        );
    }
    Ok(report.counters)
}
