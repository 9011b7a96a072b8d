//! Reading records from NDJSON or CSV input: attempts (SPEC 1.1) here, gate decisions (SPEC 1.2)
//! through the same framing with [`crate::format::decision::DecisionDecoder`].
//!
//! Framing that routers and shippers produce is normal input: a UTF-8 byte-order mark, CRLF line
//! ends, blank lines and a last line without a newline. Each line (each CSV row) becomes either a
//! record or a reject naming the line, the field and the reason; a bad line never stops the lines
//! after it. [`LineReader`] does the framing for any [`RecordDecoder`]; [`AttemptReader`] is the
//! attempt reader built on it.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::io::BufRead;
use std::marker::PhantomData;

use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::Value;

use crate::model::record::{ATTEMPT_FIELDS, Attempt, Lane, Outcome, Reject};
use crate::model::time::{now_micros, parse_timestamp};
use crate::policy::refusal::{ErrorKind, error_kind_of};

/// The longest input line (or CSV row) read as a record: 1 MiB. A longer one is rejected.
pub const MAX_LINE_BYTES: usize = 1 << 20;
/// The longest `job_id` or `idem_key`: 256 bytes (SPEC 1.1).
pub const MAX_ID_BYTES: usize = 256;
/// The most tokens one attempt may report in `tokens_in` or in `tokens_out`: 10^12 (a trillion),
/// far above any model's window, and low enough that SQL sums over billions of attempts cannot
/// overflow a 64-bit integer.
pub const MAX_TOKENS: u64 = 1_000_000_000_000;
/// The largest `attempt_no`: 2^31−1 (SPEC 1.1).
pub const MAX_ATTEMPT_NO: u64 = i32::MAX as u64;

/// Input formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputFormat {
    /// One JSON object a line.
    Ndjson,
    /// A header row with the seed's column names, then one record a row (RFC 4180).
    Csv,
}

impl InputFormat {
    /// Guesses the format from a file name: `.csv` is CSV, anything else NDJSON.
    pub fn from_path(path: &str) -> Self {
        if path.to_ascii_lowercase().ends_with(".csv") {
            InputFormat::Csv
        } else {
            InputFormat::Ndjson
        }
    }
}

/// One input line, read.
#[derive(Debug, Clone, PartialEq)]
pub enum Parsed {
    /// A record that passed every field rule.
    Record {
        /// 1-based line number (a CSV row's first line).
        line: u64,
        /// The raw text of the line.
        raw: String,
        /// The record.
        attempt: Attempt,
    },
    /// A line that could not be read, with its reason.
    Reject(Reject),
}

/// A field value before it is typed: a JSON string (borrowed from the line where it has no
/// escapes), another JSON value, or the text of a CSV cell.
#[derive(Clone, Copy)]
pub(crate) enum Cell<'a> {
    Str(&'a str),
    Json(&'a Value),
    Text(&'a str),
}

impl Cell<'_> {
    /// JSON `null` and an empty CSV cell are "absent".
    pub(crate) fn is_absent(&self) -> bool {
        match self {
            Cell::Str(_) => false,
            Cell::Json(v) => v.is_null(),
            Cell::Text(s) => s.is_empty(),
        }
    }

    pub(crate) fn to_json(self) -> Value {
        match self {
            Cell::Json(v) => v.clone(),
            Cell::Str(s) | Cell::Text(s) => Value::String(s.to_string()),
        }
    }

    /// What a JSON cell holds, for a message: `a string`, `a number`…
    fn json_kind(&self) -> &'static str {
        match self {
            Cell::Str(_) => "a string",
            Cell::Json(v) => json_kind(v),
            Cell::Text(_) => "text",
        }
    }
}

/// A field rule's failure: the field's name and the reason.
pub(crate) type FieldError = (&'static str, String);

/// Every field rule a record failed, in field order (at least one).
#[derive(Debug, PartialEq)]
pub(crate) struct FieldErrors(pub(crate) Vec<FieldError>);

impl From<FieldError> for FieldErrors {
    fn from(e: FieldError) -> Self {
        FieldErrors(vec![e])
    }
}

impl FieldErrors {
    /// As a reject's field and reason: one bad field is named with its reason; several are named
    /// together (`job_id, lane`), and the reason gives each one's (`job_id: missing; lane: …`).
    pub(crate) fn into_line_error(self) -> LineError {
        match self.0.as_slice() {
            [(field, reason)] => (Some(field.to_string()), reason.clone()),
            many => (
                Some(many.iter().map(|(f, _)| *f).collect::<Vec<_>>().join(", ")),
                many.iter()
                    .map(|(f, r)| format!("{f}: {r}"))
                    .collect::<Vec<_>>()
                    .join("; "),
            ),
        }
    }
}

/// The text of a JSON string or a CSV cell, borrowed.
pub(crate) fn text<'a>(name: &'static str, cell: Cell<'a>) -> Result<&'a str, FieldError> {
    match cell {
        Cell::Str(s) | Cell::Text(s) => Ok(s),
        Cell::Json(other) => Err((name, format!("expected a string, found {}", json_kind(other)))),
    }
}

pub(crate) fn string(name: &'static str, cell: Cell) -> Result<String, FieldError> {
    text(name, cell).map(str::to_string)
}

pub(crate) fn id(name: &'static str, cell: Cell) -> Result<String, FieldError> {
    let s = string(name, cell)?;
    if s.is_empty() {
        return Err((name, "missing".into()));
    }
    if s.len() > MAX_ID_BYTES {
        return Err((name, format!("longer than {MAX_ID_BYTES} bytes ({})", s.len())));
    }
    if s.chars().any(char::is_control) {
        return Err((name, "contains a control character".into()));
    }
    Ok(s)
}

pub(crate) fn integer(name: &'static str, cell: Cell, min: u64, max: u64) -> Result<u64, FieldError> {
    let n: i128 = match cell {
        Cell::Json(Value::Number(n)) => match (n.as_u64(), n.as_i64()) {
            (Some(u), _) => u as i128,
            (None, Some(i)) => i as i128,
            _ => return Err((name, format!("expected an integer, found {n}"))),
        },
        Cell::Json(_) | Cell::Str(_) => {
            return Err((name, format!("expected an integer, found {}", cell.json_kind())));
        }
        Cell::Text(s) => s
            .trim()
            .parse::<i128>()
            .map_err(|_| (name, format!("expected an integer, found {s:?}")))?,
    };
    if n < min as i128 || n > max as i128 {
        return Err((name, format!("{n} is outside {min}..={max}")));
    }
    Ok(n as u64)
}

pub(crate) fn timestamp(name: &'static str, cell: Cell) -> Result<i64, FieldError> {
    parse_timestamp(text(name, cell)?).map_err(|reason| (name, reason))
}

/// A finite number (seconds, for the gate's fields): a JSON number, or a CSV cell's decimal text.
/// NaN and infinities are refused; with `non_negative`, so is a value below 0.
pub(crate) fn number(name: &'static str, cell: Cell, non_negative: bool) -> Result<f64, FieldError> {
    let x = match cell {
        Cell::Json(Value::Number(n)) => n
            .as_f64()
            .ok_or_else(|| (name, format!("expected a number, found {n}")))?,
        Cell::Json(_) | Cell::Str(_) => {
            return Err((name, format!("expected a number, found {}", cell.json_kind())));
        }
        Cell::Text(s) => s
            .trim()
            .parse::<f64>()
            .map_err(|_| (name, format!("expected a number, found {s:?}")))?,
    };
    if !x.is_finite() {
        return Err((name, format!("expected a finite number, found {x}")));
    }
    if non_negative && x < 0.0 {
        return Err((name, format!("{x} is negative")));
    }
    Ok(x)
}

/// A boolean: JSON `true`/`false`, or a CSV cell `true`/`false` (any case) or `1`/`0`.
pub(crate) fn boolean(name: &'static str, cell: Cell) -> Result<bool, FieldError> {
    match cell {
        Cell::Json(Value::Bool(b)) => Ok(*b),
        Cell::Json(_) | Cell::Str(_) => Err((name, format!("expected true or false, found {}", cell.json_kind()))),
        Cell::Text(s) => match s.trim() {
            t if t.eq_ignore_ascii_case("true") || t == "1" => Ok(true),
            t if t.eq_ignore_ascii_case("false") || t == "0" => Ok(false),
            _ => Err((name, format!("expected true, false, 1 or 0, found {s:?}"))),
        },
    }
}

pub(crate) fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Fields named like `job_attempt`'s derived columns (`error_kind`, `attrs`, `ingested_at`), as a
/// record carried them.
struct ExportColumns {
    error_kind: Option<Value>,
    attrs: Option<Value>,
    ingested_at: Option<Value>,
}

impl ExportColumns {
    /// As any other field: each kept under its name.
    fn keep(self, attrs: &mut BTreeMap<String, Value>) {
        for (name, value) in [
            ("error_kind", self.error_kind),
            ("attrs", self.attrs),
            ("ingested_at", self.ingested_at),
        ] {
            if let Some(value) = value {
                attrs.insert(name.to_string(), value);
            }
        }
    }

    /// As a CSV export of `job_attempt` wrote them, so that the export gives back the records it
    /// came from:
    /// - `error_kind` is derived (seed 002 `error_kind(http_status, provider_code)`): a value that
    ///   says the same is not kept, one that says something else is;
    /// - `attrs` holds the record's other fields as a JSON object: they become its other fields
    ///   again, unless one would overwrite a different value, and then the whole value is kept
    ///   under "attrs";
    /// - `ingested_at`, when a ledger took the record, is kept among the other fields unless they
    ///   hold one already (an export of a ledger that was itself rebuilt from an export, or a
    ///   router's own field of that name): that one is kept, and the export's is not.
    fn settle(self, a: &Attempt, attrs: &mut BTreeMap<String, Value>) {
        if let Some(kind) = self.error_kind {
            let derived = error_kind_of(a.http_status, a.provider_code).map(ErrorKind::as_str);
            if kind.as_str() != derived {
                attrs.insert("error_kind".to_string(), kind);
            }
        }
        if let Some(value) = self.attrs {
            let object = match &value {
                Value::Object(m) => Some(m.clone()),
                Value::String(s) => serde_json::from_str::<serde_json::Map<String, Value>>(s).ok(),
                _ => None,
            };
            match object {
                Some(m) if m.iter().all(|(k, v)| attrs.get(k).is_none_or(|held| held == v)) => attrs.extend(m),
                _ => {
                    attrs.insert("attrs".to_string(), value);
                }
            }
        }
        if let Some(value) = self.ingested_at {
            attrs.entry("ingested_at".to_string()).or_insert(value);
        }
    }
}

/// Builds an attempt from named cells, applying SPEC 1.1's rules. Unknown fields go to `attrs`;
/// so do fields named like `job_attempt`'s derived columns, except in a CSV row that has all three
/// (`error_kind`, `attrs`, `ingested_at`: an export fed back), where [`ExportColumns::settle`]
/// reads them as the export wrote them.
pub(crate) fn decode_attempt<'a>(cells: &mut dyn Iterator<Item = (&'a str, Cell<'a>)>) -> Result<Attempt, FieldErrors> {
    let mut errors: Vec<FieldError> = Vec::new();
    // Every field is checked, so that a reject names every bad field, not only the first.
    let mut check = |r: Result<(), FieldError>| {
        if let Err(e) = r {
            errors.push(e);
        }
    };
    let mut job_id = None;
    let mut idem_key = None;
    let mut attempt_no = None;
    let mut lane = None;
    let mut started_at = None;
    let mut a = Attempt {
        job_id: String::new(),
        idem_key: String::new(),
        attempt_no: 0,
        lane: Lane::Free,
        started_at: 0,
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
        attrs: None,
    };
    let mut attrs: BTreeMap<String, Value> = BTreeMap::new();
    let mut stated_kind: Option<Value> = None;
    let mut carried: Option<Value> = None;
    let mut stated_ingested: Option<Value> = None;
    // How many of `job_attempt`'s derived columns the row has, and whether it is a CSV row.
    let (mut export_columns, mut csv) = (0, false);
    for (name, cell) in cells {
        csv |= matches!(cell, Cell::Text(_));
        if matches!(name, "error_kind" | "attrs" | "ingested_at") {
            export_columns += 1;
        }
        if cell.is_absent() {
            continue;
        }
        match name {
            "job_id" => check(id("job_id", cell).map(|v| job_id = Some(v))),
            "idem_key" => check(id("idem_key", cell).map(|v| idem_key = Some(v))),
            "attempt_no" => check(integer("attempt_no", cell, 1, MAX_ATTEMPT_NO).map(|v| attempt_no = Some(v as u32))),
            "lane" => check(text("lane", cell).and_then(|s| {
                lane = Some(
                    Lane::configured(s)
                        .ok_or_else(|| ("lane", format!("{s:?} is not {}", crate::model::lanes::expected())))?,
                );
                Ok(())
            })),
            "started_at" => check(timestamp("started_at", cell).map(|v| started_at = Some(v))),
            "ended_at" => check(timestamp("ended_at", cell).map(|v| a.ended_at = Some(v))),
            "outcome" => check(text("outcome", cell).and_then(|s| {
                a.outcome = Some(
                    Outcome::parse(s)
                        .ok_or_else(|| ("outcome", format!("{s:?} is not ok, retryable, ambiguous or permanent")))?,
                );
                Ok(())
            })),
            "tokens_in" => check(integer("tokens_in", cell, 0, MAX_TOKENS).map(|v| a.tokens_in = Some(v))),
            "tokens_out" => check(integer("tokens_out", cell, 0, MAX_TOKENS).map(|v| a.tokens_out = Some(v))),
            "artifact_id" => check(string("artifact_id", cell).map(|s| a.artifact_id = (!s.is_empty()).then_some(s))),
            "http_status" => check(integer("http_status", cell, 0, 999).map(|v| a.http_status = Some(v as u16))),
            "provider_code" => {
                check(integer("provider_code", cell, 0, u32::MAX as u64).map(|v| a.provider_code = Some(v as u32)))
            }
            "key_id" => check(string("key_id", cell).map(|v| a.key_id = Some(v))),
            "pool_id" => check(string("pool_id", cell).map(|v| a.pool_id = Some(v))),
            "model" => check(string("model", cell).map(|v| a.model = Some(v))),
            // `job_attempt`'s own columns, as an export carries them: settled after the loop.
            "error_kind" => stated_kind = Some(cell.to_json()),
            "attrs" => carried = Some(cell.to_json()),
            "ingested_at" => stated_ingested = Some(cell.to_json()),
            other => {
                attrs.insert(other.to_string(), cell.to_json());
            }
        }
    }
    let export = ExportColumns {
        error_kind: stated_kind,
        attrs: carried,
        ingested_at: stated_ingested,
    };
    if csv && export_columns == 3 {
        export.settle(&a, &mut attrs);
    } else {
        export.keep(&mut attrs);
    }
    // A required field that is absent is named once (a present but bad one already is).
    for (name, present) in [
        ("job_id", job_id.is_some()),
        ("idem_key", idem_key.is_some()),
        ("attempt_no", attempt_no.is_some()),
        ("lane", lane.is_some()),
        ("started_at", started_at.is_some()),
    ] {
        if !present && !errors.iter().any(|(f, _)| *f == name) {
            errors.push((name, "missing".to_string()));
        }
    }
    if !errors.is_empty() {
        // In the record's field order, as the fields are listed everywhere else.
        errors.sort_by_key(|(f, _)| ATTEMPT_FIELDS.iter().position(|n| n == f).unwrap_or(usize::MAX));
        return Err(FieldErrors(errors));
    }
    a.job_id = job_id.expect("checked above");
    a.idem_key = idem_key.expect("checked above");
    a.attempt_no = attempt_no.expect("checked above");
    a.lane = lane.expect("checked above");
    a.started_at = started_at.expect("checked above");
    if !attrs.is_empty() {
        a.attrs = Some(serde_json::to_string(&attrs).expect("a map of JSON values serializes"));
    }
    Ok(a)
}

/// A JSON object's members in input order; a repeated key is an error, not "last one wins".
/// The second field has bit [`name_bit`] set for each name pushed.
struct Members<'a>(Vec<(Name<'a>, Member<'a>)>, u64);

/// A name's bit in [`Members`]' filter: `(first byte + 2 × last byte + 3 × length) % 64`, 0 for
/// the empty name. The 18 names of an attempt record and an export (SPEC 1.1) all get different
/// bits, so a usual line needs no name compared; the length alone (the filter before) gave 9
/// bits for them, and half the names of a line were compared with the earlier ones.
fn name_bit(name: &str) -> u64 {
    let b = name.as_bytes();
    let (Some(&first), Some(&last)) = (b.first(), b.last()) else {
        return 1;
    };
    1u64 << ((usize::from(first) + 2 * usize::from(last) + 3 * b.len()) % 64)
}

impl Default for Members<'_> {
    fn default() -> Self {
        Members(Vec::with_capacity(16), 0)
    }
}

impl<'a> Members<'a> {
    /// Appends a member, or hands its name back when an earlier member has that name. A name is
    /// compared with the earlier ones only when a name with its [`name_bit`] was pushed before:
    /// the pairwise compare was the costly part of reading a line (about 600 ns of it).
    fn push(&mut self, name: Name<'a>, member: Member<'a>) -> Result<(), Name<'a>> {
        let bit = name_bit(&name.0);
        if self.1 & bit != 0 && self.0.iter().any(|(seen, _)| seen.0 == name.0) {
            return Err(name);
        }
        self.1 |= bit;
        self.0.push((name, member));
        Ok(())
    }
}

/// A member's name, borrowed from the line unless it has escapes.
struct Name<'a>(Cow<'a, str>);

/// A member's value: a string borrowed from the line unless it has escapes (most fields are
/// strings, so most need no copy before the one into the record), or any other JSON value.
enum Member<'a> {
    Str(Cow<'a, str>),
    Other(Value),
}

impl<'a> Member<'a> {
    fn cell(&self) -> Cell<'_> {
        match self {
            Member::Str(s) => Cell::Str(s),
            Member::Other(v) => Cell::Json(v),
        }
    }
}

impl<'de> serde::Deserialize<'de> for Name<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Name<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a member name")
            }
            fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Name<'de>, E> {
                Ok(Name(Cow::Borrowed(s)))
            }
            fn visit_str<E>(self, s: &str) -> Result<Name<'de>, E> {
                Ok(Name(Cow::Owned(s.to_string())))
            }
            fn visit_string<E>(self, s: String) -> Result<Name<'de>, E> {
                Ok(Name(Cow::Owned(s)))
            }
        }
        d.deserialize_str(V)
    }
}

impl<'de> serde::Deserialize<'de> for Member<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::value::{MapAccessDeserializer, SeqAccessDeserializer};
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Member<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Member<'de>, E> {
                Ok(Member::Str(Cow::Borrowed(s)))
            }
            fn visit_str<E>(self, s: &str) -> Result<Member<'de>, E> {
                Ok(Member::Str(Cow::Owned(s.to_string())))
            }
            fn visit_string<E>(self, s: String) -> Result<Member<'de>, E> {
                Ok(Member::Str(Cow::Owned(s)))
            }
            fn visit_bool<E>(self, b: bool) -> Result<Member<'de>, E> {
                Ok(Member::Other(Value::Bool(b)))
            }
            fn visit_i64<E>(self, n: i64) -> Result<Member<'de>, E> {
                Ok(Member::Other(Value::from(n)))
            }
            fn visit_u64<E>(self, n: u64) -> Result<Member<'de>, E> {
                Ok(Member::Other(Value::from(n)))
            }
            fn visit_f64<E>(self, x: f64) -> Result<Member<'de>, E> {
                // As serde_json's own `Value` does.
                Ok(Member::Other(
                    serde_json::Number::from_f64(x).map_or(Value::Null, Value::Number),
                ))
            }
            fn visit_unit<E>(self) -> Result<Member<'de>, E> {
                Ok(Member::Other(Value::Null))
            }
            fn visit_none<E>(self) -> Result<Member<'de>, E> {
                Ok(Member::Other(Value::Null))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, seq: A) -> Result<Member<'de>, A::Error> {
                <Value as serde::Deserialize>::deserialize(SeqAccessDeserializer::new(seq)).map(Member::Other)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Member<'de>, A::Error> {
                <Value as serde::Deserialize>::deserialize(MapAccessDeserializer::new(map)).map(Member::Other)
            }
        }
        d.deserialize_any(V)
    }
}

impl<'de> serde::Deserialize<'de> for Members<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Members<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Members<'de>, A::Error> {
                let mut out = Members::default();
                while let Some((k, v)) = map.next_entry::<Name<'de>, Member<'de>>()? {
                    if let Err(k) = out.push(k, v) {
                        return Err(serde::de::Error::custom(format!("duplicate key {:?}", k.0)));
                    }
                }
                Ok(out)
            }
        }
        d.deserialize_map(V)
    }
}

/// Why a line or row is not a record: `(field, reason)`, field `None` when no single field is at
/// fault (bad JSON, a CSV row of the wrong width).
pub type LineError = (Option<String>, String);

/// JSON's whitespace: space, tab, line feed, carriage return (RFC 8259 §2).
fn skip_json_whitespace(b: &[u8], mut i: usize) -> usize {
    while matches!(b.get(i), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        i += 1;
    }
    i
}

/// The index of the first quote, backslash or control character (below 0x20) at or after `j`.
/// Eight bytes are tested at a time (the "has a byte less than n" and "has a zero byte" word
/// tricks, exact for whether a word holds such a byte); the word that does is then read byte by
/// byte.
fn string_stop(b: &[u8], mut j: usize) -> Option<usize> {
    const ONES: u64 = u64::from_le_bytes([1; 8]);
    const HIGHS: u64 = ONES * 0x80;
    let zero_byte = |x: u64| x.wrapping_sub(ONES) & !x & HIGHS;
    while let Some(word) = b.get(j..j + 8) {
        let w = u64::from_le_bytes(word.try_into().expect("eight bytes"));
        let stop = zero_byte(w ^ (ONES * u64::from(b'"')))
            | zero_byte(w ^ (ONES * u64::from(b'\\')))
            | (w.wrapping_sub(ONES * 0x20) & !w & HIGHS);
        if stop != 0 {
            break;
        }
        j += 8;
    }
    b[j..]
        .iter()
        .position(|&c| c == b'"' || c == b'\\' || c < 0x20)
        .map(|k| j + k)
}

/// A JSON string starting at `b[i] == '"'` that has no escape and no control character: its text
/// (borrowed from `line`) and the index after its closing quote. `None` for any other string.
fn flat_string(line: &str, i: usize) -> Option<(&str, usize)> {
    let b = line.as_bytes();
    if b.get(i) != Some(&b'"') {
        return None;
    }
    let end = string_stop(b, i + 1)?;
    // `"` is ASCII, so both ends are character boundaries of `line`.
    (b[end] == b'"').then(|| (&line[i + 1..end], end + 1))
}

/// A JSON integer starting at `b[i]`, a digit: its value and the index after it. `None` for a
/// leading zero followed by a digit (not JSON) or a value above `u64::MAX` (read as a float by
/// serde_json). A fraction or exponent after it is left for the caller, which refuses it.
fn flat_integer(b: &[u8], i: usize) -> Option<(u64, usize)> {
    let digits = b[i..].iter().take_while(|c| c.is_ascii_digit()).count();
    if digits > 1 && b[i] == b'0' {
        return None;
    }
    let mut n: u64 = 0;
    for &c in &b[i..i + digits] {
        n = n.checked_mul(10)?.checked_add(u64::from(c - b'0'))?;
    }
    Some((n, i + digits))
}

/// Reads a flat JSON object — member names and string values without escapes, non-negative
/// integers, `true`, `false` and `null` — without serde_json's general machinery: what almost
/// every router's log line is. `None` for anything else (an escape, a float, a negative number,
/// an array or object value, a repeated name, bad JSON), which the general reader then reads,
/// giving its own answer or error. When this gives members, they are the ones serde_json gives
/// (the test `the_flat_reader_reads_what_serde_json_reads` and the fuzz target check it).
fn flat_members(line: &str) -> Option<Members<'_>> {
    let b = line.as_bytes();
    let mut i = skip_json_whitespace(b, 0);
    if b.get(i) != Some(&b'{') {
        return None;
    }
    i = skip_json_whitespace(b, i + 1);
    let mut out = Members::default();
    if b.get(i) == Some(&b'}') {
        i += 1;
    } else {
        loop {
            let (name, next) = flat_string(line, i)?;
            i = skip_json_whitespace(b, next);
            if b.get(i) != Some(&b':') {
                return None;
            }
            i = skip_json_whitespace(b, i + 1);
            let (member, next) = match *b.get(i)? {
                b'"' => {
                    let (s, next) = flat_string(line, i)?;
                    (Member::Str(Cow::Borrowed(s)), next)
                }
                b'0'..=b'9' => {
                    let (n, next) = flat_integer(b, i)?;
                    (Member::Other(Value::from(n)), next)
                }
                b'n' if b[i..].starts_with(b"null") => (Member::Other(Value::Null), i + 4),
                b't' if b[i..].starts_with(b"true") => (Member::Other(Value::Bool(true)), i + 4),
                b'f' if b[i..].starts_with(b"false") => (Member::Other(Value::Bool(false)), i + 5),
                _ => return None,
            };
            out.push(Name(Cow::Borrowed(name)), member).ok()?;
            i = skip_json_whitespace(b, next);
            match b.get(i)? {
                b',' => i = skip_json_whitespace(b, i + 1),
                b'}' => {
                    i += 1;
                    break;
                }
                _ => return None,
            }
        }
    }
    (skip_json_whitespace(b, i) == b.len()).then_some(out)
}

/// Where the flat reader and serde_json read `line` differently: `None` when the flat reader
/// declines the line or reads the same members, else both readings. For the parser's fuzz target
/// and tests; ingest never needs it.
pub fn flat_reader_disagreement(line: &str) -> Option<String> {
    fn show(m: &Members) -> Vec<(String, Value)> {
        m.0.iter()
            .map(|(k, v)| {
                let v = match v {
                    Member::Str(s) => Value::String(s.to_string()),
                    Member::Other(v) => v.clone(),
                };
                (k.0.to_string(), v)
            })
            .collect()
    }
    let flat = show(&flat_members(line)?);
    match serde_json::from_str::<Members>(line) {
        Ok(general) if show(&general) == flat => None,
        Ok(general) => Some(format!("flat reader {flat:?}, serde_json {:?}", show(&general))),
        Err(e) => Some(format!("flat reader {flat:?}, serde_json refuses it: {e}")),
    }
}

/// Decodes one NDJSON line with a record decoder over named cells: duplicate keys are bad JSON.
/// A flat object is read by [`flat_members`], anything else by serde_json.
pub(crate) fn from_json_with<T>(
    line: &str,
    decode: impl for<'a> FnOnce(&mut dyn Iterator<Item = (&'a str, Cell<'a>)>) -> Result<T, FieldErrors>,
) -> Result<T, LineError> {
    let members = match flat_members(line) {
        Some(members) => members,
        None => serde_json::from_str(line).map_err(|e| (None, format!("bad JSON: {e}")))?,
    };
    decode(&mut members.0.iter().map(|(k, v)| (k.0.as_ref(), v.cell()))).map_err(FieldErrors::into_line_error)
}

/// Decodes one CSV row given the header's column names; a row of another width is refused.
pub(crate) fn from_csv_with<T>(
    header: &[String],
    row: &[&str],
    decode: impl for<'a> FnOnce(&mut dyn Iterator<Item = (&'a str, Cell<'a>)>) -> Result<T, FieldErrors>,
) -> Result<T, LineError> {
    if row.len() != header.len() {
        return Err((
            None,
            format!("expected {} fields as in the header, found {}", header.len(), row.len()),
        ));
    }
    decode(&mut header.iter().zip(row).map(|(h, v)| (h.as_str(), Cell::Text(v)))).map_err(FieldErrors::into_line_error)
}

/// Reads one NDJSON line as an attempt: `Err((field, reason))`, field `None` for bad JSON.
pub fn attempt_from_json(line: &str) -> Result<Attempt, (Option<String>, String)> {
    from_json_with(line, decode_attempt)
}

/// Reads one CSV row as an attempt given the header's column names.
pub fn attempt_from_csv(header: &[String], row: &[&str]) -> Result<Attempt, (Option<String>, String)> {
    from_csv_with(header, row, decode_attempt)
}

/// Turns one NDJSON line or one CSV row into a typed record; [`LineReader`] does the framing.
pub trait RecordDecoder {
    /// The record type, e.g. [`Attempt`] or [`crate::format::decision::Decision`].
    type Record;
    /// Reads one NDJSON line (a JSON object; duplicate keys are refused).
    fn from_json(line: &str) -> Result<Self::Record, LineError>;
    /// Reads one CSV row given the header's column names.
    fn from_csv(header: &[String], row: &[&str]) -> Result<Self::Record, LineError>;
}

/// The attempt decoder of SPEC 1.1 ([`attempt_from_json`], [`attempt_from_csv`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct AttemptDecoder;

impl RecordDecoder for AttemptDecoder {
    type Record = Attempt;
    fn from_json(line: &str) -> Result<Attempt, LineError> {
        attempt_from_json(line)
    }
    fn from_csv(header: &[String], row: &[&str]) -> Result<Attempt, LineError> {
        attempt_from_csv(header, row)
    }
}

/// One input line (one CSV row) read by a [`LineReader`]: a typed record, or a reject.
#[derive(Debug, Clone, PartialEq)]
pub enum Framed<T> {
    /// A record that passed every field rule.
    Record {
        /// 1-based line number (a CSV row's first line).
        line: u64,
        /// The raw text of the line (of the whole row for a multi-line CSV row).
        raw: String,
        /// The record.
        record: T,
    },
    /// A line that could not be read, with its reason.
    Reject(Reject),
}

/// Reads a line of at most `max` bytes into `buf` (without its `\n`); returns `None` at the end of
/// input, else the line's full length (which may exceed `max`: the rest was skipped).
fn read_line_bounded<R: BufRead>(r: &mut R, buf: &mut Vec<u8>, max: usize) -> std::io::Result<Option<usize>> {
    buf.clear();
    let mut total = 0usize;
    let mut saw_any = false;
    loop {
        let chunk = r.fill_buf()?;
        if chunk.is_empty() {
            return Ok(saw_any.then_some(total));
        }
        saw_any = true;
        let (take, done) = match memchr::memchr(b'\n', chunk) {
            Some(i) => (i, true),
            None => (chunk.len(), false),
        };
        let room = max.saturating_sub(buf.len());
        buf.extend_from_slice(&chunk[..take.min(room)]);
        total += take;
        r.consume(take + usize::from(done));
        if done {
            return Ok(Some(total));
        }
    }
}

/// Iterates the records of one input, NDJSON or CSV, yielding a [`Framed`] per non-blank line
/// (per CSV row), decoded by `D`.
///
/// An `Err` is an I/O error reading the input itself; a bad record is `Ok(Framed::Reject)`.
pub struct LineReader<R: BufRead, D: RecordDecoder> {
    source: String,
    reader: R,
    format: InputFormat,
    line: u64,
    buf: Vec<u8>,
    header: Option<Vec<String>>,
    /// Why every row is refused: the header names a column twice.
    bad_header: Option<String>,
    bytes_read: u64,
    decoder: PhantomData<fn() -> D>,
}

impl<R: BufRead, D: RecordDecoder> LineReader<R, D> {
    /// Reads `reader`, naming it `source` in rejects (a path, or `-` for stdin).
    pub fn new(source: impl Into<String>, reader: R, format: InputFormat) -> Self {
        LineReader {
            source: source.into(),
            reader,
            format,
            line: 0,
            buf: Vec::new(),
            header: None,
            bad_header: None,
            bytes_read: 0,
            decoder: PhantomData,
        }
    }

    /// Reads `reader` as the part of a larger input that follows its first `lines_before` lines:
    /// line numbers count on from there (and a byte-order mark is only looked for on line 1).
    pub fn after_lines(source: impl Into<String>, reader: R, format: InputFormat, lines_before: u64) -> Self {
        LineReader {
            line: lines_before,
            ..LineReader::new(source, reader, format)
        }
    }

    /// Bytes consumed so far (for a progress bar).
    pub fn bytes_read(&self) -> u64 {
        self.bytes_read
    }

    fn reject(&self, line: u64, field: Option<String>, reason: String, raw: String) -> Framed<D::Record> {
        Framed::Reject(Reject {
            source: self.source.clone(),
            line,
            field,
            reason,
            raw,
            received_at: now_micros(),
        })
    }

    /// The next non-blank line, BOM and `\r` stripped: `(text or the UTF-8 error, full length)`.
    fn next_line(&mut self) -> std::io::Result<Option<(Result<String, String>, usize)>> {
        loop {
            let Some(len) = read_line_bounded(&mut self.reader, &mut self.buf, MAX_LINE_BYTES + 2)? else {
                return Ok(None);
            };
            self.line += 1;
            self.bytes_read += len as u64 + 1;
            let mut bytes: &[u8] = &self.buf;
            if self.line == 1 {
                bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
            }
            bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
            if bytes.iter().all(u8::is_ascii_whitespace) && len <= MAX_LINE_BYTES {
                continue;
            }
            let text = std::str::from_utf8(bytes)
                .map(str::to_string)
                .map_err(|_| String::from_utf8_lossy(bytes).into_owned());
            return Ok(Some((text, len)));
        }
    }
}

impl<R: BufRead, D: RecordDecoder> Iterator for LineReader<R, D> {
    type Item = std::io::Result<Framed<D::Record>>;

    fn next(&mut self) -> Option<Self::Item> {
        let (text, len) = match self.next_line() {
            Ok(Some(l)) => l,
            Ok(None) => return None,
            Err(e) => return Some(Err(e)),
        };
        let line = self.line;
        let mut text = match text {
            _ if len > MAX_LINE_BYTES => {
                let raw = String::from_utf8_lossy(&self.buf[..self.buf.len().min(256)]).into_owned();
                return Some(Ok(self.reject(
                    line,
                    None,
                    format!("line longer than {MAX_LINE_BYTES} bytes"),
                    raw,
                )));
            }
            Ok(t) => t,
            Err(lossy) => return Some(Ok(self.reject(line, None, "not valid UTF-8".into(), lossy))),
        };
        let parsed = match self.format {
            InputFormat::Ndjson => D::from_json(&text),
            InputFormat::Csv => {
                let row = match split_csv_row(&text, &mut self.reader, &mut self.line, &mut self.bytes_read) {
                    Ok((row, whole)) => {
                        text = whole;
                        row
                    }
                    Err((reason, whole)) => return Some(Ok(self.reject(line, None, reason, whole))),
                };
                let Some(header) = &self.header else {
                    let header: Vec<String> = row.into_iter().map(|h| h.trim().to_string()).collect();
                    if let Some(dup) = header
                        .iter()
                        .enumerate()
                        .find_map(|(i, h)| header[..i].contains(h).then_some(h))
                    {
                        // Which of the two cells is the field? Neither can be trusted: refuse the input.
                        let reason = format!("the header names column {dup:?} twice");
                        self.header = Some(Vec::new());
                        self.bad_header = Some(reason.clone());
                        return Some(Ok(self.reject(line, None, reason, text)));
                    }
                    self.header = Some(header);
                    return self.next();
                };
                if let Some(reason) = &self.bad_header {
                    return Some(Ok(self.reject(line, None, reason.clone(), text)));
                }
                let cells: Vec<&str> = row.iter().map(String::as_str).collect();
                D::from_csv(header, &cells)
            }
        };
        Some(Ok(match parsed {
            Ok(record) => Framed::Record {
                line,
                raw: text,
                record,
            },
            Err((field, reason)) => self.reject(line, field, reason, text),
        }))
    }
}

/// Iterates the attempts of one input, NDJSON or CSV, yielding a [`Parsed`] per non-blank line:
/// a [`LineReader`] with the [`AttemptDecoder`].
///
/// An `Err` is an I/O error reading the input itself; a bad record is `Ok(Parsed::Reject)`.
pub struct AttemptReader<R: BufRead> {
    inner: LineReader<R, AttemptDecoder>,
}

impl<R: BufRead> AttemptReader<R> {
    /// Reads `reader`, naming it `source` in rejects (a path, or `-` for stdin).
    pub fn new(source: impl Into<String>, reader: R, format: InputFormat) -> Self {
        AttemptReader {
            inner: LineReader::new(source, reader, format),
        }
    }

    /// Bytes consumed so far (for a progress bar).
    pub fn bytes_read(&self) -> u64 {
        self.inner.bytes_read()
    }
}

impl<R: BufRead> Iterator for AttemptReader<R> {
    type Item = std::io::Result<Parsed>;

    fn next(&mut self) -> Option<Self::Item> {
        Some(self.inner.next()?.map(|framed| match framed {
            Framed::Record { line, raw, record } => Parsed::Record {
                line,
                raw,
                attempt: record,
            },
            Framed::Reject(r) => Parsed::Reject(r),
        }))
    }
}

/// Splits one CSV row (RFC 4180: quoted fields, `""` escapes). A quoted field that spans lines
/// pulls the following lines from `reader`; `line` and `bytes_read` advance with them.
///
/// Returns the fields and the row's whole text, or the reason and the whole text consumed: a row
/// past [`MAX_LINE_BYTES`] is read to its real end (its text kept up to the limit) so the rows
/// after it are read as rows, and an unterminated quote keeps everything it swallowed.
fn split_csv_row<R: BufRead>(
    first: &str,
    reader: &mut R,
    line: &mut u64,
    bytes_read: &mut u64,
) -> Result<(Vec<String>, String), (String, String)> {
    let mut text = first.to_string();
    let mut open = first.matches('"').count() % 2 == 1;
    let mut too_long = false;
    while open {
        // An open quote: the field goes on on the next line.
        let mut buf = Vec::new();
        match read_line_bounded(reader, &mut buf, MAX_LINE_BYTES) {
            Ok(Some(len)) => {
                *line += 1;
                *bytes_read += len as u64 + 1;
                let next = String::from_utf8_lossy(&buf);
                let next = next.strip_suffix('\r').unwrap_or(&next);
                open ^= next.matches('"').count() % 2 == 1;
                if text.len() + 1 + next.len() <= MAX_LINE_BYTES {
                    text.push('\n');
                    text.push_str(next);
                } else {
                    too_long = true;
                }
            }
            Ok(None) => return Err(("unterminated quoted field".into(), text)),
            Err(e) => return Err((format!("reading the row: {e}"), text)),
        }
    }
    if too_long {
        return Err((format!("row longer than {MAX_LINE_BYTES} bytes"), text));
    }
    // Without a quote (or a stray CR, which the csv crate reads as a row end) a row is its text
    // split at the commas: the same fields the csv crate gives, without building a reader per row
    // (that costs ~16 µs a row).
    if !text.is_empty() && !text.contains(['"', '\r']) {
        return Ok((text.split(',').map(str::to_string).collect(), text));
    }
    csv_fields(text)
}

/// The fields of one CSV row's whole `text` by the csv crate (quotes, doubled quotes, commas and
/// line ends inside quotes), or the reason it is not one row.
fn csv_fields(text: String) -> Result<(Vec<String>, String), (String, String)> {
    let mut rdr = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .from_reader(text.as_bytes());
    let mut rec = csv::StringRecord::new();
    match rdr.read_record(&mut rec) {
        Ok(_) if (rdr.position().byte() as usize) < text.len() => {
            Err(("bad CSV row: text after a quoted field".into(), text))
        }
        Ok(_) => Ok((rec.iter().map(str::to_string).collect(), text)),
        Err(e) => Err((format!("bad CSV row: {e}"), text)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_names_of_a_record_each_get_their_own_filter_bit_and_a_repeat_is_still_found() {
        let names: Vec<&str> = crate::model::record::ATTEMPT_FIELDS
            .iter()
            .copied()
            .chain(["error_kind", "ingested_at"])
            .collect();
        let bits = names.iter().fold(0u64, |all, n| all | name_bit(n));
        assert_eq!((names.len(), bits.count_ones()), (18, 18));
        assert_eq!(name_bit(""), 1);
        // `bn` shares `job_id`'s bit: it is compared, and taken; `job_id` again is refused.
        assert_eq!(name_bit("bn"), name_bit("job_id"));
        let mut m = Members::default();
        for n in ["job_id", "key_id", "", "bn"] {
            assert!(
                m.push(Name(Cow::Borrowed(n)), Member::Other(Value::Null)).is_ok(),
                "{n}"
            );
        }
        let again = m.push(Name(Cow::Borrowed("job_id")), Member::Other(Value::Null));
        assert_eq!(again.err().map(|n| n.0), Some(Cow::Borrowed("job_id")));
    }

    #[test]
    fn string_stop_finds_what_a_byte_scan_finds() {
        let alphabet = [b'"', b'\\', 0x00, 0x1f, 0x20, 0x21, 0x7f, 0x80, 0xa0, 0xff, b'a', b'z'];
        let mut state: u64 = 0x2545_f491_4f6c_dd1d;
        for _ in 0..20_000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let len = (state % 40) as usize;
            // Mostly plain letters, so that the stops fall anywhere in the words.
            let bytes: Vec<u8> = (0..len)
                .map(|k| {
                    let r = state.rotate_left(k as u32 * 5);
                    if r.is_multiple_of(9) {
                        alphabet[(r >> 8) as usize % alphabet.len()]
                    } else {
                        b'm'
                    }
                })
                .collect();
            for j in 0..=len {
                let naive = bytes[j..]
                    .iter()
                    .position(|&c| c == b'"' || c == b'\\' || c < 0x20)
                    .map(|k| j + k);
                assert_eq!(string_stop(&bytes, j), naive, "{bytes:?} from {j}");
            }
        }
    }

    #[test]
    fn the_flat_reader_reads_what_serde_json_reads() {
        let drill = r#"{"job_id":"job-000002","idem_key":"idem-000002","attempt_no":1,"lane":"free","started_at":"2026-11-16T00:01:05.130696Z","ended_at":"2026-11-16T00:01:06.707005Z","outcome":"retryable","tokens_in":500,"tokens_out":300,"http_status":429,"provider_code":1305,"key_id":"free-key-03","pool_id":"free-pool","model":"free-model"}"#;
        // (line, whether the flat reader takes it: `false` sends it to serde_json).
        let cases: &[(&str, bool)] = &[
            (drill, true),
            ("{}", true),
            (" \t{ } \r", true),
            (r#"{ "a" : 1 , "b":"x", "c":null, "d":true, "e":false, "":"" }"#, true),
            (r#"{"n":0,"m":18446744073709551615,"u":"ünï☃"}"#, true),
            (r#"{"n":18446744073709551616}"#, false),
            (r#"{"n":-1}"#, false),
            (r#"{"n":-0}"#, false),
            (r#"{"n":01}"#, false),
            (r#"{"n":1.5}"#, false),
            (r#"{"n":1e3}"#, false),
            (r#"{"s":"a\"b"}"#, false),
            (r#"{"s\u0041":"x"}"#, false),
            ("{\"s\":\"tab\there\"}", false),
            (r#"{"a":[1]}"#, false),
            (r#"{"a":{"b":1}}"#, false),
            (r#"{"a":1,"a":2}"#, false),
            (r#"{"a":1,}"#, false),
            (r#"{"a":1} x"#, false),
            (r#"{"a":nul}"#, false),
            (r#"{"a":nullx}"#, false),
            (r#"{"a":1"#, false),
            (r#"{"a" 1}"#, false),
            (r#"[1]"#, false),
            ("", false),
        ];
        for (line, flat) in cases {
            assert_eq!(flat_members(line).is_some(), *flat, "{line:?}");
            assert_eq!(flat_reader_disagreement(line), None, "{line:?}");
        }
        // What a flat line decodes to does not depend on the reader.
        let general: Members = serde_json::from_str(drill).unwrap();
        let via = |m: &Members| decode_attempt(&mut m.0.iter().map(|(k, v)| (k.0.as_ref(), v.cell())));
        assert_eq!(via(&flat_members(drill).unwrap()), via(&general));
        assert_eq!(attempt_from_json(drill).unwrap().provider_code, Some(1305));

        // Mutations of flat lines: one byte deleted, replaced or inserted, 20,000 times.
        let alphabet = b"{}[]:,\"\\ 0123456789.-+eEntrufals\t\n\x01abc";
        let seeds = [drill, r#"{"a":1,"b":"x","c":null,"d":true,"e":false}"#];
        let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut flat_taken = 0;
        for round in 0..20_000 {
            let mut bytes = seeds[round % seeds.len()].as_bytes().to_vec();
            for _ in 0..1 + next() % 3 {
                let at = (next() as usize) % (bytes.len() + 1);
                let c = alphabet[(next() as usize) % alphabet.len()];
                match next() % 3 {
                    0 if at < bytes.len() => {
                        bytes.remove(at);
                    }
                    1 if at < bytes.len() => bytes[at] = c,
                    _ => bytes.insert(at, c),
                }
            }
            let Ok(line) = std::str::from_utf8(&bytes) else {
                continue;
            };
            flat_taken += usize::from(flat_members(line).is_some());
            assert_eq!(flat_reader_disagreement(line), None, "{line:?}");
        }
        // The mutations reach both readers.
        assert!(flat_taken > 1_000 && flat_taken < 19_000, "{flat_taken}");
    }

    #[test]
    fn rows_without_quotes_split_as_the_csv_crate_splits_them() {
        for row in [
            "a,b,c",
            "a,,c,",
            ",",
            "job-1,k-1,1,free,2026-11-16T10:00:00Z,,ok,500,300,art-1",
            " spaced , fields ",
            "one",
            "ünïcode,☃,x",
        ] {
            let fast = split_csv_row(row, &mut std::io::empty(), &mut 0, &mut 0).unwrap();
            let slow = csv_fields(row.to_string()).unwrap();
            assert_eq!(fast, slow, "{row:?}");
        }
        // Quoted rows and stray CRs still go through the csv crate.
        assert_eq!(
            split_csv_row(r#"a,"b,c",d"#, &mut std::io::empty(), &mut 0, &mut 0)
                .unwrap()
                .0,
            ["a", "b,c", "d"]
        );
        assert!(split_csv_row("a\rb,c", &mut std::io::empty(), &mut 0, &mut 0).is_err());
    }

    fn read(format: InputFormat, input: &[u8]) -> Vec<Parsed> {
        AttemptReader::new("in", input, format).map(|p| p.unwrap()).collect()
    }

    fn lines_and_jobs(parsed: &[Parsed]) -> Vec<(u64, String)> {
        parsed
            .iter()
            .map(|p| match p {
                Parsed::Record { line, attempt, .. } => (*line, attempt.job_id.clone()),
                Parsed::Reject(r) => (r.line, format!("reject: {r}")),
            })
            .collect()
    }

    const A1: &str =
        r#"{"job_id":"j1","idem_key":"k1","attempt_no":1,"lane":"free","started_at":"2026-11-16T09:00:00Z"}"#;
    const A2: &str =
        r#"{"job_id":"j2","idem_key":"k2","attempt_no":1,"lane":"paid","started_at":"2026-11-16T09:00:00Z"}"#;

    #[test]
    fn bom_crlf_blank_lines_and_no_final_newline_are_normal_input() {
        let input = format!("\u{feff}{A1}\r\n\r\n   \r\n{A2}");
        let got = lines_and_jobs(&read(InputFormat::Ndjson, input.as_bytes()));
        assert_eq!(got, vec![(1, "j1".to_string()), (4, "j2".to_string())]);
    }

    #[test]
    fn csv_with_bom_crlf_blank_lines_and_no_final_newline() {
        let input = "\u{feff}job_id,idem_key,attempt_no,lane,started_at,tokens_in,note\r\n\
                     j1,k1,1,free,2026-11-16T09:00:00Z,800,\r\n\r\n\
                     j2,k2,2,paid,2026-11-16T11:00:00+02:00,,\"a, b\"";
        let parsed = read(InputFormat::Csv, input.as_bytes());
        assert_eq!(
            lines_and_jobs(&parsed),
            vec![(2, "j1".to_string()), (4, "j2".to_string())]
        );
        let Parsed::Record { attempt, .. } = &parsed[1] else {
            panic!()
        };
        assert_eq!(attempt.attempt_no, 2);
        assert_eq!(attempt.tokens_in, None);
        assert_eq!(attempt.attrs.as_deref(), Some(r#"{"note":"a, b"}"#));
        let Parsed::Record { attempt, .. } = &parsed[0] else {
            panic!()
        };
        assert_eq!(attempt.tokens_in, Some(800));
        assert_eq!(attempt.attrs, None);
    }

    #[test]
    fn an_oversized_csv_row_is_read_to_its_end_and_the_next_row_lands() {
        let big = "x\n".repeat(MAX_LINE_BYTES / 2 + 10);
        let input = format!(
            "job_id,idem_key,attempt_no,lane,started_at,note\nj1,k1,1,free,2026-11-16T09:00:00Z,\"{big}\"\nj2,k2,1,free,2026-11-16T09:00:00Z,ok\n"
        );
        let parsed = read(InputFormat::Csv, input.as_bytes());
        let got = lines_and_jobs(&parsed);
        assert_eq!(got.len(), 2, "{:?}", &got[..got.len().min(3)]);
        assert_eq!(got[0], (2, "reject: in:2: row longer than 1048576 bytes".to_string()));
        assert_eq!(got[1], (2 + MAX_LINE_BYTES as u64 / 2 + 10 + 1, "j2".to_string()));
    }

    #[test]
    fn an_unterminated_quote_keeps_every_line_it_swallowed() {
        let input = "job_id,idem_key,attempt_no,lane,started_at,note\nj1,k1,1,free,2026-11-16T09:00:00Z,\"open\nj2,k2,1,free,2026-11-16T09:00:00Z,x\n";
        let parsed = read(InputFormat::Csv, input.as_bytes());
        let Parsed::Reject(r) = &parsed[0] else {
            panic!("{parsed:?}")
        };
        assert_eq!(r.reason, "unterminated quoted field");
        assert_eq!(
            r.raw,
            "j1,k1,1,free,2026-11-16T09:00:00Z,\"open\nj2,k2,1,free,2026-11-16T09:00:00Z,x"
        );
    }

    #[test]
    fn a_csv_header_naming_a_column_twice_refuses_every_row() {
        let input = "job_id,idem_key,attempt_no,lane,started_at,job_id\nj1,k1,1,free,2026-11-16T09:00:00Z,j2\n";
        let got = lines_and_jobs(&read(InputFormat::Csv, input.as_bytes()));
        assert_eq!(
            got,
            [
                (1, "reject: in:1: the header names column \"job_id\" twice".to_string()),
                (2, "reject: in:2: the header names column \"job_id\" twice".to_string())
            ]
        );
    }

    #[test]
    fn csv_quoted_field_across_lines_keeps_the_row_and_later_line_numbers() {
        let input = "job_id,idem_key,attempt_no,lane,started_at,note\n\
                     j1,k1,1,free,2026-11-16T09:00:00Z,\"two\nlines\"\n\
                     j2,k2,1,free,2026-11-16T09:00:00Z,x\n";
        let parsed = read(InputFormat::Csv, input.as_bytes());
        assert_eq!(
            lines_and_jobs(&parsed),
            vec![(2, "j1".to_string()), (4, "j2".to_string())]
        );
    }

    #[test]
    fn a_bad_line_names_file_line_field_and_reason_and_the_rest_is_read() {
        let input = format!(
            "{A1}\n{{\"job_id\":\"j3\",\"idem_key\":\"k\",\"attempt_no\":1,\"lane\":\"bus\",\"started_at\":\"2026-11-16T09:00:00Z\"}}\nnot json\n{A2}\n"
        );
        let got = lines_and_jobs(&read(InputFormat::Ndjson, input.as_bytes()));
        assert_eq!(got[0], (1, "j1".to_string()));
        assert_eq!(
            got[1],
            (2, "reject: in:2: lane: \"bus\" is not free or paid".to_string())
        );
        assert!(
            got[2].1.starts_with("reject: in:3: bad JSON: expected ident"),
            "{:?}",
            got[2]
        );
        assert_eq!(got[3], (4, "j2".to_string()));
    }

    #[test]
    fn field_rules_of_spec_1_1() {
        let cases: &[(&str, &str)] = &[
            (
                r#"{"idem_key":"k","attempt_no":1,"lane":"free","started_at":"2026-11-16T09:00:00Z"}"#,
                "job_id: missing",
            ),
            (
                r#"{"job_id":"j","attempt_no":1,"lane":"free","started_at":"2026-11-16T09:00:00Z"}"#,
                "idem_key: missing",
            ),
            (
                r#"{"job_id":"j","idem_key":"","attempt_no":1,"lane":"free","started_at":"2026-11-16T09:00:00Z"}"#,
                "idem_key: missing",
            ),
            (
                r#"{"job_id":"j","idem_key":"k","attempt_no":0,"lane":"free","started_at":"2026-11-16T09:00:00Z"}"#,
                "attempt_no: 0 is outside 1..=2147483647",
            ),
            (
                r#"{"job_id":"j","idem_key":"k","attempt_no":2147483648,"lane":"free","started_at":"2026-11-16T09:00:00Z"}"#,
                "attempt_no: 2147483648 is outside 1..=2147483647",
            ),
            (
                r#"{"job_id":"j","idem_key":"k","attempt_no":1.5,"lane":"free","started_at":"2026-11-16T09:00:00Z"}"#,
                "attempt_no: expected an integer, found 1.5",
            ),
            (
                r#"{"job_id":"j","idem_key":"k","attempt_no":"1","lane":"free","started_at":"2026-11-16T09:00:00Z"}"#,
                "attempt_no: expected an integer, found a string",
            ),
            (
                r#"{"job_id":"j","idem_key":"k","attempt_no":1,"lane":"free","started_at":"2026-11-16T09:00:00"}"#,
                "started_at: timestamp has no UTC offset (add Z or +HH:MM)",
            ),
            (
                r#"{"job_id":"j","idem_key":"k","attempt_no":1,"lane":"free","started_at":"2026-11-16T09:00:00Z","tokens_in":-1}"#,
                "tokens_in: -1 is outside 0..=1000000000000",
            ),
            (
                r#"{"job_id":"j","idem_key":"k","attempt_no":1,"lane":"free","started_at":"2026-11-16T09:00:00Z","http_status":1000}"#,
                "http_status: 1000 is outside 0..=999",
            ),
            (
                r#"{"job_id":"j","idem_key":"k","attempt_no":1,"lane":"free","started_at":"2026-11-16T09:00:00Z","outcome":"maybe"}"#,
                "outcome: \"maybe\" is not ok, retryable, ambiguous or permanent",
            ),
            (
                r#"{"job_id":"j","job_id":"j","idem_key":"k","attempt_no":1,"lane":"free","started_at":"2026-11-16T09:00:00Z"}"#,
                "bad JSON: duplicate key \"job_id\" at line 1 column 26",
            ),
        ];
        for (line, want) in cases {
            let (field, reason) = attempt_from_json(line).unwrap_err();
            let got = match field {
                Some(f) => format!("{f}: {reason}"),
                None => reason,
            };
            assert_eq!(&got, want, "for {line}");
        }
        let too_many = r#"{"job_id":"j","idem_key":"k","attempt_no":1,"lane":"free","started_at":"2026-11-16T09:00:00Z","tokens_out":1000000000001}"#;
        assert_eq!(
            attempt_from_json(too_many).unwrap_err().1,
            "1000000000001 is outside 0..=1000000000000"
        );
        let esc = r#"{"job_id":"j\u001b[31m","idem_key":"k","attempt_no":1,"lane":"free","started_at":"2026-11-16T09:00:00Z"}"#;
        assert_eq!(
            attempt_from_json(esc).unwrap_err(),
            (Some("job_id".to_string()), "contains a control character".to_string())
        );
        let derived = r#"{"job_id":"j","idem_key":"k","attempt_no":1,"lane":"free","started_at":"2026-11-16T09:00:00Z","error_kind":"x"}"#;
        assert_eq!(
            attempt_from_json(derived).unwrap().attrs.as_deref(),
            Some(r#"{"error_kind":"x"}"#)
        );
        let long = "x".repeat(257);
        let line = format!(
            r#"{{"job_id":"{long}","idem_key":"k","attempt_no":1,"lane":"free","started_at":"2026-11-16T09:00:00Z"}}"#
        );
        assert_eq!(attempt_from_json(&line).unwrap_err().1, "longer than 256 bytes (257)");
    }

    #[test]
    fn an_exported_rows_derived_columns_give_back_the_fields_they_came_from() {
        let header: Vec<String> = [
            "job_id",
            "idem_key",
            "attempt_no",
            "lane",
            "started_at",
            "http_status",
            "provider_code",
            "router",
            "error_kind",
            "attrs",
            "ingested_at",
        ]
        .map(String::from)
        .to_vec();
        let attrs = |row: &[&str]| attempt_from_csv(&header, row).unwrap().attrs;
        let row = |kind: &'static str, attrs: &'static str| {
            [
                "j",
                "k",
                "1",
                "free",
                "2026-11-16T09:00:00Z",
                "429",
                "1310",
                "",
                kind,
                attrs,
                "2026-11-20T00:00:00Z",
            ]
        };
        // 429 with 1310 is a quota refusal (seed 002 is_quota_code): an export's "quota" is dropped, the attrs
        // object's members come back, and ingested_at (the old ledger's) is kept.
        assert_eq!(
            attrs(&row("quota", r#"{"router":"r1","tier":2}"#)).as_deref(),
            Some(r#"{"ingested_at":"2026-11-20T00:00:00Z","router":"r1","tier":2}"#)
        );
        // A kind that says something else than the derived one is kept.
        assert_eq!(
            attrs(&row("auth", "")).as_deref(),
            Some(r#"{"error_kind":"auth","ingested_at":"2026-11-20T00:00:00Z"}"#)
        );
        // attrs that is not an object, or whose member would overwrite a different value, stays whole.
        assert_eq!(
            attrs(&row("quota", "[1]")).as_deref(),
            Some(r#"{"attrs":"[1]","ingested_at":"2026-11-20T00:00:00Z"}"#)
        );
        let mut other = row("quota", r#"{"router":"r2"}"#);
        other[7] = "r1";
        assert_eq!(
            attrs(&other).as_deref(),
            Some(r#"{"attrs":"{\"router\":\"r2\"}","ingested_at":"2026-11-20T00:00:00Z","router":"r1"}"#)
        );
        // An export of a ledger rebuilt from an export: the first ledger's ingested_at is kept.
        assert_eq!(
            attrs(&row("quota", r#"{"ingested_at":"2026-11-01T00:00:00Z","router":"r1"}"#)).as_deref(),
            Some(r#"{"ingested_at":"2026-11-01T00:00:00Z","router":"r1"}"#)
        );
        let mut same = row("quota", r#"{"router":"r1"}"#);
        same[7] = "r1";
        assert_eq!(
            attrs(&same).as_deref(),
            Some(r#"{"ingested_at":"2026-11-20T00:00:00Z","router":"r1"}"#)
        );
        // Only a CSV row with all three columns is read as an export: elsewhere they are fields
        // like any other (an NDJSON record, a CSV without ingested_at).
        let line = r#"{"job_id":"j","idem_key":"k","attempt_no":1,"lane":"free","started_at":"2026-11-16T09:00:00Z","http_status":429,"provider_code":1310,"error_kind":"quota","attrs":{"router":"r1"},"ingested_at":"2026-11-20T00:00:00Z"}"#;
        assert_eq!(
            attempt_from_json(line).unwrap().attrs.as_deref(),
            Some(r#"{"attrs":{"router":"r1"},"error_kind":"quota","ingested_at":"2026-11-20T00:00:00Z"}"#)
        );
        let ten = &header[..10];
        assert_eq!(
            attempt_from_csv(ten, &row("quota", r#"{"router":"r1"}"#)[..10])
                .unwrap()
                .attrs
                .as_deref(),
            Some(r#"{"attrs":"{\"router\":\"r1\"}","error_kind":"quota"}"#)
        );
    }

    #[test]
    fn optional_fields_absent_null_and_empty_artifact() {
        let a = attempt_from_json(
            r#"{"job_id":"j","idem_key":"k","attempt_no":3,"lane":"paid","started_at":"2026-11-16T09:00:00Z","ended_at":null,"artifact_id":"","tokens_out":5,"http_status":429,"provider_code":1305,"key_id":"k9","pool_id":"pool-2","model":"glm","router":"r1"}"#,
        )
        .unwrap();
        assert_eq!(a.ended_at, None);
        assert_eq!(a.artifact_id, None);
        assert_eq!(a.tokens_in, None);
        assert_eq!(a.tokens_out, Some(5));
        assert_eq!((a.http_status, a.provider_code), (Some(429), Some(1305)));
        assert_eq!(a.attrs.as_deref(), Some(r#"{"router":"r1"}"#));
    }

    #[test]
    fn invalid_utf8_and_overlong_lines_are_rejected_and_reading_goes_on() {
        let mut input = b"\xff\xfe not utf8\n".to_vec();
        input.extend_from_slice(&vec![b'x'; MAX_LINE_BYTES + 10]);
        input.push(b'\n');
        input.extend_from_slice(A1.as_bytes());
        let got = lines_and_jobs(&read(InputFormat::Ndjson, &input));
        assert_eq!(got[0], (1, "reject: in:1: not valid UTF-8".to_string()));
        assert_eq!(got[1], (2, "reject: in:2: line longer than 1048576 bytes".to_string()));
        assert_eq!(got[2], (3, "j1".to_string()));
    }

    #[test]
    fn a_reject_names_every_bad_field_not_only_the_first() {
        let line = r#"{"idem_key":"k","attempt_no":0,"lane":"cheap","started_at":1763287200}"#;
        let (field, reason) = attempt_from_json(line).unwrap_err();
        assert_eq!(field.as_deref(), Some("job_id, attempt_no, lane, started_at"));
        assert_eq!(
            reason,
            "job_id: missing; attempt_no: 0 is outside 1..=2147483647; lane: \"cheap\" is not free or paid; \
             started_at: expected a string, found a number"
        );
        // One bad field reads as before: the field, and its reason alone.
        let line = r#"{"job_id":"j","idem_key":"k","attempt_no":1,"lane":"free"}"#;
        assert_eq!(
            attempt_from_json(line).unwrap_err(),
            (Some("started_at".to_string()), "missing".to_string())
        );
    }
}
