//! One function per command; each returns the process exit code.

mod demo;
mod drill;
mod export;
mod ingest;
mod retain;
mod review;
mod serve;
mod sql;
mod verify;

use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, bail};
use laneledger_store::Ledger;

use crate::cli::{Cli, Command};

/// Runs the parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Ingest {
            db,
            kind,
            config,
            format,
            batch,
            files,
        } => {
            load_config(config.as_deref())?;
            ingest::run(&db.db, kind, format, batch as usize, &files)
        }
        Command::Sql { db, format, sql } => sql::run(&db.db, format, &sql),
        Command::Review {
            db,
            week,
            format,
            config,
        } => review::run(&db.db, week.as_deref(), format, config.as_deref()),
        Command::Serve {
            db,
            addr,
            config,
            server,
            retain_every,
        } => serve::run(&db.db, addr, config.as_deref(), &server, retain_every),
        Command::Retain {
            db,
            days,
            dry_run,
            archive,
            config,
            now,
        } => retain::run(retain::Args {
            db: db.db,
            days,
            dry_run,
            archive,
            config,
            now,
        }),
        Command::Verify { db, now } => verify::run(&db.db, now.as_deref()),
        Command::Drill {
            jobs,
            policy,
            seed,
            start,
            days,
            trace,
            job_prefix,
            out,
        } => drill::run(drill::Args {
            jobs,
            policy,
            seed,
            start,
            days,
            trace,
            job_prefix,
            out,
        }),
        Command::Export {
            db,
            format,
            out,
            since,
            until,
        } => export::run(&db.db, format, &out, since.as_deref(), until.as_deref()),
        Command::Demo { addr, data, server } => demo::run(addr, data, &server),
    }
}

/// 2 for what the user asked wrongly (read-only SQL, a bad query, a bad week, a bad export
/// range), else 1.
pub fn exit_code(e: &anyhow::Error) -> u8 {
    use laneledger_query::Error as Q;
    for cause in e.chain() {
        if cause.downcast_ref::<laneledger_store::config::ConfigError>().is_some() {
            return 2;
        }
        if let Some(q) = cause.downcast_ref::<Q>() {
            return match q {
                Q::ReadOnly(_) | Q::Plan(_) | Q::BadWeek(_) | Q::UnknownWeek(_) | Q::BadTimeRange(_) => 2,
                _ => 1,
            };
        }
    }
    1
}

/// Opens a ledger that must already exist (for commands that only read).
pub fn open_existing(db: &Path) -> anyhow::Result<Ledger> {
    if !db.exists() {
        bail!(
            "no ledger at {} (create one with `laneledger ingest --db {} FILE`)",
            db.display(),
            db.display()
        );
    }
    // redb would make an empty file a new, empty ledger: a reading command reports it instead.
    if std::fs::metadata(db).is_ok_and(|m| m.is_file() && m.len() == 0) {
        bail!("{} is an empty file, not a ledger", db.display());
    }
    open(db)
}

/// Opens (or creates) the ledger at `db`. When the file was written by an older release it is
/// migrated first, and stderr says so: the older release can no longer open it.
pub fn open(db: &Path) -> anyhow::Result<Ledger> {
    let ledger = Ledger::open(db).with_context(|| format!("opening {}", db.display()))?;
    if let Some(old) = ledger.migrated_from() {
        eprintln!(
            "laneledger: migrated {} from ledger format version {old} to {}; releases that read only \
             version {old} can no longer open it",
            db.display(),
            laneledger_store::tables::FORMAT_VERSION
        );
    }
    Ok(ledger)
}

/// Reads lane.yaml, or the seeds' defaults when no path is given.
pub fn load_config(path: Option<&Path>) -> anyhow::Result<laneledger_store::LaneConfig> {
    Ok(laneledger_store::LaneConfig::load(path)?)
}

/// A multi-thread tokio runtime for the async commands.
pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_stack_size(crate::STACK_BYTES)
        .build()?)
}

/// Writes `text` to stdout; a reader that went away (`| head`) ends the output quietly.
pub fn print(text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => Ok(other?),
    }
}
