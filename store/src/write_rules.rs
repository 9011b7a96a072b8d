//! SPEC 2's write rules for a record whose identity the ledger already holds.
//!
//! The same record again is a duplicate delivery; a record that agrees with every field already
//! set and adds absent ones completes the row; a record that differs in a field already set is a
//! conflict, and the row in force stays as it was.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::record::Attempt;

/// What a record means for the row in force with the same identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Merge {
    /// Nothing new: a duplicate delivery.
    Duplicate,
    /// The row completed: the merged row, and the names of the fields it gained.
    Complete(Box<Attempt>, Vec<String>),
    /// A field already set differs: the names of the differing fields.
    Conflict(Vec<String>),
}

/// Compares `incoming` with the row in force (`held`) field by field (SPEC 2).
///
/// `attrs` is compared key by key: a differing key is named `attrs.KEY`, a new key completes.
pub fn merge(held: &Attempt, incoming: &Attempt) -> Merge {
    let mut differ: Vec<String> = Vec::new();
    let mut added: Vec<String> = Vec::new();
    let mut out = held.clone();

    fn required<T: PartialEq>(name: &str, a: &T, b: &T, differ: &mut Vec<String>) {
        if a != b {
            differ.push(name.to_string());
        }
    }
    required("job_id", &held.job_id, &incoming.job_id, &mut differ);
    required("idem_key", &held.idem_key, &incoming.idem_key, &mut differ);
    required("attempt_no", &held.attempt_no, &incoming.attempt_no, &mut differ);
    required("lane", &held.lane, &incoming.lane, &mut differ);
    required("started_at", &held.started_at, &incoming.started_at, &mut differ);

    fn optional<T: PartialEq + Clone>(
        name: &str,
        slot: &mut Option<T>,
        new: &Option<T>,
        differ: &mut Vec<String>,
        added: &mut Vec<String>,
    ) {
        match (slot.as_ref(), new) {
            (_, None) => {}
            (None, Some(v)) => {
                *slot = Some(v.clone());
                added.push(name.to_string());
            }
            (Some(a), Some(b)) if a == b => {}
            (Some(_), Some(_)) => differ.push(name.to_string()),
        }
    }
    optional(
        "ended_at",
        &mut out.ended_at,
        &incoming.ended_at,
        &mut differ,
        &mut added,
    );
    optional("outcome", &mut out.outcome, &incoming.outcome, &mut differ, &mut added);
    optional(
        "tokens_in",
        &mut out.tokens_in,
        &incoming.tokens_in,
        &mut differ,
        &mut added,
    );
    optional(
        "tokens_out",
        &mut out.tokens_out,
        &incoming.tokens_out,
        &mut differ,
        &mut added,
    );
    optional(
        "artifact_id",
        &mut out.artifact_id,
        &incoming.artifact_id,
        &mut differ,
        &mut added,
    );
    optional(
        "http_status",
        &mut out.http_status,
        &incoming.http_status,
        &mut differ,
        &mut added,
    );
    optional(
        "provider_code",
        &mut out.provider_code,
        &incoming.provider_code,
        &mut differ,
        &mut added,
    );
    optional("key_id", &mut out.key_id, &incoming.key_id, &mut differ, &mut added);
    optional("pool_id", &mut out.pool_id, &incoming.pool_id, &mut differ, &mut added);
    optional("model", &mut out.model, &incoming.model, &mut differ, &mut added);

    if let Some(new_attrs) = &incoming.attrs {
        let parse = |s: &str| serde_json::from_str::<BTreeMap<String, Value>>(s).unwrap_or_default();
        let mut held_attrs = held.attrs.as_deref().map(parse).unwrap_or_default();
        let mut grew = false;
        for (k, v) in parse(new_attrs) {
            match held_attrs.get(&k) {
                None => {
                    held_attrs.insert(k, v);
                    grew = true;
                }
                Some(old) if *old == v => {}
                Some(_) => differ.push(format!("attrs.{k}")),
            }
        }
        if grew {
            out.attrs = Some(serde_json::to_string(&held_attrs).expect("a map of JSON values serializes"));
            added.push("attrs".to_string());
        }
    }

    if !differ.is_empty() {
        Merge::Conflict(differ)
    } else if !added.is_empty() {
        Merge::Complete(Box::new(out), added)
    } else {
        Merge::Duplicate
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Lane, Outcome};

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
}
