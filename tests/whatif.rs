//! `laneledger whatif` on the demo's pin week (2026-W48): the lane policy replayed under one
//! changed setting moves as the lane-thrash note's two columns do, the gate's decisions flip
//! exactly where a changed cap says, and the same seed gives the same figures.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_laneledger"))
}

fn sample(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("sample-data").join(name)
}

fn run(args: &[&str]) -> Output {
    bin().args(args).output().expect("run laneledger")
}

/// A ledger of the demo's two drill weeks and the pin week's gate decisions, and lane.yaml files:
/// the demo's own, and copies with one setting changed.
struct Demo {
    dir: tempfile::TempDir,
}

impl Demo {
    fn new() -> Demo {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("l.redb");
        let db = db.to_str().unwrap();
        let pin = sample("drill-pin-2026-W48.ndjson");
        let nopin = sample("drill-nopin-2026-W47.ndjson");
        let decisions = sample("decisions-2026-W48.ndjson");
        for args in [
            vec!["ingest", "--db", db, pin.to_str().unwrap(), nopin.to_str().unwrap()],
            vec!["ingest", "--db", db, "--kind", "decisions", decisions.to_str().unwrap()],
        ] {
            let o = run(&args);
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        }
        let demo = Demo { dir };
        let yaml = std::fs::read_to_string(sample("lane.yaml")).unwrap();
        for (name, from, to) in [
            ("max1.yaml", "    max_attempts: 2\n", "    max_attempts: 1\n"),
            ("nopin.yaml", "pin_on: [ambiguous, permanent]", "pin_on: []"),
            ("age40.yaml", "max_queue_age_s: 30 ", "max_queue_age_s: 40 "),
        ] {
            assert_eq!(yaml.matches(from).count(), 1, "{from:?} once in lane.yaml");
            std::fs::write(demo.dir.path().join(name), yaml.replacen(from, to, 1)).unwrap();
        }
        demo
    }

    fn whatif(&self, config: &str, extra: &[&str]) -> Output {
        let db = self.dir.path().join("l.redb");
        let config = if config == "lane.yaml" {
            sample("lane.yaml")
        } else {
            self.dir.path().join(config)
        };
        let base = sample("lane.yaml");
        let mut args = vec![
            "whatif",
            "--db",
            db.to_str().unwrap(),
            "--week",
            "2026-W48",
            "--config",
            config.to_str().unwrap(),
            "--base",
            base.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        run(&args)
    }

    fn json(&self, config: &str) -> Value {
        let o = self.whatif(config, &["--format", "json"]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice(&o.stdout).unwrap()
    }
}

/// The replay's drill table: jobs, unique accepted artifacts, free attempts, paid attempts,
/// total tokens, duplicate artifacts, cross-lane jobs, jobs without an artifact.
fn table(v: &Value) -> [u64; 8] {
    [
        "jobs",
        "unique_accepted_artifacts",
        "free_attempts",
        "paid_attempts",
        "total_tokens",
        "duplicate_artifacts",
        "cross_lane_jobs",
        "failed_jobs",
    ]
    .map(|k| v[k].as_u64().unwrap_or_else(|| panic!("{k} in {v}")))
}

/// Today's policy replayed over the pin week: close to the week as logged (378 free, 44 paid,
/// 355,200 tokens, 44 cross-lane jobs, no duplicate).
const NOW: [u64; 8] = [300, 300, 378, 45, 356_400, 0, 45, 0];

#[test]
fn max_attempts_1_pins_sooner_more_paid_fewer_free() {
    let demo = Demo::new();
    let v = demo.json("max1.yaml");
    assert_eq!(
        v["changes"],
        serde_json::json!([{"key": "lanes.free.max_attempts", "now": "2", "with_change": "1"}])
    );
    let lane = &v["lane"];
    assert_eq!(lane["logged"]["free_attempts"], 378);
    assert_eq!(lane["logged"]["paid_attempts"], 44);
    assert_eq!(table(&lane["now"]), NOW);
    let with = table(&lane["with_change"]);
    assert_eq!(with, [300, 300, 300, 101, 361_200, 0, 101, 0]);
    // One free attempt a job: toward the note's "Pin + dedup" column, away from "Retry free, no
    // pin": fewer free attempts, more paid ones, more tokens, more jobs crossing lanes.
    assert!(with[2] < NOW[2] && with[3] > NOW[3] && with[4] > NOW[4] && with[6] > NOW[6]);
}

#[test]
fn pin_on_empty_moves_as_the_notes_retry_free_no_pin_column() {
    let demo = Demo::new();
    let v = demo.json("nopin.yaml");
    assert_eq!(
        v["changes"],
        serde_json::json!([{"key": "lanes.free.pin_on", "now": "[ambiguous, permanent]", "with_change": "[]"}])
    );
    let lane = &v["lane"];
    assert_eq!(table(&lane["now"]), NOW);
    let with = table(&lane["with_change"]);
    assert_eq!(with, [300, 300, 401, 26, 352_000, 20, 26, 0]);
    // The note: Pin + dedup 375 free, 46 paid, 355,200 tokens, 0 duplicates, 0.15 cross-lane;
    // Retry free, no pin 411, 6, 336,000, 15, 0.02. Every row moves the same way here.
    assert!(with[2] > NOW[2], "free attempts rise");
    assert!(with[3] < NOW[3], "paid attempts fall");
    assert!(with[4] < NOW[4], "tokens fall");
    assert!(with[5] > NOW[5], "duplicates appear");
    assert!(with[6] < NOW[6], "fewer jobs cross lanes");
    assert_eq!(with[1], NOW[1], "every job still gets its artifact");
    // The rates drawn from are the week's own: 300 first free calls, 78 later ones, 44 paid.
    let o = &lane["observed"];
    assert_eq!(o["first_free"]["attempts"], serde_json::json!([198, 78, 19, 5]));
    assert_eq!(o["later_free"]["attempts"], serde_json::json!([58, 20, 0, 0]));
    assert_eq!(o["paid"]["attempts"], serde_json::json!([44, 0, 0, 0]));
    // Nothing about the gate changed.
    assert_eq!(v["gate"]["changes"], serde_json::json!([]));
    assert_eq!(v["gate"]["now"], v["gate"]["changed"]);
}

#[test]
fn a_gate_cap_flips_exactly_the_decisions_it_reaches() {
    let demo = Demo::new();
    let v = demo.json("age40.yaml");
    let g = &v["gate"];
    // Queue age over 30 and at most 40, no cap of their own: 35/120, 33/60 and 32/90 now fit
    // free; 38/40, 33/42 and 31/39 go to a reserved worker. 41 s and above stay deferred, and
    // rows that logged their own cap keep it.
    assert_eq!(
        g["changes"],
        serde_json::json!([
            {"from": "defer", "to": "admit_free", "decisions": 3},
            {"from": "defer", "to": "reserved", "decisions": 3}
        ])
    );
    assert_eq!(g["own_cap"], 3);
    assert_eq!(g["logged_mismatches"], 4);
    let counts = |t: &Value| {
        [
            "decisions",
            "admit_free",
            "defer",
            "reserved",
            "free_admit_misses",
            "free_admits_unknown",
        ]
        .map(|k| t[k].as_u64().unwrap())
    };
    assert_eq!(counts(&g["logged"]), [41, 20, 12, 9, 4, 0]);
    assert_eq!(counts(&g["now"]), [41, 18, 14, 9, 2, 1]);
    assert_eq!(counts(&g["changed"]), [41, 21, 8, 12, 2, 3]);
    assert_eq!(g["changed"]["defers_that_fit_reserved"], 4);
    assert_eq!(g["changed"]["reserved_that_fit_free"], 8);
    // The lane replay is untouched by a gate cap.
    assert_eq!(v["lane"]["now"], v["lane"]["with_change"]);
    let text = String::from_utf8(demo.whatif("age40.yaml", &[]).stdout).unwrap();
    assert!(text.contains("  gate.max_queue_age_s: 30 → 40\n"), "{text}");
    assert!(
        text.contains("  defer → admit_free: 3\n  defer → reserved: 3\n"),
        "{text}"
    );
    assert!(
        text.contains("  ÷ defers                                    0.500          0.571            0.500\n"),
        "{text}"
    );
}

#[test]
fn todays_settings_change_nothing() {
    let demo = Demo::new();
    let v = demo.json("lane.yaml");
    assert_eq!(v["changes"], serde_json::json!([]));
    assert_eq!(v["gate"]["changes"], serde_json::json!([]));
    assert_eq!(table(&v["lane"]["with_change"]), NOW);
    let text = String::from_utf8(demo.whatif("lane.yaml", &[]).stdout).unwrap();
    assert!(text.contains("nothing the what-if reads differs from today's settings"));
    assert!(text.contains("decisions that change: none"));
}

#[test]
fn the_same_seed_gives_the_same_figures() {
    let demo = Demo::new();
    let a = demo.whatif("nopin.yaml", &["--seed", "7"]);
    let b = demo.whatif("nopin.yaml", &["--seed", "7"]);
    assert!(a.status.success());
    assert_eq!(a.stdout, b.stdout);
    let other = demo.whatif("nopin.yaml", &["--seed", "8"]);
    assert_ne!(a.stdout, other.stdout, "another seed, another draw");
    let zero = demo.whatif("nopin.yaml", &[]);
    assert_eq!(zero.stdout, demo.whatif("nopin.yaml", &["--seed", "0"]).stdout);
    assert!(String::from_utf8_lossy(&a.stdout).starts_with("what-if for ISO week 2026-W48 (replay seed 7)\n"));
}

#[test]
fn a_bad_or_empty_week_is_refused() {
    let demo = Demo::new();
    let db = demo.dir.path().join("l.redb");
    let config = sample("lane.yaml");
    for (week, message) in [
        ("2026-48", "laneledger: \"2026-48\" is not an ISO week like 2026-W47\n"),
        ("2026-W49", "laneledger: no data for ISO week 2026-W49\n"),
    ] {
        let o = run(&[
            "whatif",
            "--db",
            db.to_str().unwrap(),
            "--week",
            week,
            "--config",
            config.to_str().unwrap(),
        ]);
        assert_eq!(o.status.code(), Some(2));
        assert_eq!(String::from_utf8_lossy(&o.stderr), message);
    }
}
