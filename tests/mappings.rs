//! `laneledger ingest --mapping`: each built-in mapping on its sample export, as a user runs it;
//! a re-ingest is all duplicate deliveries; a bad mapping file is refused before anything is
//! written; `--dry-run` writes nothing; a folder of objects and a Parquet export are read.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;

use arrow::array::{Float64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};

fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_laneledger"))
}

fn sample(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("sample-data/routers")
        .join(name)
        .display()
        .to_string()
}

fn run(args: &[&str]) -> Output {
    Command::new(bin()).args(args).output().expect("runs")
}

fn text(o: &Output) -> (i32, String, String) {
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn sql(db: &str, q: &str) -> String {
    let (code, out, err) = text(&run(&["sql", "--db", db, "--format", "csv", q]));
    assert_eq!(code, 0, "{err}");
    out.replace("\r\n", "\n")
}

#[test]
fn each_builtin_mapping_takes_its_sample_and_a_re_ingest_is_all_duplicates() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("l.redb").display().to_string();
    let cases: [(&str, &str, &[&str], &str); 5] = [
        ("litellm", "litellm.ndjson", &["--idem-fallback"], "accepted 4,"),
        ("otlp", "otlp-genai.json", &[], "accepted 2,"),
        (
            "openrouter",
            "openrouter-generations.json",
            &["--idem-fallback"],
            "accepted 3,",
        ),
        ("langfuse", "langfuse-observations.csv", &[], "accepted 2,"),
        ("litellm-spendlogs", "litellm-spendlogs.csv", &[], "accepted 2,"),
    ];
    for (mapping, file, extra, accepted) in cases {
        let path = sample(file);
        let mut args = vec!["ingest", "--db", &db, "--mapping", mapping, &path];
        args.extend_from_slice(extra);
        let (code, out, err) = text(&run(&args));
        assert_eq!(code, 0, "{mapping}: {out}{err}");
        assert!(out.starts_with(accepted), "{mapping}: {out}");
        let (code, out, err) = text(&run(&args));
        assert_eq!(code, 0, "{mapping}: {out}{err}");
        assert!(
            out.starts_with("accepted 0, completed 0, duplicate deliveries "),
            "{mapping} again: {out}"
        );
        assert!(out.contains(", conflicts 0, rejected 0"), "{mapping} again: {out}");
    }
    assert_eq!(
        sql(
            &db,
            "SELECT job_id, attempt_no, lane, outcome, http_status, provider_code, tokens_in, tokens_out \
             FROM job_attempt ORDER BY job_id, attempt_no"
        ),
        "job_id,attempt_no,lane,outcome,http_status,provider_code,tokens_in,tokens_out\n\
         gen-3bhGkxlo4XFrqiabUM7NDtwDzWwG,1,paid,retryable,503,,0,0\n\
         gen-3bhGkxlo4XFrqiabUM7NDtwDzWwG,2,paid,ok,200,,10,25\n\
         gen-8QpZr2Lm5VnXcT7yWkA1sD4fG6hJ,1,free,ok,200,,44,9\n\
         ticket-4411,1,free,retryable,429,1305,0,0\n\
         ticket-4411,2,paid,ok,,,1500,700\n\
         trace-4411,1,free,retryable,429,,0,0\n\
         trace-4411,2,paid,ok,,,1520,412\n\
         trace-5e21,1,free,retryable,429,1305,0,0\n\
         trace-5e21,2,paid,ok,200,,1520,412\n\
         trace-7f3a,1,free,retryable,429,1305,0,0\n\
         trace-7f3a,2,free,retryable,429,1305,0,0\n\
         trace-7f3a,3,paid,ok,200,,1520,412\n\
         trace-90c1,1,free,ok,200,,800,210\n"
    );
    // The review counts the attempts keyed by a declared fallback.
    let (code, out, err) = text(&run(&["review", "--db", &db, "--week", "2025-W46"]));
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("Where the idempotency keys came from\n  key_source                attempts  share_pct\n  sent with the record      9         69.2\n  fallback: the request id  4         30.8\n"),
        "{out}"
    );
}

#[test]
fn without_a_key_or_a_declared_fallback_the_record_is_rejected_saying_how() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("l.redb").display().to_string();
    let path = sample("litellm.ndjson");
    let (code, out, err) = text(&run(&["ingest", "--db", &db, "--mapping", "litellm", &path]));
    assert_eq!(code, 3, "{out}{err}");
    assert!(
        out.starts_with("accepted 3, completed 0, duplicate deliveries 0, conflicts 0, rejected 1"),
        "{out}"
    );
    assert!(
        err.contains(&format!(
            "{path}:4: idem_key: no value at /metadata/spend_logs_metadata/idempotency_key, "
        )),
        "{err}"
    );
    assert!(err.contains("declare it with --idem-fallback"), "{err}");
}

#[test]
fn a_bad_mapping_file_is_refused_naming_its_line_before_anything_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("l.redb");
    let mapping = dir.path().join("mine.yaml");
    std::fs::write(
        &mapping,
        "name: mine\nfields:\n  job_id: {from: [/trace_id]}\n  started_at: {from: [/startTime], as: epoch_hours}\n",
    )
    .unwrap();
    let m = mapping.display().to_string();
    let (code, out, err) = text(&run(&[
        "ingest",
        "--db",
        &db.display().to_string(),
        "--mapping",
        &m,
        &sample("litellm.ndjson"),
    ]));
    assert_eq!(code, 2, "{out}");
    assert!(
        err.contains(&format!("bad mapping: {m}:4: fields.started_at.as")),
        "{err}"
    );
    assert!(!db.exists(), "nothing is written, not even an empty ledger");
}

#[test]
fn a_dry_run_shows_what_the_mapping_finds_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("l.redb");
    let (code, out, err) = text(&run(&[
        "ingest",
        "--db",
        &db.display().to_string(),
        "--mapping",
        "litellm",
        "--dry-run",
        &sample("litellm.ndjson"),
    ]));
    assert_eq!(code, 3, "{err}");
    assert!(out.starts_with(
        "dry run of the litellm mapping: 4 attempts found, 0 skipped by its filter, 1 would be rejected; nothing written\n"
    ));
    assert!(
        out.contains("idem_key        75.0% (3 of 4)   <- required: records without it are rejected\n"),
        "{out}"
    );
    assert!(out.contains("provider_code   50.0% (2 of 4)\n"), "{out}");
    assert!(out.contains("http_status    100.0% (4 of 4)\n"), "{out}");
    assert!(out.contains("first mapped attempts:\n"), "{out}");
    assert!(!db.exists());
}

#[test]
fn a_folder_of_bucket_objects_and_a_parquet_export() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("l.redb").display().to_string();
    // LiteLLM's S3/GCS logger writes one payload object per call, named by time.
    let bucket = dir.path().join("bucket/2025-11-16");
    std::fs::create_dir_all(&bucket).unwrap();
    let lines: Vec<&str> = include_str!("../sample-data/routers/litellm.ndjson").lines().collect();
    for (i, line) in lines.iter().enumerate() {
        let pretty = serde_json::to_string_pretty(&serde_json::from_str::<serde_json::Value>(line).unwrap()).unwrap();
        std::fs::write(bucket.join(format!("time-10-00-0{i}-000000_call{i}.json")), pretty).unwrap();
    }
    let folder = dir.path().join("bucket").display().to_string();
    let (code, out, err) = text(&run(&[
        "ingest",
        "--db",
        &db,
        "--mapping",
        "litellm",
        "--idem-fallback",
        &folder,
    ]));
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.starts_with("accepted 4,"), "{out}");
    assert_eq!(
        sql(
            &db,
            "SELECT job_id, attempt_no, outcome FROM job_attempt ORDER BY job_id, attempt_no"
        ),
        "job_id,attempt_no,outcome\ntrace-7f3a,1,retryable\ntrace-7f3a,2,retryable\ntrace-7f3a,3,ok\ntrace-90c1,1,ok\n"
    );
    // Langfuse's blob export in Parquet (its default), as its columns are named.
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Utf8, false),
        Field::new("trace_id", DataType::Utf8, false),
        Field::new("type", DataType::Utf8, false),
        Field::new("start_time", DataType::Utf8, false),
        Field::new("end_time", DataType::Utf8, true),
        Field::new("level", DataType::Utf8, false),
        Field::new("provided_model_name", DataType::Utf8, true),
        Field::new("total_cost", DataType::Float64, true),
    ]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(StringArray::from(vec!["obs-1", "obs-2", "span-1"])),
            Arc::new(StringArray::from(vec!["tr-1", "tr-1", "tr-1"])),
            Arc::new(StringArray::from(vec!["GENERATION", "GENERATION", "SPAN"])),
            Arc::new(StringArray::from(vec![
                "2025-11-17 09:00:00.000000",
                "2025-11-17 09:00:02.000000",
                "2025-11-17 09:00:00.000000",
            ])),
            Arc::new(StringArray::from(vec![
                Some("2025-11-17 09:00:01.000000"),
                Some("2025-11-17 09:00:04.500000"),
                None,
            ])),
            Arc::new(StringArray::from(vec!["ERROR", "DEFAULT", "DEFAULT"])),
            Arc::new(StringArray::from(vec![Some("glm-4.6:free"), Some("gpt-4o-mini"), None])),
            Arc::new(Float64Array::from(vec![Some(0.0), Some(0.0004), None])),
        ],
    )
    .unwrap();
    let pq = dir.path().join("observations.parquet");
    let mut w = parquet::arrow::ArrowWriter::try_new(std::fs::File::create(&pq).unwrap(), schema, None).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
    let pq = pq.display().to_string();
    let (code, out, err) = text(&run(&[
        "ingest",
        "--db",
        &db,
        "--mapping",
        "langfuse",
        "--idem-fallback",
        &pq,
    ]));
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.starts_with("accepted 2,"), "{out}");
    assert!(out.contains("1 record not taken as attempts"), "{out}");
    assert_eq!(
        sql(
            &db,
            "SELECT job_id, attempt_no, lane, outcome, started_at, ended_at FROM job_attempt WHERE job_id = 'tr-1' ORDER BY attempt_no"
        ),
        "job_id,attempt_no,lane,outcome,started_at,ended_at\n\
         tr-1,1,free,permanent,2025-11-17T09:00:00Z,2025-11-17T09:00:01Z\n\
         tr-1,2,paid,ok,2025-11-17T09:00:02Z,2025-11-17T09:00:04.500Z\n"
    );
}

#[test]
fn a_printed_builtin_is_a_mapping_file_that_works_as_it_is() {
    let dir = tempfile::tempdir().unwrap();
    let (code, list, _) = text(&run(&["mappings"]));
    assert_eq!(code, 0);
    for name in ["otlp", "litellm", "litellm-spendlogs", "openrouter", "langfuse"] {
        assert!(list.lines().any(|l| l.starts_with(&format!("{name} "))), "{list}");
    }
    let (code, yaml, _) = text(&run(&["mappings", "openrouter"]));
    assert_eq!(code, 0);
    let copy = dir.path().join("my-openrouter.yaml");
    std::fs::write(&copy, yaml.replace("name: openrouter", "name: my-openrouter")).unwrap();
    let db = dir.path().join("l.redb").display().to_string();
    let (code, out, err) = text(&run(&[
        "ingest",
        "--db",
        &db,
        "--mapping",
        &copy.display().to_string(),
        "--idem-fallback",
        &sample("openrouter-generations.json"),
    ]));
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("accepted 3,"), "{out}");
    assert_eq!(
        sql(
            &db,
            "SELECT COUNT(*) AS n FROM job_attempt WHERE strpos(attrs, '\"mapping\":\"my-openrouter\"') > 0"
        ),
        "n\n3\n"
    );
    assert_eq!(text(&run(&["mappings", "kong"])).0, 2);
}
