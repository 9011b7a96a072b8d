//! One function per command; each returns the process exit code.

mod compact;
mod demo;
mod drill;
mod export;
mod ingest;
pub mod remote;
mod retain;
mod review;
mod serve;
mod sql;
pub mod usage;
mod verify;
mod whatif;

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
            table,
            mapping,
            idem_fallback,
            dry_run,
            batch,
            no_compact,
            files,
        } => {
            load_config(config.as_deref())?;
            if let Some(mapping) = mapping {
                let options = ingest::MappedOptions {
                    mapping: &mapping,
                    idem_fallback,
                    dry_run,
                    format,
                    batch: batch as usize,
                    compact: !no_compact,
                };
                return ingest::run_mapped(&db.db, kind, &options, &files);
            }
            if idem_fallback || dry_run {
                return Err(usage::usage(
                    "--idem-fallback and --dry-run go with --mapping (a router's own log)",
                ));
            }
            ingest::run(
                &db.db,
                kind,
                format,
                table.as_deref(),
                batch as usize,
                !no_compact,
                &files,
            )
        }
        Command::Sql {
            db,
            format,
            timeout,
            memory,
            max_rows,
            max_result_bytes,
            sql,
        } => {
            let limits = laneledger_query::ResultLimits {
                max_rows: max_rows.max(1),
                max_bytes: max_result_bytes.max(1),
            };
            sql::run(&db.db, format, timeout, memory, limits, &sql)
        }
        Command::Review {
            db,
            week,
            format,
            config,
        } => review::run(&db.db, week.as_deref(), format, config.as_deref()),
        Command::Whatif {
            db,
            week,
            config,
            base,
            seed,
            format,
        } => whatif::run(&db.db, &week, &config, base.as_deref(), seed, format),
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
        Command::Compact { db } => compact::run(&db.db),
        Command::Verify { db, now } => verify::run(&db.db, now.as_deref()),
        Command::Drill {
            jobs,
            policy,
            seed,
            start,
            days,
            trace,
            job_prefix,
            ids,
            order,
            out,
        } => drill::run(drill::Args {
            jobs,
            policy,
            seed,
            start,
            days,
            trace,
            job_prefix,
            ids,
            order,
            out,
        }),
        Command::Export {
            db,
            format,
            out,
            since,
            until,
            config,
        } => export::run(
            &db.db,
            format,
            &out,
            since.as_deref(),
            until.as_deref(),
            config.as_deref(),
        ),
        Command::Mappings { name } => ingest::mappings(name.as_deref()),
        Command::Demo { addr, data, server } => demo::run(addr, data, &server),
    }
}

/// 2 for what the user asked wrongly (a bad flag or value, see [`usage`]; read-only SQL, a bad
/// query, a bad week, a bad export
/// range, a bad lane.yaml or mapping file), 4 when the ledger file is damaged (redb's checksums, or a record that cannot be
/// decoded: as `verify` exits for a ledger that does not verify), else 1.
pub fn exit_code(e: &anyhow::Error) -> u8 {
    use laneledger_query::Error as Q;
    if e.chain().any(damaged) {
        return verify::BROKEN;
    }
    for cause in e.chain() {
        if cause.downcast_ref::<usage::Usage>().is_some() {
            return 2;
        }
        if cause.downcast_ref::<laneledger_store::config::ConfigError>().is_some()
            || cause
                .downcast_ref::<laneledger_store::ingest::mapping::MappingError>()
                .is_some()
        {
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

/// Whether `e`, or an error it wraps (through DataFusion's external errors too), says the ledger
/// file is damaged: [`laneledger_store::Error::Damaged`] or [`laneledger_store::Error::Corrupt`].
fn damaged(e: &(dyn std::error::Error + 'static)) -> bool {
    use laneledger_query::Error as Q;
    use laneledger_store::Error as S;
    let mut cause = Some(e);
    while let Some(c) = cause {
        let store = match c.downcast_ref::<Q>() {
            Some(Q::Store(s)) => Some(s),
            Some(Q::Execution(df)) => return damaged(df),
            _ => c.downcast_ref::<S>(),
        };
        if matches!(store, Some(S::Damaged(_) | S::Corrupt { .. })) {
            return true;
        }
        cause = c.source();
    }
    false
}

/// Opens a ledger that must already exist, writable unless the file cannot be written (`verify`
/// logs its run, `retain` sweeps).
pub fn open_existing(db: &Path) -> anyhow::Result<Ledger> {
    must_exist(db)?;
    open(db)
}

/// Opens a ledger that must already exist, for a command that only reads (`sql`, `review`,
/// `export`, `retain --dry-run`): read-only where it can be, so the file is left as it was
/// ([`Ledger::open_to_read`]).
pub fn open_to_read(db: &Path) -> anyhow::Result<Ledger> {
    must_exist(db)?;
    opened(db, migrating(|p| Ledger::open_to_read_with_progress(db, p)))
}

/// [`open_existing`] with redb's integrity check first ([`Ledger::open_checked`]): for `verify`.
pub fn open_checked(db: &Path) -> anyhow::Result<Ledger> {
    must_exist(db)?;
    opened(db, Ledger::open_checked(db))
}

/// Refuses a path that holds no ledger: missing, or an empty file.
fn must_exist(db: &Path) -> anyhow::Result<()> {
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
    Ok(())
}

/// Opens (or creates) the ledger at `db`. When the file was written by an older release it is
/// migrated first, and stderr says so: the older release can no longer open it.
pub fn open(db: &Path) -> anyhow::Result<Ledger> {
    opened(db, migrating(|p| Ledger::open_with_progress(db, p)))
}

/// Runs an open that may migrate an older file with a progress bar or lines, which show only
/// when the migration takes long ([`crate::progress::Reporter`]).
fn migrating<T>(open: impl FnOnce(&dyn laneledger_store::progress::Progress) -> T) -> T {
    let reporter = crate::progress::Reporter::new("migrating");
    let opened = open(&reporter);
    reporter.finish();
    opened
}

/// The migration notice of [`open`] for a ledger just opened (or the error, with the path).
fn opened(db: &Path, ledger: laneledger_store::Result<Ledger>) -> anyhow::Result<Ledger> {
    DAMAGE_PATH.get_or_init(|| db.to_path_buf());
    let ledger = ledger.with_context(|| format!("opening {}", db.display()))?;
    if let Some(old) = ledger.migrated_from() {
        eprintln!(
            "laneledger: migrated {} from ledger format version {old} to {}; releases that read only \
             version {old} can no longer open it",
            db.display(),
            laneledger_store::storage::tables::FORMAT_VERSION
        );
    }
    Ok(ledger)
}

/// The ledger file a damaged-page panic is reported against (the first one opened).
static DAMAGE_PATH: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();

/// Whether a damaged-page panic ends the process (every command but `serve`, whose request
/// fails instead while the server goes on).
pub static EXIT_ON_DAMAGE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

/// Installs the panic hook that turns a panic inside redb into a damaged-ledger report.
///
/// redb trusts the pages it reads (only its integrity check compares their checksums), so a file
/// damaged outside laneledger can make a read panic inside redb (cberner/redb#1334). Such a
/// panic is reported as `laneledger: LEDGER is damaged: …` and the process exits 4, the code of a
/// ledger that does not verify; other panics keep the default report.
pub fn report_damage_on_panic() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        // `laneledger … | head`: the reader went away. Stop quietly, as a shell's own tools do
        // on SIGPIPE (Rust ignores the signal, so printing panics instead).
        let message = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or_default();
        if message.starts_with("failed printing to stdout") && message.contains("Broken pipe") {
            std::process::exit(0);
        }
        let in_redb = info
            .location()
            .is_some_and(|l| l.file().contains("/redb-") || l.file().contains("\\redb-"));
        if !in_redb {
            return default(info);
        }
        let what = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_default();
        let file = DAMAGE_PATH
            .get()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| "the ledger file".into());
        // From the crate's directory on: `redb-4.6.0/src/tree_store/btree_iters.rs:35`.
        let at = info
            .location()
            .map(|l| {
                let f = l.file();
                format!(" at {}:{}", f.rfind("redb-").map_or(f, |i| &f[i..]), l.line())
            })
            .unwrap_or_default();
        eprintln!(
            "laneledger: {file} is damaged: redb could not read one of its pages ({what}{at}); restore it from a copy"
        );
        if EXIT_ON_DAMAGE.load(std::sync::atomic::Ordering::Relaxed) {
            std::process::exit(i32::from(verify::BROKEN));
        }
    }));
}

/// Reads lane.yaml, or the seeds' defaults when no path is given.
/// Its lane tiers become the lanes this process takes in records (one lane.yaml a process).
pub fn load_config(path: Option<&Path>) -> anyhow::Result<laneledger_store::LaneConfig> {
    let config = laneledger_store::LaneConfig::load(path)?;
    config.lanes.activate();
    Ok(config)
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
