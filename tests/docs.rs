//! The reference in docs/ stays true: every flag each command's `--help` lists appears in
//! docs/cli.md, and every column docs/sql.md lists exists in its table (as `information_schema`
//! reports it on a fresh ledger), with every table and view of the ledger listed there; and every
//! route `web/src/lib.rs` defines is in docs/http-api.md. The examples run: docs/lane-yaml.md's
//! file is accepted, and the SQL of docs/sql.md and docs/rules.md answers.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Command, Output};

fn run(args: &[&str]) -> Output {
    let o = Command::new(env!("CARGO_BIN_EXE_laneledger"))
        .args(args)
        .env("LANELEDGER_LOG", "off")
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

fn doc(name: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs").join(name)).unwrap()
}

/// The commands `laneledger --help` lists, `help` aside.
fn commands() -> Vec<String> {
    let help = String::from_utf8(run(&["--help"]).stdout).unwrap();
    let list = &help[help.find("Commands:").expect("a Commands: section")..];
    list.lines()
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_string)
        .collect()
}

/// The long flags an option line of `--help` names (`  -h, --help`, `      --db <DB>`).
fn flags(help: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in help.lines() {
        let t = line.trim_start();
        if !t.starts_with('-') {
            continue;
        }
        for word in t.split([' ', ',', '=']) {
            if let Some(name) = word.strip_prefix("--")
                && !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            {
                out.insert(format!("--{name}"));
            }
        }
    }
    out
}

#[test]
fn every_command_and_flag_is_in_docs_cli_md() {
    let cli = doc("cli.md");
    let commands = commands();
    assert!(commands.len() >= 10, "{commands:?}");
    let mut missing = Vec::new();
    for command in &commands {
        if !cli.contains(&format!("## `laneledger {command}`")) {
            missing.push(format!("the section `## \\`laneledger {command}\\``"));
        }
        let help = String::from_utf8(run(&[command, "--help"]).stdout).unwrap();
        let flags = flags(&help);
        assert!(flags.contains("--help"), "{command}: {flags:?}");
        for flag in flags {
            if !cli.contains(&flag) {
                missing.push(format!("{command} {flag}"));
            }
        }
    }
    assert!(missing.is_empty(), "docs/cli.md lacks: {missing:?}");
}

/// docs/sql.md's table of every table's columns: table → columns, in order.
fn documented_columns() -> BTreeMap<String, Vec<String>> {
    let sql = doc("sql.md");
    let section = &sql[sql.find("## Every table's columns").expect("the columns section")..];
    let mut out = BTreeMap::new();
    for line in section.lines().skip(1).take_while(|l| !l.starts_with("## ")) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        // | `table` | `a`, `b` |
        if cells.len() != 4 || !cells[1].starts_with('`') {
            continue;
        }
        let table = cells[1].trim_matches('`').to_string();
        let columns = cells[2]
            .split(',')
            .map(|c| c.trim().trim_matches('`').to_string())
            .collect();
        out.insert(table, columns);
    }
    out
}

#[test]
fn every_documented_column_exists_and_every_table_is_documented() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("l.redb");
    let db = db.to_str().unwrap();
    let sample = Path::new(env!("CARGO_MANIFEST_DIR")).join("sample-data");
    run(&[
        "ingest",
        "--db",
        db,
        sample.join("drill-pin-2026-W48.ndjson").to_str().unwrap(),
    ]);
    run(&[
        "ingest",
        "--db",
        db,
        "--kind",
        "decisions",
        sample.join("decisions-2026-W48.ndjson").to_str().unwrap(),
    ]);
    let csv = run(&[
        "sql",
        "--db",
        db,
        "--format",
        "csv",
        "SELECT table_name, column_name FROM information_schema.columns \
         WHERE table_schema = 'public' ORDER BY table_name, ordinal_position",
    ]);
    let csv = String::from_utf8(csv.stdout).unwrap();
    let mut actual: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for line in csv.lines().skip(1) {
        let (table, column) = line.split_once(',').unwrap();
        actual.entry(table.to_string()).or_default().push(column.to_string());
    }
    assert!(actual.contains_key("job_attempt"), "{actual:?}");

    let documented = documented_columns();
    let mut wrong = Vec::new();
    for (table, columns) in &documented {
        match actual.get(table) {
            None => wrong.push(format!("{table}: no such table or view")),
            Some(held) => {
                for c in columns {
                    if !held.contains(c) {
                        wrong.push(format!("{table}.{c}: no such column (it has {held:?})"));
                    }
                }
            }
        }
    }
    for table in actual.keys() {
        if !documented.contains_key(table) {
            wrong.push(format!("{table}: not in docs/sql.md"));
        }
    }
    assert!(wrong.is_empty(), "docs/sql.md is out of date: {wrong:?}");
}

#[test]
fn every_route_of_the_server_is_in_docs_http_api_md() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let lib = std::fs::read_to_string(root.join("web/src/lib.rs")).unwrap();
    let api = doc("http-api.md");
    let mut routes = Vec::new();
    for part in lib.split(".route(\"").skip(1) {
        let (path, rest) = part.split_once('"').unwrap();
        // `, get(handler))` or `, post(handler))`
        let method = rest
            .trim_start_matches([',', ' '])
            .split('(')
            .next()
            .unwrap()
            .to_uppercase();
        routes.push(format!("`{method} {path}`"));
    }
    assert!(routes.len() >= 20, "{routes:?}");
    let missing: Vec<&String> = routes.iter().filter(|r| !api.contains(r.as_str())).collect();
    assert!(missing.is_empty(), "docs/http-api.md lacks: {missing:?}");
}

#[test]
fn the_lane_yaml_of_docs_lane_yaml_md_is_accepted_as_it_is() {
    let lane = doc("lane-yaml.md");
    let start = lane.find("```yaml\n").expect("a yaml block") + "```yaml\n".len();
    let yaml = &lane[start..start + lane[start..].find("```").unwrap()];
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("lane.yaml");
    std::fs::write(&config, yaml).unwrap();
    let db = dir.path().join("l.redb");
    let sample = Path::new(env!("CARGO_MANIFEST_DIR")).join("sample-data");
    let o = run(&[
        "ingest",
        "--db",
        db.to_str().unwrap(),
        "--config",
        config.to_str().unwrap(),
        sample.join("drill-pin-2026-W48.ndjson").to_str().unwrap(),
    ]);
    assert_eq!(
        String::from_utf8(o.stdout).unwrap(),
        "accepted 422, completed 0, duplicate deliveries 0, conflicts 0, rejected 0\n"
    );
    let o = run(&[
        "review",
        "--db",
        db.to_str().unwrap(),
        "--config",
        config.to_str().unwrap(),
        "--week",
        "2026-W48",
    ]);
    assert!(
        String::from_utf8(o.stdout).unwrap().starts_with("ISO week 2026-W48 "),
        "the review under the documented lane.yaml"
    );
}

#[test]
fn the_sql_examples_of_the_docs_run() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("l.redb");
    let db = db.to_str().unwrap();
    let sample = Path::new(env!("CARGO_MANIFEST_DIR")).join("sample-data");
    run(&[
        "ingest",
        "--db",
        db,
        sample.join("drill-nopin-2026-W47.ndjson").to_str().unwrap(),
    ]);
    let mut ran = 0;
    for name in ["sql.md", "rules.md"] {
        let text = doc(name);
        for block in text.split("```sql\n").skip(1) {
            let block = &block[..block.find("```").unwrap()];
            let code: String = block
                .lines()
                .filter(|l| !l.trim_start().starts_with("--"))
                .map(|l| format!("{l}\n"))
                .collect();
            for statement in code.split(';').map(str::trim).filter(|s| !s.is_empty()) {
                // The original table's DDL is shown, not run: user SQL is read-only.
                if statement.starts_with("CREATE") {
                    continue;
                }
                run(&["sql", "--db", db, statement]);
                ran += 1;
            }
        }
    }
    assert_eq!(
        ran, 5,
        "the three audit examples of sql.md and the two queries of rules.md"
    );
}
