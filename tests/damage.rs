//! Every damage exits 4 (issue 36 item 7): seeded byte flips and 16-byte overwrites of a small
//! ledger, each followed by `verify`. `verify` exits 0 only when the attempts and the chain's tip
//! are those of the original, and 4 otherwise, naming the damage; never 1 with a raw storage
//! error. `sql` on each damaged copy answers or exits 4 too.

#[path = "support/generated.rs"]
mod generated;

use std::path::Path;
use std::process::{Command, Output};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_laneledger"))
}

/// A small deterministic generator (xorshift64*), so a failing case can be replayed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn ledger(dir: &Path, n: usize) -> std::path::PathBuf {
    generated::ledger(dir, "original", n)
}

fn verify(db: &Path) -> Output {
    bin().arg("verify").arg("--db").arg(db).output().unwrap()
}

fn attempts(db: &Path) -> Output {
    bin()
        .args(["sql", "--format", "csv", "--db"])
        .arg(db)
        .arg("SELECT * EXCEPT (ingested_at) FROM job_attempt ORDER BY job_id, attempt_no")
        .output()
        .unwrap()
}

/// Damaged copies tried: half single-byte flips, half 16-byte overwrites.
const CASES: usize = 200;

#[test]
fn flipped_and_overwritten_bytes_exit_4_unless_nothing_changed() {
    let dir = tempfile::tempdir().unwrap();
    let original = ledger(dir.path(), 2_000);
    let bytes = std::fs::read(&original).unwrap();
    let clean = verify(&original);
    assert_eq!(
        clean.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&clean.stderr)
    );
    let clean_line = String::from_utf8_lossy(&clean.stdout).into_owned();
    let rows = attempts(&original);
    assert!(rows.status.success());
    let mut rng = Rng(0x36_36_36_36);
    let damaged = dir.path().join("damaged.redb");
    let (mut named, mut unchanged) = (0, 0);
    for case in 0..CASES {
        let mut copy = bytes.clone();
        let at = rng.below(copy.len());
        let what = if case % 2 == 0 {
            let mask = (rng.below(255) + 1) as u8;
            copy[at] ^= mask;
            format!("byte {at} xor {mask:#04x}")
        } else {
            let at = at.min(copy.len() - 16);
            for b in &mut copy[at..at + 16] {
                *b = rng.next() as u8;
            }
            format!("16 bytes at {at}")
        };
        std::fs::write(&damaged, &copy).unwrap();
        // A command that only reads answers or says the file is damaged, never a raw error.
        let read = bin()
            .args(["sql", "--db"])
            .arg(&damaged)
            .arg("SELECT count(*), sum(tokens_in) FROM job_attempt")
            .output()
            .unwrap();
        assert!(
            matches!(read.status.code(), Some(0 | 4)),
            "case {case}: {what}: sql exit {:?}: {}",
            read.status.code(),
            String::from_utf8_lossy(&read.stderr)
        );
        let o = verify(&damaged);
        let stderr = String::from_utf8_lossy(&o.stderr);
        match o.status.code() {
            Some(0) => {
                // Nothing visible changed: the same counts and tip, the same attempts.
                assert_eq!(String::from_utf8_lossy(&o.stdout), clean_line, "case {case}: {what}");
                let now = attempts(&damaged);
                assert_eq!(
                    now.stdout, rows.stdout,
                    "case {case}: {what}: verify said clean but the attempts differ"
                );
                unchanged += 1;
            }
            Some(4) => {
                assert!(
                    stderr.contains("damaged") || stderr.contains("does not verify"),
                    "case {case}: {what}: {stderr}"
                );
                named += 1;
            }
            other => panic!("case {case}: {what}: exit {other:?}: {stderr}"),
        }
    }
    assert_eq!(named + unchanged, CASES);
    eprintln!("{named} damaged copies named as damage, {unchanged} unchanged");
    assert!(named > 0, "no case was named as damage");
}
