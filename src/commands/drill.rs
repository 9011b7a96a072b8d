//! `laneledger drill`: seed 000's drill as attempt NDJSON.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use laneledger_store::drill::{self, DrillConfig, DrillIds, DrillOrder, Policy, SplitMix64};

use crate::cli::{IdsArg, OrderArg, PolicyArg};

pub struct Args {
    pub jobs: Option<usize>,
    pub policy: PolicyArg,
    pub seed: u64,
    pub start: String,
    pub days: f64,
    pub trace: Option<PathBuf>,
    pub job_prefix: String,
    pub ids: IdsArg,
    pub order: OrderArg,
    pub out: Option<PathBuf>,
}

pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    let mut rng = SplitMix64::new(a.seed);
    let (jobs, crlf, final_newline) = match &a.trace {
        Some(path) => {
            let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
            let mut jobs = drill::trace_jobs(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
            if let Some(n) = a.jobs {
                jobs.truncate(n);
            }
            (jobs, text.contains("\r\n"), text.ends_with('\n'))
        }
        None => {
            let start = laneledger_store::parse_timestamp(&a.start)
                .map_err(|e| super::usage::usage(format!("--start: {e}")))?;
            if a.days.is_nan() || a.days <= 0.0 {
                return Err(super::usage::usage("--days must be above 0"));
            }
            (
                drill::synthetic_jobs(a.jobs.unwrap_or(0), start, a.days, &mut rng),
                false,
                true,
            )
        }
    };
    let cfg = DrillConfig {
        policy: match a.policy {
            PolicyArg::Pin => Policy::Pin,
            PolicyArg::Nopin => Policy::NoPin,
        },
        seed: a.seed,
        job_prefix: a.job_prefix,
        ids: match a.ids {
            IdsArg::Sequential => DrillIds::Sequential,
            IdsArg::Random => DrillIds::Random,
        },
    };
    let order = match a.order {
        OrderArg::Job => DrillOrder::Job,
        OrderArg::Time => DrillOrder::Time,
    };
    let out: Box<dyn Write> = match &a.out {
        Some(p) => Box::new(std::fs::File::create(p).with_context(|| format!("creating {}", p.display()))?),
        None => Box::new(std::io::stdout().lock()),
    };
    let mut out = std::io::BufWriter::new(out);
    let eol = if crlf { "\r\n" } else { "\n" };
    // Each attempt is written as it comes: a drill of millions is never held at once.
    let mut written = 0usize;
    let mut write_all = || -> std::io::Result<()> {
        drill::run_each(&cfg, &jobs, &mut rng, order, |attempt| {
            if written > 0 {
                out.write_all(eol.as_bytes())?;
            }
            written += 1;
            serde_json::to_writer(&mut out, &attempt.to_json()).map_err(std::io::Error::from)
        })?;
        if final_newline && written > 0 {
            out.write_all(eol.as_bytes())?;
        }
        out.flush()
    };
    match write_all() {
        // `drill | head`: the reader has what it wanted.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe && a.out.is_none() => Ok(ExitCode::SUCCESS),
        other => {
            other?;
            Ok(ExitCode::SUCCESS)
        }
    }
}
