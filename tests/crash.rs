//! Crash safety of HTTP ingest (issue 4): 100,000 attempts posted by several clients while the
//! server is killed with SIGKILL at 20 random points. After each kill the ledger must reopen and
//! hold every acknowledged record, and each unacknowledged request must be all there or not at
//! all; at the end every attempt is there exactly once.

#[path = "support/server.rs"]
mod server;

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use laneledger_store::Ledger;
use server::{ServerProcess, agent, attempt_line, binary, post};

const ATTEMPTS: usize = 100_000;
const BATCH: usize = 500;
const CLIENTS: usize = 4;
const KILLS: usize = 20;

/// What a client knows of one request.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Sent {
    /// Not sent yet.
    No,
    /// Answered 200: acknowledged, hence durable.
    Acked,
    /// Sent, but the server died before answering.
    Unknown,
}

/// SplitMix64: a fixed seed gives the same kill points on every run.
fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn job_of(i: usize) -> String {
    format!("crash-{i:08}")
}

#[test]
fn sigkill_at_twenty_random_points_loses_no_acknowledged_attempt() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("crash.redb");
    let batches: Vec<Vec<u8>> = (0..ATTEMPTS / BATCH)
        .map(|b| {
            (b * BATCH..(b + 1) * BATCH)
                .map(|i| attempt_line("crash-", i) + "\n")
                .collect::<String>()
                .into_bytes()
        })
        .collect();
    let sent = Arc::new(Mutex::new(vec![Sent::No; batches.len()]));
    let acked_records = Arc::new(AtomicUsize::new(0));
    let batches = Arc::new(batches);

    let mut seed = 0x001a_2e1e_d9e4_u64;
    let mut kill_points: Vec<usize> = (0..KILLS)
        .map(|_| 1 + (splitmix(&mut seed) % (ATTEMPTS as u64 - 1)) as usize)
        .collect();
    kill_points.sort_unstable();

    let (mut reopened, mut lost, mut half_visible, mut restarts) = (0, 0usize, 0usize, 0);
    let mut resend_answers = (0usize, 0usize, 0usize); // all accepted, all duplicate, mixed
    for round in 0..=KILLS {
        let mut server = ServerProcess::start(&binary(), &db, &[], Duration::from_secs(120))
            .unwrap_or_else(|| panic!("round {round}: the server did not come back up"));
        restarts += 1;
        let queue: Arc<Mutex<VecDeque<usize>>> = Arc::new(Mutex::new(
            sent.lock()
                .unwrap()
                .iter()
                .enumerate()
                .filter(|(_, s)| **s != Sent::Acked)
                .map(|(i, _)| i)
                .collect(),
        ));
        let clients: Vec<_> = (0..CLIENTS)
            .map(|_| {
                let (queue, sent, acked, batches) =
                    (queue.clone(), sent.clone(), acked_records.clone(), batches.clone());
                let base = server.base.clone();
                std::thread::spawn(move || -> (usize, usize, usize) {
                    let agent = agent(Duration::from_secs(60));
                    let mut answers = (0, 0, 0);
                    loop {
                        let Some(b) = queue.lock().unwrap().pop_front() else {
                            return answers;
                        };
                        let before = sent.lock().unwrap()[b];
                        match post(&agent, &base, "/v1/attempts", &batches[b]) {
                            Ok((200, body)) => {
                                let v: serde_json::Value = serde_json::from_str(&body).unwrap();
                                let accepted = v["totals"]["accepted"].as_u64().unwrap() as usize;
                                let duplicates = v["totals"]["duplicates"].as_u64().unwrap() as usize;
                                assert_eq!(accepted + duplicates, BATCH, "{body}");
                                if before == Sent::Unknown {
                                    match (accepted, duplicates) {
                                        (BATCH, 0) => answers.0 += 1,
                                        (0, BATCH) => answers.1 += 1,
                                        _ => answers.2 += 1,
                                    }
                                } else {
                                    assert_eq!(accepted, BATCH, "a batch never sent was partly there: {body}");
                                }
                                sent.lock().unwrap()[b] = Sent::Acked;
                                acked.fetch_add(BATCH, Ordering::SeqCst);
                            }
                            Ok((503, _)) => {
                                queue.lock().unwrap().push_back(b);
                                std::thread::sleep(Duration::from_millis(20));
                            }
                            Ok((status, body)) => panic!("batch {b}: {status} {body}"),
                            Err(_) => {
                                // No answer: the server died with this request in flight.
                                sent.lock().unwrap()[b] = Sent::Unknown;
                                return answers;
                            }
                        }
                    }
                })
            })
            .collect();
        if let Some(&point) = kill_points.get(round) {
            while acked_records.load(Ordering::SeqCst) < point && clients.iter().any(|c| !c.is_finished()) {
                std::thread::sleep(Duration::from_millis(1));
            }
            server.kill();
        }
        for c in clients {
            let a = c.join().unwrap();
            resend_answers.0 += a.0;
            resend_answers.1 += a.1;
            resend_answers.2 += a.2;
        }
        if round == KILLS {
            assert!(server.terminate().success(), "serve did not exit cleanly on SIGTERM");
        }
        // The ledger as a fresh process would find it.
        let ledger = match Ledger::open(&db) {
            Ok(l) => {
                reopened += usize::from(round < KILLS);
                l
            }
            Err(e) => panic!("round {round}: reopen failed: {e}"),
        };
        let mut present: HashSet<String> = HashSet::new();
        ledger
            .for_each_attempt(|a| {
                present.insert(a.attempt.job_id);
            })
            .unwrap();
        for (b, s) in sent.lock().unwrap().iter().enumerate() {
            let here = (b * BATCH..(b + 1) * BATCH)
                .filter(|&i| present.contains(&job_of(i)))
                .count();
            match s {
                Sent::Acked => lost += BATCH - here,
                Sent::Unknown if here != 0 && here != BATCH => half_visible += 1,
                Sent::No => assert_eq!(here, 0, "batch {b} was never sent"),
                Sent::Unknown => {}
            }
        }
        if round == KILLS {
            assert_eq!(present.len(), ATTEMPTS);
            assert_eq!(ledger.attempt_count().unwrap(), ATTEMPTS as u64);
        }
    }
    eprintln!(
        "crash test: {KILLS} kills at {kill_points:?} acknowledged records; acknowledged records lost: {lost}; \
         half-visible batches: {half_visible}; reopens after a kill that succeeded: {reopened}/{KILLS}; server \
         restarts: {restarts}; unanswered batches resent: {} were not there, {} were all there, {} mixed",
        resend_answers.0, resend_answers.1, resend_answers.2
    );
    assert_eq!(lost, 0, "acknowledged records lost");
    assert_eq!(half_visible, 0, "half-visible batches");
    assert_eq!(resend_answers.2, 0, "a resent batch was partly there");
    assert_eq!(reopened, KILLS);
    assert_eq!(restarts, KILLS + 1);
    assert!(sent.lock().unwrap().iter().all(|s| *s == Sent::Acked));
}

#[test]
fn sigterm_answers_the_requests_in_flight_and_exits_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("term.redb");
    let mut server = ServerProcess::start(&binary(), &db, &[], Duration::from_secs(120)).expect("serve starts");
    let acked = Arc::new(Mutex::new(Vec::<usize>::new()));
    let next = Arc::new(AtomicUsize::new(0));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (acked, next, base) = (acked.clone(), next.clone(), server.base.clone());
            std::thread::spawn(move || {
                let agent = agent(Duration::from_secs(60));
                loop {
                    let b = next.fetch_add(1, Ordering::SeqCst);
                    let body: String = (b * BATCH..(b + 1) * BATCH)
                        .map(|i| attempt_line("term-", i) + "\n")
                        .collect();
                    match post(&agent, &base, "/v1/attempts", body.as_bytes()) {
                        Ok((200, _)) => acked.lock().unwrap().push(b),
                        // Refused or cut off once shutdown began.
                        Ok(_) | Err(_) => return,
                    }
                }
            })
        })
        .collect();
    while acked.lock().unwrap().len() < 10 {
        std::thread::sleep(Duration::from_millis(5));
    }
    let status = server.terminate();
    for c in clients {
        c.join().unwrap();
    }
    assert!(status.success(), "{status:?}");
    let ledger = Ledger::open(&db).expect("reopen after SIGTERM");
    let mut present = HashSet::new();
    ledger
        .for_each_attempt(|a| {
            present.insert(a.attempt.job_id);
        })
        .unwrap();
    let acked = acked.lock().unwrap();
    for &b in acked.iter() {
        for i in b * BATCH..(b + 1) * BATCH {
            assert!(
                present.contains(&format!("term-{i:08}")),
                "acknowledged attempt {i} lost"
            );
        }
    }
    assert!(acked.len() >= 10);
    // Whatever is there beyond the acknowledged batches came in whole batches.
    assert_eq!(present.len() % BATCH, 0);
}

#[test]
fn a_second_process_on_the_same_ledger_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("held.redb");
    let _server = ServerProcess::start(&binary(), &db, &[], Duration::from_secs(120)).expect("serve starts");
    let port = server::free_port().to_string();
    let out = std::process::Command::new(binary())
        .args(["serve", "--addr", &format!("127.0.0.1:{port}"), "--db"])
        .arg(&db)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("is already open by another process"), "{stderr}");
}
