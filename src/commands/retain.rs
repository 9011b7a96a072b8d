//! `laneledger retain` (SPEC 6), and the sweep schedule `serve --retain-every` starts.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use laneledger_query::Session;
use laneledger_query::archive::retention::{SweepOptions, SweepOutcome, sweep_with_progress};
use laneledger_query::words::counted;
use laneledger_store::storage::retention::{RetentionRule, SweepPlan};
use laneledger_store::{format_timestamp, now_micros, parse_timestamp};
use laneledger_web::AppState;

/// `retain`'s arguments.
pub struct Args {
    pub db: PathBuf,
    pub days: Option<u32>,
    pub dry_run: bool,
    pub archive: Option<PathBuf>,
    pub config: Option<PathBuf>,
    pub now: Option<String>,
}

/// Starts the sweep schedule `serve --retain-every` asked for (`None` or zero: none, as for
/// `demo`). The task holds a clone of the state, writer included: abort it at shutdown so that
/// the writer can stop.
pub fn spawn_scheduled(state: &AppState, every: Option<Duration>) -> Option<tokio::task::JoinHandle<()>> {
    let every = every?;
    let task = laneledger_web::pages::retention::spawn_schedule(state.clone(), every)?;
    tracing::info!("retention sweep every {}s", every.as_secs());
    Some(task)
}

/// The attempts a plan removes, per UTC day of `started_at`: `(day, attempts)`.
fn per_day(plan: &SweepPlan) -> Vec<(String, usize)> {
    let mut days = std::collections::BTreeMap::<String, usize>::new();
    for a in &plan.attempts {
        *days
            .entry(format_timestamp(a.attempt.started_at)[..10].to_string())
            .or_default() += 1;
    }
    days.into_iter().collect()
}

fn describe(plan: &SweepPlan) -> String {
    let mut s = format!(
        "{}, {}, every attempt ended before the cutoff {} ({} before {}); digest {}\nkept: {} with an open attempt, {} inside a reconcile window of {} s\n",
        counted(plan.jobs.len() as u64, "job", "jobs"),
        counted(plan.attempts.len() as u64, "attempt", "attempts"),
        format_timestamp(plan.cutoff),
        counted(plan.rule.days, "day", "days"),
        format_timestamp(plan.now),
        plan.digest_hex(),
        counted(plan.kept_open, "old job", "old jobs"),
        plan.kept_reconcile,
        plan.rule.reconcile_window_s,
    );
    if plan.abandoned > 0 {
        s += &format!(
            "abandoned: {} with an attempt still open that started before {} ({} before the cutoff)\n",
            counted(plan.abandoned, "job", "jobs"),
            format_timestamp(plan.rule.abandon_cutoff(plan.now)),
            counted(laneledger_store::storage::retention::ABANDON_GRACE_DAYS, "day", "days"),
        );
    }
    for (day, n) in per_day(plan) {
        s += &format!("  {day}  {}\n", counted(n as u64, "attempt", "attempts"));
    }
    s
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let config = super::load_config(args.config.as_deref())?;
    let mut rule = RetentionRule::from_config(&config);
    if let Some(days) = args.days {
        if days == 0 {
            return Err(super::usage::usage("--days must be at least 1"));
        }
        rule.days = days;
    }
    let now = match &args.now {
        Some(t) => parse_timestamp(t).map_err(|e| super::usage::usage(format!("--now: {e}")))?,
        None => now_micros(),
    };
    let ledger = if args.dry_run {
        super::open_to_read(&args.db)?
    } else {
        super::open_existing(&args.db)?
    };
    let reporter = crate::progress::Reporter::new("retain");
    let outcome = super::runtime()?.block_on(async {
        let session = Session::with_config(ledger, config).await?;
        let opts = SweepOptions {
            rule,
            dry_run: args.dry_run,
            archive: args.archive.clone(),
            abort_after: None,
        };
        sweep_with_progress(&session, now, &opts, reporter.handle()).await
    });
    let outcome = outcome.with_context(|| format!("sweeping {}", args.db.display()))?;
    reporter.finish();
    let text = match outcome {
        SweepOutcome::DryRun(plan) => format!("dry run, nothing written: would remove {}", describe(&plan)),
        SweepOutcome::NothingToRemove(plan) => format!(
            "nothing to remove: no finished job ended before {}; nothing written\n",
            format_timestamp(plan.cutoff)
        ),
        SweepOutcome::Swept { plan, record } => format!(
            "sweep {}: removed {}{}",
            record.sweep_no,
            describe(&plan),
            record.archive.map(|a| format!("archived to {a}\n")).unwrap_or_default()
        ),
    };
    super::print(&text)?;
    Ok(ExitCode::SUCCESS)
}
