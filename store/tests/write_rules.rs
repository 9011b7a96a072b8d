//! SPEC 2's write rules through the ledger API, on a real redb file.

use laneledger_store::{DEFAULT_BATCH, Error, InputFormat, Ledger, Outcome, WriteResult, ingest_reader};

const OPEN: &str =
    r#"{"job_id":"j1","idem_key":"k1","attempt_no":1,"lane":"free","started_at":"2026-11-16T09:00:00Z"}"#;
const END: &str = r#"{"job_id":"j1","idem_key":"k1","attempt_no":1,"lane":"free","started_at":"2026-11-16T11:00:00+02:00","ended_at":"2026-11-16T09:00:12Z","outcome":"ok","tokens_in":500,"tokens_out":300,"artifact_id":"a1"}"#;
const CHANGED: &str = r#"{"job_id":"j1","idem_key":"k1","attempt_no":1,"lane":"paid","started_at":"2026-11-16T09:00:00Z","tokens_in":501}"#;
const OTHER: &str =
    r#"{"job_id":"j2","idem_key":"k1","attempt_no":1,"lane":"paid","started_at":"2026-11-16T09:01:00Z"}"#;

fn ingest(ledger: &Ledger, name: &str, text: &str) -> laneledger_store::IngestReport {
    ingest_reader(
        ledger,
        name,
        text.as_bytes(),
        InputFormat::Ndjson,
        DEFAULT_BATCH,
        |_| {},
    )
    .unwrap()
}

fn ledger() -> (tempfile::TempDir, Ledger) {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path().join("l.redb")).unwrap();
    (dir, ledger)
}

#[test]
fn reingesting_a_file_changes_no_row_and_counts_duplicate_deliveries() {
    let (_d, l) = ledger();
    let file = format!("{END}\n{OTHER}\n");
    let first = ingest(&l, "a.ndjson", &file);
    assert_eq!((first.counters.accepted, first.counters.duplicates), (2, 0));
    let before: Vec<_> = [l.attempt("j1", 1).unwrap(), l.attempt("j2", 1).unwrap()].into();
    let again = ingest(&l, "a.ndjson", &file);
    assert_eq!(
        again.counters.to_string(),
        "accepted 0, completed 0, duplicate deliveries 2, conflicts 0, rejected 0"
    );
    let after: Vec<_> = [l.attempt("j1", 1).unwrap(), l.attempt("j2", 1).unwrap()].into();
    assert_eq!(before, after);
    assert_eq!(l.attempt_count().unwrap(), 2);
    assert_eq!(l.counters().unwrap().duplicates, 2);
}

#[test]
fn an_open_attempt_then_its_end_gives_one_complete_row() {
    let (_d, l) = ledger();
    let r = ingest(&l, "s", &format!("{OPEN}\n{END}\n"));
    assert_eq!((r.counters.accepted, r.counters.completed), (1, 1));
    assert_eq!(l.attempt_count().unwrap(), 1);
    let row = l.attempt("j1", 1).unwrap().unwrap();
    assert_eq!(row.seq, 1);
    assert_eq!(row.attempt.outcome, Some(Outcome::Ok));
    assert_eq!((row.attempt.tokens_in, row.attempt.tokens_out), (Some(500), Some(300)));
    assert_eq!(row.attempt.artifact_id.as_deref(), Some("a1"));
    assert_eq!(
        laneledger_store::format_timestamp(row.attempt.ended_at.unwrap()),
        "2026-11-16T09:00:12Z"
    );
}

#[test]
fn a_changed_field_gives_a_conflict_row_naming_it_and_the_first_row_stays() {
    let (_d, l) = ledger();
    ingest(&l, "s", &format!("{END}\n"));
    let r = ingest(&l, "late.ndjson", &format!("\n{CHANGED}\n"));
    assert_eq!(r.counters.conflicts, 1);
    assert_eq!(
        r.problems,
        ["late.ndjson:2: conflict: job j1 attempt 1 differs in lane, tokens_in; the first row stays"]
    );
    let conflicts = l.conflicts().unwrap();
    assert_eq!(conflicts.len(), 1);
    assert_eq!(conflicts[0].fields, ["lane", "tokens_in"]);
    assert_eq!(conflicts[0].raw, CHANGED);
    assert_eq!(conflicts[0].line, 2);
    let row = l.attempt("j1", 1).unwrap().unwrap();
    assert_eq!(row.attempt.tokens_in, Some(500));
    assert_eq!(row.attempt.lane, laneledger_store::Lane::Free);
}

#[test]
fn a_malformed_line_is_rejected_with_its_line_number_and_the_other_lines_land() {
    let (_d, l) = ledger();
    let r = ingest(&l, "mixed.ndjson", &format!("{END}\n{{\"job_id\": \n{OTHER}"));
    assert_eq!((r.counters.accepted, r.counters.rejected), (2, 1));
    assert_eq!(r.problems.len(), 1);
    assert!(
        r.problems[0].starts_with("mixed.ndjson:2: bad JSON: EOF while parsing"),
        "{}",
        r.problems[0]
    );
    let rejects = l.rejects().unwrap();
    assert_eq!(
        (rejects[0].source.as_str(), rejects[0].line, rejects[0].raw.as_str()),
        ("mixed.ndjson", 2, "{\"job_id\": ")
    );
    assert_eq!(l.attempt_count().unwrap(), 2);
}

#[test]
fn lookups_by_job_and_by_idem_key() {
    let (_d, l) = ledger();
    let second = END
        .replace("\"attempt_no\":1", "\"attempt_no\":2")
        .replace("\"lane\":\"free\"", "\"lane\":\"paid\"");
    ingest(&l, "s", &format!("{second}\n{END}\n{OTHER}\n"));
    let job: Vec<u32> = l
        .job_attempts("j1")
        .unwrap()
        .iter()
        .map(|a| a.attempt.attempt_no)
        .collect();
    assert_eq!(job, [1, 2]);
    let by_key: Vec<(String, u32)> = l
        .attempts_by_idem_key("k1")
        .unwrap()
        .iter()
        .map(|a| (a.attempt.job_id.clone(), a.attempt.attempt_no))
        .collect();
    assert_eq!(
        by_key,
        [("j1".to_string(), 1), ("j1".to_string(), 2), ("j2".to_string(), 1)]
    );
    assert!(l.job_attempts("nope").unwrap().is_empty());
}

#[test]
fn results_per_record_in_order_within_one_batch() {
    let (_d, l) = ledger();
    let text = format!("{OPEN}\n{OPEN}\n{END}\n{CHANGED}\nnope\n");
    let parsed: Vec<_> = laneledger_store::AttemptReader::new("b", text.as_bytes(), InputFormat::Ndjson)
        .map(|p| match p.unwrap() {
            laneledger_store::Parsed::Record { line, raw, attempt } => laneledger_store::Incoming::Attempt {
                source: "b".into(),
                line,
                raw,
                attempt,
            },
            laneledger_store::Parsed::Reject(r) => laneledger_store::Incoming::Reject(r),
        })
        .collect();
    let results = l.write_batch(parsed).unwrap();
    assert_eq!(results[0], WriteResult::Accepted);
    assert_eq!(results[1], WriteResult::Duplicate);
    assert!(matches!(&results[2], WriteResult::Completed { fields } if fields.len() == 5));
    assert_eq!(
        results[3],
        WriteResult::Conflict {
            fields: vec!["lane".into(), "tokens_in".into()]
        }
    );
    assert!(matches!(&results[4], WriteResult::Rejected { field: None, .. }));
}

#[test]
fn records_survive_a_reopen_and_a_second_open_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("l.redb");
    {
        let l = Ledger::open(&path).unwrap();
        ingest(&l, "s", &format!("{END}\n"));
        match Ledger::open(&path) {
            Err(Error::AlreadyOpen(p)) => assert_eq!(p, path),
            other => panic!("expected AlreadyOpen, got {other:?}"),
        }
    }
    let l = Ledger::open(&path).unwrap();
    assert_eq!(l.attempt_count().unwrap(), 1);
    assert_eq!(l.counters().unwrap().accepted, 1);
}

#[test]
fn borrowed_decode_matches_owned() {
    let (_d, ledger) = ledger();
    let text = r#"{"job_id":"j1","idem_key":"k1","attempt_no":1,"lane":"free","started_at":"2026-11-16T10:00:00Z","ended_at":"2026-11-16T10:00:05.5Z","outcome":"ambiguous","tokens_in":100,"tokens_out":10,"artifact_id":"a1","http_status":429,"provider_code":1305,"key_id":"key-7","pool_id":"pool-a","model":"m1"}
{"job_id":"j2","idem_key":"k2","attempt_no":3,"lane":"paid","started_at":"2026-11-16T11:00:00Z"}
{"job_id":"j3","idem_key":"k3","attempt_no":1,"lane":"free","started_at":"2026-11-16T12:00:00Z","region":"eu","retry_of":"j0"}
"#;
    ingest(&ledger, "all.ndjson", text);
    let mut owned = Vec::new();
    ledger.for_each_attempt(|s| owned.push(s)).unwrap();
    let mut borrowed = Vec::new();
    ledger
        .attempt_chunks(2, |n, mut chunk| {
            chunk.unpack()?;
            for v in chunk.values() {
                let r = laneledger_store::decode_attempt_ref(v)?;
                // Compare while the bytes are alive.
                assert_eq!(r, owned[borrowed.len()].as_ref());
                borrowed.push((n, r.attempt.job_id.to_string()));
            }
            Ok::<(), Error>(())
        })
        .unwrap();
    // The three rows were appended in key order: one block, handed on whole as chunk 0 although
    // it holds more than two rows.
    assert_eq!(
        borrowed,
        [(0, "j1".to_string()), (0, "j2".to_string()), (0, "j3".to_string())]
    );
    assert_eq!(
        owned[2].attempt.attrs.as_deref(),
        Some(r#"{"region":"eu","retry_of":"j0"}"#)
    );
}

/// A ledger whose rows j1..j8 (attempt 1) sit in one block and whose row j2 #2, written after
/// them, sits in the delta beside it: a scan merges the two row by row.
fn block_and_delta() -> (tempfile::TempDir, Ledger) {
    let (d, ledger) = ledger();
    let row = |job: &str, no: u32| {
        format!(
            r#"{{"job_id":"{job}","idem_key":"k-{job}","attempt_no":{no},"lane":"free","started_at":"2026-11-16T10:00:00Z"}}"#
        )
    };
    let in_order: Vec<String> = (1..=8).map(|j| row(&format!("j{j}"), 1)).collect();
    ingest(&ledger, "a.ndjson", &in_order.join("\n"));
    ingest(&ledger, "b.ndjson", &row("j2", 2));
    (d, ledger)
}

/// The (chunk number, job_id, attempt_no) of every row a scan in chunks of `rows` hands on.
fn scanned(ledger: &Ledger, rows: usize) -> Vec<(usize, String, u32)> {
    let returned = std::cell::RefCell::new(Vec::<laneledger_store::AttemptChunk>::new());
    let mut seen = Vec::new();
    ledger
        .attempt_chunks_reusing(
            rows,
            || returned.borrow_mut().pop(),
            |n, mut chunk| {
                chunk.unpack()?;
                for v in chunk.values() {
                    let a = laneledger_store::decode_attempt_ref(v)?.attempt;
                    seen.push((n, a.job_id.to_string(), a.attempt_no));
                }
                // Handed back with its bytes and ends still in it.
                returned.borrow_mut().push(chunk);
                Ok::<(), Error>(())
            },
        )
        .unwrap();
    seen
}

#[test]
fn a_scan_merges_the_delta_into_the_blocks_in_key_order() {
    let (_d, ledger) = block_and_delta();
    let jobs = |seen: Vec<(usize, String, u32)>| -> Vec<(usize, String)> {
        seen.into_iter().map(|(n, j, no)| (n, format!("{j}#{no}"))).collect()
    };
    let expected: Vec<String> = ["j1#1", "j2#1", "j2#2", "j3#1", "j4#1", "j5#1", "j6#1", "j7#1", "j8#1"]
        .map(String::from)
        .into();
    // Chunks of 4: the block the delta row falls in goes row by row.
    let seen = jobs(scanned(&ledger, 4));
    assert_eq!(seen.iter().map(|(_, j)| j.clone()).collect::<Vec<_>>(), expected);
    assert_eq!(
        seen.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
        [0, 0, 0, 0, 1, 1, 1, 1, 2]
    );
    let mut owned = Vec::new();
    ledger
        .for_each_attempt(|s| owned.push(format!("{}#{}", s.attempt.job_id, s.attempt.attempt_no)))
        .unwrap();
    assert_eq!(owned, expected);
    assert_eq!(ledger.attempt_count().unwrap(), 9);
    assert_eq!(ledger.job_attempts("j2").unwrap().len(), 2);
    assert_eq!(ledger.attempt("j2", 2).unwrap().unwrap().attempt.idem_key, "k-j2");
}

#[test]
fn reused_chunk_buffers_hold_only_their_own_values() {
    // A scan hands decoded chunks back to be filled again; a buffer that comes back still
    // holding old bytes and ends must start empty, so every chunk holds exactly its own values.
    let (_d, ledger) = block_and_delta();
    let seen = scanned(&ledger, 1);
    let numbers: Vec<usize> = seen.iter().map(|(n, _, _)| *n).collect();
    assert_eq!(numbers, (0..9).collect::<Vec<_>>(), "one row a chunk");
    assert_eq!((seen[2].1.as_str(), seen[2].2), ("j2", 2));
}

/// One attempt of the model test: job `job` (not zero-padded, so string order is not number
/// order: `job-10` sorts before `job-9`), attempt 1, in one of three shapes: open, ended, or
/// ended on the other lane.
fn shaped(job: u32, shape: u64) -> laneledger_store::Attempt {
    let mut a = laneledger_store::format::parse::attempt_from_json(&format!(
        r#"{{"job_id":"job-{job}","idem_key":"k{}","attempt_no":1,"lane":"free","started_at":"2026-11-16T09:00:00Z"}}"#,
        job % 7
    ))
    .unwrap();
    if shape >= 1 {
        a.ended_at = Some(a.started_at + 12_000_000);
        a.outcome = Some(Outcome::Ok);
        a.tokens_in = Some(500);
    }
    if shape == 2 {
        a.lane = laneledger_store::Lane::Paid;
    }
    a
}

#[test]
fn batches_mixing_keys_above_and_below_the_greatest_held_give_each_record_its_own_result() {
    use laneledger_store::model::write_rules::{Merge, merge};
    use laneledger_store::{Attempt, Incoming};
    use std::collections::BTreeMap;

    // Keys above every held key go in through a cursor at the table's end, the rest through
    // lookups; a model applying SPEC 2 record by record must agree with every result and row.
    let (_d, l) = ledger();
    let mut model: BTreeMap<String, (Attempt, u64)> = BTreeMap::new();
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let (mut top, mut seq) = (0u32, 0u64);
    let mut seen = [0u64; 5];
    for _ in 0..60 {
        let mut batch = Vec::new();
        let mut expected = Vec::new();
        for _ in 0..1 + next() % 200 {
            let job = match next() % 10 {
                // The next job up, or one a little above it (leaving gaps filled later).
                0..=4 => {
                    top += 1;
                    top
                }
                5 => {
                    top += 2 + (next() % 3) as u32;
                    top
                }
                // Any job up to the greatest: held (a redelivery) or a gap (new, below it).
                _ => 1 + (next() % u64::from(top.max(1))) as u32,
            };
            let a = shaped(job, next() % 3);
            let want = match model.get(&a.job_id) {
                None => {
                    seq += 1;
                    model.insert(a.job_id.clone(), (a.clone(), seq));
                    WriteResult::Accepted
                }
                Some((held, _)) => match merge(held, &a) {
                    Merge::Duplicate => WriteResult::Duplicate,
                    Merge::Complete(row, fields) => {
                        model.get_mut(&a.job_id).unwrap().0 = *row;
                        WriteResult::Completed { fields }
                    }
                    Merge::Conflict(fields) => WriteResult::Conflict { fields },
                },
            };
            expected.push(want);
            batch.push(Incoming::Attempt {
                source: "model".into(),
                line: 1,
                raw: String::new(),
                attempt: a,
            });
        }
        let got = l.write_batch(batch).unwrap();
        assert_eq!(got, expected);
        for r in &got {
            let i = match r {
                WriteResult::Accepted => 0,
                WriteResult::Completed { .. } => 1,
                WriteResult::Duplicate => 2,
                WriteResult::Conflict { .. } => 3,
                WriteResult::Rejected { .. } => 4,
            };
            seen[i] += 1;
        }
    }
    // Every path was taken, many times over.
    assert!(seen[..4].iter().all(|&n| n > 100), "{seen:?}");
    let mut rows = Vec::new();
    l.for_each_attempt(|s| rows.push((s.attempt, s.seq))).unwrap();
    assert_eq!(rows, model.into_values().collect::<Vec<_>>());
    assert!(l.verify().unwrap().is_clean());
}

/// A ledger of hashed ids written in many commits (each commit's rows a run beside the others),
/// read in key ranges side by side: each range in key order, the ranges one after another every
/// row once, as one scan reads them, with the ranges a few blocks wide each.
#[test]
fn a_snapshot_read_in_key_ranges_gives_every_row_once_in_key_order() {
    let (_d, ledger) = ledger();
    // Job ids in no order (a multiplicative hash of the counter), as a router's random ids come.
    let id = |i: u64| format!("req_{:016x}", i.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    for commit in 0..12u64 {
        let lines: Vec<String> = (0..3_000u64)
            .map(|i| {
                let job = id(commit * 3_000 + i);
                format!(
                    r#"{{"job_id":"{job}","idem_key":"k-{job}","attempt_no":1,"lane":"free","started_at":"2026-11-16T10:00:00Z","artifact_id":"a-{job}"}}"#
                )
            })
            .collect();
        ingest(&ledger, "c.ndjson", &lines.join("\n"));
    }
    let whole: Vec<(String, u32)> = scanned(&ledger, 1_000).into_iter().map(|(_, j, n)| (j, n)).collect();
    assert_eq!(whole.len(), 36_000);
    assert!(whole.windows(2).all(|w| w[0] < w[1]));
    let snapshot = ledger.attempt_snapshot(4).unwrap();
    assert_eq!(snapshot.parts(), 4);
    // Read the ranges last first, as threads might finish them, then put them in order.
    let mut parts: Vec<Vec<(String, u32)>> = vec![Vec::new(); snapshot.parts()];
    for part in (0..snapshot.parts()).rev() {
        snapshot
            .chunks(
                part,
                1_000,
                || None,
                |_, mut chunk| {
                    chunk.unpack()?;
                    for v in chunk.values() {
                        let a = laneledger_store::decode_attempt_ref(v)?.attempt;
                        parts[part].push((a.job_id.to_string(), a.attempt_no));
                    }
                    Ok::<(), Error>(())
                },
            )
            .unwrap();
    }
    // Each range holds between a twentieth and half of the rows: the sample run's ten or so
    // blocks place the boundaries roughly, as the ids spread.
    let sizes: Vec<usize> = parts.iter().map(Vec::len).collect();
    assert!(
        sizes.iter().all(|n| (1_800..=18_000).contains(n)),
        "ranges of {sizes:?} rows"
    );
    assert_eq!(parts.concat(), whole);
    assert_eq!(snapshot.position(), ledger.attempt_snapshot(1).unwrap().position());
}
