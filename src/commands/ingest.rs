//! `laneledger ingest`.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use laneledger_store::format::parse::Framed;
use laneledger_store::format::sqlite_source::SqliteSource;
use laneledger_store::ingest::mapping::source::{self, SourceReader};
use laneledger_store::ingest::mapping::{InputShape, MappedFeed, Mapping, ingest_mapped};
use laneledger_store::{
    Counters, IngestReport, InputFormat, Ledger, Progress, format_timestamp, ingest_decisions_reader_with_progress,
    ingest_reader_with_progress, try_ingest_framed,
};

use super::usage::usage;
use crate::cli::{FormatArg, KindArg};
use crate::progress::Reporter;
/// Problems printed per input; the rest are counted and kept in the ledger.
const PRINT_PROBLEMS: usize = 50;

pub fn run(
    db: &Path,
    kind: KindArg,
    format: Option<FormatArg>,
    table: Option<&str>,
    batch: usize,
    compact: bool,
    files: &[String],
) -> anyhow::Result<ExitCode> {
    let sqlite = matches!(format, Some(FormatArg::Sqlite));
    if table.is_some() && !sqlite {
        return Err(usage(
            "--table names the table of a SQLite database: it goes with --format sqlite",
        ));
    }
    if sqlite && kind != KindArg::Attempts {
        return Err(usage(
            "--format sqlite reads attempts (a `job_attempt` table), not gate decisions",
        ));
    }
    if sqlite && files.iter().any(|n| n == "-") {
        return Err(usage("--format sqlite reads a database file, not stdin (`-`)"));
    }
    let table = table.unwrap_or(laneledger_store::format::sqlite_source::DEFAULT_TABLE);
    // Every database must hold the table before anything is written.
    for name in files.iter().filter(|_| sqlite) {
        SqliteSource::open(Path::new(name), name, table)?;
    }
    // Every input must open before anything is written, so a typo cannot leave half an ingest.
    for name in files.iter().filter(|n| *n != "-") {
        File::open(name).with_context(|| format!("opening {name}"))?;
    }
    let ledger = match super::open(db) {
        Ok(ledger) => ledger,
        // `serve` holds the file: the records go through its write API.
        Err(e) => {
            let server = super::remote::through_server(db, e)?;
            if sqlite {
                return Err(anyhow::anyhow!(
                    "{} is held by `laneledger serve`, which takes NDJSON and CSV records, not a SQLite file: \
                     stop the server to move the SQLite ledger in",
                    db.display()
                ));
            }
            return server.ingest(kind, format, files, batch);
        }
    };
    let mut total = Counters::default();
    let reporter = Reporter::new("ingest");
    for name in files {
        let fmt = match format {
            Some(FormatArg::Csv) => InputFormat::Csv,
            Some(FormatArg::Ndjson) => InputFormat::Ndjson,
            Some(FormatArg::Sqlite) => {
                total.merge(&ingest_sqlite(&ledger, name, table, batch, &reporter, rows(&total))?);
                continue;
            }
            None => InputFormat::from_path(name),
        };
        let counters = ingest_one(&ledger, name, kind, fmt, batch, &reporter, rows(&total))?;
        total.merge(&counters);
    }
    // Copy-on-write commits and a file grown ahead of its pages leave space unused; give it back
    // once, at the end, when something was written.
    if compact && total.accepted + total.completed > 0 {
        ledger
            .compact()
            .with_context(|| format!("compacting {} after the ingest", db.display()))?;
    }
    reporter.finish();
    println!("{total}");
    Ok(if total.rejected > 0 || total.conflicts > 0 {
        ExitCode::from(3)
    } else {
        ExitCode::SUCCESS
    })
}

/// The records of one input (all write results count: accepted, completed, duplicate,
/// conflicting, rejected).
pub fn rows(c: &Counters) -> u64 {
    c.accepted + c.completed + c.duplicates + c.conflicts + c.rejected
}

/// Progress of one input within a command that ingests several: `before` rows came before it.
struct After<'a> {
    progress: &'a dyn Progress,
    before: u64,
}

impl Progress for After<'_> {
    fn done(&self, rows: u64) {
        self.progress.done(self.before + rows);
    }
}

/// Ingests one input, telling `reporter` the records written so far (`before` of them came from
/// the inputs before: one count for the whole command); its problems are printed out of the
/// bar's way.
pub fn ingest_one(
    ledger: &Ledger,
    name: &str,
    kind: KindArg,
    fmt: InputFormat,
    batch: usize,
    reporter: &Reporter,
    before: u64,
) -> anyhow::Result<Counters> {
    let progress = &After {
        progress: reporter,
        before,
    };
    let reader: Box<dyn BufRead> = if name == "-" {
        Box::new(BufReader::new(std::io::stdin().lock()))
    } else {
        let f = File::open(name).with_context(|| format!("opening {name}"))?;
        Box::new(BufReader::with_capacity(1 << 16, f))
    };
    let report = match kind {
        KindArg::Attempts => ingest_reader_with_progress(ledger, name, reader, fmt, batch, progress)?,
        KindArg::Decisions => ingest_decisions_reader_with_progress(ledger, name, reader, fmt, batch, progress)?,
    };
    reporter.suspend(|| print_problems(name, &report));
    Ok(report.counters)
}

/// Ingests the rows of one SQLite table (seed 000's `job_attempt`) as attempts; rejects and
/// conflicts name the row's rowid.
fn ingest_sqlite(
    ledger: &Ledger,
    name: &str,
    table: &str,
    batch: usize,
    reporter: &Reporter,
    before: u64,
) -> anyhow::Result<Counters> {
    let rows = SqliteSource::open(Path::new(name), name, table)?;
    // The count given is of rows read, which is the rows written when a batch is committed.
    let report = try_ingest_framed(ledger, name, rows, batch, |n| reporter.done(before + n))?;
    reporter.suspend(|| print_problems(name, &report));
    Ok(report.counters)
}

/// Prints the first [`PRINT_PROBLEMS`] problems of one input to stderr, and how many more.
fn print_problems(name: &str, report: &IngestReport) {
    for p in report.problems.iter().take(PRINT_PROBLEMS) {
        eprintln!("{p}");
    }
    if report.problems.len() > PRINT_PROBLEMS {
        eprintln!(
            "{name}: … and {} more (all kept: SELECT * FROM ingest_reject / attempt_conflict)",
            report.problems.len() - PRINT_PROBLEMS
        );
    }
}

/// How `ingest --mapping` runs.
pub struct MappedOptions<'a> {
    /// A built-in mapping's name or a mapping file.
    pub mapping: &'a str,
    /// Whether the declared idempotency-key fallback is allowed.
    pub idem_fallback: bool,
    /// Write nothing: print what the mapping finds.
    pub dry_run: bool,
    /// `--format csv|ndjson` overrides the file extension.
    pub format: Option<FormatArg>,
    /// Records per commit.
    pub batch: usize,
    /// Compact the file at the end.
    pub compact: bool,
}

/// The mapped records shown by `--dry-run`.
const DRY_RUN_SHOWN: usize = 3;

/// `ingest --mapping`: a router's own log, through a built-in mapping or a mapping file.
pub fn run_mapped(db: &Path, kind: KindArg, o: &MappedOptions, files: &[String]) -> anyhow::Result<ExitCode> {
    if kind != KindArg::Attempts {
        return Err(usage("--mapping reads attempts, not gate decisions"));
    }
    if matches!(o.format, Some(FormatArg::Sqlite)) {
        return Err(usage(
            "--format sqlite reads the ledger table as it is: it takes no --mapping",
        ));
    }
    // A bad mapping file is refused, naming its line and key, before anything is opened.
    let mut mapping = Mapping::resolve(o.mapping)?;
    mapping.allow_idem_fallback(o.idem_fallback);
    let inputs = expand_inputs(files)?;
    if o.dry_run {
        return dry_run(&mapping, o.format, &inputs);
    }
    let ledger = match super::open(db) {
        Ok(ledger) => ledger,
        Err(e) => {
            let server = super::remote::through_server(db, e)?;
            return Err(server.mapped_refused(&mapping));
        }
    };
    let mut total = Counters::default();
    let (mut skipped, mut fallback) = (0u64, 0u64);
    let reporter = Reporter::new("ingest");
    for name in &inputs {
        let records = mapped_records(&mapping, o.format, name)?;
        let before = rows(&total);
        // The records the mapping gave so far, which are the rows written when a batch commits.
        let report = ingest_mapped(&ledger, &mapping, name, records, o.batch, |n| reporter.done(before + n))?;
        reporter.suspend(|| print_problems(name, &report.ingest));
        total.merge(&report.ingest.counters);
        skipped += report.skipped;
        fallback += report.idem_fallback;
    }
    if o.compact && total.accepted + total.completed > 0 {
        ledger
            .compact()
            .with_context(|| format!("compacting {} after the ingest", db.display()))?;
    }
    reporter.finish();
    println!("{total}");
    if skipped > 0 {
        println!(
            "{} not taken as attempts (the {} mapping's filter: not a model call)",
            plural(skipped, "record", "records"),
            mapping.name()
        );
    }
    if fallback > 0 {
        println!(
            "{} keyed by the request id (--idem-fallback): duplicates across client retries cannot be seen through such keys",
            plural(fallback, "attempt", "attempts")
        );
    }
    Ok(if total.rejected > 0 || total.conflicts > 0 {
        ExitCode::from(3)
    } else {
        ExitCode::SUCCESS
    })
}

fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// The inputs: files as given (`-` for stdin); a folder stands for its data files, recursively,
/// in name order (a bucket's objects are named by time).
fn expand_inputs(files: &[String]) -> anyhow::Result<Vec<String>> {
    fn walk(dir: &Path, out: &mut Vec<String>) -> anyhow::Result<()> {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .with_context(|| format!("reading the folder {}", dir.display()))?
            .collect::<Result<_, _>>()
            .with_context(|| format!("reading the folder {}", dir.display()))?;
        entries.sort_by_key(|e| e.path());
        for e in entries {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out)?;
            } else if let Some(ext) = p.extension().and_then(|e| e.to_str())
                && ["json", "ndjson", "jsonl", "csv", "parquet"].contains(&ext.to_ascii_lowercase().as_str())
            {
                out.push(p.display().to_string());
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    for name in files {
        let p = Path::new(name);
        if name != "-" && p.is_dir() {
            let before = out.len();
            walk(p, &mut out)?;
            if out.len() == before {
                anyhow::bail!("{name}: the folder holds no .json, .ndjson, .jsonl, .csv or .parquet file");
            }
        } else {
            if name != "-" {
                File::open(name).with_context(|| format!("opening {name}"))?;
            }
            out.push(name.clone());
        }
    }
    Ok(out)
}

/// The source records of one input for `mapping`: OTLP for the otlp mapping, else by `--format`
/// or the file's extension (CSV, Parquet, or JSON: NDJSON, an array or one object).
fn mapped_records(
    mapping: &Mapping,
    format: Option<FormatArg>,
    name: &str,
) -> anyhow::Result<Box<dyn Iterator<Item = std::io::Result<source::Item>>>> {
    let lower = name.to_ascii_lowercase();
    if mapping.input() != InputShape::Otlp && format.is_none() && lower.ends_with(".parquet") {
        let rows = laneledger_query::tables::parquet_source::parquet_records(Path::new(name), name)
            .with_context(|| format!("reading {name} as Parquet"))?;
        return Ok(Box::new(rows));
    }
    let shape = match (mapping.input(), format) {
        (InputShape::Otlp, _) => InputShape::Otlp,
        (_, Some(FormatArg::Csv)) => InputShape::Csv,
        (_, Some(_)) => InputShape::Json,
        (_, None) if lower.ends_with(".csv") => InputShape::Csv,
        (shape, None) => shape,
    };
    let reader: Box<dyn BufRead> = if name == "-" {
        Box::new(BufReader::new(std::io::stdin().lock()))
    } else {
        let f = File::open(name).with_context(|| format!("opening {name}"))?;
        Box::new(BufReader::with_capacity(1 << 16, f))
    };
    Ok(Box::new(SourceReader::new(name, reader, shape)))
}

/// `--dry-run`: maps every input with nothing stored before it and writes nothing; prints the
/// share of attempts where each field was found, then the first mapped records.
fn dry_run(mapping: &Mapping, format: Option<FormatArg>, inputs: &[String]) -> anyhow::Result<ExitCode> {
    let mut found: std::collections::BTreeMap<&'static str, u64> = Default::default();
    let (mut attempts, mut skipped, mut fallback, mut rejected) = (0u64, 0u64, 0u64, 0u64);
    let mut shown: Vec<String> = Vec::new();
    let mut problems: Vec<String> = Vec::new();
    for name in inputs {
        let records = mapped_records(mapping, format, name)?;
        let mut feed = MappedFeed::new(mapping, name, records, None);
        for f in feed.by_ref() {
            match f.with_context(|| format!("reading {name}"))? {
                Framed::Record { line, record, .. } => {
                    if shown.len() < DRY_RUN_SHOWN {
                        shown.push(format!("{name}:{line}: {}", native_json(&record)));
                    }
                }
                Framed::Reject(r) => {
                    rejected += 1;
                    if problems.len() < PRINT_PROBLEMS {
                        problems.push(match &r.field {
                            Some(f) => format!("{}:{}: {f}: {}", r.source, r.line, r.reason),
                            None => format!("{}:{}: {}", r.source, r.line, r.reason),
                        });
                    }
                }
            }
        }
        for (k, v) in &feed.found {
            *found.entry(k).or_default() += v;
        }
        attempts += feed.attempts;
        skipped += feed.skipped;
        fallback += feed.idem_fallback;
    }
    println!(
        "dry run of the {} mapping: {} found, {} skipped by its filter, {} would be rejected; nothing written",
        mapping.name(),
        plural(attempts, "attempt", "attempts"),
        skipped,
        rejected
    );
    println!("field          found in");
    for name in laneledger_store::ingest::mapping::COUNTED_FIELDS {
        let n = found.get(name).copied().unwrap_or(0);
        let share = if attempts == 0 {
            0.0
        } else {
            100.0 * n as f64 / attempts as f64
        };
        let required = ["job_id", "idem_key", "attempt_no", "lane", "started_at"].contains(name);
        let flag = if required && n < attempts {
            "   <- required: records without it are rejected"
        } else {
            ""
        };
        println!("{name:<14} {share:>5.1}% ({n} of {attempts}){flag}");
    }
    if fallback > 0 {
        println!(
            "idem_key: {} of {attempts} from the declared fallback (the request id), not a client key",
            fallback
        );
    }
    for p in &problems {
        eprintln!("{p}");
    }
    if !shown.is_empty() {
        println!("first mapped attempts:");
        for s in &shown {
            println!("{s}");
        }
    }
    Ok(if rejected > 0 {
        ExitCode::from(3)
    } else {
        ExitCode::SUCCESS
    })
}

/// An attempt as the native NDJSON record it stands for.
fn native_json(a: &laneledger_store::Attempt) -> String {
    let mut m = serde_json::Map::new();
    m.insert("job_id".into(), a.job_id.clone().into());
    m.insert("idem_key".into(), a.idem_key.clone().into());
    m.insert("attempt_no".into(), a.attempt_no.into());
    m.insert("lane".into(), a.lane.as_str().into());
    m.insert("started_at".into(), format_timestamp(a.started_at).into());
    if let Some(t) = a.ended_at {
        m.insert("ended_at".into(), format_timestamp(t).into());
    }
    if let Some(o) = a.outcome {
        m.insert("outcome".into(), o.as_str().into());
    }
    let opt_u = [("tokens_in", a.tokens_in), ("tokens_out", a.tokens_out)];
    for (k, v) in opt_u {
        if let Some(v) = v {
            m.insert(k.into(), v.into());
        }
    }
    if let Some(v) = &a.artifact_id {
        m.insert("artifact_id".into(), v.clone().into());
    }
    if let Some(v) = a.http_status {
        m.insert("http_status".into(), v.into());
    }
    if let Some(v) = a.provider_code {
        m.insert("provider_code".into(), v.into());
    }
    for (k, v) in [("key_id", &a.key_id), ("pool_id", &a.pool_id), ("model", &a.model)] {
        if let Some(v) = v {
            m.insert(k.into(), v.clone().into());
        }
    }
    if let Some(attrs) = &a.attrs {
        m.insert(
            "attrs".into(),
            serde_json::from_str(attrs).unwrap_or_else(|_| attrs.clone().into()),
        );
    }
    serde_json::Value::Object(m).to_string()
}

/// `laneledger mappings [NAME]`: the built-in mappings, or one's YAML.
pub fn mappings(name: Option<&str>) -> anyhow::Result<ExitCode> {
    use laneledger_store::ingest::mapping::BUILTIN;
    match name {
        None => {
            for (name, text) in BUILTIN {
                let about = Mapping::from_yaml(text, name).map(|m| m.about().to_string())?;
                println!("{name:<18} {about}");
            }
            println!(
                "\n`laneledger mappings NAME` prints one to copy and edit; docs/mappings.md describes the format."
            );
        }
        Some(name) => match BUILTIN.iter().find(|(n, _)| *n == name) {
            Some((_, text)) => print!("{text}"),
            None => {
                let names: Vec<&str> = BUILTIN.iter().map(|(n, _)| *n).collect();
                eprintln!("laneledger: no built-in mapping {name:?}; one of {}", names.join(", "));
                return Ok(ExitCode::from(2));
            }
        },
    }
    Ok(ExitCode::SUCCESS)
}
