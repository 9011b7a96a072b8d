//! Turning a source's records into attempts by a [`Spec`]: pointers resolved, conversions applied,
//! lane and outcome decided, attempt numbers read or derived, the rest kept in `attrs`; then the
//! ledger's own field rules (the same as for a native record) check the result.

use std::collections::{BTreeMap, HashMap};

use serde_json::{Map, Value};

use super::spec::{Condition, Conversion, FieldSpec, OneOrMany, Pointer, Predicate, Spec, Subject};
use crate::format::parse::{Cell, Framed, decode_attempt};
use crate::model::record::{ATTEMPT_FIELDS, Attempt, Reject};
use crate::model::time::{format_timestamp, now_micros, parse_timestamp};

/// What an idempotency key taken from a mapping's declared fallback (a request id) starts with:
/// `fallback:trace-7f3a`.
pub const FALLBACK_PREFIX: &str = "fallback:";

/// One record of a source before mapping.
#[derive(Debug, Clone, PartialEq)]
pub struct SourceRecord {
    /// Its 1-based line in the input (for a JSON array, its 1-based position).
    pub line: u64,
    /// Its text as it arrived (kept with a reject or a conflict).
    pub raw: String,
    /// Its value.
    pub value: Value,
}

/// An attempt already in the ledger, as far as numbering needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PriorAttempt {
    /// Its number.
    pub attempt_no: u32,
    /// When it started, µs.
    pub started_at: i64,
    /// The tiebreak id a derived number was given with (`attrs.attempt_key`), when there was one.
    pub attempt_key: Option<String>,
}

/// The attempts already stored for a job, so that derived numbers continue them and a record
/// delivered again gets the number it got the first time.
pub trait PriorAttempts {
    /// The job's stored attempts.
    fn attempts_of(&self, job_id: &str) -> Vec<PriorAttempt>;
}

/// No attempt stored anywhere (a dry run without a ledger, tests).
pub struct NoPrior;

impl PriorAttempts for NoPrior {
    fn attempts_of(&self, _: &str) -> Vec<PriorAttempt> {
        Vec::new()
    }
}

/// What [`super::Mapping::map`] gives.
#[derive(Debug, Default)]
pub struct Mapped {
    /// One per mapped record (a record or a reject), in input order.
    pub framed: Vec<Framed<Attempt>>,
    /// Records the mapping's filter left out (not attempts: a parent span, an HTTP span).
    pub skipped: u64,
    /// How often each attempt field was found, over the attempts mapped (records and rejects).
    pub found: BTreeMap<&'static str, u64>,
    /// Attempts mapped (records and rejects).
    pub attempts: u64,
    /// Attempts whose idempotency key is the declared fallback.
    pub idem_fallback: u64,
}

/// The fields [`Mapped::found`] counts, in the record's order: the attempt's own fields
/// (not `attrs`).
pub const COUNTED_FIELDS: &[&str] = ATTEMPT_FIELDS.split_at(ATTEMPT_FIELDS.len() - 1).0;

/// One item to map: the record (or exploded item), its parent, and its position.
struct Item<'a> {
    value: &'a Value,
    parent: Option<&'a Value>,
    index: usize,
}

impl Item<'_> {
    fn get(&self, p: &Pointer) -> Option<&Value> {
        let root = if p.parent { self.parent? } else { self.value };
        root.pointer(&p.path).filter(|v| present(v))
    }
}

/// Not null and not empty text: what "resolves" means.
fn present(v: &Value) -> bool {
    !matches!(v, Value::Null) && !matches!(v, Value::String(s) if s.is_empty())
}

/// A scalar's text (`None` for arrays and objects).
fn scalar_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

fn as_f64(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// Values equal as a user means it: numbers as numbers (`"429"` equals `429`), else as text.
fn loosely_equal(a: &Value, b: &Value) -> bool {
    match (as_f64(a), as_f64(b)) {
        (Some(x), Some(y)) if matches!(a, Value::Number(_)) || matches!(b, Value::Number(_)) => x == y,
        _ => match (scalar_text(a), scalar_text(b)) {
            (Some(x), Some(y)) => x == y,
            _ => a == b,
        },
    }
}

/// Applies one conversion, or says why it does not apply.
fn convert(v: &Value, c: Conversion) -> Result<Value, String> {
    let micros = |m: f64| -> Result<Value, String> {
        if !m.is_finite() {
            return Err("not a finite number".into());
        }
        Ok(Value::String(format_timestamp(m.round() as i64)))
    };
    match c {
        Conversion::EpochSeconds => micros(as_f64(v).ok_or("not a number of seconds")? * 1e6),
        Conversion::EpochMillis => micros(as_f64(v).ok_or("not a number of milliseconds")? * 1e3),
        Conversion::UnixNanos => {
            // Exact for integers: nanoseconds overflow an f64's precision.
            let ns: i128 = match v {
                Value::Number(n) => n
                    .as_i64()
                    .map(i128::from)
                    .or_else(|| n.as_f64().map(|x| x as i128))
                    .ok_or("not a number of nanoseconds")?,
                Value::String(s) => s.trim().parse().map_err(|_| "not a number of nanoseconds")?,
                _ => return Err("not a number of nanoseconds".into()),
            };
            Ok(Value::String(format_timestamp((ns / 1000) as i64)))
        }
        Conversion::Rfc3339 => {
            let s = v.as_str().ok_or("not text")?;
            let t = s.trim();
            let t = if t.len() > 10 && t.as_bytes()[10] == b' ' {
                format!("{}T{}", &t[..10], &t[11..])
            } else {
                t.to_string()
            };
            parse_timestamp(&t).map(|m| Value::String(format_timestamp(m)))
        }
        Conversion::NaiveUtc => {
            let s = v.as_str().ok_or("not text")?.trim().replace(' ', "T");
            let naive = chrono::NaiveDateTime::parse_from_str(&s, "%Y-%m-%dT%H:%M:%S%.f")
                .map_err(|_| format!("not a date and time without offset: {s:?}"))?;
            let m = naive.and_utc().timestamp_micros();
            parse_timestamp(&format_timestamp(m)).map(|m| Value::String(format_timestamp(m)))
        }
        Conversion::Int => match v {
            Value::Number(n) if n.is_i64() || n.is_u64() => Ok(v.clone()),
            Value::Number(n) => match n.as_f64() {
                Some(x) if x.fract() == 0.0 && x.abs() < 9.0e15 => Ok(Value::from(x as i64)),
                _ => Err(format!("{n} is not an integer")),
            },
            Value::String(s) => s
                .trim()
                .parse::<i64>()
                .map(Value::from)
                .map_err(|_| format!("{s:?} is not an integer")),
            other => Err(format!("{} is not an integer", crate::format::parse::json_kind(other))),
        },
        Conversion::String => scalar_text(v)
            .map(Value::String)
            .ok_or_else(|| "not a scalar".to_string()),
        Conversion::Json => {
            let s = v.as_str().ok_or("not text")?;
            serde_json::from_str(s).map_err(|e| format!("not JSON: {e}"))
        }
    }
}

/// The mapped values of one item so far, for `field:` conditions.
type Mapped_ = BTreeMap<&'static str, Value>;

fn holds(c: &Condition, item: &Item, mapped: &Mapped_) -> bool {
    let v = match &c.subject {
        Subject::Path(p) => item.get(p),
        Subject::Field(f) => mapped.get(f.as_str()).filter(|v| present(v)),
    };
    let r = match (&c.predicate, v) {
        (Predicate::Exists(want), v) => v.is_some() == *want,
        (_, None) => false,
        (Predicate::In(values), Some(v)) => values.iter().any(|x| loosely_equal(x, v)),
        (Predicate::Range(lo, hi), Some(v)) => as_f64(v).is_some_and(|x| *lo <= x && x <= *hi),
        (Predicate::Matches(p), Some(v)) => {
            let text = scalar_text(v).unwrap_or_else(|| v.to_string());
            p.0.is_match(&text)
        }
    };
    r != c.not
}

fn all_hold(cs: Option<&OneOrMany<Condition>>, item: &Item, mapped: &Mapped_) -> bool {
    cs.is_none_or(|cs| cs.as_slice().iter().all(|c| holds(c, item, mapped)))
}

/// Resolves one field: `Ok(None)` when nothing resolves, `Err` when a value was found but does
/// not convert. The pointer that gave the value is added to `used`.
fn resolve(spec: &FieldSpec, item: &Item, mapped: &Mapped_, used: &mut Vec<Pointer>) -> Result<Option<Value>, String> {
    if !all_hold(spec.when.as_ref(), item, mapped) {
        return Ok(None);
    }
    let mut found = None;
    if let Some(c) = &spec.constant {
        found = Some(c.clone());
    }
    if found.is_none() {
        for p in &spec.from {
            let Some(v) = item.get(p) else { continue };
            let v = match &spec.regex {
                Some(re) => {
                    let text = scalar_text(v).unwrap_or_else(|| v.to_string());
                    let Some(caps) = re.0.captures(&text) else { continue };
                    let m = caps.get(1).or_else(|| caps.get(0)).expect("a match has group 0");
                    Value::String(m.as_str().to_string())
                }
                None => v.clone(),
            };
            used.push(p.clone());
            // A value the map lists becomes its entry (null: the field is absent); one it does
            // not list takes `default`, or stays as it is.
            let v = match &spec.map {
                Some(map) => match scalar_text(&v).and_then(|k| map.get(&k)) {
                    Some(Value::Null) => return Ok(None),
                    Some(mapped) => mapped.clone(),
                    None => match &spec.default {
                        Some(d) => return Ok(Some(d.clone())),
                        None => v,
                    },
                },
                None => v,
            };
            found = Some(match &spec.convert {
                None => v,
                Some(cs) => {
                    let mut reasons = Vec::new();
                    let mut out = None;
                    for c in cs.as_slice() {
                        match convert(&v, *c) {
                            Ok(x) => {
                                out = Some(x);
                                break;
                            }
                            Err(r) => reasons.push(r),
                        }
                    }
                    out.ok_or_else(|| format!("{p}: {}", reasons.join("; ")))?
                }
            });
            break;
        }
    }
    Ok(found.or_else(|| spec.default.clone()))
}

/// Removes the value a pointer names from `root`, and any object left empty above it.
fn remove_pointer(root: &mut Value, path: &str) {
    let mut parts: Vec<String> = path
        .split('/')
        .skip(1)
        .map(|t| t.replace("~1", "/").replace("~0", "~"))
        .collect();
    let Some(last) = parts.pop() else { return };
    fn walk(v: &mut Value, parts: &[String], last: &str) -> bool {
        match parts.split_first() {
            None => {
                if let Value::Object(m) = v {
                    m.remove(last);
                    return m.is_empty();
                }
                false
            }
            Some((head, rest)) => {
                let (child_empty, empty_now) = match v {
                    Value::Object(m) => match m.get_mut(head.as_str()) {
                        Some(child) => {
                            let e = walk(child, rest, last);
                            if e {
                                m.remove(head.as_str());
                            }
                            (e, m.is_empty())
                        }
                        None => (false, false),
                    },
                    _ => (false, false),
                };
                child_empty && empty_now
            }
        }
    }
    walk(root, &parts, &last);
}

/// One attempt mapped, before numbering.
struct Pending {
    line: u64,
    raw: String,
    result: Result<Attempt, (Vec<String>, Vec<String>)>,
    /// Derived numbering: the tiebreak id.
    derive_key: Option<String>,
    derived: bool,
}

impl Spec {
    /// Maps `records` (see [`super::Mapping::map`]).
    pub(crate) fn map(
        &self,
        source: &str,
        records: Vec<SourceRecord>,
        prior: &dyn PriorAttempts,
        allow_fallback: bool,
        mapping_name: &str,
    ) -> Mapped {
        let mut out = Mapped::default();
        let mut pending: Vec<Pending> = Vec::new();
        let received_at = now_micros();
        let reject = |line: u64, raw: String, field: Option<String>, reason: String| {
            Framed::Reject(Reject {
                source: source.to_string(),
                line,
                field,
                reason,
                raw,
                received_at,
            })
        };
        // Rejects of whole records keep their place: indexes into `pending` are filled later.
        let mut order: Vec<Result<usize, Framed<Attempt>>> = Vec::new();
        for rec in records {
            let roots: Vec<&Value> = match &self.records {
                None => vec![&rec.value],
                Some(p) => match rec.value.pointer(&p.path) {
                    Some(Value::Array(items)) => items.iter().collect(),
                    Some(v @ Value::Object(_)) => vec![v],
                    _ => {
                        order.push(Err(reject(
                            rec.line,
                            rec.raw.clone(),
                            None,
                            format!("no record at {p} (the mapping's `records`)"),
                        )));
                        continue;
                    }
                },
            };
            for root in roots {
                let items: Vec<Item> = match &self.explode {
                    None => vec![Item {
                        value: root,
                        parent: None,
                        index: 0,
                    }],
                    Some(p) => match root.pointer(&p.path) {
                        Some(Value::Array(tries)) => tries
                            .iter()
                            .enumerate()
                            .map(|(index, value)| Item {
                                value,
                                parent: Some(root),
                                index,
                            })
                            .collect(),
                        _ => vec![],
                    },
                };
                if items.is_empty() {
                    out.skipped += 1;
                    continue;
                }
                for item in items {
                    if !all_hold(self.filter.as_ref(), &item, &BTreeMap::new()) {
                        out.skipped += 1;
                        continue;
                    }
                    let p = self.map_item(&item, allow_fallback, mapping_name, &mut out);
                    order.push(Ok(pending.len()));
                    pending.push(Pending {
                        line: rec.line,
                        raw: rec.raw.clone(),
                        ..p
                    });
                }
            }
        }
        self.number(&mut pending, prior);
        let mut pending: Vec<Option<Pending>> = pending.into_iter().map(Some).collect();
        for o in order {
            out.framed.push(match o {
                Err(r) => r,
                Ok(i) => {
                    let p = pending[i].take().expect("each pending item is framed once");
                    match p.result {
                        Ok(attempt) => Framed::Record {
                            line: p.line,
                            raw: p.raw,
                            record: attempt,
                        },
                        Err((fields, reasons)) => reject(p.line, p.raw, Some(fields.join(", ")), reasons.join("; ")),
                    }
                }
            });
        }
        out
    }

    /// Maps one item to an attempt (numbered later when derived).
    fn map_item(&self, item: &Item, allow_fallback: bool, mapping_name: &str, out: &mut Mapped) -> Pending {
        let mut used: Vec<Pointer> = Vec::new();
        let mut values: Mapped_ = BTreeMap::new();
        let mut errors: Vec<(String, String)> = Vec::new();
        let f = &self.fields;
        let mut specs: Vec<(&'static str, &FieldSpec)> = vec![("job_id", &f.job_id), ("started_at", &f.started_at)];
        specs.extend(f.optional().into_iter().filter_map(|(n, s)| s.map(|s| (n, s))));
        for (name, spec) in specs {
            match resolve(spec, item, &values, &mut used) {
                Ok(Some(v)) => {
                    values.insert(name, v);
                }
                Ok(None) if name == "job_id" || name == "started_at" => {
                    errors.push((name.to_string(), format!("no value at {}", pointer_list(&spec.from))))
                }
                Ok(None) => {}
                Err(reason) => errors.push((name.to_string(), reason)),
            }
        }
        let mut attrs_extra: BTreeMap<String, Value> = BTreeMap::new();
        for (name, spec) in &self.attrs.fields {
            match resolve(spec, item, &values, &mut used) {
                Ok(Some(v)) => {
                    attrs_extra.insert(name.clone(), v);
                }
                Ok(None) => {}
                Err(reason) => errors.push((name.clone(), reason)),
            }
        }
        // The idempotency key: the client's, else the declared fallback when allowed.
        let idem_from = self.idem_key.from.iter().find_map(|p| item.get(p).map(|v| (p, v)));
        let fallback_allowed = allow_fallback || self.idem_key.allow_fallback;
        let idem = match idem_from {
            Some((p, v)) => Some((p.clone(), v.clone(), false)),
            None if fallback_allowed => self
                .idem_key
                .fallback
                .iter()
                .find_map(|p| item.get(p).map(|v| (p.clone(), v.clone(), true))),
            None => None,
        };
        match &idem {
            Some((p, v, is_fallback)) => {
                used.push(p.clone());
                let key = scalar_text(v).unwrap_or_else(|| v.to_string());
                // A fallback key says so in the key itself, so that every query (and the review,
                // which never reads attrs) can tell it from a key the client sent.
                let key = if *is_fallback {
                    format!("{FALLBACK_PREFIX}{key}")
                } else {
                    key
                };
                values.insert("idem_key", Value::String(key));
                attrs_extra.insert(
                    "idem_key_from".into(),
                    Value::String(match is_fallback {
                        true => format!("fallback {p}"),
                        false => p.to_string(),
                    }),
                );
                if *is_fallback {
                    out.idem_fallback += 1;
                }
            }
            None => {
                let tried = pointer_list(&self.idem_key.from);
                let how = if self.idem_key.fallback.is_empty() {
                    "no source carries one on its own: have the client send one, or name a request id under \
                     idem_key.fallback in a copy of this mapping"
                        .to_string()
                } else if fallback_allowed {
                    format!("nor at the fallback {}", pointer_list(&self.idem_key.fallback))
                } else {
                    format!(
                        "to use the request id at {} as the key, declare it with --idem-fallback \
                         (or idem_fallback=1 over HTTP, or idem_key.allow_fallback: true in the mapping); \
                         duplicates across client retries cannot be seen through it",
                        pointer_list(&self.idem_key.fallback)
                    )
                };
                let tried = if tried.is_empty() {
                    "no client key declared".to_string()
                } else {
                    format!("no value at {tried}")
                };
                errors.push(("idem_key".into(), format!("{tried}; {how}")));
            }
        }
        // The lane.
        let lane_value = self.lane.from.iter().find_map(|p| item.get(p).map(|v| (p, v)));
        let lane = match lane_value {
            Some((p, v)) => {
                let text = scalar_text(v).unwrap_or_else(|| v.to_string());
                let found = self
                    .lane
                    .map
                    .get(&text)
                    .or_else(|| {
                        self.lane
                            .suffix
                            .iter()
                            .find(|(s, _)| text.ends_with(s.as_str()))
                            .map(|(_, l)| l)
                    })
                    .or_else(|| {
                        self.lane
                            .prefix
                            .iter()
                            .find(|(s, _)| text.starts_with(s.as_str()))
                            .map(|(_, l)| l)
                    })
                    .or(self.lane.default.as_ref());
                match found {
                    Some(l) => Some(l.0),
                    None => {
                        errors.push((
                            "lane".into(),
                            format!("{p}: {text:?} is not in the mapping's lane map; add it under lane.map or set lane.default"),
                        ));
                        None
                    }
                }
            }
            None => match self.lane.default {
                Some(l) => Some(l.0),
                None => {
                    errors.push(("lane".into(), format!("no value at {}", pointer_list(&self.lane.from))));
                    None
                }
            },
        };
        if let Some(l) = lane {
            values.insert("lane", Value::String(l.as_str().to_string()));
        }
        // The attempt number: read, the item's position, or derived later.
        let mut derived = false;
        let read = self.attempt_no.from.iter().find_map(|p| item.get(p).map(|v| (p, v)));
        match read {
            Some((p, v)) => {
                used.push(p.clone());
                match convert(v, Conversion::Int) {
                    Ok(n) => {
                        values.insert("attempt_no", n);
                    }
                    Err(r) => errors.push(("attempt_no".into(), format!("{p}: {r}"))),
                }
            }
            None if self.attempt_no.index => {
                values.insert("attempt_no", Value::from(item.index as u64 + 1));
            }
            None if self.attempt_no.derive.is_some() => {
                derived = true;
                values.insert("attempt_no", Value::from(1u64));
            }
            None => errors.push((
                "attempt_no".into(),
                format!("no value at {}", pointer_list(&self.attempt_no.from)),
            )),
        }
        let derive_key = match (&self.attempt_no.derive, derived) {
            (Some(d), true) => d.tiebreak.iter().find_map(|p| item.get(p)).and_then(scalar_text),
            _ => None,
        };
        if let Some(k) = &derive_key {
            attrs_extra.insert("attempt_key".into(), Value::String(k.clone()));
        }
        // The outcome: the first rule that holds.
        if let Some(rule) = self.outcome.iter().find(|r| all_hold(r.when.as_ref(), item, &values)) {
            values.insert("outcome", Value::String(rule.then.0.as_str().to_string()));
        }
        for name in COUNTED_FIELDS {
            if values.contains_key(name) {
                *out.found.entry(name).or_default() += 1;
            }
        }
        out.attempts += 1;
        // The ledger's own rules on the values found: the same checks and messages as a native
        // record's. Text goes in as text, the rest as JSON.
        let cells: Vec<(&str, Value)> = values.iter().map(|(k, v)| (*k, v.clone())).collect();
        let decoded = decode_attempt(&mut cells.iter().map(|(k, v)| {
            (
                *k,
                match v {
                    Value::String(s) => Cell::Str(s.as_str()),
                    other => Cell::Json(other),
                },
            )
        }));
        if let Err(e) = decoded.as_ref() {
            for (field, reason) in &e.0 {
                if !errors.iter().any(|(f, _)| f == field) {
                    errors.push((field.to_string(), reason.clone()));
                }
            }
        }
        let result = if errors.is_empty() {
            let mut attempt = decoded.expect("no error");
            attempt.attrs = Some(self.attrs_of(item, &used, attrs_extra, mapping_name));
            Ok(attempt)
        } else {
            errors.sort_by_key(|(f, _)| COUNTED_FIELDS.iter().position(|n| n == f).unwrap_or(usize::MAX));
            // One bad field is named with its reason; several, each with its own.
            let reasons = match errors.as_slice() {
                [(_, r)] => vec![r.clone()],
                many => many.iter().map(|(f, r)| format!("{f}: {r}")).collect(),
            };
            Err((errors.iter().map(|(f, _)| f.clone()).collect(), reasons))
        };
        Pending {
            line: 0,
            raw: String::new(),
            result,
            derive_key,
            derived,
        }
    }

    /// What the record holds beyond the mapped fields: the item (and its parent's own fields,
    /// the exploded array left out) without the values the mapping used or drops, plus the extra
    /// named values, the key's provenance and the mapping's name; keys sorted.
    fn attrs_of(&self, item: &Item, used: &[Pointer], extra: BTreeMap<String, Value>, mapping_name: &str) -> String {
        let mut own = item.value.clone();
        let mut parent = item.parent.cloned();
        if let (Some(parent), Some(explode)) = (parent.as_mut(), &self.explode) {
            remove_pointer(parent, &explode.path);
        }
        for p in used.iter().chain(&self.attrs.drop) {
            match (p.parent, parent.as_mut()) {
                (true, Some(parent)) => remove_pointer(parent, &p.path),
                (true, None) => {}
                (false, _) => {
                    if p.path.is_empty() {
                        continue;
                    }
                    remove_pointer(&mut own, &p.path);
                }
            }
        }
        let mut attrs: BTreeMap<String, Value> = BTreeMap::new();
        let mut take = |v: Value| match v {
            Value::Object(m) => {
                for (k, v) in m {
                    if let Some(v) = sorted(v) {
                        attrs.insert(k, v);
                    }
                }
            }
            Value::Null => {}
            other => {
                attrs.insert("value".into(), other);
            }
        };
        if let Some(parent) = parent {
            take(parent);
        }
        take(own);
        attrs.extend(extra);
        attrs.insert("mapping".into(), Value::String(mapping_name.to_string()));
        serde_json::to_string(&attrs).expect("a map of JSON values serializes")
    }

    /// Derived attempt numbers: per job, a record seen before (same start and tiebreak id) keeps
    /// its number; new ones follow the job's highest, ordered by start time, then tiebreak id,
    /// then input order.
    fn number(&self, pending: &mut [Pending], prior: &dyn PriorAttempts) {
        let mut by_job: HashMap<String, Vec<usize>> = HashMap::new();
        for (i, p) in pending.iter().enumerate() {
            if let (true, Ok(a)) = (p.derived, &p.result) {
                by_job.entry(a.job_id.clone()).or_default().push(i);
            }
        }
        let mut jobs: Vec<(String, Vec<usize>)> = by_job.into_iter().collect();
        jobs.sort();
        for (job, mut idx) in jobs {
            let known = prior.attempts_of(&job);
            let mut next = known.iter().map(|k| k.attempt_no).max().unwrap_or(0);
            let mut given: HashMap<(i64, Option<String>), u32> = known
                .iter()
                .map(|k| ((k.started_at, k.attempt_key.clone()), k.attempt_no))
                .collect();
            idx.sort_by(|&a, &b| {
                let (pa, pb) = (&pending[a], &pending[b]);
                let sa = pa.result.as_ref().map(|x| x.started_at).unwrap_or_default();
                let sb = pb.result.as_ref().map(|x| x.started_at).unwrap_or_default();
                (sa, &pa.derive_key, a).cmp(&(sb, &pb.derive_key, b))
            });
            for i in idx {
                let p = &mut pending[i];
                let Ok(a) = p.result.as_mut() else { continue };
                let key = (a.started_at, p.derive_key.clone());
                let n = *given.entry(key).or_insert_with(|| {
                    next += 1;
                    next
                });
                a.attempt_no = n;
            }
        }
    }
}

/// Keys of nested objects sorted, so that attrs text is the same however the input ordered them;
/// nulls, and objects left empty without them, dropped (`None`): they say nothing, and routers
/// send dozens (LiteLLM's payload is mostly nulls).
fn sorted(v: Value) -> Option<Value> {
    match v {
        Value::Null => None,
        Value::Object(m) => {
            let b: BTreeMap<String, Value> = m.into_iter().filter_map(|(k, v)| Some((k, sorted(v)?))).collect();
            (!b.is_empty()).then(|| Value::Object(b.into_iter().collect::<Map<String, Value>>()))
        }
        Value::Array(a) => Some(Value::Array(
            a.into_iter().map(|v| sorted(v).unwrap_or(Value::Null)).collect(),
        )),
        other => Some(other),
    }
}

fn pointer_list(ps: &[Pointer]) -> String {
    ps.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions() {
        assert_eq!(
            convert(&Value::from(1760709602.5), Conversion::EpochSeconds).unwrap(),
            Value::String("2025-10-17T14:00:02.500000Z".into())
        );
        assert_eq!(
            convert(&Value::from("1760709602000000000"), Conversion::UnixNanos).unwrap(),
            Value::String("2025-10-17T14:00:02Z".into())
        );
        assert_eq!(
            convert(&Value::from(1760709602123i64), Conversion::EpochMillis).unwrap(),
            Value::String("2025-10-17T14:00:02.123000Z".into())
        );
        assert_eq!(
            convert(&Value::from("2024-07-15 23:33:19.433273"), Conversion::NaiveUtc).unwrap(),
            Value::String("2024-07-15T23:33:19.433273Z".into())
        );
        assert_eq!(
            convert(&Value::from("2024-07-15 23:33:19+02:00"), Conversion::Rfc3339).unwrap(),
            Value::String("2024-07-15T21:33:19Z".into())
        );
        assert_eq!(
            convert(&Value::from(" 429 "), Conversion::Int).unwrap(),
            Value::from(429)
        );
        assert_eq!(
            convert(&Value::from("x"), Conversion::Int).unwrap_err(),
            "\"x\" is not an integer"
        );
        assert_eq!(
            convert(&Value::from(12), Conversion::String).unwrap(),
            Value::from("12")
        );
    }

    #[test]
    fn removing_a_pointer_prunes_emptied_objects() {
        let mut v: Value = serde_json::json!({"a": {"b": {"c": 1}}, "d": 2, "e": {"f": 1, "g": 2}});
        remove_pointer(&mut v, "/a/b/c");
        remove_pointer(&mut v, "/e/f");
        remove_pointer(&mut v, "/nope/x");
        assert_eq!(v, serde_json::json!({"d": 2, "e": {"g": 2}}));
    }

    #[test]
    fn loose_equality() {
        assert!(loosely_equal(&Value::from("429"), &Value::from(429)));
        assert!(loosely_equal(&Value::from("success"), &Value::from("success")));
        assert!(!loosely_equal(&Value::from("0429x"), &Value::from(429)));
    }
}
