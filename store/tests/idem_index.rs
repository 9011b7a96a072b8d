//! The idem_key index in sorted runs (`store/src/storage/idem_index.rs`): after hundreds of commits of
//! every size, merged by tier, the whole index and every lookup equal a model kept beside it, and
//! the runs stay few.

use std::collections::BTreeSet;

use laneledger_store::drill::SplitMix64;
use laneledger_store::storage::tables::IDEM_RUN_DIR;
use laneledger_store::{InputFormat, Ledger, ingest_reader};
use redb::ReadableTableMetadata;

fn line(job: &str, no: u32, idem: &str) -> String {
    format!(
        r#"{{"job_id":"{job}","idem_key":"{idem}","attempt_no":{no},"lane":"free","started_at":"2026-11-02T00:00:00Z"}}"#
    ) + "\n"
}

#[test]
fn many_commits_merge_into_few_runs_and_every_lookup_matches_a_model() {
    let dir = tempfile::tempdir().unwrap();
    let l = Ledger::open(dir.path().join("l.redb")).unwrap();
    let mut rng = SplitMix64::new(11);
    let keys: Vec<String> = (0..400)
        .map(|i| format!("idem-{:x}", SplitMix64::new(i).next_u64()))
        .collect();
    let mut model: BTreeSet<(String, String, u32)> = BTreeSet::new();
    let mut delivered: Vec<String> = Vec::new();
    for commit in 0..300u64 {
        let size = match commit % 7 {
            0 => 500,
            1 => 1,
            _ => 1 + rng.next_u64() % 40,
        };
        let mut lines = String::new();
        for _ in 0..size {
            let job = format!("j{:016x}", rng.next_u64());
            let idem = &keys[(rng.next_u64() % keys.len() as u64) as usize];
            for no in 1..=1 + (rng.next_u64() % 3) as u32 {
                lines += &line(&job, no, idem);
                model.insert((idem.clone(), job.clone(), no));
            }
        }
        // Now and then a delivery comes again: duplicates add nothing to the index.
        if commit % 10 == 9 {
            lines += &delivered[(rng.next_u64() % delivered.len() as u64) as usize];
        }
        let report = ingest_reader(&l, "a.ndjson", lines.as_bytes(), InputFormat::Ndjson, 100_000, |_| {}).unwrap();
        assert_eq!(report.counters.rejected, 0);
        delivered.push(lines);
    }
    let n = model.len() as u64;
    assert!(n > 20_000, "{n}");
    let model: Vec<_> = model.into_iter().collect();
    assert_eq!(l.idem_index_entries().unwrap(), model);
    for key in &keys {
        let found: Vec<(String, u32)> = l
            .attempts_by_idem_key(key)
            .unwrap()
            .into_iter()
            .map(|s| (s.attempt.job_id, s.attempt.attempt_no))
            .collect();
        let want: Vec<(String, u32)> = model
            .iter()
            .filter(|(k, _, _)| k == key)
            .map(|(_, j, no)| (j.clone(), *no))
            .collect();
        assert!(!want.is_empty());
        assert_eq!(found, want, "{key}");
    }
    assert!(l.attempts_by_idem_key("idem-").unwrap().is_empty());
    assert!(l.attempts_by_idem_key("idem-~").unwrap().is_empty());
    // At most three runs per tier (⌊log₄ entries⌋) that holds any: these entries stay below
    // the tier whose runs are no longer merged (4⁹ entries), as the unit test of `merges` shows.
    let txn = l.database().begin_read().unwrap();
    let runs = txn.open_table(IDEM_RUN_DIR).unwrap().len().unwrap();
    let tiers = u64::from(n.ilog2() / 2) + 1;
    assert!(runs <= 3 * tiers, "{runs} runs for {n} entries");
}
