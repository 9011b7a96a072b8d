//! `export` (SPEC 8): the sample data through Parquet, Arrow IPC and CSV and back, the `day=`
//! folders, `--since`/`--until`, reruns that converge, and DuckDB reading the Parquet export.

mod common;

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Command;

use arrow::array::{Array, RecordBatch, StringArray, TimestampMicrosecondArray};
use arrow::compute::{SortColumn, concat_batches, lexsort_to_indices, take_record_batch};
use laneledger_query::archive::export::{
    DEFAULT_FILE_STEM, ExportFormat, ExportSummary, day_of, export, parse_bound, write_attempts, write_attempts_named,
};
use laneledger_query::archive::retention::{SweepOptions, SweepOutcome, sweep};
use laneledger_query::tables::job_attempt;
use laneledger_query::{Error, OutputFormat, QueryResult, Session, format_result};
use laneledger_store::storage::retention::RetentionRule;
use laneledger_store::{DEFAULT_BATCH, InputFormat, Ledger, StoredAttempt, ingest_decisions_reader};

/// Every attempt file of sample-data/.
const SAMPLE_ATTEMPTS: [&str; 5] = [
    "drill-nopin-2026-W47.ndjson",
    "drill-pin-2026-W48.ndjson",
    "keys-incident-2026-10-17.ndjson",
    "trace-code-2023-11-16.ndjson",
    "trace-conv-2023-11-16.ndjson",
];

/// The DuckDB release `.ci/run` installs.
const DUCKDB_PIP: &str = "pip install duckdb==2.0.1";

const FORMATS: [ExportFormat; 3] = [ExportFormat::Parquet, ExportFormat::Arrow, ExportFormat::Csv];

/// The ledger's answer to `sql` as one batch.
async fn query_batch(session: &Session, sql: &str) -> RecordBatch {
    let r = session.query(sql).await.unwrap();
    concat_batches(&r.schema, &r.batches).unwrap()
}

/// `job_attempt`'s rows (checked to have its schema) with the label columns as plain text, as
/// the files hold them.
fn plain(batch: RecordBatch) -> RecordBatch {
    assert_eq!(batch.schema().fields(), job_attempt::schema().fields());
    job_attempt::plain(&batch).unwrap()
}

/// `batch` sorted by (job_id, attempt_no).
fn sorted(batch: &RecordBatch) -> RecordBatch {
    let key = |name: &str| SortColumn {
        values: batch.column_by_name(name).unwrap().clone(),
        options: None,
    };
    let idx = lexsort_to_indices(&[key("job_id"), key("attempt_no")], None).unwrap();
    take_record_batch(batch, &idx).unwrap()
}

/// Reads one exported file back with the format's own Arrow reader.
fn read_file(format: ExportFormat, path: &Path) -> Vec<RecordBatch> {
    let file = File::open(path).unwrap();
    match format {
        ExportFormat::Parquet => parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
            .unwrap()
            .build()
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap(),
        ExportFormat::Arrow => arrow::ipc::reader::FileReader::try_new(file, None)
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap(),
        ExportFormat::Csv => arrow::csv::ReaderBuilder::new(job_attempt::plain_schema())
            .with_header(true)
            .build(file)
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap(),
    }
}

/// Every file under `dir`, relative path → bytes.
fn files_under(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(root, &p, out);
            } else {
                out.insert(p.strip_prefix(root).unwrap().to_path_buf(), std::fs::read(&p).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// Reads every file of `summary` back, checking that it sits in `day=<its day>/` and that each
/// row's `started_at` falls on that UTC day; returns all rows sorted by (job_id, attempt_no).
fn read_back(format: ExportFormat, summary: &ExportSummary) -> RecordBatch {
    let mut all = Vec::new();
    for f in &summary.files {
        let folder = f.path.parent().unwrap();
        assert_eq!(folder.file_name().unwrap().to_str().unwrap(), format!("day={}", f.day));
        assert_eq!(folder.parent().unwrap(), summary.out);
        assert_eq!(
            f.path.file_name().unwrap().to_str().unwrap(),
            format!("{DEFAULT_FILE_STEM}.{}", format.extension())
        );
        assert_eq!(f.bytes, std::fs::metadata(&f.path).unwrap().len());
        let batches = read_file(format, &f.path);
        let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
        assert_eq!(rows as u64, f.rows, "{}", f.path.display());
        for b in &batches {
            assert_eq!(
                b.schema().fields(),
                job_attempt::plain_schema().fields(),
                "{}",
                f.path.display()
            );
            let started = b
                .column_by_name("started_at")
                .unwrap()
                .as_any()
                .downcast_ref::<TimestampMicrosecondArray>()
                .unwrap();
            for t in started.values() {
                assert_eq!(day_of(*t), Some(f.day), "{}", f.path.display());
            }
        }
        all.extend(batches);
    }
    sorted(&concat_batches(&job_attempt::plain_schema(), &all).unwrap())
}

/// The same rows, values and types, column by column.
fn assert_same_rows(format: ExportFormat, got: &RecordBatch, expected: &RecordBatch) {
    assert_eq!(got.num_rows(), expected.num_rows(), "{format:?}: row count");
    assert_eq!(got.schema().fields(), expected.schema().fields(), "{format:?}: schema");
    for (i, field) in expected.schema().fields().iter().enumerate() {
        assert_eq!(
            got.column(i).as_ref(),
            expected.column(i).as_ref(),
            "{format:?}: column {}",
            field.name()
        );
    }
}

/// The UTC days (`YYYY-MM-DD`) of `started_at` in `batch`, with the rows of each.
fn days_of(batch: &RecordBatch) -> BTreeMap<String, u64> {
    let started = batch
        .column_by_name("started_at")
        .unwrap()
        .as_any()
        .downcast_ref::<TimestampMicrosecondArray>()
        .unwrap();
    let mut days = BTreeMap::new();
    for t in started.values() {
        *days.entry(day_of(*t).unwrap().to_string()).or_default() += 1;
    }
    days
}

#[tokio::test]
async fn parquet_arrow_and_csv_give_back_exactly_the_rows_of_job_attempt_in_day_folders() {
    let (_d, ledger) = common::ledger_from(&SAMPLE_ATTEMPTS);
    let session = Session::new(ledger.clone()).await.unwrap();
    // The files hold the label columns as plain text.
    let expected = plain(query_batch(&session, "SELECT * FROM job_attempt ORDER BY job_id, attempt_no").await);
    assert_eq!(expected.schema().fields(), job_attempt::plain_schema().fields());
    let per_day = query_batch(
        &session,
        "SELECT to_char(started_at, '%Y-%m-%d') AS day, COUNT(*) AS n FROM job_attempt GROUP BY 1 ORDER BY 1",
    )
    .await;
    let sql_days: BTreeMap<String, u64> = {
        let day = per_day.column(0).as_any().downcast_ref::<StringArray>().unwrap();
        let n = per_day
            .column(1)
            .as_any()
            .downcast_ref::<arrow::array::Int64Array>()
            .unwrap();
        (0..per_day.num_rows())
            .map(|i| (day.value(i).to_string(), n.value(i) as u64))
            .collect()
    };
    assert_eq!(days_of(&expected), sql_days);
    assert!(sql_days.len() > 2, "the sample data spans several days: {sql_days:?}");

    for format in FORMATS {
        let out = tempfile::tempdir().unwrap();
        let summary = export(&ledger, format, out.path(), None, None).unwrap();
        assert_eq!(summary.rows, expected.num_rows() as u64, "{format:?}");
        assert_eq!(summary.days, sql_days.len(), "{format:?}");
        assert_eq!(summary.files.len(), sql_days.len(), "{format:?}");
        let exported_days: BTreeMap<String, u64> = summary.files.iter().map(|f| (f.day.to_string(), f.rows)).collect();
        assert_eq!(exported_days, sql_days, "{format:?}");
        assert_eq!(summary.bytes, summary.files.iter().map(|f| f.bytes).sum::<u64>());
        // Nothing else in the folder: one file a day (and, for Parquet, the ledger's tables under
        // ledger/), no temp files left.
        let on_disk: Vec<PathBuf> = files_under(out.path()).into_keys().collect();
        let mut listed: Vec<PathBuf> = summary
            .files
            .iter()
            .map(|f| &f.path)
            .chain(summary.tables.iter().flat_map(|t| &t.files))
            .map(|p| p.strip_prefix(out.path()).unwrap().to_path_buf())
            .collect();
        listed.sort();
        assert_eq!(on_disk, listed, "{format:?}");
        assert_same_rows(format, &read_back(format, &summary), &expected);
    }
}

/// Awkward values: quotes, commas and non-ASCII text, JSON attrs, sub-second times, NULLs,
/// an empty model, a day boundary.
const EDGE_LINES: &str = r#"{"job_id":"j,1","idem_key":"k \"quoted\"","attempt_no":1,"lane":"free","started_at":"2026-11-16T23:59:59.999999Z","ended_at":"2026-11-17T00:00:00.000001Z","outcome":"ambiguous","tokens_in":7,"model":"","router":"r\u00e9seau, \"eu\""}
{"job_id":"j,1","idem_key":"k \"quoted\"","attempt_no":2,"lane":"paid","started_at":"2026-11-17T00:00:00Z","outcome":"ok","tokens_out":9,"artifact_id":"été","http_status":200,"provider_code":0}
{"job_id":"j2","idem_key":"k2","attempt_no":1,"lane":"free","started_at":"1970-01-01T00:00:00Z"}"#;

#[tokio::test]
async fn awkward_values_round_trip_exactly_and_csv_reads_an_empty_string_as_null() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path().join("l.redb")).unwrap();
    let r = laneledger_store::ingest_reader(
        &ledger,
        "edge",
        EDGE_LINES.as_bytes(),
        laneledger_store::InputFormat::Ndjson,
        laneledger_store::DEFAULT_BATCH,
        |_| {},
    )
    .unwrap();
    assert_eq!(r.counters.accepted, 3, "{:?}", r.problems);
    let session = Session::new(ledger.clone()).await.unwrap();
    // The files hold the label columns as plain text.
    let expected = plain(query_batch(&session, "SELECT * FROM job_attempt ORDER BY job_id, attempt_no").await);
    for format in FORMATS {
        let out = tempfile::tempdir().unwrap();
        let summary = export(&ledger, format, out.path(), None, None).unwrap();
        let days: Vec<String> = summary.files.iter().map(|f| f.day.to_string()).collect();
        assert_eq!(days, ["1970-01-01", "2026-11-16", "2026-11-17"], "{format:?}");
        let back = read_back(format, &summary);
        if format == ExportFormat::Csv {
            // CSV has one spelling for NULL and "" (an empty field): the empty model comes back NULL.
            let model = back.column_by_name("model").unwrap();
            assert!(model.is_null(0), "{format:?}");
            let exp_model = expected.column_by_name("model").unwrap();
            assert_eq!(exp_model.as_any().downcast_ref::<StringArray>().unwrap().value(0), "");
            let model_idx = expected.schema().index_of("model").unwrap();
            let mut cols = expected.columns().to_vec();
            cols[model_idx] = model.clone();
            assert_same_rows(format, &back, &RecordBatch::try_new(expected.schema(), cols).unwrap());
        } else {
            assert_same_rows(format, &back, &expected);
        }
    }
}

#[tokio::test]
async fn since_is_inclusive_and_until_exclusive_on_started_at() {
    let (_d, ledger) = common::ledger_from(&["drill-nopin-2026-W47.ndjson", "drill-pin-2026-W48.ndjson"]);
    let session = Session::new(ledger.clone()).await.unwrap();
    let count = |sql: String| {
        let session = session.clone();
        async move {
            let b = query_batch(&session, &sql).await;
            b.column(0)
                .as_any()
                .downcast_ref::<arrow::array::Int64Array>()
                .unwrap()
                .value(0) as u64
        }
    };
    // The nopin drill's attempts start 2026-11-16 … 2026-11-20 and the pin drill's a week later.
    let cases: [(Option<&str>, Option<&str>, &str); 4] = [
        (
            Some("2026-11-17"),
            Some("2026-11-19T12:00:00Z"),
            "started_at >= TIMESTAMP '2026-11-17T00:00:00Z' AND started_at < TIMESTAMP '2026-11-19T12:00:00Z'",
        ),
        (
            Some("2026-11-23T01:00:00+01:00"),
            None,
            "started_at >= TIMESTAMP '2026-11-23T00:00:00Z'",
        ),
        (
            None,
            Some("2026-11-18"),
            "started_at < TIMESTAMP '2026-11-18T00:00:00Z'",
        ),
        (
            Some("2030-01-01"),
            None,
            "started_at >= TIMESTAMP '2030-01-01T00:00:00Z'",
        ),
    ];
    let total = ledger.attempt_count().unwrap();
    for (since, until, predicate) in cases {
        let expected = count(format!("SELECT COUNT(*) FROM job_attempt WHERE {predicate}")).await;
        let expected_days = count(format!(
            "SELECT COUNT(DISTINCT to_char(started_at, '%Y-%m-%d')) FROM job_attempt WHERE {predicate}"
        ))
        .await;
        let out = tempfile::tempdir().unwrap();
        let since_us = since.map(|t| parse_bound(t).unwrap());
        let until_us = until.map(|t| parse_bound(t).unwrap());
        let summary = export(&ledger, ExportFormat::Arrow, out.path(), since_us, until_us).unwrap();
        assert_eq!(summary.rows, expected, "{since:?} … {until:?}");
        assert_eq!(summary.days as u64, expected_days, "{since:?} … {until:?}");
        let back = read_back(ExportFormat::Arrow, &summary);
        assert_eq!(back.num_rows() as u64, expected);
        let started = back
            .column_by_name("started_at")
            .unwrap()
            .as_any()
            .downcast_ref::<TimestampMicrosecondArray>()
            .unwrap();
        for t in started.values() {
            assert!(since_us.is_none_or(|s| *t >= s) && until_us.is_none_or(|u| *t < u));
        }
        if since == Some("2030-01-01") {
            assert_eq!(
                (summary.rows, summary.days, summary.files.len(), summary.bytes),
                (0, 0, 0, 0)
            );
        } else {
            assert!(
                expected > 0 && expected < total,
                "{since:?} … {until:?} selects a part: {expected}"
            );
        }
    }
    // The first case's range ends at noon: 2026-11-19 is only partly in it.
    let out = tempfile::tempdir().unwrap();
    let summary = export(
        &ledger,
        ExportFormat::Csv,
        out.path(),
        Some(parse_bound("2026-11-17").unwrap()),
        Some(parse_bound("2026-11-19T12:00:00Z").unwrap()),
    )
    .unwrap();
    let days: Vec<String> = summary.files.iter().map(|f| f.day.to_string()).collect();
    assert_eq!(days, ["2026-11-17", "2026-11-18", "2026-11-19"]);
}

#[test]
fn a_bound_is_rfc3339_or_a_date_at_midnight_utc_and_anything_else_is_refused() {
    assert_eq!(
        parse_bound("2026-11-17").unwrap(),
        parse_bound("2026-11-17T00:00:00Z").unwrap()
    );
    assert_eq!(
        parse_bound("2026-11-17T01:30:00+01:00").unwrap(),
        parse_bound("2026-11-17T00:30:00Z").unwrap()
    );
    assert_eq!(parse_bound("1970-01-02").unwrap(), 86_400_000_000);
    for bad in [
        "",
        "yesterday",
        "2026-13-01",
        "2026-02-30",
        "2026-11-17T00:00:00",
        "17/11/2026",
        "2300-01-01",
    ] {
        match parse_bound(bad) {
            Err(Error::BadTimeRange(msg)) => assert!(msg.contains(&format!("{bad:?}")), "{msg}"),
            other => panic!("{bad:?}: {other:?}"),
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path().join("l.redb")).unwrap();
    let t = parse_bound("2026-11-17").unwrap();
    for (since, until) in [(t, t), (t + 1, t)] {
        match export(
            &ledger,
            ExportFormat::Parquet,
            &dir.path().join("out"),
            Some(since),
            Some(until),
        ) {
            Err(Error::BadTimeRange(msg)) => assert!(msg.contains("must be before --until"), "{msg}"),
            other => panic!("{other:?}"),
        }
    }
    assert!(!dir.path().join("out").exists());
}

#[test]
fn a_rerun_leaves_the_same_files_and_a_crashed_run_converges() {
    let (_d, ledger) = common::ledger_from(&["drill-pin-2026-W48.ndjson", "keys-incident-2026-10-17.ndjson"]);
    for format in FORMATS {
        let out = tempfile::tempdir().unwrap();
        let first = export(&ledger, format, out.path(), None, None).unwrap();
        let files = files_under(out.path());
        // A Parquet export also writes week_snapshot and retention_sweep (this ledger has no decisions).
        let ledger_files = if format == ExportFormat::Parquet { 2 } else { 0 };
        assert_eq!(files.len(), first.files.len() + ledger_files, "{format:?}");
        let second = export(&ledger, format, out.path(), None, None).unwrap();
        assert_eq!(second, first, "{format:?}");
        assert_eq!(files_under(out.path()), files, "{format:?}");

        // A crash: one file cut short, a temp file left behind.
        let victim = &first.files[0];
        let bytes = std::fs::read(&victim.path).unwrap();
        std::fs::write(&victim.path, &bytes[..bytes.len() / 2]).unwrap();
        let temp = victim.path.parent().unwrap().join(format!(
            ".{}.4242.tmp",
            victim.path.file_name().unwrap().to_str().unwrap()
        ));
        std::fs::write(&temp, b"half a file").unwrap();
        let third = export(&ledger, format, out.path(), None, None).unwrap();
        assert_eq!(third, first, "{format:?}");
        assert_eq!(files_under(out.path()), files, "{format:?}: the rerun converges");
    }
}

#[test]
fn write_attempts_partitions_by_day_and_named_files_sit_side_by_side() {
    let (_d, ledger) = common::ledger_from(&["drill-nopin-2026-W47.ndjson"]);
    let mut attempts: Vec<StoredAttempt> = Vec::new();
    ledger.for_each_attempt(|s| attempts.push(s)).unwrap();
    // Two sweeps whose jobs share every day: even and odd job numbers.
    let (early, late): (Vec<_>, Vec<_>) = attempts
        .iter()
        .cloned()
        .partition(|s| s.attempt.job_id.ends_with(['0', '2', '4', '6', '8']));
    assert!(!early.is_empty() && !late.is_empty());

    let out = tempfile::tempdir().unwrap();
    let a = write_attempts_named(early.clone(), ExportFormat::Parquet, out.path(), "sweep-1").unwrap();
    let b = write_attempts_named(late.clone(), ExportFormat::Parquet, out.path(), "sweep-2").unwrap();
    assert_eq!(a.rows, early.len() as u64);
    assert_eq!(b.rows, late.len() as u64);
    let on_disk = files_under(out.path());
    assert_eq!(
        on_disk.len(),
        a.files.len() + b.files.len(),
        "both sweeps' files are kept"
    );
    for f in a.files.iter().chain(&b.files) {
        assert!(f.path.exists(), "{}", f.path.display());
    }
    let mut both = read_back_named(&a);
    both.extend(read_back_named(&b));
    let both = sorted(&concat_batches(&job_attempt::plain_schema(), &both).unwrap());
    let plain: Vec<RecordBatch> = job_attempt::to_batches(&attempts)
        .unwrap()
        .iter()
        .map(|b| job_attempt::plain(b).unwrap())
        .collect();
    let all = sorted(&concat_batches(&job_attempt::plain_schema(), &plain).unwrap());
    assert_same_rows(ExportFormat::Parquet, &both, &all);

    // The default name is the export's; a bad name is refused before anything is written.
    let whole = write_attempts(attempts.clone(), ExportFormat::Parquet, out.path()).unwrap();
    assert_eq!(whole.rows, attempts.len() as u64);
    assert!(
        whole
            .files
            .iter()
            .all(|f| f.path.ends_with(format!("day={}/attempts.parquet", f.day)))
    );
    for bad in ["", ".hidden", "a/b"] {
        match write_attempts_named(attempts.clone(), ExportFormat::Csv, out.path(), bad) {
            Err(Error::Export { .. }) => {}
            other => panic!("{bad:?}: {other:?}"),
        }
    }
    let blocked = out.path().join("a-file");
    std::fs::write(&blocked, b"").unwrap();
    match write_attempts(attempts, ExportFormat::Csv, &blocked) {
        Err(e @ Error::Export { .. }) => assert!(e.to_string().contains("a-file"), "{e}"),
        other => panic!("{other:?}"),
    }
}

/// [`read_back`] for files with any name.
fn read_back_named(summary: &ExportSummary) -> Vec<RecordBatch> {
    summary
        .files
        .iter()
        .flat_map(|f| read_file(ExportFormat::Parquet, &f.path))
        .collect()
}

/// The DuckDB script: makes `job_attempt` a view over the Parquet export (hive partitioning),
/// creates seed 000's `job_rollup` from the text given, and prints its columns, the export's
/// column types and the rollup's rows as JSON.
const DUCKDB_SCRIPT: &str = r#"
import json, sys
import duckdb
glob, rollup_view = sys.argv[1], sys.argv[2]
con = duckdb.connect()
con.execute("CREATE VIEW job_attempt AS SELECT * FROM read_parquet(?, hive_partitioning=true)".replace("?", "'" + glob.replace("'", "''") + "'"))
con.execute(rollup_view)
types = [[r[0], r[1]] for r in con.execute("DESCRIBE job_attempt").fetchall()]
cur = con.execute("SELECT * FROM job_rollup ORDER BY job_id")
columns = [d[0] for d in cur.description]
rows = [list(r) for r in cur.fetchall()]
print(json.dumps({"types": types, "columns": columns, "rows": rows}))
"#;

#[tokio::test]
async fn duckdb_reads_the_parquet_export_and_gives_the_ledgers_job_rollup() {
    let has_duckdb = Command::new("python3").args(["-c", "import duckdb"]).output();
    match has_duckdb {
        Ok(o) if o.status.success() => {}
        Ok(o) => panic!(
            "DuckDB for Python is missing; install it with `{DUCKDB_PIP}` (as .ci/run does): {}",
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => panic!("python3 is needed to run DuckDB ({e}); install Python 3, then `{DUCKDB_PIP}`"),
    }
    let (_d, ledger) = common::ledger_from(&SAMPLE_ATTEMPTS);
    let session = Session::new(ledger.clone()).await.unwrap();
    let out = tempfile::tempdir().unwrap();
    let summary = export(&ledger, ExportFormat::Parquet, out.path(), None, None).unwrap();
    assert!(summary.days > 2);

    let glob = format!("{}/*/*.parquet", out.path().display());
    let o = Command::new("python3")
        .args([
            "-c",
            DUCKDB_SCRIPT,
            &glob,
            laneledger_query::derived::views::SEED_JOB_ROLLUP_VIEW,
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "duckdb: {}", String::from_utf8_lossy(&o.stderr));
    let duck: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();

    // DuckDB sees job_attempt's columns with their types, then the hive partition `day`.
    let types: Vec<(String, String)> = duck["types"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t[0].as_str().unwrap().to_string(), t[1].as_str().unwrap().to_string()))
        .collect();
    let expected_types: Vec<(String, String)> = job_attempt::plain_schema()
        .fields()
        .iter()
        .map(|f| {
            let t = match f.data_type() {
                arrow::datatypes::DataType::Utf8 => "VARCHAR",
                arrow::datatypes::DataType::Int64 => "BIGINT",
                arrow::datatypes::DataType::Timestamp(_, Some(_)) => "TIMESTAMP WITH TIME ZONE",
                other => panic!("no DuckDB type for {other}"),
            };
            (f.name().clone(), t.to_string())
        })
        .chain([("day".to_string(), "DATE".to_string())])
        .collect();
    assert_eq!(types, expected_types);

    // Every job_rollup row, exactly.
    let ledger_rollup = session.query("SELECT * FROM job_rollup").await.unwrap();
    let columns: Vec<String> = ledger_rollup.schema.fields().iter().map(|f| f.name().clone()).collect();
    assert_eq!(duck["columns"], serde_json::json!(columns));
    let json: serde_json::Value =
        serde_json::from_str(&format_result(&ledger_rollup, OutputFormat::Json).unwrap()).unwrap();
    let mut ours: Vec<serde_json::Value> = json
        .as_array()
        .unwrap()
        .iter()
        .map(|row| serde_json::Value::Array(columns.iter().map(|c| row[c].clone()).collect()))
        .collect();
    let mut theirs: Vec<serde_json::Value> = duck["rows"].as_array().unwrap().clone();
    let by_job = |v: &serde_json::Value| v[0].as_str().unwrap().to_string();
    ours.sort_by_key(by_job);
    theirs.sort_by_key(by_job);
    assert_eq!(ours.len(), theirs.len(), "job_rollup rows");
    let jobs = query_batch(&session, "SELECT COUNT(DISTINCT job_id) FROM job_attempt").await;
    let jobs = jobs
        .column(0)
        .as_any()
        .downcast_ref::<arrow::array::Int64Array>()
        .unwrap()
        .value(0);
    assert!(jobs > 0);
    assert_eq!(ours.len(), jobs as usize, "one job_rollup row a job");
    for (o, t) in ours.iter().zip(&theirs) {
        assert_eq!(o, t, "job_rollup row");
    }
}

/// The ledger's answer to `sql` as CSV text.
async fn csv_of(session: &Session, sql: &str) -> String {
    format_result(&session.query(sql).await.unwrap(), OutputFormat::Csv).unwrap()
}

/// The Parquet files' rows, in the order of the files, as CSV text (the same header and cells as
/// [`csv_of`] gives for the table).
fn csv_of_files(paths: &[PathBuf]) -> String {
    let batches: Vec<RecordBatch> = paths.iter().flat_map(|p| read_file(ExportFormat::Parquet, p)).collect();
    let schema = batches[0].schema();
    format_result(&QueryResult { schema, batches }, OutputFormat::Csv).unwrap()
}

/// CSV text with its data rows sorted (the header first).
fn sorted_lines(csv: &str) -> Vec<String> {
    let mut lines: Vec<String> = csv.split("\r\n").map(str::to_string).collect();
    lines[1..].sort();
    lines
}

#[tokio::test]
async fn a_parquet_export_also_writes_the_gate_decisions_week_snapshots_and_sweeps_under_ledger() {
    let (_d, ledger) = common::ledger_from(&SAMPLE_ATTEMPTS);
    let decisions = common::sample("decisions-2026-W48.ndjson");
    let reader = std::io::BufReader::new(File::open(&decisions).unwrap());
    let report =
        ingest_decisions_reader(&ledger, "decisions", reader, InputFormat::Ndjson, DEFAULT_BATCH, |_| {}).unwrap();
    assert_eq!(report.counters.accepted, 41);
    let session = Session::new(ledger.clone()).await.unwrap();
    // A sweep 30 days before 2026-12-24 removes the old traces, the key incident, week 47's drill and
    // part of week 48's: week_snapshot keeps the touched weeks' figures, retention_sweep the sweep.
    let now = laneledger_store::parse_timestamp("2026-12-24T00:00:00Z").unwrap();
    let rule = RetentionRule {
        days: 30,
        reconcile_window_s: 900,
    };
    let SweepOutcome::Swept { .. } = sweep(&session, now, &SweepOptions::new(rule)).await.unwrap() else {
        panic!("the sweep removed nothing");
    };
    let snapshot_weeks = csv_of(&session, "SELECT iso_week FROM week_snapshot ORDER BY iso_week").await;
    assert_eq!(
        snapshot_weeks,
        "iso_week\r\n2023-W46\r\n2026-W42\r\n2026-W47\r\n2026-W48\r\n"
    );

    let out = tempfile::tempdir().unwrap();
    let summary = export(&ledger, ExportFormat::Parquet, out.path(), None, None).unwrap();
    let root = out.path().join("ledger");
    let names: Vec<&str> = summary.tables.iter().map(|t| t.table).collect();
    assert_eq!(names, ["gate_decision", "week_snapshot", "retention_sweep"]);

    // gate_decision: one file a UTC day of decided_at, every decision once, the table's columns.
    let gate = &summary.tables[0];
    assert_eq!(gate.dir, root.join("gate_decision"));
    assert_eq!(gate.rows, 41);
    let days = csv_of(
        &session,
        "SELECT DISTINCT to_char(decided_at, '%Y-%m-%d') AS d FROM gate_decision ORDER BY d",
    )
    .await;
    let expected_files: Vec<PathBuf> = days
        .split("\r\n")
        .skip(1)
        .filter(|d| !d.is_empty())
        .map(|d| root.join(format!("gate_decision/day={d}/gate_decision.parquet")))
        .collect();
    assert!(expected_files.len() > 1, "{days}");
    assert_eq!(gate.files, expected_files);
    assert_eq!(
        read_file(ExportFormat::Parquet, &gate.files[0])[0].schema(),
        laneledger_query::tables::gate_decision::schema()
    );
    assert_eq!(
        sorted_lines(&csv_of_files(&gate.files)),
        sorted_lines(&csv_of(&session, "SELECT * FROM gate_decision").await)
    );

    // week_snapshot and retention_sweep: one file each, exactly the tables' rows in their order.
    let snap = &summary.tables[1];
    assert_eq!(snap.files, [root.join("week_snapshot/week_snapshot.parquet")]);
    assert_eq!(snap.rows, 4);
    assert_eq!(
        csv_of_files(&snap.files),
        csv_of(&session, "SELECT * FROM week_snapshot").await
    );
    let sweeps = &summary.tables[2];
    assert_eq!(sweeps.files, [root.join("retention_sweep/retention_sweep.parquet")]);
    assert_eq!(sweeps.rows, 1);
    assert_eq!(
        csv_of_files(&sweeps.files),
        csv_of(&session, "SELECT * FROM retention_sweep").await
    );

    // The summary's second line; the attempts' files are the only ones one level down.
    let bytes: u64 = summary.tables.iter().map(|t| t.bytes).sum();
    let on_disk: u64 = summary
        .tables
        .iter()
        .flat_map(|t| &t.files)
        .map(|f| std::fs::metadata(f).unwrap().len())
        .sum();
    assert_eq!(bytes, on_disk);
    let text = summary.to_string();
    let second = text.lines().nth(1).unwrap();
    assert_eq!(
        second,
        format!(
            "and the ledger's tables to {}: gate_decision 41 rows ({} files), week_snapshot 4 rows, retention_sweep 1 row, {bytes} bytes",
            root.display(),
            expected_files.len()
        )
    );
    let mut one_level: Vec<PathBuf> = Vec::new();
    for entry in std::fs::read_dir(out.path()).unwrap() {
        let dir = entry.unwrap().path();
        for f in std::fs::read_dir(&dir).unwrap() {
            let f = f.unwrap().path();
            if f.is_file() {
                one_level.push(f);
            }
        }
    }
    one_level.sort();
    let attempt_files: Vec<PathBuf> = summary.files.iter().map(|f| f.path.clone()).collect();
    assert_eq!(one_level, attempt_files);

    // --since/--until bound decided_at too; a day without decisions writes no file.
    let bounded = tempfile::tempdir().unwrap();
    let since = parse_bound("2026-11-25").unwrap();
    let until = parse_bound("2026-11-26").unwrap();
    let summary = export(&ledger, ExportFormat::Parquet, bounded.path(), Some(since), Some(until)).unwrap();
    let in_range = csv_of(
        &session,
        "SELECT * FROM gate_decision WHERE decided_at >= TIMESTAMP '2026-11-25T00:00:00Z' \
         AND decided_at < TIMESTAMP '2026-11-26T00:00:00Z'",
    )
    .await;
    let n = in_range.split("\r\n").filter(|l| !l.is_empty()).count() as u64 - 1;
    assert!(n > 0 && n < 41, "{in_range}");
    assert_eq!(summary.tables[0].rows, n);
    assert_eq!(
        summary.tables[0].files,
        [bounded
            .path()
            .join("ledger/gate_decision/day=2026-11-25/gate_decision.parquet")]
    );
    assert_eq!(
        sorted_lines(&csv_of_files(&summary.tables[0].files)),
        sorted_lines(&in_range)
    );
    let empty = tempfile::tempdir().unwrap();
    let since = parse_bound("2026-12-01").unwrap();
    let summary = export(&ledger, ExportFormat::Parquet, empty.path(), Some(since), None).unwrap();
    assert_eq!((summary.tables[0].rows, summary.tables[0].files.len()), (0, 0));
    assert!(empty.path().join("ledger/gate_decision").is_dir());

    // Arrow and CSV exports write the attempts only.
    for format in [ExportFormat::Arrow, ExportFormat::Csv] {
        let other = tempfile::tempdir().unwrap();
        let summary = export(&ledger, format, other.path(), None, None).unwrap();
        assert!(summary.tables.is_empty(), "{format:?}");
        assert!(!other.path().join("ledger").exists(), "{format:?}");
        assert_eq!(summary.to_string().lines().count(), 1);
    }
}
