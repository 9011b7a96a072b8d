//! The hash chain: a clean ledger verifies (before and after a retention sweep), and 1,000 random
//! single-record tampers done directly on the redb tables are each found, with the first bad
//! record named.

use std::collections::HashMap;
use std::path::Path;

use laneledger_store::drill::{self, DrillConfig, Policy, SplitMix64};
use laneledger_store::storage::chain::{
    BLOCK_BYTES, Problem, RecordKey, VerifyReport, encode_v4_entry, join_block, pack_block, split_block, unpack_block,
};
use laneledger_store::storage::retention::{DAY_MICROS, RetentionRule};
use laneledger_store::storage::tables::{
    ATTEMPT_BY_IDEM_KEY, ATTEMPT_CONFLICT, ATTEMPT_IDEM, CHAIN_BLOCK, CHAIN_BLOCK_V4, CHAIN_CHECKPOINT, CHAIN_TIP,
    CHAIN_V2, DECISION, DECISION_CONFLICT, INGEST_REJECT, RETENTION_SWEEP, WEEK_SNAPSHOT,
};
use laneledger_store::{
    Attempt, DEFAULT_BATCH, InputFormat, Ledger, StoredAttempt, ingest_decisions_reader, ingest_reader, parse_timestamp,
};
use redb::{ReadableTable, ReadableTableMetadata};

const START: &str = "2026-09-01T00:00:00Z";

/// 60 days of drill jobs delivered open and then completed, with conflicts, rejects and gate
/// decisions (one completed, one in conflict, one unreadable line).
fn build(path: &Path) -> Ledger {
    let ledger = Ledger::open(path).unwrap();
    let start = parse_timestamp(START).unwrap();
    let cfg = DrillConfig {
        policy: Policy::NoPin,
        seed: 7,
        job_prefix: "t-".into(),
        ids: laneledger_store::drill::DrillIds::Sequential,
    };
    let attempts = drill::synthetic(&cfg, 120, start, 60.0);
    let mut text = String::new();
    for (i, a) in attempts.iter().enumerate() {
        if i % 3 == 0 {
            let mut open = a.clone();
            open.ended_at = None;
            open.outcome = None;
            open.artifact_id = None;
            text += &format!("{}\n", open.to_json());
        }
        text += &format!("{}\n", a.to_json());
        if i % 17 == 5 {
            let mut changed = a.clone();
            changed.tokens_in = Some(a.tokens_in.unwrap_or(0) + 1);
            text += &format!("{}\n", changed.to_json());
        }
        if i % 29 == 0 {
            text += "{not json\n";
        }
    }
    ingest_reader(&ledger, "a.ndjson", text.as_bytes(), InputFormat::Ndjson, 50, |_| {}).unwrap();
    let decisions = r#"{"job_id":"t-1","decided_at":"2026-09-01T09:00:00Z","queue_age_s":12,"expected_service_s":8,"retry_tax_s":8,"deadline_slack_s":90,"decision":"admit_free"}
{"job_id":"t-1","decided_at":"2026-09-01T09:00:00Z","queue_age_s":12,"expected_service_s":8,"retry_tax_s":8,"deadline_slack_s":90,"decision":"admit_free","slack_miss":true}
{"job_id":"t-1","decided_at":"2026-09-01T09:00:00Z","queue_age_s":12,"expected_service_s":8,"retry_tax_s":8,"deadline_slack_s":90,"decision":"defer"}
{"job_id":"t-2","decided_at":"2026-10-20T09:01:00Z","queue_age_s":50,"expected_service_s":8,"retry_tax_s":8,"deadline_slack_s":40,"decision":"defer"}
oops
"#;
    ingest_decisions_reader(
        &ledger,
        "d.ndjson",
        decisions.as_bytes(),
        InputFormat::Ndjson,
        DEFAULT_BATCH,
        |_| {},
    )
    .unwrap();
    ledger
}

/// A sweep at START + 60 days keeping 30.
fn sweep(ledger: &Ledger) {
    let now = parse_timestamp(START).unwrap() + 60 * DAY_MICROS;
    let rule = RetentionRule {
        days: 30,
        reconcile_window_s: 900,
    };
    let plan = ledger.plan_sweep(now, rule).unwrap();
    assert!(!plan.is_empty());
    let record = ledger.commit_sweep(&plan, None, &[]).unwrap().unwrap();
    assert!(record.checkpoints > 0);
}

/// The stored bytes of the record `key` names, through the redb tables.
fn get(ledger: &Ledger, key: &RecordKey) -> Option<Vec<u8>> {
    let txn = ledger.database().begin_read().unwrap();
    let v = |g: Option<redb::AccessGuard<'_, &[u8]>>| g.map(|g| g.value().to_vec());
    match key {
        RecordKey::Attempt { job_id, attempt_no } => laneledger_store::storage::attempt_store::read_rows(&txn)
            .unwrap()
            .get(job_id, *attempt_no)
            .unwrap(),
        RecordKey::Decision { job_id, decided_at } => v(txn
            .open_table(DECISION)
            .unwrap()
            .get((job_id.as_str(), *decided_at))
            .unwrap()),
        RecordKey::WeekSnapshot(w) => v(txn.open_table(WEEK_SNAPSHOT).unwrap().get(w.as_str()).unwrap()),
        _ => {
            let (def, n) = numbered(key);
            v(txn.open_table(def).unwrap().get(n).unwrap())
        }
    }
}

fn numbered(key: &RecordKey) -> (redb::TableDefinition<'static, u64, &'static [u8]>, u64) {
    match key {
        RecordKey::AttemptConflict(n) => (ATTEMPT_CONFLICT, *n),
        RecordKey::IngestReject(n) => (INGEST_REJECT, *n),
        RecordKey::DecisionConflict(n) => (DECISION_CONFLICT, *n),
        RecordKey::RetentionSweep(n) => (RETENTION_SWEEP, *n),
        RecordKey::Checkpoint(n) => (CHAIN_CHECKPOINT, *n),
        other => unreachable!("{other:?}"),
    }
}

/// Stores `value` under `key` (`None` removes it), directly in the redb table.
fn put(ledger: &Ledger, key: &RecordKey, value: Option<&[u8]>) {
    let txn = ledger.database().begin_write().unwrap();
    match key {
        RecordKey::Attempt { job_id, attempt_no } => {
            laneledger_store::storage::attempt_store::set_row(&txn, job_id, *attempt_no, value).unwrap()
        }
        RecordKey::Decision { job_id, decided_at } => {
            let mut t = txn.open_table(DECISION).unwrap();
            match value {
                Some(v) => drop(t.insert((job_id.as_str(), *decided_at), v).unwrap()),
                None => drop(t.remove((job_id.as_str(), *decided_at)).unwrap()),
            }
        }
        RecordKey::WeekSnapshot(w) => {
            let mut t = txn.open_table(WEEK_SNAPSHOT).unwrap();
            match value {
                Some(v) => drop(t.insert(w.as_str(), v).unwrap()),
                None => drop(t.remove(w.as_str()).unwrap()),
            }
        }
        _ => {
            let (def, n) = numbered(key);
            let mut t = txn.open_table(def).unwrap();
            match value {
                Some(v) => drop(t.insert(n, v).unwrap()),
                None => drop(t.remove(n).unwrap()),
            }
        }
    }
    txn.commit().unwrap();
}

/// The block holding position `n`: (its key, its stored `prev`, its entries' stored bytes).
fn block_of(ledger: &Ledger, n: u64) -> (u64, [u8; 32], Vec<Vec<u8>>) {
    let txn = ledger.database().begin_read().unwrap();
    let t = txn.open_table(CHAIN_BLOCK).unwrap();
    let (k, v) = t.range(..=n).unwrap().next_back().unwrap().unwrap();
    let plain = unpack_block(v.value()).unwrap();
    let (prev, frames) = split_block(&plain).unwrap();
    (k.value(), prev, frames.into_iter().map(<[u8]>::to_vec).collect())
}

fn chain_get(ledger: &Ledger, n: u64) -> Vec<u8> {
    let (first, _, frames) = block_of(ledger, n);
    frames[(n - first) as usize].clone()
}

/// Replaces the entry stored at position `n`, or removes it (its block is cut in two around it,
/// both pieces keeping the block's `prev`).
fn chain_put(ledger: &Ledger, n: u64, value: Option<&[u8]>) {
    let (first, prev, mut frames) = block_of(ledger, n);
    let i = (n - first) as usize;
    let txn = ledger.database().begin_write().unwrap();
    {
        let mut t = txn.open_table(CHAIN_BLOCK).unwrap();
        let join = |frames: &[Vec<u8>]| pack_block(&join_block(&prev, frames.iter().map(Vec::as_slice)));
        match value {
            Some(v) => {
                frames[i] = v.to_vec();
                t.insert(first, join(&frames).as_slice()).unwrap();
            }
            None => {
                t.remove(first).unwrap();
                if i > 0 {
                    t.insert(first, join(&frames[..i]).as_slice()).unwrap();
                }
                if i + 1 < frames.len() {
                    t.insert(n + 1, join(&frames[i + 1..]).as_slice()).unwrap();
                }
            }
        }
    }
    txn.commit().unwrap();
}

/// Each stored block: (its first position, its last).
fn blocks(ledger: &Ledger) -> Vec<(u64, u64)> {
    let txn = ledger.database().begin_read().unwrap();
    let t = txn.open_table(CHAIN_BLOCK).unwrap();
    t.iter()
        .unwrap()
        .map(|r| {
            let (k, v) = r.unwrap();
            (
                k.value(),
                k.value() + split_block(&unpack_block(v.value()).unwrap()).unwrap().1.len() as u64 - 1,
            )
        })
        .collect()
}

/// What verify must name: (table, key, seq, the problems allowed).
type Expected = (&'static str, String, Option<u64>, Vec<Problem>);

fn tamper_all(clean: &Path, trials: usize, seed: u64) -> usize {
    let dir = tempfile::tempdir().unwrap();
    let (entries, latest) = {
        let l = Ledger::open(clean).unwrap();
        let entries = l.chain_entries().unwrap();
        let mut latest: HashMap<RecordKey, u64> = HashMap::new();
        for e in &entries {
            latest.insert(e.key.clone(), e.n);
        }
        (entries, latest)
    };
    let positions: Vec<u64> = entries.iter().map(|e| e.n).collect();
    let mut keys: Vec<RecordKey> = latest.keys().cloned().collect();
    keys.sort();
    let mut rng = SplitMix64::new(seed);
    let mut pick = |n: usize| (rng.next_u64() % n as u64) as usize;
    let mut detected = 0;
    for trial in 0..trials {
        let path = dir.path().join(format!("t{trial}.redb"));
        std::fs::copy(clean, &path).unwrap();
        let l = Ledger::open(&path).unwrap();
        let kind = pick(10);
        let expected: Expected = match kind {
            // A record's bytes changed (one byte flipped).
            0 => {
                let key = &keys[pick(keys.len())];
                let mut v = get(&l, key).unwrap();
                let i = pick(v.len());
                v[i] ^= 1 + pick(255) as u8;
                put(&l, key, Some(&v));
                (
                    key.table(),
                    key.to_string(),
                    Some(latest[key]),
                    vec![Problem::RecordChanged],
                )
            }
            // A record deleted.
            1 => {
                let key = &keys[pick(keys.len())];
                put(&l, key, None);
                if let RecordKey::Checkpoint(first) = key {
                    // Without its checkpoint the removed run is a gap in the chain.
                    ("chain", format!("n={first}"), Some(*first), vec![Problem::EntryMissing])
                } else {
                    (
                        key.table(),
                        key.to_string(),
                        Some(latest[key]),
                        vec![Problem::RecordRemoved],
                    )
                }
            }
            // Two records of one table swapped (a reordering).
            2 => {
                let a = keys[pick(keys.len())].clone();
                let same: Vec<&RecordKey> = keys
                    .iter()
                    .filter(|k| k.table() == a.table() && **k != a && get(&l, k) != get(&l, &a))
                    .collect();
                if same.is_empty() {
                    let mut v = get(&l, &a).unwrap();
                    v.push(0);
                    put(&l, &a, Some(&v));
                    (a.table(), a.to_string(), Some(latest[&a]), vec![Problem::RecordChanged])
                } else {
                    let b = same[pick(same.len())].clone();
                    let (va, vb) = (get(&l, &a).unwrap(), get(&l, &b).unwrap());
                    put(&l, &a, Some(&vb));
                    put(&l, &b, Some(&va));
                    let first = if latest[&a] < latest[&b] { &a } else { &b };
                    (
                        first.table(),
                        first.to_string(),
                        Some(latest[first]),
                        vec![Problem::RecordChanged],
                    )
                }
            }
            // A chain entry changed.
            3 => {
                let n = positions[pick(positions.len())];
                let mut v = chain_get(&l, n);
                let i = pick(v.len());
                v[i] ^= 1 + pick(255) as u8;
                chain_put(&l, n, Some(&v));
                (
                    "chain",
                    format!("n={n}"),
                    Some(n),
                    vec![Problem::EntryChanged, Problem::EntryUnreadable],
                )
            }
            // A chain entry deleted.
            4 => {
                let n = positions[pick(positions.len())];
                chain_put(&l, n, None);
                ("chain", format!("n={n}"), Some(n), vec![Problem::EntryMissing])
            }
            // Two chain entries swapped (a reordering).
            5 => {
                let i = pick(positions.len() - 1);
                let j = i + 1 + pick(positions.len() - 1 - i);
                let (a, b) = (positions[i], positions[j]);
                let (va, vb) = (chain_get(&l, a), chain_get(&l, b));
                chain_put(&l, a, Some(&vb));
                chain_put(&l, b, Some(&va));
                ("chain", format!("n={a}"), Some(a), vec![Problem::EntryMoved])
            }
            // A block's stored `prev` changed.
            7 => {
                let chain = blocks(&l);
                let (first, _) = chain[pick(chain.len())];
                let (_, mut prev, frames) = block_of(&l, first);
                prev[pick(32)] ^= 1 + pick(255) as u8;
                let txn = l.database().begin_write().unwrap();
                txn.open_table(CHAIN_BLOCK)
                    .unwrap()
                    .insert(
                        first,
                        pack_block(&join_block(&prev, frames.iter().map(Vec::as_slice))).as_slice(),
                    )
                    .unwrap();
                txn.commit().unwrap();
                ("chain", format!("n={first}"), Some(first), vec![Problem::BrokenLink])
            }
            // The stored tip changed.
            8 => {
                let last = *positions.last().unwrap();
                let txn = l.database().begin_write().unwrap();
                {
                    let mut t = txn.open_table(CHAIN_TIP).unwrap();
                    let mut tip = t.get("tip").unwrap().unwrap().value().to_vec();
                    tip[pick(32)] ^= 1 + pick(255) as u8;
                    t.insert("tip", tip.as_slice()).unwrap();
                }
                txn.commit().unwrap();
                ("chain", format!("n={last}"), Some(last), vec![Problem::TipChanged])
            }
            // A chain entry changed together with its CRC: the record hash's last byte, so that the
            // record no longer matches either; the walk finds the hashes after it changed where the
            // next block (or the checkpoint standing for the run after it) links, or at the tip.
            9 => {
                let n = positions[pick(positions.len())];
                let mut v = chain_get(&l, n);
                let body = v.len() - 4;
                v[body - 1] ^= 1 + pick(255) as u8;
                let crc = crc32fast::hash(&v[..body]);
                v[body..].copy_from_slice(&crc.to_le_bytes());
                chain_put(&l, n, Some(&v));
                let last = *positions.last().unwrap();
                let (_, end) = blocks(&l).into_iter().find(|&(a, b)| a <= n && n <= b).unwrap();
                let key = &entries.iter().find(|e| e.n == n).unwrap().key;
                if let RecordKey::Checkpoint(_) = key {
                    // A checkpoint the walk relies on is checked against its entry first.
                    (key.table(), key.to_string(), Some(n), vec![Problem::RecordChanged])
                } else if end == last {
                    ("chain", format!("n={last}"), Some(last), vec![Problem::TipChanged])
                } else {
                    (
                        "chain",
                        format!("n={}", end + 1),
                        Some(end + 1),
                        vec![Problem::BrokenLink, Problem::EntryMissing],
                    )
                }
            }
            // A record added under a new key (a copy of another attempt's bytes).
            _ => {
                let src = keys.iter().find(|k| matches!(k, RecordKey::Attempt { .. })).unwrap();
                let v = get(&l, src).unwrap();
                let key = RecordKey::Attempt {
                    job_id: format!("forged-{trial}"),
                    attempt_no: 1,
                };
                put(&l, &key, Some(&v));
                ("attempt", key.to_string(), None, vec![Problem::RecordAdded])
            }
        };
        let report = l.verify().unwrap();
        let bad = report
            .first_bad
            .unwrap_or_else(|| panic!("trial {trial} (kind {kind}) not detected: {expected:?}"));
        assert_eq!(
            (bad.table, bad.key.clone(), bad.seq),
            (expected.0, expected.1.clone(), expected.2),
            "trial {trial} (kind {kind})"
        );
        assert!(expected.3.contains(&bad.problem), "trial {trial}: {bad}");
        detected += 1;
        drop(l);
        std::fs::remove_file(&path).unwrap();
    }
    detected
}

#[test]
fn a_clean_ledger_verifies_before_and_after_a_sweep_and_1000_tampers_are_all_named() {
    let dir = tempfile::tempdir().unwrap();
    let clean = dir.path().join("clean.redb");
    let swept = dir.path().join("swept.redb");
    {
        let l = build(&clean);
        let r = l.verify().unwrap();
        assert!(r.is_clean(), "{:?}", r.first_bad);
        assert_eq!(r.problems, 0);
        assert_eq!(r.entries, l.chain_entries().unwrap().len() as u64);
        assert!(r.records > 100);
    }
    std::fs::copy(&clean, &swept).unwrap();
    {
        let l = Ledger::open(&swept).unwrap();
        sweep(&l);
        let r = l.verify().unwrap();
        assert!(r.is_clean(), "{:?}", r.first_bad);
        assert!(r.checkpoints > 0);
        // Writes after a sweep chain on from the sweep's entries.
        let more = format!(
            "{}\n",
            r#"{"job_id":"late","idem_key":"late","attempt_no":1,"lane":"free","started_at":"2026-11-01T00:00:00Z"}"#
        );
        ingest_reader(&l, "b.ndjson", more.as_bytes(), InputFormat::Ndjson, 10, |_| {}).unwrap();
        assert!(l.verify().unwrap().is_clean());
    }
    assert_eq!(tamper_all(&clean, 500, 1), 500);
    assert_eq!(tamper_all(&swept, 500, 2), 500);
}

#[test]
fn verify_runs_are_logged() {
    let dir = tempfile::tempdir().unwrap();
    let l = build(&dir.path().join("l.redb"));
    let r = l.verify().unwrap();
    assert_eq!(l.record_verify(1_000, &r).unwrap(), 1);
    let runs = l.verify_runs().unwrap();
    assert_eq!(runs.len(), 1);
    assert!(runs[0].clean);
    assert_eq!(runs[0].tip, r.tip);
    assert_eq!(runs[0].at, 1_000);
}

#[test]
fn a_format_1_ledger_is_chained_when_opened() {
    use laneledger_store::storage::tables::{COUNTER, META};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v1.redb");
    {
        // A version 1 file: the same records, no chain.
        let l = build(&path);
        let txn = l.database().begin_write().unwrap();
        laneledger_store::storage::attempt_store::write_as_format_5(&txn).unwrap();
        txn.delete_table(CHAIN_BLOCK).unwrap();
        txn.delete_table(CHAIN_TIP).unwrap();
        txn.open_table(META).unwrap().insert("format_version", 1).unwrap();
        txn.open_table(COUNTER).unwrap().remove("chain_entries").unwrap();
        txn.commit().unwrap();
    }
    let l = Ledger::open(&path).unwrap();
    assert_eq!(l.migrated_from(), Some(1));
    let r = l.verify().unwrap();
    assert!(r.is_clean(), "{:?}", r.first_bad);
    assert_eq!(r.entries, r.records);
    assert_eq!(format_version(&l), laneledger_store::storage::tables::FORMAT_VERSION);
}

/// Opens the ledger file at `path`, of format version `from`, as a user would: read-only it is
/// refused (migrating would write), then opened, which migrates it to the current version.
fn open_migrating(path: &Path, from: u64) -> Ledger {
    use laneledger_store::storage::tables::FORMAT_VERSION;
    match Ledger::open_read_only(path) {
        Err(laneledger_store::Error::ReadOnlyNeedsMigration { found, supported, .. }) => {
            assert_eq!((found, supported), (from, FORMAT_VERSION))
        }
        other => panic!("{other:?}"),
    }
    let l = Ledger::open(path).unwrap();
    assert_eq!((l.migrated_from(), format_version(&l)), (Some(from), FORMAT_VERSION));
    l
}

/// `meta["format_version"]` of the file.
fn format_version(ledger: &Ledger) -> u64 {
    use laneledger_store::storage::tables::META;
    let txn = ledger.database().begin_read().unwrap();
    txn.open_table(META)
        .unwrap()
        .get("format_version")
        .unwrap()
        .unwrap()
        .value()
}

/// Rewrites a ledger of the current format as version 4 wrote it: every chain entry stored whole
/// with its own SHA-256, in blocks of up to 4,096 consecutive positions without a stored `prev`,
/// and no tip row.
fn downgrade_to_v4(ledger: &Ledger) {
    use laneledger_store::storage::tables::META;
    let entries = ledger.chain_entries().unwrap();
    let txn = ledger.database().begin_write().unwrap();
    laneledger_store::storage::attempt_store::write_as_format_5(&txn).unwrap();
    {
        let mut v4 = txn.open_table(CHAIN_BLOCK_V4).unwrap();
        let (mut block, mut first, mut len) = (Vec::new(), 0u64, 0usize);
        for (i, e) in entries.iter().enumerate() {
            if len > 0 && (e.n != entries[i - 1].n + 1 || len == 4096) {
                v4.insert(first, block.as_slice()).unwrap();
                (block, len) = (Vec::new(), 0);
            }
            if len == 0 {
                first = e.n;
            }
            let stored = encode_v4_entry(e);
            leb128(&mut block, stored.len());
            block.extend_from_slice(&stored);
            len += 1;
        }
        if len > 0 {
            v4.insert(first, block.as_slice()).unwrap();
        }
    }
    txn.delete_table(CHAIN_BLOCK).unwrap();
    txn.delete_table(CHAIN_TIP).unwrap();
    txn.open_table(META).unwrap().insert("format_version", 4).unwrap();
    txn.commit().unwrap();
}

/// Appends `n` as LEB128.
fn leb128(out: &mut Vec<u8>, mut n: usize) {
    while n >= 0x80 {
        out.push(n as u8 | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

/// Rewrites a ledger of the current format as version 3 wrote it: the chain as version 4 stores it,
/// the idem_key index as one B-tree key per attempt instead of sorted runs.
fn downgrade_to_v3(ledger: &Ledger) {
    use laneledger_store::storage::tables::{IDEM_RUN, IDEM_RUN_DIR, META};
    downgrade_to_v4(ledger);
    let entries = ledger.idem_index_entries().unwrap();
    let txn = ledger.database().begin_write().unwrap();
    {
        let mut idem = txn.open_table(ATTEMPT_IDEM).unwrap();
        for (idem_key, job_id, attempt_no) in &entries {
            idem.insert((idem_key.as_str(), job_id.as_str(), *attempt_no), ())
                .unwrap();
        }
    }
    txn.delete_table(IDEM_RUN).unwrap();
    txn.delete_table(IDEM_RUN_DIR).unwrap();
    txn.open_table(META).unwrap().insert("format_version", 3).unwrap();
    txn.commit().unwrap();
}

/// Rewrites a ledger of the current format as version 2 wrote it: one chain row per entry, the
/// idem_key index as a multimap.
fn downgrade_to_v2(ledger: &Ledger) {
    use laneledger_store::storage::tables::META;
    let chain = ledger.chain_entries().unwrap();
    downgrade_to_v3(ledger);
    let txn = ledger.database().begin_write().unwrap();
    {
        let mut rows = txn.open_table(CHAIN_V2).unwrap();
        for e in &chain {
            rows.insert(e.n, encode_v4_entry(e).as_slice()).unwrap();
        }
        let idem = txn.open_table(ATTEMPT_IDEM).unwrap();
        let mut multimap = txn.open_multimap_table(ATTEMPT_BY_IDEM_KEY).unwrap();
        for row in idem.iter().unwrap() {
            let (k, _) = row.unwrap();
            let (idem_key, job_id, attempt_no) = k.value();
            multimap.insert(idem_key, (job_id, attempt_no)).unwrap();
        }
    }
    txn.delete_table(CHAIN_BLOCK_V4).unwrap();
    txn.delete_table(ATTEMPT_IDEM).unwrap();
    txn.open_table(META).unwrap().insert("format_version", 2).unwrap();
    txn.commit().unwrap();
}

/// The names of the ledger's tables (not multimaps).
fn table_names(ledger: &Ledger) -> Vec<String> {
    let txn = ledger.database().begin_read().unwrap();
    txn.list_tables()
        .unwrap()
        .map(|t| redb::TableHandle::name(&t).to_string())
        .collect()
}

/// The bytes the chain's entries take in their blocks, each block's stored `prev` left out.
fn chain_frame_bytes(ledger: &Ledger) -> usize {
    let txn = ledger.database().begin_read().unwrap();
    let t = txn.open_table(CHAIN_BLOCK).unwrap();
    t.iter()
        .unwrap()
        .map(|r| unpack_block(r.unwrap().1.value()).unwrap().len() - 32)
        .sum()
}

/// The idem_key index entries the attempt rows call for: (idem_key, job_id, attempt_no) of each
/// row, in order.
fn index_of_rows(ledger: &Ledger) -> Vec<(String, String, u32)> {
    let mut keys: Vec<(String, String, u32)> = Vec::new();
    ledger
        .for_each_attempt(|s| keys.push((s.attempt.idem_key, s.attempt.job_id, s.attempt.attempt_no)))
        .unwrap();
    keys.sort();
    keys
}

/// Every idem_key the attempts carry, once each, in order.
fn idem_keys(ledger: &Ledger) -> Vec<String> {
    let mut keys: Vec<String> = Vec::new();
    ledger.for_each_attempt(|s| keys.push(s.attempt.idem_key)).unwrap();
    keys.sort();
    keys.dedup();
    keys
}

#[test]
fn a_format_2_ledger_is_moved_to_blocks_with_the_same_entries_tip_and_idem_index() {
    use laneledger_store::storage::tables::FORMAT_VERSION;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v2.redb");
    let (entries, report, by_idem) = {
        // Swept, so that the chain has gaps where blocks must be cut.
        let l = build(&path);
        sweep(&l);
        let report = l.verify().unwrap();
        assert!(report.is_clean() && report.checkpoints > 0, "{report:?}");
        // The sweep removed the swept rows' index entries and no other.
        assert_eq!(l.idem_index_entries().unwrap(), index_of_rows(&l));
        let by_idem: Vec<_> = idem_keys(&l)
            .iter()
            .map(|k| (k.clone(), l.attempts_by_idem_key(k).unwrap()))
            .collect();
        (l.chain_entries().unwrap(), report, by_idem)
    };
    assert!(entries.len() > 100);
    assert!(by_idem.len() > 50 && by_idem.iter().all(|(_, a)| !a.is_empty()));
    assert!(
        by_idem.iter().any(|(_, a)| a.len() > 1),
        "some idem keys carry several attempts"
    );
    downgrade_to_v2(&Ledger::open(&path).unwrap());

    // Opened read-only, an older file is refused: migrating it would write.
    drop(open_migrating(&path, 2));
    let l = Ledger::open(&path).unwrap();
    assert_eq!(l.migrated_from(), None, "migrated once");
    assert_eq!(format_version(&l), FORMAT_VERSION);
    let tables = table_names(&l);
    assert!(!tables.contains(&"chain".to_string()), "{tables:?}");
    let txn = l.database().begin_read().unwrap();
    assert_eq!(txn.list_multimap_tables().unwrap().count(), 0);
    drop(txn);
    assert_eq!(l.chain_entries().unwrap(), entries);
    let after = l.verify().unwrap();
    assert_eq!(
        (
            after.tip,
            after.entries,
            after.records,
            after.checkpoints,
            after.first_bad
        ),
        (report.tip, report.entries, report.records, report.checkpoints, None)
    );
    let again: Vec<_> = by_idem
        .iter()
        .map(|(k, _)| (k.clone(), l.attempts_by_idem_key(k).unwrap()))
        .collect();
    assert_eq!(again, by_idem);
    assert!(l.attempts_by_idem_key("no such key").unwrap().is_empty());
    assert_eq!(l.idem_index_entries().unwrap(), index_of_rows(&l));
}

#[test]
fn a_format_4_ledger_keeps_its_entries_and_tip_and_what_was_wrong_with_its_chain() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v4.redb");
    let (entries, report, bytes) = {
        let l = build(&path);
        sweep(&l);
        let report = l.verify().unwrap();
        assert!(report.is_clean() && report.checkpoints > 0, "{report:?}");
        (l.chain_entries().unwrap(), report, chain_frame_bytes(&l))
    };
    let tampered = dir.path().join("v4-tampered.redb");
    downgrade_to_v4(&Ledger::open(&path).unwrap());
    std::fs::copy(&path, &tampered).unwrap();
    let v4_len = std::fs::metadata(&path).unwrap().len();
    {
        let l = open_migrating(&path, 4);
        // Compacted once migrated: the rewritten chain's old pages are given back.
        let v5_len = std::fs::metadata(&path).unwrap().len();
        assert!(v5_len < v4_len, "{v5_len} against {v4_len}");
        let tables = table_names(&l);
        assert!(!tables.contains(&"chain_block".to_string()), "{tables:?}");
        let after = chain_frame_bytes(&l);
        // The entries are stored as they were written (the blocks' `prev`s aside: the migration
        // cuts blocks only at the sweep's gaps and at BLOCK_BYTES, not at each write).
        assert_eq!(bytes, after);
        assert_eq!(l.chain_entries().unwrap(), entries);
        let again = l.verify().unwrap();
        assert_eq!(
            (
                again.tip,
                again.entries,
                again.records,
                again.checkpoints,
                again.first_bad
            ),
            (report.tip, report.entries, report.records, report.checkpoints, None)
        );
    }
    // An entry changed in the version 4 file, or made unreadable, is still named once migrated.
    let n = entries[entries.len() / 2].n;
    let unreadable = dir.path().join("v4-unreadable.redb");
    std::fs::copy(&tampered, &unreadable).unwrap();
    let tamper = |file: &Path, change: &dyn Fn(&mut [u8])| {
        let db = redb::Database::open(file).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut t = txn.open_table(CHAIN_BLOCK_V4).unwrap();
            let (first, mut block) = {
                let (k, v) = t.range(..=n).unwrap().next_back().unwrap().unwrap();
                (k.value(), v.value().to_vec())
            };
            // Walk the frames (one-byte lengths: entries are shorter than 128 bytes) to entry n.
            let mut at = 0;
            for _ in first..n {
                at += 1 + block[at] as usize;
            }
            change(&mut block[at + 1..]);
            t.insert(first, block.as_slice()).unwrap();
        }
        txn.commit().unwrap();
    };
    tamper(&tampered, &|entry| entry[2] ^= 0x01);
    // A variant that postcard does not know: the entry cannot be decoded.
    tamper(&unreadable, &|entry| entry[0] = 9);
    for (file, allowed) in [
        (&tampered, vec![Problem::EntryChanged, Problem::EntryUnreadable]),
        (&unreadable, vec![Problem::EntryUnreadable]),
    ] {
        let l = Ledger::open(file).unwrap();
        assert_eq!(l.migrated_from(), Some(4));
        let bad = l.verify().unwrap().first_bad.unwrap();
        assert_eq!(
            (bad.table, bad.key.clone(), bad.seq),
            ("chain", format!("n={n}"), Some(n))
        );
        assert!(allowed.contains(&bad.problem), "{bad}");
    }
}

#[test]
fn a_format_3_ledger_gets_its_idem_index_as_one_run_with_the_same_lookups() {
    use laneledger_store::storage::tables::IDEM_RUN_DIR;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v3.redb");
    let (report, by_idem, entries) = {
        let l = build(&path);
        sweep(&l);
        let by_idem: Vec<_> = idem_keys(&l)
            .iter()
            .map(|k| (k.clone(), l.attempts_by_idem_key(k).unwrap()))
            .collect();
        (l.verify().unwrap(), by_idem, l.idem_index_entries().unwrap())
    };
    assert!(
        by_idem.iter().any(|(_, a)| a.len() > 1),
        "some idem keys carry several attempts"
    );
    downgrade_to_v3(&Ledger::open(&path).unwrap());
    let l = open_migrating(&path, 3);
    let tables = table_names(&l);
    assert!(!tables.contains(&"attempt_idem".to_string()), "{tables:?}");
    let txn = l.database().begin_read().unwrap();
    assert_eq!(txn.open_table(IDEM_RUN_DIR).unwrap().len().unwrap(), 1, "one run");
    drop(txn);
    assert_eq!(l.idem_index_entries().unwrap(), entries);
    let again: Vec<_> = by_idem
        .iter()
        .map(|(k, _)| (k.clone(), l.attempts_by_idem_key(k).unwrap()))
        .collect();
    assert_eq!(again, by_idem);
    let after = l.verify().unwrap();
    assert_eq!((after.tip, after.first_bad), (report.tip, None));
}

#[test]
fn one_write_transaction_stores_its_entries_in_blocks_of_at_most_block_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let l = Ledger::open(dir.path().join("l.redb")).unwrap();
    let lines = |from: usize| -> String {
        (from..from + 20_000)
            .map(|i| {
                format!(
                    r#"{{"job_id":"j{i:05}","idem_key":"k{i:05}","attempt_no":1,"lane":"free","started_at":"2026-11-02T00:00:00Z"}}"#
                ) + "\n"
            })
            .collect()
    };
    // Each block: (first position, entries, plain bytes, stored bytes).
    let stored_blocks = |l: &Ledger| -> Vec<(u64, usize, usize, usize)> {
        let txn = l.database().begin_read().unwrap();
        let t = txn.open_table(CHAIN_BLOCK).unwrap();
        t.iter()
            .unwrap()
            .map(|r| {
                let (k, v) = r.unwrap();
                let plain = unpack_block(v.value()).unwrap();
                (
                    k.value(),
                    split_block(&plain).unwrap().1.len(),
                    plain.len(),
                    v.value().len(),
                )
            })
            .collect()
    };
    ingest_reader(&l, "a.ndjson", lines(0).as_bytes(), InputFormat::Ndjson, 20_000, |_| {}).unwrap();
    let stored = stored_blocks(&l);
    let blocks: Vec<(u64, usize, usize)> = stored.iter().map(|&(k, n, plain, _)| (k, n, plain)).collect();
    assert_eq!(BLOCK_BYTES, 523_264);
    // An entry of j00000..j19999 takes 50 bytes stored and framed, one less for n below 128 and
    // one more from 16,384 on (n is a varint). The file's first block has no ratio to go by: it is
    // cut before the entry that would take it past BLOCK_BYTES plain; the rest of the write packs
    // at about the same ratio, so it fits in the second.
    let entry = |n: u64| {
        if n < 128 {
            49
        } else if n < 16_384 {
            50
        } else {
            51
        }
    };
    let mut expected = Vec::new();
    let (mut first, mut len, mut bytes) = (1u64, 0usize, 32usize);
    for n in 1..=20_000u64 {
        if bytes + entry(n) > BLOCK_BYTES {
            expected.push((first, len, bytes));
            (first, len, bytes) = (n, 0, 32);
        }
        len += 1;
        bytes += entry(n);
    }
    expected.push((first, len, bytes));
    assert_eq!(blocks, expected);
    assert_eq!(blocks.iter().map(|b| b.0).collect::<Vec<_>>(), vec![1, 10_468]);
    assert!(stored.iter().all(|b| b.3 < b.2 && b.3 <= BLOCK_BYTES), "{stored:?}");
    // The next write fills its blocks to the ratio the last block packed at: more than
    // BLOCK_BYTES plain, at most BLOCK_BYTES packed.
    ingest_reader(
        &l,
        "b.ndjson",
        lines(20_000).as_bytes(),
        InputFormat::Ndjson,
        20_000,
        |_| {},
    )
    .unwrap();
    let more = stored_blocks(&l)[2..].to_vec();
    assert_eq!(more[0].0, 20_001, "{more:?}");
    assert_eq!(more.iter().map(|b| b.1).sum::<usize>(), 20_000);
    assert!(
        more[0].2 > BLOCK_BYTES && more.iter().all(|b| b.3 <= BLOCK_BYTES),
        "{more:?}"
    );
    let r = l.verify().unwrap();
    assert!(r.is_clean(), "{:?}", r.first_bad);
    assert_eq!((r.entries, r.records), (40_000, 40_000));
    assert_eq!(l.attempts_by_idem_key("k00042").unwrap()[0].attempt.job_id, "j00042");
}

#[test]
fn a_block_splits_into_its_prev_and_frames_and_a_bad_frame_is_named() {
    let entries: [&[u8]; 3] = [b"a", &[7u8; 200], b""];
    let prev = [9u8; 32];
    let block = join_block(&prev, entries);
    assert_eq!(&block[..32], &prev);
    assert_eq!(
        &block[32..36],
        &[1, b'a', 0xc8, 0x01],
        "a length is LEB128: 200 is c8 01"
    );
    assert_eq!(split_block(&block).unwrap(), (prev, entries.to_vec()));
    let with_prev = |frames: &[u8]| [&prev[..], frames].concat();
    assert_eq!(
        split_block(&with_prev(&[1, b'a', 5, b'x'])),
        Err("frame 2 runs 5 bytes past the block's end".to_string())
    );
    assert_eq!(
        split_block(&with_prev(&[0x80])),
        Err("frame 1's length: a varint is cut at byte 1".to_string())
    );
    assert_eq!(
        split_block(&[0; 31]),
        Err("31 bytes, shorter than the block's prev hash".to_string())
    );
}

#[test]
fn a_stored_block_is_its_plain_length_and_one_zstd_frame_and_a_bad_one_is_named() {
    let prev = [9u8; 32];
    let entries: Vec<Vec<u8>> = (0..300u32).map(|i| format!("job-{i:08x}").into_bytes()).collect();
    let plain = join_block(&prev, entries.iter().map(Vec::as_slice));
    let stored = pack_block(&plain);
    // 3,932 bytes plain: the varint dc 1e, then zstd's magic number 28 b5 2f fd.
    assert_eq!(plain.len(), 3_932);
    assert_eq!(&stored[..6], &[0xdc, 0x1e, 0x28, 0xb5, 0x2f, 0xfd]);
    assert!(stored.len() < plain.len() / 2, "{}", stored.len());
    assert_eq!(unpack_block(&stored).unwrap(), plain);
    assert_eq!(
        unpack_block(&stored[..stored.len() - 1]).map(|p| p.len()),
        Err("a section does not unpack: Src size is incorrect".to_string())
    );
    let mut longer = vec![0xdd, 0x1e];
    longer.extend_from_slice(&stored[2..]);
    assert_eq!(
        unpack_block(&longer),
        Err("a section unpacks to 3932 bytes, not 3933".to_string())
    );
    assert_eq!(
        unpack_block(&[0xff, 0xff, 0xff, 0xff, 0x7f]),
        Err("the block claims 34359738367 bytes unpacked, more than 8372224".to_string())
    );
    assert_eq!(
        unpack_block(&[0x80]),
        Err("the block's length: a varint is cut at byte 1".to_string())
    );
}

/// A format 5 file, every attempt row in the `attempt` B-tree, has its rows packed into blocks
/// when opened: the same rows, lookups, chain and tip, an empty delta, and a smaller file.
#[test]
fn a_format_5_ledger_gets_its_attempt_rows_packed_with_the_same_rows_and_tip() {
    use laneledger_store::storage::tables::{ATTEMPT, ATTEMPT_BLOCK, FORMAT_VERSION, META};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v5.redb");
    let (rows, report, by_job) = {
        let l = build(&path);
        sweep(&l);
        let report = l.verify().unwrap();
        assert!(report.is_clean(), "{report:?}");
        let mut rows = Vec::new();
        l.for_each_attempt(|s| rows.push(s)).unwrap();
        let by_job = l.job_attempts(&rows[rows.len() / 2].attempt.job_id).unwrap();
        (rows, report, by_job)
    };
    {
        let l = Ledger::open(&path).unwrap();
        let txn = l.database().begin_write().unwrap();
        laneledger_store::storage::attempt_store::write_as_format_5(&txn).unwrap();
        txn.open_table(META).unwrap().insert("format_version", 5).unwrap();
        txn.commit().unwrap();
        let txn = l.database().begin_read().unwrap();
        assert_eq!(txn.open_table(ATTEMPT).unwrap().len().unwrap(), rows.len() as u64);
    }
    let l = Ledger::open(&path).unwrap();
    assert_eq!(l.migrated_from(), Some(5));
    assert_eq!(format_version(&l), FORMAT_VERSION);
    {
        let txn = l.database().begin_read().unwrap();
        assert_eq!(txn.open_table(ATTEMPT).unwrap().len().unwrap(), 0, "the delta is empty");
        assert!(txn.open_table(ATTEMPT_BLOCK).unwrap().len().unwrap() > 0);
    }
    let mut again = Vec::new();
    l.for_each_attempt(|s| again.push(s)).unwrap();
    assert_eq!(again, rows);
    assert_eq!(l.attempt_count().unwrap(), rows.len() as u64);
    assert_eq!(l.job_attempts(&by_job[0].attempt.job_id).unwrap(), by_job);
    let after = l.verify().unwrap();
    assert_eq!(
        (after.tip, after.entries, after.records, after.first_bad),
        (report.tip, report.entries, report.records, None)
    );
}

/// The format version whose layout each attempt block has, in key order: 8 (framed, with a key
/// filter: its first two bytes 0), 7 (framed: its first byte 0) or 6 (one values frame).
fn block_layouts(ledger: &Ledger) -> Vec<u64> {
    use laneledger_store::storage::tables::ATTEMPT_BLOCK;
    let txn = ledger.database().begin_read().unwrap();
    let blocks = txn.open_table(ATTEMPT_BLOCK).unwrap();
    blocks
        .iter()
        .unwrap()
        .map(|r| match r.unwrap().1.value() {
            [0, 0, ..] => 8,
            [0, ..] => 7,
            _ => 6,
        })
        .collect()
}

/// `l` holds what `rows` and `report` were read from: every attempt in order, every job's lookup
/// (more than 20 jobs), and `verify`'s tip and counts, nothing bad.
fn assert_holds(l: &Ledger, rows: &[StoredAttempt], report: &VerifyReport) {
    let mut again = Vec::new();
    l.for_each_attempt(|s| again.push(s)).unwrap();
    assert_eq!(again, rows);
    let mut jobs: Vec<&str> = rows.iter().map(|s| s.attempt.job_id.as_str()).collect();
    jobs.dedup();
    assert!(jobs.len() > 20);
    for job in jobs {
        let want: Vec<_> = rows.iter().filter(|s| s.attempt.job_id == job).cloned().collect();
        assert_eq!(l.job_attempts(job).unwrap(), want, "{job}");
    }
    let after = l.verify().unwrap();
    assert_eq!(
        (after.tip, after.entries, after.records, after.first_bad),
        (report.tip.clone(), report.entries, report.records, None)
    );
}

/// A format 6 file, its blocks one values frame each, only has its version raised when opened:
/// its blocks stay as they are and give the same rows, every job's lookup and the same tip, and
/// the next write packs framed blocks.
#[test]
fn a_format_6_ledger_is_read_as_it_is_and_written_framed() {
    use laneledger_store::storage::tables::META;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v6.redb");
    let (rows, report) = {
        let l = build(&path);
        sweep(&l);
        let mut rows = Vec::new();
        l.for_each_attempt(|s| rows.push(s)).unwrap();
        (rows, l.verify().unwrap())
    };
    {
        let l = Ledger::open(&path).unwrap();
        assert!(block_layouts(&l).iter().all(|v| *v == 8));
        let txn = l.database().begin_write().unwrap();
        laneledger_store::storage::attempt_store::write_as_format_6(&txn).unwrap();
        txn.open_table(META).unwrap().insert("format_version", 6).unwrap();
        txn.commit().unwrap();
    }
    let l = open_migrating(&path, 6);
    let before = block_layouts(&l);
    assert!(!before.is_empty() && before.iter().all(|v| *v == 6), "{before:?}");
    assert_holds(&l, &rows, &report);

    let mut new = rows[0].attempt.clone();
    (new.job_id, new.attempt_no, new.idem_key) = ("zz-1".into(), 1, "zz-idem".into());
    let line = format!("{}\n", new.to_json());
    ingest_reader(&l, "new.ndjson", line.as_bytes(), InputFormat::Ndjson, 50, |_| {}).unwrap();
    assert_eq!(
        block_layouts(&l).last(),
        Some(&8),
        "the block written is framed, with a key filter"
    );
    assert_eq!(l.job_attempts("zz-1").unwrap()[0].attempt, new);
    let mut all = Vec::new();
    l.for_each_attempt(|s| all.push(s)).unwrap();
    assert_eq!((all.len(), &all[..rows.len()]), (rows.len() + 1, &rows[..]));
}

/// A format 7 file, its blocks without key filters, only has its version raised when opened: its
/// blocks give the same rows, lookups and tip, a record delivered again is still a duplicate (a
/// block without a filter is unpacked to check), a new key inside the blocks' range is taken, and
/// a block a write rewrites gets its filter.
#[test]
fn a_format_7_ledger_is_read_as_it_is_and_its_blocks_get_filters_when_rewritten() {
    use laneledger_store::storage::tables::META;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v7.redb");
    let (rows, report) = {
        let l = build(&path);
        sweep(&l);
        let mut rows = Vec::new();
        l.for_each_attempt(|s| rows.push(s)).unwrap();
        (rows, l.verify().unwrap())
    };
    {
        let l = Ledger::open(&path).unwrap();
        let txn = l.database().begin_write().unwrap();
        laneledger_store::storage::attempt_store::write_as_format_7(&txn).unwrap();
        txn.open_table(META).unwrap().insert("format_version", 7).unwrap();
        txn.commit().unwrap();
    }
    let l = open_migrating(&path, 7);
    let before = block_layouts(&l);
    assert!(!before.is_empty() && before.iter().all(|v| *v == 7), "{before:?}");
    assert_holds(&l, &rows, &report);

    // Every row delivered again: all duplicates, nothing written.
    let text: String = rows.iter().map(|s| format!("{}\n", s.attempt.to_json())).collect();
    let r = ingest_reader(&l, "again.ndjson", text.as_bytes(), InputFormat::Ndjson, 50, |_| {}).unwrap();
    assert_eq!((r.counters.accepted, r.counters.duplicates), (0, rows.len() as u64));
    assert_eq!(block_layouts(&l), before);

    // A new key inside the blocks' range (right after the first job's), and one above them all.
    let mut inside = rows[0].attempt.clone();
    (inside.job_id, inside.attempt_no, inside.idem_key) =
        (format!("{}-b", rows[0].attempt.job_id), 1, "in-idem".into());
    let mut above = rows[0].attempt.clone();
    (above.job_id, above.attempt_no, above.idem_key) = ("zz-1".into(), 1, "zz-idem".into());
    let text = format!("{}\n{}\n", inside.to_json(), above.to_json());
    let r = ingest_reader(&l, "new.ndjson", text.as_bytes(), InputFormat::Ndjson, 50, |_| {}).unwrap();
    assert_eq!(r.counters.accepted, 2);
    assert_eq!(l.job_attempts(&inside.job_id).unwrap()[0].attempt, inside);
    assert_eq!(l.job_attempts("zz-1").unwrap()[0].attempt, above);
    let layouts = block_layouts(&l);
    assert_eq!(
        layouts.last(),
        Some(&8),
        "the block appended to is rewritten with a filter"
    );
    assert!(layouts[..layouts.len() - 1].iter().all(|v| *v == 7), "{layouts:?}");
    assert_eq!(l.verify().unwrap().first_bad, None);
}

/// A format 8 file keeps rows written inside the blocks' key range in a delta B-tree: opening it
/// folds them into the blocks once, every record, lookup and the tip unchanged, and leaves the
/// delta empty; the next writes inside the range go to runs and read back.
#[test]
fn a_format_8_ledger_has_its_delta_folded_when_opened() {
    use laneledger_store::storage::tables::{ATTEMPT, ATTEMPT_RUN_DIR, META};
    use redb::ReadableTableMetadata;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v8.redb");
    let delta_rows = |l: &Ledger| {
        let txn = l.database().begin_read().unwrap();
        txn.open_table(ATTEMPT).unwrap().len().unwrap()
    };
    let runs = |l: &Ledger| {
        let txn = l.database().begin_read().unwrap();
        txn.open_table(ATTEMPT_RUN_DIR).unwrap().len().unwrap()
    };
    let (rows, report) = {
        let l = build(&path);
        sweep(&l);
        assert!(runs(&l) > 0, "the completions and re-reports went to runs");
        let mut rows = Vec::new();
        l.for_each_attempt(|s| rows.push(s)).unwrap();
        (rows, l.verify().unwrap())
    };
    {
        let l = Ledger::open(&path).unwrap();
        let txn = l.database().begin_write().unwrap();
        laneledger_store::storage::attempt_store::write_as_format_8(&txn).unwrap();
        txn.open_table(META).unwrap().insert("format_version", 8).unwrap();
        txn.commit().unwrap();
        assert!(delta_rows(&l) > 0, "the runs' rows are in the delta");
    }
    let l = open_migrating(&path, 8);
    assert_eq!((delta_rows(&l), runs(&l)), (0, 0));
    assert_holds(&l, &rows, &report);

    // A new key inside the blocks' range: a run, read back.
    let mut inside = rows[0].attempt.clone();
    (inside.job_id, inside.attempt_no, inside.idem_key) =
        (format!("{}-b", rows[0].attempt.job_id), 1, "in-idem".into());
    let text = format!("{}\n", inside.to_json());
    let r = ingest_reader(&l, "new.ndjson", text.as_bytes(), InputFormat::Ndjson, 50, |_| {}).unwrap();
    assert_eq!(r.counters.accepted, 1);
    assert_eq!(runs(&l), 1);
    assert_eq!(l.job_attempts(&inside.job_id).unwrap()[0].attempt, inside);
    let mut all = Vec::new();
    l.for_each_attempt(|s| all.push(s)).unwrap();
    assert_eq!(all.len(), rows.len() + 1);
    assert_eq!(l.verify().unwrap().first_bad, None);
}

/// 900 drill jobs with random ids (as routers write them), and their NDJSON text.
fn random_id_drill(seed: u64) -> (Vec<Attempt>, String) {
    let cfg = DrillConfig {
        policy: Policy::NoPin,
        seed,
        job_prefix: "r-".into(),
        ids: laneledger_store::drill::DrillIds::Random,
    };
    let attempts = drill::synthetic(&cfg, 900, parse_timestamp(START).unwrap(), 10.0);
    let text = attempts.iter().map(|a| format!("{}\n", a.to_json())).collect();
    (attempts, text)
}

/// A format 10 file, its chain blocks plain, has them packed when opened: every entry, hash and
/// the tip unchanged, the chain's blocks smaller, and a damaged packed block named by `verify`.
#[test]
fn a_format_10_ledgers_chain_is_packed_once_with_every_hash_and_the_tip_unchanged() {
    use laneledger_store::storage::tables::META;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v10.redb");
    let (attempts, text) = random_id_drill(10);
    let chain_bytes = |l: &Ledger| -> (usize, usize) {
        let txn = l.database().begin_read().unwrap();
        let t = txn.open_table(CHAIN_BLOCK).unwrap();
        t.iter()
            .unwrap()
            .fold((0, 0), |(n, bytes), r| (n + 1, bytes + r.unwrap().1.value().len()))
    };
    let (rows, report, entries, plain) = {
        let l = Ledger::open(&path).unwrap();
        ingest_reader(&l, "r.ndjson", text.as_bytes(), InputFormat::Ndjson, 500, |_| {}).unwrap();
        let report = l.verify().unwrap();
        let entries = l.chain_entries().unwrap();
        let txn = l.database().begin_write().unwrap();
        laneledger_store::storage::chain::write_as_format_10(&txn).unwrap();
        txn.open_table(META).unwrap().insert("format_version", 10).unwrap();
        txn.commit().unwrap();
        let mut rows = Vec::new();
        l.for_each_attempt(|s| rows.push(s)).unwrap();
        (rows, report, entries, chain_bytes(&l))
    };
    assert!(
        report.is_clean() && report.entries == attempts.len() as u64,
        "{report:?}"
    );
    let l = open_migrating(&path, 10);
    assert_eq!(l.chain_entries().unwrap(), entries);
    assert_holds(&l, &rows, &report);
    let packed = chain_bytes(&l);
    assert_eq!(packed.0, plain.0);
    assert!(packed.1 * 10 < plain.1 * 9, "{packed:?} against {plain:?}");
    // A packed block cut short on disk no longer unpacks: its first entry is unreadable. (A byte
    // changed inside the frame may unpack to entries whose CRC fails instead, and which entry
    // depends on the hashes, which depend on when the rows were ingested.)
    let (first, mut stored) = {
        let txn = l.database().begin_read().unwrap();
        let t = txn.open_table(CHAIN_BLOCK).unwrap();
        let (k, v) = t.iter().unwrap().nth(1).unwrap().unwrap();
        (k.value(), v.value().to_vec())
    };
    stored.pop();
    let txn = l.database().begin_write().unwrap();
    txn.open_table(CHAIN_BLOCK)
        .unwrap()
        .insert(first, stored.as_slice())
        .unwrap();
    txn.commit().unwrap();
    let bad = l.verify().unwrap().first_bad.unwrap();
    assert_eq!(
        (bad.table, bad.key, bad.seq, bad.problem),
        ("chain", format!("n={first}"), Some(first), Problem::EntryUnreadable)
    );
}

/// A format 9 file's runs carry plain key filters: opening it only raises its version, every row,
/// lookup and the tip unchanged; every key its runs hold is still found (a re-delivery of each
/// record is a duplicate), and the next run gets a blocked filter.
#[test]
fn a_format_9_ledger_keeps_its_runs_and_finds_every_key_they_hold() {
    use laneledger_store::storage::tables::{ATTEMPT_RUN_DIR, META};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v9.redb");
    // The first byte of each run's filter (after the header's kind byte and row count).
    let filter_kinds = |l: &Ledger| -> Vec<u8> {
        let txn = l.database().begin_read().unwrap();
        let dir = txn.open_table(ATTEMPT_RUN_DIR).unwrap();
        dir.iter().unwrap().map(|r| r.unwrap().1.value()[9]).collect()
    };
    let (attempts, text) = random_id_drill(9);
    let (rows, report) = {
        let l = Ledger::open(&path).unwrap();
        // Batches of 500: random ids land inside the range held, so each batch after the first
        // leaves a run.
        let r = ingest_reader(&l, "r.ndjson", text.as_bytes(), InputFormat::Ndjson, 500, |_| {}).unwrap();
        assert_eq!(r.counters.accepted, attempts.len() as u64);
        assert!(filter_kinds(&l).iter().all(|&k| k == 0x8b), "{:?}", filter_kinds(&l));
        let report = l.verify().unwrap();
        let txn = l.database().begin_write().unwrap();
        laneledger_store::storage::attempt_store::write_as_format_9(&txn).unwrap();
        txn.open_table(META).unwrap().insert("format_version", 9).unwrap();
        txn.commit().unwrap();
        let mut rows = Vec::new();
        l.for_each_attempt(|s| rows.push(s)).unwrap();
        (rows, report)
    };
    let l = open_migrating(&path, 9);
    let kinds = filter_kinds(&l);
    assert!(!kinds.is_empty() && kinds.iter().all(|&k| k == 7), "{kinds:?}");
    assert_eq!(rows.len(), attempts.len());
    assert_holds(&l, &rows, &report);

    // Every record again, in one batch: each is found through the plain filters.
    let r = ingest_reader(&l, "again.ndjson", text.as_bytes(), InputFormat::Ndjson, 5000, |_| {}).unwrap();
    assert_eq!(
        (r.counters.accepted, r.counters.duplicates, r.counters.conflicts),
        (0, attempts.len() as u64, 0)
    );
    // A new key inside the range: a run with a blocked filter, read back.
    let mut inside = rows[0].attempt.clone();
    (inside.job_id, inside.attempt_no, inside.idem_key) =
        (format!("{}-b", rows[0].attempt.job_id), 1, "in-idem".into());
    let one = format!("{}\n", inside.to_json());
    let r = ingest_reader(&l, "new.ndjson", one.as_bytes(), InputFormat::Ndjson, 50, |_| {}).unwrap();
    assert_eq!(r.counters.accepted, 1);
    assert_eq!(*filter_kinds(&l).last().unwrap(), 0x8b);
    assert_eq!(l.job_attempts(&inside.job_id).unwrap()[0].attempt, inside);
    let mut all = Vec::new();
    l.for_each_attempt(|s| all.push(s)).unwrap();
    assert_eq!(all.len(), rows.len() + 1);
    assert_eq!(l.verify().unwrap().first_bad, None);
}

/// An ingest of random ids in commits of 20 records: its runs are merged on a second thread
/// while it writes. Every record is held and found by its key, a second delivery of the file is
/// all duplicates, the chain verifies, and no four runs of one tier are left side by side (the
/// merges the thread had not reached are done before the ingest returns).
#[test]
fn an_ingest_whose_runs_merge_on_a_second_thread_holds_every_record_and_leaves_them_merged() {
    use laneledger_store::storage::tables::ATTEMPT_RUN_DIR;
    let dir = tempfile::tempdir().unwrap();
    let l = Ledger::open(dir.path().join("bg.redb")).unwrap();
    let (attempts, text) = random_id_drill(21);
    let r = ingest_reader(&l, "r.ndjson", text.as_bytes(), InputFormat::Ndjson, 20, |_| {}).unwrap();
    assert_eq!(r.counters.accepted, attempts.len() as u64);
    for a in &attempts {
        let held = l.attempt(&a.job_id, a.attempt_no).unwrap().unwrap().attempt;
        assert_eq!(
            (&held.idem_key, held.started_at, held.ended_at),
            (&a.idem_key, a.started_at, a.ended_at)
        );
    }
    let again = ingest_reader(&l, "r.ndjson", text.as_bytes(), InputFormat::Ndjson, 20, |_| {}).unwrap();
    assert_eq!(again.counters.duplicates, attempts.len() as u64);
    let report = l.verify().unwrap();
    assert!(report.is_clean(), "{report:?}");
    let tiers: Vec<u32> = {
        let txn = l.database().begin_read().unwrap();
        let runs = txn.open_table(ATTEMPT_RUN_DIR).unwrap();
        runs.iter()
            .unwrap()
            .map(|r| u64::from_le_bytes(r.unwrap().1.value()[1..9].try_into().unwrap()).ilog2() / 2)
            .collect()
    };
    assert!(tiers.len() > 1, "{tiers:?}");
    assert!(!tiers.windows(4).any(|w| w.iter().all(|&t| t == w[0])), "{tiers:?}");
}
