//! `laneledger export` (SPEC 8 export): the ledger's attempts as Parquet, Arrow IPC or CSV files,
//! partitioned by day in hive style, for DuckDB, Spark or DataFusion to read as they are.
//!
//! Layout: `OUT/day=YYYY-MM-DD/attempts.{parquet,arrow,csv}`, one file a UTC day of `started_at`,
//! each with exactly the columns and types of [`crate::tables::job_attempt::plain_schema`] (timestamps
//! `Timestamp(Microsecond, "UTC")`). Rows keep the order they come in: (job_id, attempt_no) for
//! [`export`]. Each file is written to a hidden temp name (`.attempts.parquet.PID.tmp`) in its
//! folder, synced, then renamed over the old one, so a rerun into the same folder overwrites its
//! files and a rerun after a crash converges. Days that have no rows this time are left alone.
//!
//! A Parquet export also writes the ledger's own tables that the views over the attempts need
//! elsewhere (`weekly_metrics`, `gate_weekly`), under [`LEDGER_DIR`], out of reach of a reader of
//! the attempts (`OUT/day=*/*.parquet`, or `OUT/*/*.parquet`, lists none of them):
//! `OUT/ledger/gate_decision/day=YYYY-MM-DD/gate_decision.parquet` (one file a UTC day of
//! `decided_at`, same `--since`/`--until` bounds on `decided_at`; the folder is created even when
//! no decision is in range, so that it says "none"), `OUT/ledger/week_snapshot/week_snapshot.parquet`
//! and `OUT/ledger/retention_sweep/retention_sweep.parquet` (whole tables, one file each, written
//! even when empty). Columns and types are the SQL tables' ([`crate::tables::gate_decision::schema`],
//! [`crate::tables::retention_tables::week_snapshot_schema`],
//! [`crate::tables::retention_tables::sweep_schema`]). Arrow and CSV exports write the attempts only.
//!
//! The retention sweep (SPEC 6 `--archive DIR`) archives what it removes with
//! [`write_attempts_named`], one file name per sweep, so that sweeps never overwrite each other.
//!
//! ```no_run
//! use laneledger_query::archive::export::{ExportFormat, export, parse_bound};
//! let ledger = laneledger_store::Ledger::open("laneledger.redb")?;
//! let since = parse_bound("2026-11-16")?;
//! let summary = export(&ledger, ExportFormat::Parquet, "out".as_ref(), Some(since), None)?;
//! println!("{summary}"); // exported 422 rows, 5 days, 5 files, 42775 bytes to out
//! # Ok::<(), laneledger_query::Error>(())
//! ```

use std::collections::BTreeMap;
use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};

use chrono::{DateTime, NaiveDate, Utc};
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use laneledger_store::progress::{Progress, RowCounter, Silent};
use laneledger_store::{Ledger, StoredAttempt, StoredDecision};
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;

use crate::error::{Error, ExportWriteError, Result};
use crate::tables::gate_decision::{self, GateDefaults};
use crate::tables::job_attempt::{self, Batcher};

/// The folder, under a Parquet export's output folder, that holds the ledger's own tables:
/// `OUT/ledger/TABLE/…` for each of [`LEDGER_TABLES`].
pub const LEDGER_DIR: &str = "ledger";

/// The ledger tables a Parquet export writes under [`LEDGER_DIR`], in this order: `gate_decision`
/// (one file a UTC day of `decided_at`), `week_snapshot` and `retention_sweep` (one file each).
pub const LEDGER_TABLES: [&str; 3] = ["gate_decision", "week_snapshot", "retention_sweep"];

/// The file name (without extension) [`export`] and [`write_attempts`] give each day's file.
pub const DEFAULT_FILE_STEM: &str = "attempts";

/// Rows a day's builders have room for before they grow (days are many; most are small).
const DAY_CAPACITY: usize = 1_024;

/// The file formats of an export.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExportFormat {
    /// Apache Parquet, Snappy-compressed, with the Arrow schema embedded (`.parquet`).
    Parquet,
    /// The Arrow IPC file format, also known as Feather v2 (`.arrow`).
    Arrow,
    /// RFC 4180 CSV with a header row and CRLF line ends (`.csv`); timestamps read
    /// `2026-11-16T09:00:00.250000Z` ([`CSV_TIMESTAMP_FORMAT`]). A NULL is an empty field, and so
    /// is an empty string (a `model` sent as `""`): readers take both back as NULL. Parquet and
    /// Arrow keep the difference.
    Csv,
}

impl ExportFormat {
    /// The file extension, without the dot: `parquet`, `arrow` or `csv`.
    pub fn extension(self) -> &'static str {
        match self {
            ExportFormat::Parquet => "parquet",
            ExportFormat::Arrow => "arrow",
            ExportFormat::Csv => "csv",
        }
    }
}

/// `strftime` pattern of every timestamp in a CSV export: UTC, microseconds, `Z`.
pub const CSV_TIMESTAMP_FORMAT: &str = "%Y-%m-%dT%H:%M:%S%.6fZ";

/// One file an export wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportedFile {
    /// The UTC day of `started_at` its rows share (its `day=` folder).
    pub day: NaiveDate,
    /// Where it is: `OUT/day=YYYY-MM-DD/STEM.EXT`.
    pub path: PathBuf,
    /// Attempts in it.
    pub rows: u64,
    /// Its size in bytes.
    pub bytes: u64,
}

/// One ledger table an export wrote under [`LEDGER_DIR`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportedTable {
    /// The table: one of [`LEDGER_TABLES`].
    pub table: &'static str,
    /// Its folder: `OUT/ledger/TABLE`.
    pub dir: PathBuf,
    /// Rows written.
    pub rows: u64,
    /// Bytes written, all its files together.
    pub bytes: u64,
    /// Its files: one a day for `gate_decision` (in day order, none when no decision is in
    /// range), one for the others.
    pub files: Vec<PathBuf>,
}

/// What an export wrote: totals, and every file in day order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportSummary {
    /// The output folder.
    pub out: PathBuf,
    /// Attempts written.
    pub rows: u64,
    /// Distinct UTC days of `started_at` (one `day=` folder each).
    pub days: usize,
    /// Bytes written, all files together.
    pub bytes: u64,
    /// The files, in day order.
    pub files: Vec<ExportedFile>,
    /// The ledger tables written under [`LEDGER_DIR`] (Parquet exports only; empty otherwise).
    pub tables: Vec<ExportedTable>,
}

impl std::fmt::Display for ExportSummary {
    /// `exported 422 rows, 5 days, 5 files, 61234 bytes to OUT`; for a Parquet export, a second
    /// line: `and the ledger's tables to OUT/ledger: gate_decision 41 rows (2 files),
    /// week_snapshot 0 rows, retention_sweep 0 rows, 9876 bytes`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exported {}, {}, {}, {} to {}",
            crate::words::counted(self.rows, "row", "rows"),
            crate::words::counted(self.days as u64, "day", "days"),
            crate::words::counted(self.files.len() as u64, "file", "files"),
            crate::words::counted(self.bytes, "byte", "bytes"),
            self.out.display()
        )?;
        if self.tables.is_empty() {
            return Ok(());
        }
        let parts: Vec<String> = self
            .tables
            .iter()
            .map(|t| {
                let rows = crate::words::counted(t.rows, "row", "rows");
                if t.table == "gate_decision" {
                    let files = crate::words::counted(t.files.len() as u64, "file", "files");
                    format!("{} {rows} ({files})", t.table)
                } else {
                    format!("{} {rows}", t.table)
                }
            })
            .collect();
        let bytes: u64 = self.tables.iter().map(|t| t.bytes).sum();
        write!(
            f,
            "\nand the ledger's tables to {}: {}, {}",
            self.out.join(LEDGER_DIR).display(),
            parts.join(", "),
            crate::words::counted(bytes, "byte", "bytes")
        )
    }
}

/// Parses an export bound: RFC 3339 (`2026-11-16T09:00:00Z`, `…+01:00`) or a date `YYYY-MM-DD`,
/// which means midnight UTC. Returns µs since the epoch, UTC.
///
/// Errors: [`Error::BadTimeRange`] naming the text, for anything else (a timestamp without an
/// offset, a date out of the calendar, a time outside 1970-01-01 … 2200-01-01).
pub fn parse_bound(text: &str) -> Result<i64> {
    let t = text.trim();
    let looks_like_date = t.len() == 10 && t.as_bytes()[4] == b'-' && t.as_bytes()[7] == b'-';
    let parsed = if looks_like_date {
        NaiveDate::parse_from_str(t, "%Y-%m-%d")
            .map_err(|e| format!("{text:?} is not a date: {e}"))
            .and_then(|d| laneledger_store::parse_timestamp(&format!("{d}T00:00:00Z")))
    } else {
        laneledger_store::parse_timestamp(t)
    };
    parsed.map_err(|reason| {
        Error::BadTimeRange(format!(
            "{text:?} is not a time like 2026-11-16T09:00:00Z or a date like 2026-11-16: {reason}"
        ))
    })
}

/// The UTC day of a timestamp (µs since the epoch), or `None` outside chrono's calendar.
pub fn day_of(micros: i64) -> Option<NaiveDate> {
    DateTime::<Utc>::from_timestamp_micros(micros).map(|t| t.date_naive())
}

/// Exports the ledger's attempts whose `started_at` is in `since` (inclusive) … `until`
/// (exclusive), both µs since the epoch UTC and open when `None`, into `out` (created when
/// missing), one file a UTC day, in (job_id, attempt_no) order within each file (SPEC 8 export).
///
/// Reads one ledger snapshot into Arrow batches, one set a day (in memory, as a query of
/// `job_attempt` holds them), then writes with the read transaction closed.
/// Errors: [`Error::BadTimeRange`] when `since >= until`; [`Error::Store`] when the ledger fails;
/// [`Error::Export`] naming the file that could not be written.
pub fn export(
    ledger: &Ledger,
    format: ExportFormat,
    out: &Path,
    since: Option<i64>,
    until: Option<i64>,
) -> Result<ExportSummary> {
    export_with(ledger, format, out, since, until, &GateDefaults::default())
}

/// [`export`], with the `lane.yaml` gate defaults (`gate.max_queue_age_s`,
/// `gate.reserved_service_s`) that `gate_decision` shows where a decision logged none, as the
/// ledger's SQL session does. A Parquet export also writes the ledger's tables under
/// [`LEDGER_DIR`] (see the module's documentation); the decisions take the same bounds, on
/// `decided_at`.
///
/// Errors: as [`export`].
pub fn export_with(
    ledger: &Ledger,
    format: ExportFormat,
    out: &Path,
    since: Option<i64>,
    until: Option<i64>,
    gate: &GateDefaults,
) -> Result<ExportSummary> {
    export_with_progress(ledger, format, out, since, until, gate, &Silent)
}

/// [`export_with`], telling `progress` how far it has come in two stages: `reading` (the
/// attempts read from the ledger, of those it holds) and `writing` (the attempts in range
/// written to files, of those read in range). The ledger's tables that a Parquet export writes
/// after them are one step.
///
/// Errors: as [`export`].
pub fn export_with_progress(
    ledger: &Ledger,
    format: ExportFormat,
    out: &Path,
    since: Option<i64>,
    until: Option<i64>,
    gate: &GateDefaults,
    progress: &dyn Progress,
) -> Result<ExportSummary> {
    if let (Some(s), Some(u)) = (since, until)
        && s >= u
    {
        return Err(Error::BadTimeRange(format!(
            "--since ({}) must be before --until ({})",
            laneledger_store::format_timestamp(s),
            laneledger_store::format_timestamp(u)
        )));
    }
    let in_range = |t: i64| since.is_none_or(|s| t >= s) && until.is_none_or(|u| t < u);
    let mut days = DayBatchers::default();
    let mut pushed = Ok(());
    let mut read = RowCounter::stage(progress, "reading", Some(ledger.attempt_count()?));
    ledger.for_each_attempt(|s| {
        read.add(1);
        if pushed.is_ok() && in_range(s.attempt.started_at) {
            pushed = days.push(&s);
        }
    })?;
    read.finish();
    pushed?;
    let mut summary = days.write(format, out, DEFAULT_FILE_STEM, progress)?;
    if format == ExportFormat::Parquet {
        summary.tables = write_ledger_tables(ledger, out, &in_range, gate)?;
    }
    Ok(summary)
}

/// Writes [`LEDGER_TABLES`] under `out/ledger` as Parquet: the decisions whose `decided_at` is
/// `in_range`, one file a UTC day; every week snapshot and every sweep, one file each.
fn write_ledger_tables(
    ledger: &Ledger,
    out: &Path,
    in_range: &dyn Fn(i64) -> bool,
    gate: &GateDefaults,
) -> Result<Vec<ExportedTable>> {
    let mut decisions: BTreeMap<NaiveDate, Vec<StoredDecision>> = BTreeMap::new();
    let mut bad = None;
    ledger.for_each_decision(|d| {
        if !in_range(d.decision.decided_at) {
            return;
        }
        match day_of(d.decision.decided_at) {
            Some(day) => decisions.entry(day).or_default().push(d),
            None => {
                bad.get_or_insert((d.decision.job_id.clone(), d.decision.decided_at));
            }
        }
    })?;
    if let Some((job_id, at)) = bad {
        return Err(Error::Execution(datafusion::error::DataFusionError::Execution(
            format!("decision of job {job_id}: decided_at {at} µs is outside the calendar"),
        )));
    }
    let root = out.join(LEDGER_DIR);
    let mut tables = Vec::with_capacity(LEDGER_TABLES.len());

    let dir = root.join("gate_decision");
    // Created even when no decision is in range: the folder then says "no decisions".
    std::fs::create_dir_all(&dir).map_err(|e| Error::Export {
        path: dir.clone(),
        source: e.into(),
    })?;
    let mut table = ExportedTable {
        table: "gate_decision",
        dir: dir.clone(),
        rows: 0,
        bytes: 0,
        files: Vec::with_capacity(decisions.len()),
    };
    let schema = gate_decision::schema();
    for (day, rows) in decisions {
        let batches = gate_decision::to_batches(&rows, gate)?;
        let day_dir = dir.join(format!("day={day}"));
        let path = day_dir.join("gate_decision.parquet");
        let bytes =
            write_file(&day_dir, &path, ExportFormat::Parquet, &schema, &batches, &mut |_| {}).map_err(|source| {
                Error::Export {
                    path: path.clone(),
                    source,
                }
            })?;
        table.rows += rows.len() as u64;
        table.bytes += bytes;
        table.files.push(path);
    }
    tables.push(table);

    let whole: [(&'static str, SchemaRef, Vec<RecordBatch>); 2] = [
        (
            "week_snapshot",
            crate::tables::retention_tables::week_snapshot_schema(),
            crate::tables::retention_tables::scan_week_snapshots(ledger)?,
        ),
        (
            "retention_sweep",
            crate::tables::retention_tables::sweep_schema(),
            crate::tables::retention_tables::scan_sweeps(ledger)?,
        ),
    ];
    for (name, schema, batches) in whole {
        let dir = root.join(name);
        let path = dir.join(format!("{name}.parquet"));
        let bytes =
            write_file(&dir, &path, ExportFormat::Parquet, &schema, &batches, &mut |_| {}).map_err(|source| {
                Error::Export {
                    path: path.clone(),
                    source,
                }
            })?;
        tables.push(ExportedTable {
            table: name,
            dir,
            rows: batches.iter().map(|b| b.num_rows() as u64).sum(),
            bytes,
            files: vec![path],
        });
    }
    Ok(tables)
}

/// Writes `attempts` into `out` as [`export`] does, one `DEFAULT_FILE_STEM` file a UTC day of
/// `started_at`, rows in the order given. Same as
/// [`write_attempts_named`]`(attempts, format, out, DEFAULT_FILE_STEM)`.
///
/// Errors: [`Error::Export`] naming the file that could not be written; [`Error::Execution`]
/// for a `started_at` outside the calendar (the ledger never holds one).
pub fn write_attempts(
    attempts: impl IntoIterator<Item = StoredAttempt>,
    format: ExportFormat,
    out: &Path,
) -> Result<ExportSummary> {
    write_attempts_named(attempts, format, out, DEFAULT_FILE_STEM)
}

/// Writes `attempts` into `out/day=YYYY-MM-DD/{file_stem}.{ext}`, one file a UTC day of
/// `started_at`, rows in the order given, each file through a temp name and a rename.
///
/// A caller that writes different rows into one folder more than once (the retention archive,
/// SPEC 6) gives each call its own `file_stem` (e.g. `sweep-20261130T104900Z`): a file of the same
/// name is overwritten. `file_stem` must be a plain file name (no `/`, not starting with `.`).
///
/// Errors: [`Error::Export`] naming the file that could not be written (or an invalid
/// `file_stem`); [`Error::Execution`] for a `started_at` outside the calendar.
pub fn write_attempts_named(
    attempts: impl IntoIterator<Item = StoredAttempt>,
    format: ExportFormat,
    out: &Path,
    file_stem: &str,
) -> Result<ExportSummary> {
    write_attempts_with_progress(attempts, format, out, file_stem, &Silent)
}

/// [`write_attempts_named`], telling `progress` the attempts written (stage `writing`, of the
/// attempts given).
///
/// Errors: as [`write_attempts_named`].
pub fn write_attempts_with_progress(
    attempts: impl IntoIterator<Item = StoredAttempt>,
    format: ExportFormat,
    out: &Path,
    file_stem: &str,
    progress: &dyn Progress,
) -> Result<ExportSummary> {
    let mut days = DayBatchers::default();
    for s in attempts {
        days.push(&s)?;
    }
    days.write(format, out, file_stem, progress)
}

/// `job_attempt` batches, one batcher a UTC day of `started_at`.
#[derive(Default)]
struct DayBatchers {
    days: BTreeMap<NaiveDate, Batcher>,
}

impl DayBatchers {
    fn push(&mut self, s: &StoredAttempt) -> Result<()> {
        let day = day_of(s.attempt.started_at).ok_or_else(|| {
            Error::Execution(datafusion::error::DataFusionError::Execution(format!(
                "job {} attempt {}: started_at {} µs is outside the calendar",
                s.attempt.job_id, s.attempt.attempt_no, s.attempt.started_at
            )))
        })?;
        self.days
            .entry(day)
            .or_insert_with(|| Batcher::with_capacity(DAY_CAPACITY))
            .push(s)
    }

    /// Writes one file a day into `out`, telling `progress` the rows written (stage `writing`).
    fn write(
        self,
        format: ExportFormat,
        out: &Path,
        file_stem: &str,
        progress: &dyn Progress,
    ) -> Result<ExportSummary> {
        if file_stem.is_empty() || file_stem.starts_with('.') || file_stem.contains(['/', '\\']) {
            return Err(Error::Export {
                path: out.join(file_stem),
                source: std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "the file name must be a plain name not starting with a dot",
                )
                .into(),
            });
        }
        std::fs::create_dir_all(out).map_err(|e| Error::Export {
            path: out.to_path_buf(),
            source: e.into(),
        })?;
        let mut summary = ExportSummary {
            out: out.to_path_buf(),
            rows: 0,
            days: self.days.len(),
            bytes: 0,
            files: Vec::with_capacity(self.days.len()),
            tables: Vec::new(),
        };
        let schema = job_attempt::plain_schema();
        let total = self.days.values().map(|b| b.rows() as u64).sum();
        let mut written = RowCounter::stage(progress, "writing", Some(total));
        for (day, batcher) in self.days {
            let rows = batcher.rows() as u64;
            let batches = batcher
                .finish()?
                .iter()
                .map(job_attempt::plain)
                .collect::<Result<Vec<_>>>()?;
            let dir = out.join(format!("day={day}"));
            let path = dir.join(format!("{file_stem}.{}", format.extension()));
            let on_batch = &mut |n: usize| written.add(n as u64);
            let bytes =
                write_file(&dir, &path, format, &schema, &batches, on_batch).map_err(|source| Error::Export {
                    path: path.clone(),
                    source,
                })?;
            summary.rows += rows;
            summary.bytes += bytes;
            summary.files.push(ExportedFile { day, path, rows, bytes });
        }
        written.finish();
        Ok(summary)
    }
}

/// Writes `batches` (of `schema`) to `path` (in folder `dir`) through a hidden temp file and a
/// rename; returns the file's size in bytes. `on_batch` is told the rows of each batch written.
fn write_file(
    dir: &Path,
    path: &Path,
    format: ExportFormat,
    schema: &SchemaRef,
    batches: &[RecordBatch],
    on_batch: &mut dyn FnMut(usize),
) -> std::result::Result<u64, ExportWriteError> {
    std::fs::create_dir_all(dir)?;
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or(DEFAULT_FILE_STEM);
    remove_stale_temps(dir, name)?;
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let written = write_tmp(&tmp, format, schema, batches, on_batch).and_then(|()| {
        std::fs::rename(&tmp, path)?;
        sync_dir(dir)?;
        Ok(std::fs::metadata(path)?.len())
    });
    if written.is_err() {
        // The temp file is hidden and the next run removes it; this is only tidying up.
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// Writes and syncs the temp file.
fn write_tmp(
    tmp: &Path,
    format: ExportFormat,
    schema: &SchemaRef,
    batches: &[RecordBatch],
    on_batch: &mut dyn FnMut(usize),
) -> std::result::Result<(), ExportWriteError> {
    let file = BufWriter::new(File::create(tmp)?);
    let file = match format {
        ExportFormat::Parquet => {
            let props = WriterProperties::builder().set_compression(Compression::SNAPPY).build();
            let mut w = ArrowWriter::try_new(file, schema.clone(), Some(props))?;
            for b in batches {
                w.write(b)?;
                on_batch(b.num_rows());
            }
            w.into_inner()?
        }
        ExportFormat::Arrow => {
            let mut w = arrow::ipc::writer::FileWriter::try_new(file, schema)?;
            for b in batches {
                w.write(b)?;
                on_batch(b.num_rows());
            }
            w.finish()?;
            w.into_inner()?
        }
        ExportFormat::Csv => {
            let mut w = arrow::csv::WriterBuilder::new()
                .with_header(true)
                .with_line_terminator(arrow::csv::writer::Terminator::CRLF)
                .with_timestamp_tz_format(CSV_TIMESTAMP_FORMAT.to_string())
                .build(file);
            for b in batches {
                w.write(b)?;
                on_batch(b.num_rows());
            }
            w.into_inner()
        }
    };
    let file = file.into_inner().map_err(|e| e.into_error())?;
    file.sync_all()?;
    Ok(())
}

/// Removes `.NAME.*.tmp` files a crashed run left in `dir`.
fn remove_stale_temps(dir: &Path, name: &str) -> std::io::Result<()> {
    let prefix = format!(".{name}.");
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let file_name = entry.file_name();
        if let Some(n) = file_name.to_str()
            && n.starts_with(&prefix)
            && n.ends_with(".tmp")
        {
            std::fs::remove_file(entry.path())?;
        }
    }
    Ok(())
}

/// Makes a rename in `dir` durable (a no-op where folders cannot be opened, as on Windows).
fn sync_dir(dir: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        File::open(dir)?.sync_all()?;
    }
    #[cfg(not(unix))]
    {
        let _ = dir;
    }
    Ok(())
}
