//! The attempt record (SPEC 1.1, seed 000 `job_attempt`) and what the ledger keeps beside it.
//!
//! Timestamps are microseconds since the Unix epoch, UTC (`i64`). Fields that the input may leave
//! out are `Option`s, so that a later record can *complete* them (SPEC 2); SQL shows the seed's
//! `DEFAULT 0` for absent token counts.

use serde::{Deserialize, Serialize};

/// The lane an attempt ran on (seed 000 `CHECK (lane IN ('free','paid'))`), or one of the tiers a
/// `lane.yaml` names (issue 31).
///
/// Stored as postcard's enum encoding: `Free` and `Paid` are the one byte 0 and 1 they always
/// were (so older files and their chain hashes are unchanged), and any other configured name is
/// variant 2 followed by the name inline (its length, then its UTF-8 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Lane {
    /// The free lane.
    Free,
    /// The paid fallback.
    Paid,
    /// A tier named in `lane.yaml`, spelled as configured. Build it with
    /// [`crate::model::lanes::intern`], which gives `free` and `paid` their own variants.
    Named(&'static str),
}

impl Lane {
    /// The name: `"free"`, `"paid"` or the configured tier's.
    pub fn as_str(self) -> &'static str {
        match self {
            Lane::Free => "free",
            Lane::Paid => "paid",
            Lane::Named(name) => name,
        }
    }

    /// Parses the seed's spelling; anything else is `None` (for configured tiers see
    /// [`Lane::configured`]).
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "free" => Some(Lane::Free),
            "paid" => Some(Lane::Paid),
            _ => None,
        }
    }

    /// The lane of this process's `lane.yaml` tiers spelled exactly `s` (`free` or `paid` without
    /// tiers); `None` for any other name ([`crate::model::lanes::configured`]).
    pub fn configured(s: &str) -> Option<Self> {
        crate::model::lanes::configured(s)
    }
}

/// How [`Lane`] is encoded: the derive's layout, so that `Free` and `Paid` keep their bytes.
#[derive(Serialize, Deserialize)]
#[serde(rename = "Lane")]
enum LaneRepr<'a> {
    Free,
    Paid,
    Named(#[serde(borrow)] std::borrow::Cow<'a, str>),
}

impl Serialize for Lane {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Lane::Free => LaneRepr::Free,
            Lane::Paid => LaneRepr::Paid,
            Lane::Named(name) => LaneRepr::Named(std::borrow::Cow::Borrowed(name)),
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for Lane {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(match LaneRepr::deserialize(d)? {
            LaneRepr::Free => Lane::Free,
            LaneRepr::Paid => Lane::Paid,
            LaneRepr::Named(name) => crate::model::lanes::intern(&name),
        })
    }
}

/// How an attempt ended, as the router saw it (seed 000 `outcome -- ok | retryable | ambiguous | permanent`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Outcome {
    /// The call answered with usable work.
    Ok,
    /// 429 or 503 with no work done: safe to retry (seed 000).
    Retryable,
    /// A timeout after partial streaming: the work may exist (seed 000).
    Ambiguous,
    /// The request cannot succeed on this lane.
    Permanent,
}

impl Outcome {
    /// The seed's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Retryable => "retryable",
            Outcome::Ambiguous => "ambiguous",
            Outcome::Permanent => "permanent",
        }
    }

    /// Parses the seed's spelling; anything else is `None`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "ok" => Some(Outcome::Ok),
            "retryable" => Some(Outcome::Retryable),
            "ambiguous" => Some(Outcome::Ambiguous),
            "permanent" => Some(Outcome::Permanent),
            _ => None,
        }
    }
}

/// One model call, as a router reported it (SPEC 1.1). Identity: (`job_id`, `attempt_no`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attempt {
    /// The job, 1–256 bytes.
    pub job_id: String,
    /// The idempotency key derived from the job's inputs, 1–256 bytes; never invented.
    pub idem_key: String,
    /// 1 … 2^31−1, in the order the router made the calls.
    pub attempt_no: u32,
    /// The lane the call ran on.
    pub lane: Lane,
    /// When the call started, µs since the epoch, UTC.
    pub started_at: i64,
    /// When it ended, µs since the epoch, UTC; `None` while the attempt is open.
    pub ended_at: Option<i64>,
    /// The router's outcome.
    pub outcome: Option<Outcome>,
    /// Prompt tokens; SQL shows 0 when absent (seed 000 `DEFAULT 0`).
    pub tokens_in: Option<u64>,
    /// Completion tokens; SQL shows 0 when absent.
    pub tokens_out: Option<u64>,
    /// The artifact the call produced; an empty input string is stored as `None`.
    pub artifact_id: Option<String>,
    /// The HTTP status, 0–999; 0 means no response arrived (seed 002 `status`).
    pub http_status: Option<u16>,
    /// The provider's business code from the body, e.g. z.ai 1305 (seed 002 `zai_code`).
    pub provider_code: Option<u32>,
    /// The provider key used.
    pub key_id: Option<String>,
    /// The key pool the key belongs to.
    pub pool_id: Option<String>,
    /// The model name.
    pub model: Option<String>,
    /// Every other input field, as a JSON object text (SQL column `attrs`), keys sorted.
    pub attrs: Option<String>,
}

/// The attempt fields in the seed's column order, then the refusal detail; used to name the
/// fields of a conflict.
pub const ATTEMPT_FIELDS: [&str; 16] = [
    "job_id",
    "idem_key",
    "attempt_no",
    "lane",
    "started_at",
    "ended_at",
    "outcome",
    "tokens_in",
    "tokens_out",
    "artifact_id",
    "http_status",
    "provider_code",
    "key_id",
    "pool_id",
    "model",
    "attrs",
];

/// An attempt as the ledger holds it: the record plus when it was first accepted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredAttempt {
    /// The record, completed by later deliveries where they added fields.
    pub attempt: Attempt,
    /// Append order: the n-th accepted attempt of this ledger has `seq` n (from 1).
    pub seq: u64,
    /// When the first record of this identity was accepted, µs since the epoch, UTC.
    pub ingested_at: i64,
}

impl StoredAttempt {
    /// The same attempt as a borrowed [`StoredAttemptRef`] (what a scan decodes in place).
    pub fn as_ref(&self) -> StoredAttemptRef<'_> {
        let a = &self.attempt;
        StoredAttemptRef {
            attempt: AttemptRef {
                job_id: &a.job_id,
                idem_key: &a.idem_key,
                attempt_no: a.attempt_no,
                lane: a.lane,
                started_at: a.started_at,
                ended_at: a.ended_at,
                outcome: a.outcome,
                tokens_in: a.tokens_in,
                tokens_out: a.tokens_out,
                artifact_id: a.artifact_id.as_deref(),
                http_status: a.http_status,
                provider_code: a.provider_code,
                key_id: a.key_id.as_deref(),
                pool_id: a.pool_id.as_deref(),
                model: a.model.as_deref(),
                attrs: a.attrs.as_deref(),
            },
            seq: self.seq,
            ingested_at: self.ingested_at,
        }
    }
}

/// A record that disagreed with the row in force (SPEC 2 conflict), kept as it arrived.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Conflict {
    /// Where it came from: a file path, `-` for stdin, or an HTTP route.
    pub source: String,
    /// The 1-based line number in the source (the record's first line for CSV).
    pub line: u64,
    /// The identity it claims.
    pub job_id: String,
    /// The identity it claims.
    pub attempt_no: u32,
    /// The names of the fields that differ from the row in force, in [`ATTEMPT_FIELDS`] order.
    pub fields: Vec<String>,
    /// The record as parsed.
    pub attempt: Attempt,
    /// The raw input text.
    pub raw: String,
    /// When it arrived, µs since the epoch, UTC.
    pub received_at: i64,
}

/// A line that could not be read as a record (SPEC 2 reject), kept with its reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reject {
    /// Where it came from: a file path, `-` for stdin, or an HTTP route.
    pub source: String,
    /// The 1-based line number in the source.
    pub line: u64,
    /// The field at fault, when one is (`None` for bad JSON or a bad CSV row).
    pub field: Option<String>,
    /// Why it was refused, e.g. `missing`, `timestamp has no UTC offset`.
    pub reason: String,
    /// The raw input text (lossy UTF-8 when the line was not UTF-8).
    pub raw: String,
    /// When it arrived, µs since the epoch, UTC.
    pub received_at: i64,
}

impl std::fmt::Display for Reject {
    /// `FILE:LINE: field: reason`, or `FILE:LINE: reason` when no field is at fault.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.field {
            Some(field) => write!(f, "{}:{}: {}: {}", self.source, self.line, field, self.reason),
            None => write!(f, "{}:{}: {}", self.source, self.line, self.reason),
        }
    }
}

/// The on-disk attempt value, versioned so a later release reads files written by this one.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum AttemptRecord {
    /// Format version 1.
    V1(StoredAttempt),
}

/// A stored attempt read in place: the same postcard layout as [`StoredAttempt`] (field for
/// field, in the same order), with every string borrowed from the redb page instead of copied, so
/// a full scan allocates nothing per row. Decode it with [`AttemptRecordRef`]; a test keeps the two
/// layouts equal (`borrowed_decode_matches_owned`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub struct AttemptRef<'a> {
    /// See [`Attempt::job_id`].
    pub job_id: &'a str,
    /// See [`Attempt::idem_key`].
    pub idem_key: &'a str,
    /// See [`Attempt::attempt_no`].
    pub attempt_no: u32,
    /// See [`Attempt::lane`].
    pub lane: Lane,
    /// See [`Attempt::started_at`] (µs since the epoch, UTC).
    pub started_at: i64,
    /// See [`Attempt::ended_at`] (µs since the epoch, UTC).
    pub ended_at: Option<i64>,
    /// See [`Attempt::outcome`].
    pub outcome: Option<Outcome>,
    /// See [`Attempt::tokens_in`] (tokens).
    pub tokens_in: Option<u64>,
    /// See [`Attempt::tokens_out`] (tokens).
    pub tokens_out: Option<u64>,
    /// See [`Attempt::artifact_id`].
    #[serde(borrow)]
    pub artifact_id: Option<&'a str>,
    /// See [`Attempt::http_status`].
    pub http_status: Option<u16>,
    /// See [`Attempt::provider_code`].
    pub provider_code: Option<u32>,
    /// See [`Attempt::key_id`].
    #[serde(borrow)]
    pub key_id: Option<&'a str>,
    /// See [`Attempt::pool_id`].
    #[serde(borrow)]
    pub pool_id: Option<&'a str>,
    /// See [`Attempt::model`].
    #[serde(borrow)]
    pub model: Option<&'a str>,
    /// See [`Attempt::attrs`] (a JSON object text).
    #[serde(borrow)]
    pub attrs: Option<&'a str>,
}

/// [`StoredAttempt`] read in place (see [`AttemptRef`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub struct StoredAttemptRef<'a> {
    /// The record.
    #[serde(borrow)]
    pub attempt: AttemptRef<'a>,
    /// See [`StoredAttempt::seq`].
    pub seq: u64,
    /// See [`StoredAttempt::ingested_at`] (µs since the epoch, UTC).
    pub ingested_at: i64,
}

/// [`AttemptRecord`] read in place: one variant per format version, as there.
#[derive(Debug, Clone, Copy, Deserialize)]
pub enum AttemptRecordRef<'a> {
    /// Format version 1.
    #[serde(borrow)]
    V1(StoredAttemptRef<'a>),
}

/// The on-disk conflict value, versioned.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum ConflictRecord {
    /// Format version 1.
    V1(Conflict),
}

/// The on-disk reject value, versioned.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum RejectRecord {
    /// Format version 1.
    V1(Reject),
}

impl Attempt {
    /// The record as one NDJSON object in the input format of SPEC 1.1: timestamps in RFC 3339
    /// `Z`, absent fields left out, `attrs` members at the top level, so it reads back unchanged.
    pub fn to_json(&self) -> serde_json::Value {
        use crate::model::time::format_timestamp;
        use serde_json::{Map, Value, json};
        let mut m = Map::new();
        m.insert("job_id".into(), json!(self.job_id));
        m.insert("idem_key".into(), json!(self.idem_key));
        m.insert("attempt_no".into(), json!(self.attempt_no));
        m.insert("lane".into(), json!(self.lane.as_str()));
        m.insert("started_at".into(), json!(format_timestamp(self.started_at)));
        let mut opt = |k: &str, v: Option<Value>| {
            if let Some(v) = v {
                m.insert(k.into(), v);
            }
        };
        opt("ended_at", self.ended_at.map(|t| json!(format_timestamp(t))));
        opt("outcome", self.outcome.map(|o| json!(o.as_str())));
        opt("tokens_in", self.tokens_in.map(|n| json!(n)));
        opt("tokens_out", self.tokens_out.map(|n| json!(n)));
        opt("artifact_id", self.artifact_id.as_ref().map(|s| json!(s)));
        opt("http_status", self.http_status.map(|n| json!(n)));
        opt("provider_code", self.provider_code.map(|n| json!(n)));
        opt("key_id", self.key_id.as_ref().map(|s| json!(s)));
        opt("pool_id", self.pool_id.as_ref().map(|s| json!(s)));
        opt("model", self.model.as_ref().map(|s| json!(s)));
        if let Some(attrs) = &self.attrs
            && let Ok(Value::Object(extra)) = serde_json::from_str::<Value>(attrs)
        {
            for (k, v) in extra {
                m.entry(k).or_insert(v);
            }
        }
        Value::Object(m)
    }
}
