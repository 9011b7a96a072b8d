//! The ledger's gate decisions (SPEC 1.2, seed 003): writes under SPEC 2's rules and reads.
//!
//! Decisions live in the `decision` table keyed by (job_id, decided_at µs), conflicts in
//! `decision_conflict`; a line that cannot be read goes to the same `ingest_reject` table as a bad
//! attempt line. As for attempts, [`Ledger::write_decisions`] takes one redb write transaction per
//! batch, and every accepted record is durable when it returns `Ok`.

use redb::{ReadableTable, ReadableTableMetadata};

use crate::error::Result;
use crate::format::decision::{
    DecisionConflict, DecisionConflictRecord, DecisionRecord, IncomingDecision, StoredDecision, merge_decision,
};
use crate::model::record::RejectRecord;
use crate::model::time::now_micros;
use crate::model::write_rules::Merge;
use crate::storage::chain::{CHAIN_ENTRIES, ChainWriter, EntryKind, RecordKey};
use crate::storage::ledger::{COUNTER_NAMES, Counters, Ledger, NEXT_REJECT, WriteResult, decode, encode};
use crate::storage::reject_seen::RejectSeen;
use crate::storage::tables::{COUNTER, DECISION, DECISION_CONFLICT, INGEST_REJECT};

const NEXT_DECISION_SEQ: &str = "next_decision_seq";
const NEXT_DECISION_CONFLICT: &str = "next_decision_conflict";

/// The running total's name for decisions: `decision_accepted`, `decision_rejected`…
fn counter_name(name: &str) -> String {
    format!("decision_{name}")
}

/// Decodes a stored decision value (any format version this build reads).
pub fn decode_decision(bytes: &[u8]) -> Result<StoredDecision> {
    match decode::<DecisionRecord>("decision", "value", bytes)? {
        DecisionRecord::V1(d) => Ok(d),
    }
}

impl Ledger {
    /// Applies SPEC 2's write rules to each gate decision in order, in one write transaction, and
    /// commits: a new (job_id, decided_at) is accepted, the same record again is a duplicate, added
    /// optional fields (`slack_miss` when the job ends) complete the row, a differing field is kept
    /// in `decision_conflict` naming it, a bad line is kept in `ingest_reject`.
    ///
    /// Returns one [`WriteResult`] per record, in order. When this returns `Ok`, the batch is
    /// durable; on `Err` nothing of the batch was written.
    pub fn write_decisions(&self, batch: Vec<IncomingDecision>) -> Result<Vec<WriteResult>> {
        let now = now_micros();
        let txn = self.database().begin_write()?;
        let mut results = Vec::with_capacity(batch.len());
        {
            let mut decisions = txn.open_table(DECISION)?;
            let mut conflicts = txn.open_table(DECISION_CONFLICT)?;
            let mut rejects = txn.open_table(INGEST_REJECT)?;
            let mut counter = txn.open_table(COUNTER)?;
            let get = |name: &str| -> Result<u64> { Ok(counter.get(name)?.map(|v| v.value()).unwrap_or(0)) };
            let mut chain = ChainWriter::open(&txn, get(CHAIN_ENTRIES)?)?;
            let mut next_seq = get(NEXT_DECISION_SEQ)?;
            let mut next_conflict = get(NEXT_DECISION_CONFLICT)?;
            let mut next_reject = get(NEXT_REJECT)?;
            let mut totals = Counters::default();
            // Opened at the batch's first reject ([`crate::storage::reject_seen`]).
            let mut seen: Option<RejectSeen> = None;
            let mut rejects_again = 0u64;

            for item in batch {
                let result = match item {
                    IncomingDecision::Reject(reject) => {
                        // A line already kept (same source, line and raw text) is a duplicate
                        // delivery of its reject: reported again, stored once.
                        if seen.is_none() {
                            seen = Some(RejectSeen::open(&txn, &rejects)?);
                        }
                        let seen = seen.as_mut().expect("opened just above");
                        match seen.kept(&reject)? {
                            Some(kept) => {
                                rejects_again += 1;
                                WriteResult::Rejected {
                                    field: reject.field.clone(),
                                    reason: crate::storage::reject_seen::again(&reject.reason, kept),
                                }
                            }
                            None => {
                                next_reject += 1;
                                seen.insert(&reject, next_reject)?;
                                let r = WriteResult::Rejected {
                                    field: reject.field.clone(),
                                    reason: reject.reason.clone(),
                                };
                                let value = encode(&RejectRecord::V1(reject));
                                rejects.insert(next_reject, value.as_slice())?;
                                chain.append(EntryKind::Insert, RecordKey::IngestReject(next_reject), &value)?;
                                r
                            }
                        }
                    }
                    IncomingDecision::Decision {
                        source,
                        line,
                        raw,
                        decision,
                    } => {
                        let key = (decision.job_id.as_str(), decision.decided_at);
                        let held = match decisions.get(key)? {
                            Some(v) => Some(decode_decision(v.value())?),
                            None => None,
                        };
                        match held {
                            None => {
                                next_seq += 1;
                                let stored = StoredDecision {
                                    decision,
                                    seq: next_seq,
                                    ingested_at: now,
                                };
                                let value = encode(&DecisionRecord::V1(stored.clone()));
                                let d = stored.decision;
                                decisions.insert((d.job_id.as_str(), d.decided_at), value.as_slice())?;
                                let key = RecordKey::Decision {
                                    job_id: d.job_id,
                                    decided_at: d.decided_at,
                                };
                                chain.append(EntryKind::Insert, key, &value)?;
                                WriteResult::Accepted
                            }
                            Some(held) => match merge_decision(&held.decision, &decision) {
                                Merge::Duplicate => WriteResult::Duplicate,
                                Merge::Complete(row, fields) => {
                                    let stored = StoredDecision { decision: *row, ..held };
                                    let value = encode(&DecisionRecord::V1(stored));
                                    decisions.insert(key, value.as_slice())?;
                                    let key = RecordKey::Decision {
                                        job_id: key.0.to_string(),
                                        decided_at: key.1,
                                    };
                                    chain.append(EntryKind::Update, key, &value)?;
                                    WriteResult::Completed { fields }
                                }
                                Merge::Conflict(fields) => {
                                    next_conflict += 1;
                                    let c = DecisionConflict {
                                        source,
                                        line,
                                        job_id: decision.job_id.clone(),
                                        decided_at: decision.decided_at,
                                        fields: fields.clone(),
                                        decision,
                                        raw,
                                        received_at: now,
                                    };
                                    let value = encode(&DecisionConflictRecord::V1(c));
                                    conflicts.insert(next_conflict, value.as_slice())?;
                                    chain.append(
                                        EntryKind::Insert,
                                        RecordKey::DecisionConflict(next_conflict),
                                        &value,
                                    )?;
                                    WriteResult::Conflict { fields }
                                }
                            },
                        }
                    }
                };
                totals.add(&result);
                results.push(result);
            }
            counter.insert(CHAIN_ENTRIES, chain.finish()?)?;
            counter.insert(NEXT_DECISION_SEQ, next_seq)?;
            counter.insert(NEXT_DECISION_CONFLICT, next_conflict)?;
            counter.insert(NEXT_REJECT, next_reject)?;
            let add = [
                totals.accepted,
                totals.completed,
                totals.duplicates + rejects_again,
                totals.conflicts,
                totals.rejected - rejects_again,
            ];
            for (name, n) in COUNTER_NAMES.iter().zip(add) {
                if n > 0 {
                    let name = counter_name(name);
                    let old = counter.get(name.as_str())?.map(|v| v.value()).unwrap_or(0);
                    counter.insert(name.as_str(), old + n)?;
                }
            }
        }
        txn.commit()?;
        self.bump_generation();
        Ok(results)
    }

    /// The running totals of every decision write result since the ledger was created (kept apart
    /// from the attempts' [`Ledger::counters`]; rejected decision lines count here).
    pub fn decision_counters(&self) -> Result<Counters> {
        let txn = self.database().begin_read()?;
        let t = txn.open_table(COUNTER)?;
        let get =
            |name: &str| -> Result<u64> { Ok(t.get(counter_name(name).as_str())?.map(|v| v.value()).unwrap_or(0)) };
        Ok(Counters {
            accepted: get("accepted")?,
            completed: get("completed")?,
            duplicates: get("duplicates")?,
            conflicts: get("conflicts")?,
            rejected: get("rejected")?,
        })
    }

    /// The number of decision rows.
    pub fn decision_count(&self) -> Result<u64> {
        let txn = self.database().begin_read()?;
        Ok(txn.open_table(DECISION)?.len()?)
    }

    /// Calls `f` on every decision in (job_id, decided_at) order, from one consistent snapshot.
    pub fn for_each_decision(&self, mut f: impl FnMut(StoredDecision)) -> Result<()> {
        let txn = self.database().begin_read()?;
        let t = txn.open_table(DECISION)?;
        for row in t.iter()? {
            let (_, v) = row?;
            f(decode_decision(v.value())?);
        }
        Ok(())
    }

    /// One decision by its identity (`decided_at` in µs since the epoch, UTC): an index read.
    pub fn decision(&self, job_id: &str, decided_at: i64) -> Result<Option<StoredDecision>> {
        let txn = self.database().begin_read()?;
        let t = txn.open_table(DECISION)?;
        t.get((job_id, decided_at))?
            .map(|v| decode_decision(v.value()))
            .transpose()
    }

    /// One job's decisions in `decided_at` order: a range read on the primary key.
    pub fn job_decisions(&self, job_id: &str) -> Result<Vec<StoredDecision>> {
        let txn = self.database().begin_read()?;
        let t = txn.open_table(DECISION)?;
        let mut out = Vec::new();
        for row in t.range((job_id, i64::MIN)..=(job_id, i64::MAX))? {
            out.push(decode_decision(row?.1.value())?);
        }
        Ok(out)
    }

    /// Every decision conflict kept, in arrival order.
    pub fn decision_conflicts(&self) -> Result<Vec<DecisionConflict>> {
        let txn = self.database().begin_read()?;
        let t = txn.open_table(DECISION_CONFLICT)?;
        let mut out = Vec::new();
        for row in t.iter()? {
            let (k, v) = row?;
            match decode::<DecisionConflictRecord>("decision_conflict", k.value(), v.value())? {
                DecisionConflictRecord::V1(c) => out.push(c),
            }
        }
        Ok(out)
    }
}
