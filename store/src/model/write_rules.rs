//! SPEC 2's write rules for a record whose identity the ledger already holds.
//!
//! The same record again is a duplicate delivery; a record that agrees with every field already
//! set and adds absent ones completes the row; a record that differs in a field already set is a
//! conflict, and the row in force stays as it was. [`merge`] applies them to attempts;
//! [`crate::format::decision::merge_decision`] to gate decisions, with the same field rules.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::model::record::Attempt;

/// What a record means for the row in force with the same identity (an attempt by default, or a
/// [`crate::format::decision::Decision`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Merge<T = Attempt> {
    /// Nothing new: a duplicate delivery.
    Duplicate,
    /// The row completed: the merged row, and the names of the fields it gained.
    Complete(Box<T>, Vec<String>),
    /// A field already set differs: the names of the differing fields.
    Conflict(Vec<String>),
}

/// The field-by-field comparison of one record with the row in force: the differing fields and
/// the fields the row gains, in the order they were compared. Shared by every record type.
#[derive(Debug, Default)]
pub(crate) struct FieldDiff {
    differ: Vec<String>,
    added: Vec<String>,
}

impl FieldDiff {
    /// A required field: any difference is a conflict.
    pub(crate) fn required<T: PartialEq>(&mut self, name: &str, held: &T, new: &T) {
        if held != new {
            self.differ.push(name.to_string());
        }
    }

    /// An optional field: absent in the record changes nothing, absent in the row completes it,
    /// set in both and different is a conflict.
    pub(crate) fn optional<T: PartialEq + Clone>(&mut self, name: &str, slot: &mut Option<T>, new: &Option<T>) {
        match (slot.as_ref(), new) {
            (_, None) => {}
            (None, Some(v)) => {
                *slot = Some(v.clone());
                self.added.push(name.to_string());
            }
            (Some(a), Some(b)) if a == b => {}
            (Some(_), Some(_)) => self.differ.push(name.to_string()),
        }
    }

    /// `attrs` (JSON object text), compared key by key: a differing key is named `attrs.KEY`, a
    /// new key completes the row (`slot` gets the union, keys sorted).
    pub(crate) fn attrs(&mut self, slot: &mut Option<String>, new: &Option<String>) {
        let Some(new_attrs) = new else { return };
        let parse = |s: &str| serde_json::from_str::<BTreeMap<String, Value>>(s).unwrap_or_default();
        let mut held_attrs = slot.as_deref().map(parse).unwrap_or_default();
        let mut grew = false;
        for (k, v) in parse(new_attrs) {
            match held_attrs.get(&k) {
                None => {
                    held_attrs.insert(k, v);
                    grew = true;
                }
                Some(old) if *old == v => {}
                Some(_) => self.differ.push(format!("attrs.{k}")),
            }
        }
        if grew {
            *slot = Some(serde_json::to_string(&held_attrs).expect("a map of JSON values serializes"));
            self.added.push("attrs".to_string());
        }
    }

    /// The verdict: a conflict when a field differs, else a completion when one was added, else
    /// a duplicate; `row` is the held row with the added fields filled in.
    pub(crate) fn verdict<T>(self, row: T) -> Merge<T> {
        if !self.differ.is_empty() {
            Merge::Conflict(self.differ)
        } else if !self.added.is_empty() {
            Merge::Complete(Box::new(row), self.added)
        } else {
            Merge::Duplicate
        }
    }
}

/// `incoming` without an `attrs` member `ingested_at` that equals `held_ingested_at` (µs since the
/// epoch, UTC), the held row's own ingest time.
///
/// An export of `job_attempt` carries `ingested_at`, and the parser keeps it among the other
/// fields (SPEC 1.1), so a new ledger fed an export keeps the old ledger's ingest times. Fed back
/// into the ledger it came from, that member is the held row's own time, not a new field: left in,
/// it would complete every row (SPEC 2) instead of counting a duplicate delivery.
pub fn without_own_ingested_at(incoming: &Attempt, held_ingested_at: i64) -> std::borrow::Cow<'_, Attempt> {
    use std::borrow::Cow;
    let Some(attrs) = incoming.attrs.as_deref().filter(|a| a.contains("\"ingested_at\"")) else {
        return Cow::Borrowed(incoming);
    };
    let Ok(mut map) = serde_json::from_str::<BTreeMap<String, serde_json::Value>>(attrs) else {
        return Cow::Borrowed(incoming);
    };
    let stated = map.get("ingested_at").and_then(|v| v.as_str());
    if stated.and_then(|t| crate::model::time::parse_timestamp(t).ok()) != Some(held_ingested_at) {
        return Cow::Borrowed(incoming);
    }
    map.remove("ingested_at");
    let mut trimmed = incoming.clone();
    trimmed.attrs = (!map.is_empty()).then(|| serde_json::to_string(&map).expect("a map of JSON values serializes"));
    Cow::Owned(trimmed)
}

/// Compares `incoming` with the row in force (`held`) field by field (SPEC 2).
///
/// `attrs` is compared key by key: a differing key is named `attrs.KEY`, a new key completes.
pub fn merge(held: &Attempt, incoming: &Attempt) -> Merge {
    let mut d = FieldDiff::default();
    let mut out = held.clone();

    d.required("job_id", &held.job_id, &incoming.job_id);
    d.required("idem_key", &held.idem_key, &incoming.idem_key);
    d.required("attempt_no", &held.attempt_no, &incoming.attempt_no);
    d.required("lane", &held.lane, &incoming.lane);
    d.required("started_at", &held.started_at, &incoming.started_at);

    d.optional("ended_at", &mut out.ended_at, &incoming.ended_at);
    d.optional("outcome", &mut out.outcome, &incoming.outcome);
    d.optional("tokens_in", &mut out.tokens_in, &incoming.tokens_in);
    d.optional("tokens_out", &mut out.tokens_out, &incoming.tokens_out);
    d.optional("artifact_id", &mut out.artifact_id, &incoming.artifact_id);
    d.optional("http_status", &mut out.http_status, &incoming.http_status);
    d.optional("provider_code", &mut out.provider_code, &incoming.provider_code);
    d.optional("key_id", &mut out.key_id, &incoming.key_id);
    d.optional("pool_id", &mut out.pool_id, &incoming.pool_id);
    d.optional("model", &mut out.model, &incoming.model);
    d.attrs(&mut out.attrs, &incoming.attrs);

    d.verdict(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::record::{Lane, Outcome};

    fn open() -> Attempt {
        Attempt {
            job_id: "j1".into(),
            idem_key: "k1".into(),
            attempt_no: 1,
            lane: Lane::Free,
            started_at: 1_000,
            ended_at: None,
            outcome: None,
            tokens_in: None,
            tokens_out: None,
            artifact_id: None,
            http_status: None,
            provider_code: None,
            key_id: None,
            pool_id: None,
            model: None,
            attrs: Some(r#"{"router":"r1"}"#.into()),
        }
    }

    #[test]
    fn the_same_record_is_a_duplicate() {
        assert_eq!(merge(&open(), &open()), Merge::Duplicate);
    }

    #[test]
    fn a_record_with_fewer_fields_is_a_duplicate() {
        let mut closed = open();
        closed.outcome = Some(Outcome::Ok);
        assert_eq!(merge(&closed, &open()), Merge::Duplicate);
    }

    #[test]
    fn an_end_completes_an_open_attempt() {
        let mut end = open();
        end.ended_at = Some(2_000);
        end.outcome = Some(Outcome::Ok);
        end.tokens_in = Some(800);
        end.artifact_id = Some("a1".into());
        end.attrs = Some(r#"{"router":"r1","region":"eu"}"#.into());
        let Merge::Complete(row, added) = merge(&open(), &end) else {
            panic!()
        };
        assert_eq!(added, ["ended_at", "outcome", "tokens_in", "artifact_id", "attrs"]);
        assert_eq!(row.ended_at, Some(2_000));
        assert_eq!(row.attrs.as_deref(), Some(r#"{"region":"eu","router":"r1"}"#));
    }

    #[test]
    fn a_changed_field_is_a_conflict_naming_it() {
        let mut a = open();
        a.tokens_out = Some(5);
        let mut b = a.clone();
        b.tokens_out = Some(6);
        b.lane = Lane::Paid;
        b.ended_at = Some(9);
        b.attrs = Some(r#"{"router":"r2"}"#.into());
        assert_eq!(
            merge(&a, &b),
            Merge::Conflict(vec!["lane".into(), "tokens_out".into(), "attrs.router".into()])
        );
    }

    #[test]
    fn a_rows_own_ingested_at_fed_back_in_attrs_is_not_a_new_field() {
        let at = crate::model::time::parse_timestamp("2026-12-01T04:04:25.857146Z").unwrap();
        let with = |attrs: &str| Attempt {
            attrs: Some(attrs.into()),
            ..open()
        };
        let fed_back = with(r#"{"ingested_at":"2026-12-01T04:04:25.857146Z","router":"r1"}"#);
        assert_eq!(*without_own_ingested_at(&fed_back, at), open());
        assert_eq!(
            merge(&open(), &without_own_ingested_at(&fed_back, at)),
            Merge::Duplicate
        );
        let only = with(r#"{"ingested_at":"2026-12-01T04:04:25.857146Z"}"#);
        assert_eq!(without_own_ingested_at(&only, at).attrs, None);
        // Another ledger's time is a field like any other, and completes the row.
        assert_eq!(*without_own_ingested_at(&fed_back, at + 1), fed_back);
        let Merge::Complete(_, added) = merge(&open(), &without_own_ingested_at(&fed_back, at + 1)) else {
            panic!("completes")
        };
        assert_eq!(added, ["attrs"]);
    }
}
