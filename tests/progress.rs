//! Progress of long work when stderr is not a terminal: `ingest`, `verify`, `export` and
//! `retain` print a plain line every interval (set to a millisecond here through the hidden
//! variable), and a last one with the exact count; with the default interval a small job prints
//! none.

use std::path::Path;
use std::process::{Command, Output};

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `laneledger ARGS` with stderr piped, progress lines every millisecond (`every_ms`) or at the
/// default interval (`None`).
fn run(args: &[&str], every_ms: Option<u64>) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_laneledger"));
    c.args(args).env_remove("LANELEDGER_PROGRESS_EVERY_MS");
    if let Some(ms) = every_ms {
        c.env("LANELEDGER_PROGRESS_EVERY_MS", ms.to_string());
    }
    let o = c.output().expect("run laneledger");
    assert!(o.status.success(), "{args:?}: {}", text(&o.stderr));
    o
}

/// One progress line, read back.
#[derive(Debug, PartialEq)]
struct Line {
    stage: Option<String>,
    rows: u64,
    total: Option<u64>,
    done: bool,
}

fn number(s: &str) -> u64 {
    s.replace(',', "")
        .parse()
        .unwrap_or_else(|_| panic!("not a count: {s:?}"))
}

/// `WHAT: [STAGE: ]ROWS[ of TOTAL] rows[ (P%)], RATE rows/s, ELAPSED elapsed[, done]`, checked
/// piece by piece; `None` for a line of another shape.
fn parse(line: &str, what: &str) -> Option<Line> {
    let rest = line.strip_prefix(what)?.strip_prefix(": ")?;
    let (rest, done) = match rest.strip_suffix(", done") {
        Some(r) => (r, true),
        None => (rest, false),
    };
    let parts: Vec<&str> = rest.split(", ").collect();
    let [count, rate, elapsed] = parts[..] else {
        return None;
    };
    let rate = rate.strip_suffix(" rows/s")?;
    assert!(rate.chars().all(|c| c.is_ascii_digit() || c == ','), "{line}");
    let elapsed = elapsed.strip_suffix(" elapsed")?;
    assert!(
        elapsed.ends_with(" s") && elapsed.starts_with(|c: char| c.is_ascii_digit()),
        "{line}"
    );
    let (stage, count) = match count.split_once(": ") {
        Some((s, c)) => (Some(s.to_string()), c),
        None => (None, count),
    };
    let (rows, total) = match count.split_once(" of ") {
        Some((rows, t)) => {
            let (total, percent) = t.split_once(" rows (")?;
            let (rows, total) = (number(rows), number(total));
            let expected = (rows * 100).checked_div(total).unwrap_or(100);
            assert_eq!(percent, format!("{expected}%)"), "{line}");
            (rows, Some(total))
        }
        None => (number(count.strip_suffix(" rows")?), None),
    };
    Some(Line {
        stage,
        rows,
        total,
        done,
    })
}

/// Every stderr line of `o` that starts with `WHAT:` is a progress line of the right shape in
/// one of `stages`, only the last ends in `done`, and there is at least one. Returns them.
fn progress_lines(o: &Output, what: &str, stages: &[Option<&str>]) -> Vec<Line> {
    let err = text(&o.stderr);
    let lines: Vec<Line> = err
        .lines()
        .filter(|l| l.starts_with(&format!("{what}:")))
        .map(|l| parse(l, what).unwrap_or_else(|| panic!("not a progress line: {l:?}")))
        .collect();
    assert!(!lines.is_empty(), "no progress line in {err:?}");
    for (i, l) in lines.iter().enumerate() {
        assert!(stages.contains(&l.stage.as_deref()), "{l:?}");
        assert_eq!(l.done, i == lines.len() - 1, "{l:?}");
    }
    lines
}

/// A drill of 4,000 jobs over 60 days from 2026-09-01, as NDJSON in `dir`.
fn drill(dir: &Path) -> String {
    let input = dir.join("d.ndjson").display().to_string();
    run(
        &[
            "drill",
            "--jobs",
            "4000",
            "--policy",
            "nopin",
            "--start",
            "2026-09-01T00:00:00Z",
            "--days",
            "60",
            "--out",
            &input,
        ],
        None,
    );
    input
}

/// `accepted 5, completed 1, …` → the records it counts.
fn counted_records(counters: &str) -> u64 {
    counters
        .trim()
        .split(", ")
        .map(|part| number(part.rsplit(' ').next().unwrap()))
        .sum()
}

#[test]
fn ingest_reports_rows_and_ends_on_the_records_written() {
    let dir = tempfile::tempdir().unwrap();
    let input = drill(dir.path());
    let db = dir.path().join("l.redb").display().to_string();
    // The same file twice: the second half are duplicate deliveries, counted on from the first.
    let o = run(&["ingest", "--db", &db, "--batch", "1000", &input, &input], Some(1));
    let written = counted_records(&text(&o.stdout));
    let lines = progress_lines(&o, "ingest", &[None]);
    let last = lines.last().unwrap();
    assert_eq!((last.rows, last.total), (written, None));
    assert!(text(&o.stdout).contains(&format!("duplicate deliveries {}", written / 2)));
    // The count never goes back.
    assert!(lines.windows(2).all(|w| w[0].rows <= w[1].rows));
}

#[test]
fn verify_export_and_retain_end_on_the_rows_they_did() {
    let dir = tempfile::tempdir().unwrap();
    let input = drill(dir.path());
    let db = dir.path().join("l.redb").display().to_string();
    run(&["ingest", "--db", &db, &input], None);

    let o = run(&["verify", "--db", &db], Some(1));
    let out = text(&o.stdout);
    let records = number(out.split(" records").next().unwrap().rsplit(", ").next().unwrap());
    let lines = progress_lines(&o, "verify", &[None, Some("chain"), Some("records")]);
    let last = lines.last().unwrap();
    assert_eq!(
        (last.stage.as_deref(), last.rows, last.total),
        (Some("records"), records, Some(records))
    );

    let out_dir = dir.path().join("out").display().to_string();
    let o = run(&["export", "--db", &db, "--format", "csv", "--out", &out_dir], Some(1));
    let exported = number(
        text(&o.stdout)
            .strip_prefix("exported ")
            .unwrap()
            .split(' ')
            .next()
            .unwrap(),
    );
    let lines = progress_lines(&o, "export", &[None, Some("reading"), Some("writing")]);
    let last = lines.last().unwrap();
    assert_eq!(
        (last.stage.as_deref(), last.rows, last.total),
        (Some("writing"), exported, Some(exported))
    );

    let archive = dir.path().join("archive").display().to_string();
    let o = run(
        &[
            "retain",
            "--db",
            &db,
            "--now",
            "2026-11-01T00:00:00Z",
            "--days",
            "30",
            "--archive",
            &archive,
        ],
        Some(1),
    );
    let out = text(&o.stdout);
    let removed = number(out.split(" attempts,").next().unwrap().rsplit(' ').next().unwrap());
    assert!(removed > 0, "{out}");
    let stages = [
        None,
        Some("planning"),
        Some("idempotency keys"),
        Some("writing"),
        Some("checking the plan"),
        Some("checking idempotency keys"),
        Some("removing"),
    ];
    let lines = progress_lines(&o, "retain", &stages);
    let last = lines.last().unwrap();
    assert_eq!(
        (last.stage.as_deref(), last.rows, last.total),
        (Some("removing"), removed, Some(removed))
    );
}

#[test]
fn small_work_prints_no_progress_at_the_default_interval() {
    let dir = tempfile::tempdir().unwrap();
    let input = drill(dir.path());
    let db = dir.path().join("l.redb").display().to_string();
    let o = run(&["ingest", "--db", &db, &input], None);
    let o2 = run(&["verify", "--db", &db], None);
    let out_dir = dir.path().join("out").display().to_string();
    let o3 = run(&["export", "--db", &db, "--format", "csv", "--out", &out_dir], None);
    for (o, what) in [(o, "ingest"), (o2, "verify"), (o3, "export")] {
        let err = text(&o.stderr);
        assert!(!err.lines().any(|l| l.starts_with(&format!("{what}:"))), "{err}");
    }
}

#[test]
fn the_line_reader_of_these_tests_takes_the_documented_shapes() {
    assert_eq!(
        parse("ingest: 3,120,000 rows, 104,000 rows/s, 30 s elapsed", "ingest"),
        Some(Line {
            stage: None,
            rows: 3_120_000,
            total: None,
            done: false
        })
    );
    assert_eq!(
        parse(
            "verify: chain: 3,120,000 of 10,000,000 rows (31%), 249,600 rows/s, 12 min 34 s elapsed, done",
            "verify"
        ),
        Some(Line {
            stage: Some("chain".into()),
            rows: 3_120_000,
            total: Some(10_000_000),
            done: true
        })
    );
    assert_eq!(parse("ingest: started", "ingest"), None);
}
