//! The command line beside a running server (issue 34): while `laneledger serve` holds a ledger
//! file, `sql`, `review`, `export`, `verify` and `ingest` on the same file go through it and
//! print exactly what they print on the file itself; a discovery file whose server is gone is
//! ignored; a second `serve` is refused, naming the first.

#[path = "support/server.rs"]
mod server;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use server::{ServerProcess, TOKEN, binary, free_port};

fn sample(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("sample-data").join(name)
}

/// `laneledger ARGS` in `cwd`, without the token in its environment (the discovery file says
/// where it is).
fn run_in(cwd: &Path, args: &[&str]) -> Output {
    Command::new(binary())
        .args(args)
        .current_dir(cwd)
        .env_remove("LANELEDGER_TOKEN")
        .env("LANELEDGER_LOG", "warn")
        .output()
        .expect("run laneledger")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Every file under `dir` (relative path, bytes), in name order; folders as `path/`.
fn tree(dir: &Path) -> Vec<(String, Vec<u8>)> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<(String, Vec<u8>)>) {
        let mut items: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
        items.sort();
        for p in items {
            let rel = p.strip_prefix(root).unwrap().display().to_string();
            if p.is_dir() {
                out.push((format!("{rel}/"), Vec::new()));
                walk(root, &p, out);
            } else {
                out.push((rel, std::fs::read(&p).unwrap()));
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out
}

/// The reading commands compared local against remote: (name, args after `--db LEDGER`).
const READS: &[(&str, &[&str])] = &[
    (
        "sql table",
        &[
            "sql",
            "SELECT lane, COUNT(*) AS n, SUM(tokens_in) AS t FROM job_attempt GROUP BY lane ORDER BY lane",
        ],
    ),
    (
        "sql csv",
        &[
            "sql",
            "--format",
            "csv",
            "SELECT job_id, attempt_no, started_at, outcome FROM job_attempt ORDER BY job_id, attempt_no LIMIT 40",
        ],
    ),
    (
        "sql json",
        &[
            "sql",
            "--format",
            "json",
            "SELECT * FROM weekly_metrics ORDER BY week_start",
        ],
    ),
    ("review", &["review"]),
    ("review json", &["review", "--week", "2026-W48", "--format", "json"]),
    ("review of a week without data", &["review", "--week", "2025-W01"]),
    ("sql refused", &["sql", "DROP TABLE job_attempt"]),
];

/// An input with a bad line (line 3: an unknown lane), a conflict (line 5: attempt 1 of a drill
/// job with other tokens) and three new attempts, sent two records a request.
fn new_records(dir: &Path) -> PathBuf {
    let p = dir.join("more.ndjson");
    let line = |job: &str, n: u32, lane: &str, tokens: u32| {
        format!(
            r#"{{"job_id":"{job}","idem_key":"{job}-k","attempt_no":{n},"lane":"{lane}","started_at":"2026-11-24T09:00:0{n}Z","tokens_in":{tokens}}}"#
        )
    };
    let text = [
        line("extra-1", 1, "free", 10),
        line("extra-1", 2, "paid", 20),
        line("extra-2", 1, "cheap", 30),
        String::new(),
        r#"{"job_id":"pin-job-000000","idem_key":"pin-idem-000000","attempt_no":1,"lane":"free","started_at":"2026-11-23T00:00:52.998648Z","tokens_in":999}"#.to_string(),
        line("extra-3", 1, "free", 40),
    ]
    .join("\n")
        + "\n";
    std::fs::write(&p, text).unwrap();
    p
}

/// A CSV input: a quoted field spanning two lines (record 1, lines 2-3) and a bad lane on line 5.
fn new_csv(dir: &Path) -> PathBuf {
    let p = dir.join("more.csv");
    std::fs::write(
        &p,
        "job_id,idem_key,attempt_no,lane,started_at,model\n\
         csv-1,csv-1-k,1,free,2026-11-24T10:00:00Z,\"two\nlines\"\n\
         csv-2,csv-2-k,1,free,2026-11-24T10:00:01Z,m\n\
         csv-3,csv-3-k,1,cheap,2026-11-24T10:00:02Z,m\n\
         csv-4,csv-4-k,1,paid,2026-11-24T10:00:03Z,m\n",
    )
    .unwrap();
    p
}

#[test]
fn sql_review_export_verify_and_ingest_work_through_a_running_server_as_on_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path();
    let db = work.join("ledger.redb");
    let db_s = db.to_str().unwrap();
    for (file, kind) in [
        ("drill-pin-2026-W48.ndjson", "attempts"),
        ("drill-nopin-2026-W47.ndjson", "attempts"),
        ("decisions-2026-W48.ndjson", "decisions"),
    ] {
        let o = run_in(
            work,
            &["ingest", "--db", db_s, "--kind", kind, sample(file).to_str().unwrap()],
        );
        assert!(o.status.success(), "{}", text(&o.stderr));
    }
    let more = new_records(work);
    let more_s = more.to_str().unwrap();
    let more_csv = new_csv(work);
    let csv_s = more_csv.to_str().unwrap();
    // The same ledger, to ingest into locally for the expected output.
    let copy = work.join("copy.redb");
    std::fs::copy(&db, &copy).unwrap();

    // On the file itself, before the server starts.
    let local_dir = work.join("local");
    let remote_dir = work.join("remote");
    std::fs::create_dir_all(&local_dir).unwrap();
    std::fs::create_dir_all(&remote_dir).unwrap();
    let with_db = |args: &[&str]| {
        let mut a: Vec<String> = vec![args[0].to_string(), "--db".into(), db_s.to_string()];
        a.extend(args[1..].iter().map(|s| s.to_string()));
        a
    };
    let run_args = |cwd: &Path, a: &[String]| run_in(cwd, &a.iter().map(String::as_str).collect::<Vec<_>>());
    let local: Vec<Output> = READS.iter().map(|(_, a)| run_args(&local_dir, &with_db(a))).collect();
    assert_eq!(local[0].status.code(), Some(0), "{}", text(&local[0].stderr));
    assert_eq!(
        local[5].status.code(),
        Some(2),
        "a week without data is the user's mistake"
    );
    assert_eq!(local[6].status.code(), Some(2), "DROP is refused");
    let exports = [
        ["export", "--format", "parquet", "--out", "export-parquet"],
        ["export", "--format", "csv", "--out", "export-csv"],
    ];
    let local_exports: Vec<Output> = exports.iter().map(|a| run_args(&local_dir, &with_db(a))).collect();
    for o in &local_exports {
        assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    }
    let local_verify = run_in(&local_dir, &["verify", "--db", db_s]);
    assert_eq!(local_verify.status.code(), Some(0), "{}", text(&local_verify.stderr));
    let copy_s = copy.to_str().unwrap();
    let local_ingest = run_in(work, &["ingest", "--db", copy_s, "--batch", "2", more_s, csv_s]);
    assert_eq!(local_ingest.status.code(), Some(3));
    assert_eq!(
        text(&local_ingest.stdout),
        "accepted 6, completed 0, duplicate deliveries 0, conflicts 1, rejected 2\n"
    );

    // The token comes from a file the discovery file names; the commands have none of their own.
    // Reads need it too (--read-token), so every command below presents it.
    let token_file = work.join("token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    let mut serve = ServerProcess::start(
        &binary(),
        &db,
        &["--token-file", token_file.to_str().unwrap(), "--read-token"],
        Duration::from_secs(120),
    )
    .expect("serve starts");
    let discovery = work.join("ledger.redb.serve.json");
    let announced = std::fs::read_to_string(&discovery).expect("serve leaves its discovery file");
    assert!(
        !announced.contains(TOKEN),
        "the token itself is not in the discovery file"
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&discovery).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }
    let v: serde_json::Value = serde_json::from_str(&announced).unwrap();
    assert_eq!(v["url"].as_str(), Some(serve.base.as_str()));
    assert_eq!(v["reads_need_token"], serde_json::Value::Bool(true));
    // Without the token file the server refuses, and the command says whose token it sent.
    let unreadable = work.join("elsewhere.serve.json");
    std::fs::write(
        &unreadable,
        announced.replace(token_file.to_str().unwrap(), "/nonexistent/token"),
    )
    .unwrap();
    std::fs::rename(&unreadable, &discovery).unwrap();
    let refused = run_in(work, &["sql", "--db", db_s, "SELECT 1"]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        text(&refused.stderr).ends_with(
            "refused the request (401): this server needs its token to read (sent no token: the server's \
             token file /nonexistent/token cannot be read (No such file or directory (os error 2)); \
             set LANELEDGER_TOKEN)\n"
        ),
        "{}",
        text(&refused.stderr)
    );
    std::fs::write(&discovery, &announced).unwrap();

    // Held by the server: the same bytes out, the same exit codes.
    for ((name, a), want) in READS.iter().zip(&local) {
        let got = run_args(&remote_dir, &with_db(a));
        assert_eq!(got.status.code(), want.status.code(), "{name}: {}", text(&got.stderr));
        assert_eq!(text(&got.stdout), text(&want.stdout), "{name}");
    }
    for (a, want) in exports.iter().zip(&local_exports) {
        let got = run_args(&remote_dir, &with_db(a));
        assert_eq!(got.status.code(), Some(0), "{}", text(&got.stderr));
        assert_eq!(text(&got.stdout), text(&want.stdout), "{a:?}");
        let (l, r) = (tree(&local_dir.join(a[4])), tree(&remote_dir.join(a[4])));
        assert_eq!(
            l.iter().map(|(p, _)| p).collect::<Vec<_>>(),
            r.iter().map(|(p, _)| p).collect::<Vec<_>>()
        );
        assert_eq!(l, r, "{a:?}: the same files, byte for byte");
    }
    assert!(
        text(&local_exports[0].stdout).starts_with("exported 837 rows, 10 days, 10 files, "),
        "{}",
        text(&local_exports[0].stdout)
    );
    let verify = run_in(&remote_dir, &["verify", "--db", db_s]);
    assert_eq!(verify.status.code(), Some(0), "{}", text(&verify.stderr));
    assert_eq!(text(&verify.stdout), text(&local_verify.stdout));
    assert!(text(&verify.stderr).contains("the page checksums need the file to itself"));

    // ingest: the same summary, the same problems by file and line, the rows visible through the
    // server as they are in the copy ingested locally.
    let ingest = run_in(work, &["ingest", "--db", db_s, "--batch", "2", more_s, csv_s]);
    assert_eq!(ingest.status.code(), Some(3), "{}", text(&ingest.stderr));
    assert_eq!(text(&ingest.stdout), text(&local_ingest.stdout));
    assert_eq!(text(&ingest.stderr), text(&local_ingest.stderr));
    assert_eq!(
        text(&ingest.stderr),
        format!(
            "{more_s}:3: lane: \"cheap\" is not free or paid\n{more_s}:5: conflict: job pin-job-000000 attempt 1 differs in tokens_in; the first row stays\n\
             {csv_s}:5: lane: \"cheap\" is not free or paid\n"
        )
    );
    let rows = "SELECT job_id, attempt_no, lane, tokens_in, model FROM job_attempt \
                WHERE job_id LIKE 'extra-%' OR job_id LIKE 'csv-%' ORDER BY 1, 2";
    let through = run_in(work, &["sql", "--db", db_s, "--format", "csv", rows]);
    let on_copy = run_in(work, &["sql", "--db", copy_s, "--format", "csv", rows]);
    assert_eq!(
        text(&through.stdout),
        "job_id,attempt_no,lane,tokens_in,model\r\ncsv-1,1,free,0,\"two\nlines\"\r\ncsv-2,1,free,0,m\r\n\
         csv-4,1,paid,0,m\r\nextra-1,1,free,10,\r\nextra-1,2,paid,20,\r\nextra-3,1,free,40,\r\n"
    );
    assert_eq!(text(&through.stdout), text(&on_copy.stdout));

    // A second server on the same file is refused, naming the first.
    let second = run_in(work, &["serve", "--db", db_s, "--addr", "127.0.0.1:0"]);
    assert_eq!(second.status.code(), Some(1));
    assert!(
        text(&second.stderr).contains(&format!(
            "is already open by another process: `laneledger serve` (pid {}) serves it at {}/, \
             and one server per ledger file is the limit",
            v["pid"], serve.base
        )),
        "{}",
        text(&second.stderr)
    );

    // Stopped: the discovery file goes, and the commands open the file themselves.
    assert!(serve.terminate().success());
    assert!(!discovery.exists());
    let after = run_in(work, &["sql", "--db", db_s, "--format", "csv", rows]);
    assert_eq!(text(&after.stdout), text(&through.stdout));
}

/// A discovery file whose server is gone: ignored when the file is free; when another process
/// holds the file, the error says the named server does not answer and to try again later.
#[test]
fn a_stale_discovery_file_is_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("stale.redb");
    let db_s = db.to_str().unwrap();
    let o = run_in(
        dir.path(),
        &[
            "ingest",
            "--db",
            db_s,
            sample("drill-pin-2026-W48.ndjson").to_str().unwrap(),
        ],
    );
    assert!(o.status.success());
    let count = [
        "sql",
        "--db",
        db_s,
        "--format",
        "csv",
        "SELECT COUNT(*) AS n FROM job_attempt",
    ];
    let url = format!("http://127.0.0.1:{}", free_port());
    std::fs::write(
        dir.path().join("stale.redb.serve.json"),
        serde_json::json!({ "url": url, "pid": 999_999_999u64, "token": null }).to_string(),
    )
    .unwrap();
    let o = run_in(dir.path(), &count);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout), "n\r\n422\r\n");

    // Held by this test process, not by a server.
    let held = laneledger_store::Ledger::open(&db).unwrap();
    let o = run_in(dir.path(), &count);
    assert_eq!(o.status.code(), Some(1));
    let err = text(&o.stderr);
    let (head, tail) = err.split_once(" does not answer (io: Connection refused").expect(&err);
    assert_eq!(
        head,
        format!(
            "laneledger: opening {db_s}: ledger {db_s} is already open by another process; the server that \
             announced itself beside it (pid 999999999, {url})"
        )
    );
    assert!(
        tail.ends_with("): another command holds the file, try again when it is done\n"),
        "{err}"
    );
    drop(held);
}
