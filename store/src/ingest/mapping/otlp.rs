//! OTLP traces as flat span records: one OTLP/JSON `ExportTraceServiceRequest` becomes one JSON
//! object per span, the shape the built-in `otlp` mapping reads with JSON Pointers.
//!
//! The OTLP/JSON encoding (opentelemetry-proto `docs/specification.md`, "JSON Protobuf Encoding")
//! sends ids as hex, enums as integers and 64-bit integers as decimal strings; exporters differ,
//! so ids are also taken in base64 (decoded to hex), enums by their proto names, 64-bit integers
//! as JSON numbers, and the legacy `instrumentationLibrarySpans` / `instrumentationLibrary` keys.
//! Each span becomes:
//!
//! ```json
//! {"traceId": "5b8efff798038103d269b633813fc60c", "spanId": "eee19b7ec3c1b174",
//!  "parentSpanId": "eee19b7ec3c1b173", "name": "chat glm-4.6", "kind": 3,
//!  "startTimeUnixNano": "1760709602000000000", "endTimeUnixNano": "1760709602800000000",
//!  "status": {"code": 2, "message": "rate limited"},
//!  "attributes": {"gen_ai.request.model": "glm-4.6", "gen_ai.usage.input_tokens": 1500},
//!  "resource": {"service.name": "bee-runner"},
//!  "scope": {"name": "my.genai.instrumentation", "version": "1.0.0"},
//!  "events": [{"name": "exception", "timeUnixNano": "1760709602800000000", "attributes": {}}],
//!  "exception": {"type": "RateLimitError", "message": "...", "stacktrace": "..."}}
//! ```
//!
//! A key is left out when the source has nothing for it (an empty id, name or message, a zero
//! kind or time, no attribute, no event), except `status`, whose `code` is 0 when absent. The
//! protobuf encoding gives the same objects (the web server turns it into this JSON first).

use base64::Engine;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use serde_json::{Map, Value};

/// Longest part of a bad value quoted in an error.
const QUOTE_MAX: usize = 60;

/// The flattened span objects of one OTLP/JSON `ExportTraceServiceRequest`, in input order.
///
/// Errors: a reason naming the path of the first bad part, for example
/// `resourceSpans[0].scopeSpans[1].spans[3].traceId: not hex or base64 of 16 bytes: "xyz"`.
/// Unknown fields are ignored; attribute values are converted leniently ([`attribute_value`]).
pub fn spans_from_json(request: &Value) -> Result<Vec<Value>, String> {
    let Some(request) = request.as_object() else {
        return Err(format!(
            "the request is not a JSON object (an ExportTraceServiceRequest), found {}",
            kind_of(request)
        ));
    };
    let mut out = Vec::new();
    for (r, resource_spans) in array_at(request, "resourceSpans", "resourceSpans")?.iter().enumerate() {
        let rpath = format!("resourceSpans[{r}]");
        let rs = object(resource_spans, &rpath)?;
        let resource = match rs.get("resource") {
            None | Some(Value::Null) => Map::new(),
            Some(v) => {
                let path = format!("{rpath}.resource");
                attributes(object(v, &path)?, &path)?
            }
        };
        // `instrumentationLibrarySpans` is the name before OTLP 0.15 (the same message).
        let (scopes_key, scope_key) =
            if rs.contains_key("scopeSpans") || !rs.contains_key("instrumentationLibrarySpans") {
                ("scopeSpans", "scope")
            } else {
                ("instrumentationLibrarySpans", "instrumentationLibrary")
            };
        for (s, scope_spans) in array_at(rs, scopes_key, &format!("{rpath}.{scopes_key}"))?
            .iter()
            .enumerate()
        {
            let spath = format!("{rpath}.{scopes_key}[{s}]");
            let ss = object(scope_spans, &spath)?;
            let scope = scope_of(ss, scope_key, &spath)?;
            for (i, span) in array_at(ss, "spans", &format!("{spath}.spans"))?.iter().enumerate() {
                let path = format!("{spath}.spans[{i}]");
                out.push(flat_span(object(span, &path)?, &path, &resource, scope.as_ref())?);
            }
        }
    }
    Ok(out)
}

/// One OTLP/JSON `AnyValue` as plain JSON: `stringValue` a string, `intValue` an integer (from
/// its decimal string or a number), `doubleValue` a number (`"NaN"`, `"Infinity"` and
/// `"-Infinity"` stay strings), `boolValue` a bool, `arrayValue` an array of converted values,
/// `kvlistValue` an object, `bytesValue` its base64 string, an empty `AnyValue` (or anything
/// else) null. A value of the wrong JSON type for its key is kept as it was sent.
pub fn attribute_value(v: &Value) -> Value {
    let Some(m) = v.as_object() else {
        return Value::Null;
    };
    if let Some(s) = m.get("stringValue") {
        return s.clone();
    }
    if let Some(i) = m.get("intValue") {
        return match i {
            Value::String(s) => match s.trim().parse::<i64>() {
                Ok(n) => n.into(),
                Err(_) => i.clone(),
            },
            other => other.clone(),
        };
    }
    if let Some(d) = m.get("doubleValue") {
        return match d {
            Value::String(s) => match s.trim().parse::<f64>() {
                Ok(x) if x.is_finite() => serde_json::Number::from_f64(x).map_or(d.clone(), Value::Number),
                _ => d.clone(),
            },
            // A double stays a double (2 is 2.0), as the protobuf encoding gives it.
            Value::Number(n) => n
                .as_f64()
                .and_then(serde_json::Number::from_f64)
                .map_or(d.clone(), Value::Number),
            other => other.clone(),
        };
    }
    if let Some(b) = m.get("boolValue") {
        return b.clone();
    }
    if let Some(a) = m.get("arrayValue") {
        return match a.get("values") {
            Some(Value::Array(values)) => Value::Array(values.iter().map(attribute_value).collect()),
            _ => Value::Array(Vec::new()),
        };
    }
    if let Some(kv) = m.get("kvlistValue") {
        let mut out = Map::new();
        if let Some(Value::Array(values)) = kv.get("values") {
            for entry in values {
                if let Some(key) = entry.get("key").and_then(Value::as_str) {
                    out.insert(key.to_string(), entry.get("value").map_or(Value::Null, attribute_value));
                }
            }
        }
        return Value::Object(out);
    }
    if let Some(b) = m.get("bytesValue") {
        return b.clone();
    }
    Value::Null
}

/// One span as the flat object of the module's shape.
fn flat_span(
    span: &Map<String, Value>,
    path: &str,
    resource: &Map<String, Value>,
    scope: Option<&Map<String, Value>>,
) -> Result<Value, String> {
    let mut out = Map::new();
    let trace_id = id_at(span, "traceId", 16, path)?.ok_or_else(|| format!("{path}.traceId: missing"))?;
    out.insert("traceId".into(), trace_id.into());
    let span_id = id_at(span, "spanId", 8, path)?.ok_or_else(|| format!("{path}.spanId: missing"))?;
    out.insert("spanId".into(), span_id.into());
    if let Some(parent) = id_at(span, "parentSpanId", 8, path)? {
        out.insert("parentSpanId".into(), parent.into());
    }
    match span.get("name") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) if s.is_empty() => {}
        Some(Value::String(s)) => {
            out.insert("name".into(), s.clone().into());
        }
        Some(other) => return Err(format!("{path}.name: expected a string, found {}", kind_of(other))),
    }
    let kind = enum_at(span, "kind", &format!("{path}.kind"), SPAN_KINDS)?;
    if kind != 0 {
        out.insert("kind".into(), kind.into());
    }
    for key in ["startTimeUnixNano", "endTimeUnixNano"] {
        let t = u64_at(span, key, &format!("{path}.{key}"))?;
        if t != 0 {
            out.insert(key.into(), t.to_string().into());
        }
    }
    let mut status = Map::new();
    match span.get("status") {
        None | Some(Value::Null) => {
            status.insert("code".into(), 0.into());
        }
        Some(v) => {
            let spath = format!("{path}.status");
            let s = object(v, &spath)?;
            status.insert(
                "code".into(),
                enum_at(s, "code", &format!("{spath}.code"), STATUS_CODES)?.into(),
            );
            match s.get("message") {
                None | Some(Value::Null) => {}
                Some(Value::String(m)) if m.is_empty() => {}
                Some(Value::String(m)) => {
                    status.insert("message".into(), m.clone().into());
                }
                Some(other) => {
                    return Err(format!("{spath}.message: expected a string, found {}", kind_of(other)));
                }
            }
        }
    }
    out.insert("status".into(), status.into());
    let attrs = attributes(span, path)?;
    if !attrs.is_empty() {
        out.insert("attributes".into(), attrs.into());
    }
    if !resource.is_empty() {
        out.insert("resource".into(), resource.clone().into());
    }
    if let Some(scope) = scope {
        out.insert("scope".into(), scope.clone().into());
    }
    let mut events = Vec::new();
    let mut exception: Option<Map<String, Value>> = None;
    let events_in = match span.get("events") {
        None | Some(Value::Null) => &[][..],
        Some(Value::Array(a)) => a.as_slice(),
        Some(other) => {
            return Err(format!("{path}.events: expected an array, found {}", kind_of(other)));
        }
    };
    for (e, event) in events_in.iter().enumerate() {
        let epath = format!("{path}.events[{e}]");
        let ev = object(event, &epath)?;
        let mut flat = Map::new();
        let name = match ev.get("name") {
            None | Some(Value::Null) => "",
            Some(Value::String(s)) => s.as_str(),
            Some(other) => return Err(format!("{epath}.name: expected a string, found {}", kind_of(other))),
        };
        if !name.is_empty() {
            flat.insert("name".into(), name.into());
        }
        let t = u64_at(ev, "timeUnixNano", &format!("{epath}.timeUnixNano"))?;
        if t != 0 {
            flat.insert("timeUnixNano".into(), t.to_string().into());
        }
        let attrs = attributes(ev, &epath)?;
        if name == "exception" && exception.is_none() {
            let mut x = Map::new();
            for (from, to) in [
                ("exception.type", "type"),
                ("exception.message", "message"),
                ("exception.stacktrace", "stacktrace"),
            ] {
                if let Some(v) = attrs.get(from).filter(|v| !v.is_null()) {
                    x.insert(to.into(), v.clone());
                }
            }
            exception = Some(x);
        }
        if !attrs.is_empty() {
            flat.insert("attributes".into(), attrs.into());
        }
        events.push(Value::Object(flat));
    }
    if !events.is_empty() {
        out.insert("events".into(), events.into());
    }
    if let Some(x) = exception.filter(|x| !x.is_empty()) {
        out.insert("exception".into(), x.into());
    }
    Ok(Value::Object(out))
}

/// The scope (`name`, `version`) of a `ScopeSpans`, or `None` when it names nothing.
fn scope_of(ss: &Map<String, Value>, key: &str, path: &str) -> Result<Option<Map<String, Value>>, String> {
    let scope = match ss.get(key) {
        None | Some(Value::Null) => return Ok(None),
        Some(v) => object(v, &format!("{path}.{key}"))?,
    };
    let mut out = Map::new();
    for field in ["name", "version"] {
        match scope.get(field) {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) if s.is_empty() => {}
            Some(Value::String(s)) => {
                out.insert(field.into(), s.clone().into());
            }
            Some(other) => {
                return Err(format!(
                    "{path}.{key}.{field}: expected a string, found {}",
                    kind_of(other)
                ));
            }
        }
    }
    Ok((!out.is_empty()).then_some(out))
}

/// The `attributes` list of `owner` (`[{key, value}]`) as an object of converted values.
fn attributes(owner: &Map<String, Value>, path: &str) -> Result<Map<String, Value>, String> {
    let mut out = Map::new();
    let list = match owner.get("attributes") {
        None | Some(Value::Null) => return Ok(out),
        Some(Value::Array(a)) => a,
        Some(other) => {
            return Err(format!(
                "{path}.attributes: expected an array of {{key, value}}, found {}",
                kind_of(other)
            ));
        }
    };
    for (i, kv) in list.iter().enumerate() {
        let apath = format!("{path}.attributes[{i}]");
        let kv = object(kv, &apath)?;
        let key = match kv.get("key") {
            Some(Value::String(k)) => k,
            None | Some(Value::Null) => return Err(format!("{apath}.key: missing")),
            Some(other) => return Err(format!("{apath}.key: expected a string, found {}", kind_of(other))),
        };
        out.insert(key.clone(), kv.get("value").map_or(Value::Null, attribute_value));
    }
    Ok(out)
}

/// `SpanKind` names, by their numbers.
const SPAN_KINDS: &[&str] = &[
    "SPAN_KIND_UNSPECIFIED",
    "SPAN_KIND_INTERNAL",
    "SPAN_KIND_SERVER",
    "SPAN_KIND_CLIENT",
    "SPAN_KIND_PRODUCER",
    "SPAN_KIND_CONSUMER",
];

/// `Status.StatusCode` names, by their numbers.
const STATUS_CODES: &[&str] = &["STATUS_CODE_UNSET", "STATUS_CODE_OK", "STATUS_CODE_ERROR"];

/// An enum field: an integer, or one of `names` (its index); 0 when absent.
fn enum_at(m: &Map<String, Value>, key: &str, path: &str, names: &[&str]) -> Result<i64, String> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(0),
        Some(Value::Number(n)) => n
            .as_i64()
            .filter(|n| i32::try_from(*n).is_ok())
            .ok_or_else(|| format!("{path}: not a 32-bit integer: {n}")),
        Some(Value::String(s)) => names
            .iter()
            .position(|name| name == s)
            .map(|i| i as i64)
            .ok_or_else(|| {
                format!(
                    "{path}: unknown name {}; expected one of {}",
                    quote(s),
                    names.join(", ")
                )
            }),
        Some(other) => Err(format!(
            "{path}: expected an integer or a name, found {}",
            kind_of(other)
        )),
    }
}

/// A `fixed64` field: a decimal string or a JSON number; 0 when absent.
fn u64_at(m: &Map<String, Value>, key: &str, path: &str) -> Result<u64, String> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(0),
        Some(Value::Number(n)) => n
            .as_u64()
            .ok_or_else(|| format!("{path}: not an unsigned 64-bit integer: {n}")),
        Some(Value::String(s)) => s
            .trim()
            .parse::<u64>()
            .map_err(|_| format!("{path}: not an unsigned 64-bit integer: {}", quote(s))),
        Some(other) => Err(format!("{path}: expected a decimal string, found {}", kind_of(other))),
    }
}

/// Base64 as some exporters send ids: the standard or URL-safe alphabet, padded or not.
const B64_STANDARD: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);
const B64_URL_SAFE: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::URL_SAFE,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// An id of `len` bytes as lowercase hex, from hex (any case) or base64; `None` when absent or
/// empty (an all-zero id is as good as none in OTLP, and is refused).
fn id_at(m: &Map<String, Value>, key: &str, len: usize, path: &str) -> Result<Option<String>, String> {
    let s = match m.get(key) {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::String(s)) => s.trim(),
        Some(other) => {
            return Err(format!("{path}.{key}: expected a string, found {}", kind_of(other)));
        }
    };
    if s.is_empty() {
        return Ok(None);
    }
    let hex = if s.len() == 2 * len && s.bytes().all(|b| b.is_ascii_hexdigit()) {
        s.to_ascii_lowercase()
    } else {
        let bytes = B64_STANDARD
            .decode(s)
            .or_else(|_| B64_URL_SAFE.decode(s))
            .ok()
            .filter(|b| b.len() == len)
            .ok_or_else(|| format!("{path}.{key}: not hex or base64 of {len} bytes: {}", quote(s)))?;
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    };
    if hex.bytes().all(|b| b == b'0') {
        return Err(format!("{path}.{key}: all zeros, which OTLP calls an invalid id"));
    }
    Ok(Some(hex))
}

/// `v` as an object, or an error naming `path`.
fn object<'a>(v: &'a Value, path: &str) -> Result<&'a Map<String, Value>, String> {
    v.as_object()
        .ok_or_else(|| format!("{path}: expected an object, found {}", kind_of(v)))
}

/// The array under `key` (empty when absent or null), or an error naming `path`.
fn array_at<'a>(m: &'a Map<String, Value>, key: &str, path: &str) -> Result<&'a [Value], String> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(&[]),
        Some(Value::Array(a)) => Ok(a),
        Some(other) => Err(format!("{path}: expected an array, found {}", kind_of(other))),
    }
}

/// The JSON type of `v`, for errors.
fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// `s` quoted, cut to [`QUOTE_MAX`] characters.
fn quote(s: &str) -> String {
    if s.chars().count() <= QUOTE_MAX {
        format!("{s:?}")
    } else {
        let cut: String = s.chars().take(QUOTE_MAX).collect();
        format!("{cut:?}…")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The research notes' example request: two tries of one job, the first refused with a 429.
    const EXAMPLE: &str = r#"{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"bee-runner"}}]},
 "scopeSpans":[{"scope":{"name":"my.genai.instrumentation","version":"1.0.0"},"spans":[
  {"traceId":"5b8efff798038103d269b633813fc60c","spanId":"eee19b7ec3c1b174","parentSpanId":"eee19b7ec3c1b173",
   "name":"chat glm-4.6","kind":3,"startTimeUnixNano":"1760709602000000000","endTimeUnixNano":"1760709602800000000",
   "attributes":[{"key":"gen_ai.operation.name","value":{"stringValue":"chat"}},
     {"key":"gen_ai.provider.name","value":{"stringValue":"z_ai"}},
     {"key":"gen_ai.request.model","value":{"stringValue":"glm-4.6"}},
     {"key":"server.address","value":{"stringValue":"api.z.ai"}},
     {"key":"error.type","value":{"stringValue":"429"}}],
   "events":[{"name":"exception","timeUnixNano":"1760709602800000000","attributes":[
     {"key":"exception.message","value":{"stringValue":"{\"error\":{\"code\":\"1305\",\"message\":\"...\"}}"}}]}],
   "status":{"code":2,"message":"rate limited"}},
  {"traceId":"5b8efff798038103d269b633813fc60c","spanId":"eee19b7ec3c1b175","parentSpanId":"eee19b7ec3c1b173",
   "name":"chat glm-4.6","kind":3,"startTimeUnixNano":"1760709606000000000","endTimeUnixNano":"1760709613500000000",
   "attributes":[{"key":"gen_ai.operation.name","value":{"stringValue":"chat"}},
     {"key":"gen_ai.provider.name","value":{"stringValue":"z_ai"}},
     {"key":"gen_ai.request.model","value":{"stringValue":"glm-4.6"}},
     {"key":"gen_ai.response.id","value":{"stringValue":"chatcmpl-abc"}},
     {"key":"gen_ai.usage.input_tokens","value":{"intValue":"1500"}},
     {"key":"gen_ai.usage.output_tokens","value":{"intValue":"700"}}],
   "status":{"code":0}}]}]}]}"#;

    fn spans(text: &str) -> Vec<Value> {
        spans_from_json(&serde_json::from_str(text).unwrap()).unwrap()
    }

    fn error(v: Value) -> String {
        spans_from_json(&v).unwrap_err()
    }

    #[test]
    fn the_example_request_flattens_to_two_spans() {
        let s = spans(EXAMPLE);
        assert_eq!(
            s,
            vec![
                json!({
                    "traceId": "5b8efff798038103d269b633813fc60c",
                    "spanId": "eee19b7ec3c1b174",
                    "parentSpanId": "eee19b7ec3c1b173",
                    "name": "chat glm-4.6",
                    "kind": 3,
                    "startTimeUnixNano": "1760709602000000000",
                    "endTimeUnixNano": "1760709602800000000",
                    "status": {"code": 2, "message": "rate limited"},
                    "attributes": {
                        "gen_ai.operation.name": "chat",
                        "gen_ai.provider.name": "z_ai",
                        "gen_ai.request.model": "glm-4.6",
                        "server.address": "api.z.ai",
                        "error.type": "429"
                    },
                    "resource": {"service.name": "bee-runner"},
                    "scope": {"name": "my.genai.instrumentation", "version": "1.0.0"},
                    "events": [{
                        "name": "exception",
                        "timeUnixNano": "1760709602800000000",
                        "attributes": {"exception.message": "{\"error\":{\"code\":\"1305\",\"message\":\"...\"}}"}
                    }],
                    "exception": {"message": "{\"error\":{\"code\":\"1305\",\"message\":\"...\"}}"}
                }),
                json!({
                    "traceId": "5b8efff798038103d269b633813fc60c",
                    "spanId": "eee19b7ec3c1b175",
                    "parentSpanId": "eee19b7ec3c1b173",
                    "name": "chat glm-4.6",
                    "kind": 3,
                    "startTimeUnixNano": "1760709606000000000",
                    "endTimeUnixNano": "1760709613500000000",
                    "status": {"code": 0},
                    "attributes": {
                        "gen_ai.operation.name": "chat",
                        "gen_ai.provider.name": "z_ai",
                        "gen_ai.request.model": "glm-4.6",
                        "gen_ai.response.id": "chatcmpl-abc",
                        "gen_ai.usage.input_tokens": 1500,
                        "gen_ai.usage.output_tokens": 700
                    },
                    "resource": {"service.name": "bee-runner"},
                    "scope": {"name": "my.genai.instrumentation", "version": "1.0.0"}
                }),
            ]
        );
        // The key order is the contract's, as the raw text of each record shows it.
        assert_eq!(
            serde_json::to_string(&s[1]).unwrap(),
            concat!(
                r#"{"traceId":"5b8efff798038103d269b633813fc60c","spanId":"eee19b7ec3c1b175","#,
                r#""parentSpanId":"eee19b7ec3c1b173","name":"chat glm-4.6","kind":3,"#,
                r#""startTimeUnixNano":"1760709606000000000","endTimeUnixNano":"1760709613500000000","#,
                r#""status":{"code":0},"attributes":{"gen_ai.operation.name":"chat","gen_ai.provider.name":"z_ai","#,
                r#""gen_ai.request.model":"glm-4.6","gen_ai.response.id":"chatcmpl-abc","#,
                r#""gen_ai.usage.input_tokens":1500,"gen_ai.usage.output_tokens":700},"#,
                r#""resource":{"service.name":"bee-runner"},"#,
                r#""scope":{"name":"my.genai.instrumentation","version":"1.0.0"}}"#
            )
        );
    }

    #[test]
    fn old_attribute_names_base64_ids_proto_enum_names_and_legacy_keys() {
        // An older exporter: `instrumentationLibrarySpans`, base64 ids, enum names, numbers for
        // 64-bit integers, `gen_ai.system` and `prompt_tokens` / `completion_tokens`.
        let s = spans(
            r#"{"resourceSpans":[{"instrumentationLibrarySpans":[{
              "instrumentationLibrary":{"name":"opentelemetry.instrumentation.openai","version":"0.30.0"},
              "spans":[{"traceId":"W47/95gDgQPSabYzgT/GDA==","spanId":"7uGbfsPBsXQ=","parentSpanId":"7uGbfsPBsXM",
                "name":"openai.chat","kind":"SPAN_KIND_CLIENT",
                "startTimeUnixNano":1760709602000000000,"endTimeUnixNano":"1760709602800000000",
                "status":{"code":"STATUS_CODE_OK"},
                "attributes":[{"key":"gen_ai.system","value":{"stringValue":"openai"}},
                  {"key":"gen_ai.request.model","value":{"stringValue":"gpt-4o"}},
                  {"key":"gen_ai.usage.prompt_tokens","value":{"intValue":12}},
                  {"key":"gen_ai.usage.completion_tokens","value":{"intValue":"34"}}]}]}]}]}"#,
        );
        assert_eq!(
            s,
            vec![json!({
                "traceId": "5b8efff798038103d269b633813fc60c",
                "spanId": "eee19b7ec3c1b174",
                "parentSpanId": "eee19b7ec3c1b173",
                "name": "openai.chat",
                "kind": 3,
                "startTimeUnixNano": "1760709602000000000",
                "endTimeUnixNano": "1760709602800000000",
                "status": {"code": 1},
                "attributes": {
                    "gen_ai.system": "openai",
                    "gen_ai.request.model": "gpt-4o",
                    "gen_ai.usage.prompt_tokens": 12,
                    "gen_ai.usage.completion_tokens": 34
                },
                "scope": {"name": "opentelemetry.instrumentation.openai", "version": "0.30.0"}
            })]
        );
    }

    #[test]
    fn uppercase_hex_and_url_safe_base64_ids() {
        let s = spans(
            r#"{"resourceSpans":[{"scopeSpans":[{"spans":[
              {"traceId":"5B8EFFF798038103D269B633813FC60C","spanId":"__________8","status":{"code":"STATUS_CODE_ERROR"}}]}]}]}"#,
        );
        assert_eq!(
            s,
            vec![
                json!({"traceId": "5b8efff798038103d269b633813fc60c", "spanId": "ffffffffffffffff", "status": {"code": 2}})
            ]
        );
    }

    #[test]
    fn attribute_values_of_every_kind() {
        let cases = [
            (json!({"stringValue": "x"}), json!("x")),
            (json!({"intValue": "-9223372036854775808"}), json!(i64::MIN)),
            (json!({"intValue": 7}), json!(7)),
            (json!({"intValue": "seven"}), json!("seven")),
            (json!({"doubleValue": 0.25}), json!(0.25)),
            (json!({"doubleValue": 3}), json!(3.0)),
            (json!({"doubleValue": "1.5"}), json!(1.5)),
            (json!({"doubleValue": "NaN"}), json!("NaN")),
            (json!({"doubleValue": "-Infinity"}), json!("-Infinity")),
            (json!({"boolValue": true}), json!(true)),
            (json!({"bytesValue": "AAEC"}), json!("AAEC")),
            (
                json!({"arrayValue": {"values": [{"stringValue": "stop"}, {"intValue": "2"}, {}]}}),
                json!(["stop", 2, null]),
            ),
            (json!({"arrayValue": {}}), json!([])),
            (
                json!({"kvlistValue": {"values": [{"key": "a", "value": {"boolValue": false}},
                    {"key": "b", "value": {"kvlistValue": {"values": [{"key": "c", "value": {"doubleValue": 2}}]}}},
                    {"key": "d"}]}}),
                json!({"a": false, "b": {"c": 2.0}, "d": null}),
            ),
            (json!({}), Value::Null),
            (Value::Null, Value::Null),
            (json!("bare"), Value::Null),
        ];
        for (input, want) in cases {
            assert_eq!(attribute_value(&input), want, "{input}");
        }
    }

    #[test]
    fn empty_parts_are_left_out() {
        // An empty request, an empty resource and scope, empty ids, zero kind and times.
        assert_eq!(spans_from_json(&json!({})).unwrap(), Vec::<Value>::new());
        assert_eq!(
            spans_from_json(&json!({"resourceSpans": []})).unwrap(),
            Vec::<Value>::new()
        );
        let s = spans_from_json(
            &json!({"resourceSpans": [{"resource": {}, "scopeSpans": [{"scope": {"name": ""},
            "spans": [{"traceId": "5b8efff798038103d269b633813fc60c", "spanId": "eee19b7ec3c1b174",
            "parentSpanId": "", "name": "", "kind": 0, "startTimeUnixNano": "0", "status": {"message": ""},
            "attributes": [], "events": [{"name": "exception", "attributes": []}], "links": [{"x": 1}],
            "unknownField": 1}]}]}]}),
        )
        .unwrap();
        assert_eq!(
            s,
            vec![
                json!({"traceId": "5b8efff798038103d269b633813fc60c", "spanId": "eee19b7ec3c1b174",
                "status": {"code": 0}, "events": [{"name": "exception"}]})
            ]
        );
    }

    #[test]
    fn the_first_exception_event_gives_the_exception() {
        let s = spans_from_json(&json!({"resourceSpans": [{"scopeSpans": [{"spans": [{
        "traceId": "5b8efff798038103d269b633813fc60c", "spanId": "eee19b7ec3c1b174",
        "events": [
            {"name": "gen_ai.content.prompt"},
            {"name": "exception", "attributes": [
                {"key": "exception.type", "value": {"stringValue": "openai.RateLimitError"}},
                {"key": "exception.message", "value": {"stringValue": "Error code: 429"}},
                {"key": "exception.stacktrace", "value": {"stringValue": "Traceback ..."}},
                {"key": "exception.escaped", "value": {"boolValue": false}}]},
            {"name": "exception", "attributes": [{"key": "exception.type", "value": {"stringValue": "Later"}}]}
        ]}]}]}]}))
        .unwrap();
        assert_eq!(
            s[0]["exception"],
            json!({"type": "openai.RateLimitError", "message": "Error code: 429", "stacktrace": "Traceback ..."})
        );
        assert_eq!(s[0]["events"].as_array().unwrap().len(), 3);
    }

    #[test]
    fn spans_keep_input_order_across_resources_and_scopes() {
        let span = |id: &str| json!({"traceId": "0af7651916cd43dd8448eb211c80319c", "spanId": id});
        let s = spans_from_json(&json!({"resourceSpans": [
            {"resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "a"}}]},
             "scopeSpans": [{"spans": [span("0000000000000001"), span("0000000000000002")]},
                            {"spans": [span("0000000000000003")]}]},
            {"scopeSpans": [{"spans": [span("0000000000000004")]}]}]}))
        .unwrap();
        let ids: Vec<&str> = s.iter().map(|s| s["spanId"].as_str().unwrap()).collect();
        assert_eq!(
            ids,
            [
                "0000000000000001",
                "0000000000000002",
                "0000000000000003",
                "0000000000000004"
            ]
        );
        assert_eq!(s[2]["resource"], json!({"service.name": "a"}));
        assert_eq!(s[3].get("resource"), None);
    }

    #[test]
    fn errors_name_the_bad_path() {
        let one = |span: Value| {
            json!({"resourceSpans": [{"scopeSpans": [{"spans": []}, {"spans": [
                {"traceId": "5b8efff798038103d269b633813fc60c", "spanId": "eee19b7ec3c1b174"}, span]}]}]})
        };
        let ok = |extra: Value| {
            let mut span = json!({"traceId": "5b8efff798038103d269b633813fc60c", "spanId": "eee19b7ec3c1b174"});
            for (k, v) in extra.as_object().unwrap() {
                span[k] = v.clone();
            }
            one(span)
        };
        let p = "resourceSpans[0].scopeSpans[1].spans[1]";
        assert_eq!(
            error(one(json!({"traceId": "xyz", "spanId": "eee19b7ec3c1b174"}))),
            format!("{p}.traceId: not hex or base64 of 16 bytes: \"xyz\"")
        );
        assert_eq!(
            error(one(
                json!({"traceId": "5b8efff798038103", "spanId": "eee19b7ec3c1b174"})
            )),
            format!("{p}.traceId: not hex or base64 of 16 bytes: \"5b8efff798038103\"")
        );
        assert_eq!(
            error(one(json!({"spanId": "eee19b7ec3c1b174"}))),
            format!("{p}.traceId: missing")
        );
        assert_eq!(
            error(one(
                json!({"traceId": "5b8efff798038103d269b633813fc60c", "spanId": ""})
            )),
            format!("{p}.spanId: missing")
        );
        assert_eq!(
            error(one(
                json!({"traceId": "00000000000000000000000000000000", "spanId": "eee19b7ec3c1b174"})
            )),
            format!("{p}.traceId: all zeros, which OTLP calls an invalid id")
        );
        assert_eq!(
            error(ok(json!({"parentSpanId": 12}))),
            format!("{p}.parentSpanId: expected a string, found a number")
        );
        assert_eq!(
            error(ok(json!({"kind": "CLIENT"}))),
            format!(
                "{p}.kind: unknown name \"CLIENT\"; expected one of SPAN_KIND_UNSPECIFIED, SPAN_KIND_INTERNAL, \
                 SPAN_KIND_SERVER, SPAN_KIND_CLIENT, SPAN_KIND_PRODUCER, SPAN_KIND_CONSUMER"
            )
        );
        assert_eq!(
            error(ok(json!({"startTimeUnixNano": "-1"}))),
            format!("{p}.startTimeUnixNano: not an unsigned 64-bit integer: \"-1\"")
        );
        assert_eq!(
            error(ok(json!({"endTimeUnixNano": 1.5}))),
            format!("{p}.endTimeUnixNano: not an unsigned 64-bit integer: 1.5")
        );
        assert_eq!(
            error(ok(json!({"status": {"code": "ERROR"}}))),
            format!(
                "{p}.status.code: unknown name \"ERROR\"; expected one of STATUS_CODE_UNSET, STATUS_CODE_OK, \
                 STATUS_CODE_ERROR"
            )
        );
        assert_eq!(
            error(ok(json!({"status": 2}))),
            format!("{p}.status: expected an object, found a number")
        );
        assert_eq!(
            error(ok(json!({"attributes": {"gen_ai.system": "openai"}}))),
            format!("{p}.attributes: expected an array of {{key, value}}, found an object")
        );
        assert_eq!(
            error(ok(
                json!({"attributes": [{"key": "a", "value": {}}, {"value": {"stringValue": "x"}}]})
            )),
            format!("{p}.attributes[1].key: missing")
        );
        assert_eq!(
            error(ok(json!({"events": [{"name": "exception", "timeUnixNano": "soon"}]}))),
            format!("{p}.events[0].timeUnixNano: not an unsigned 64-bit integer: \"soon\"")
        );
        assert_eq!(
            error(ok(json!({"name": 3}))),
            format!("{p}.name: expected a string, found a number")
        );
        assert_eq!(
            error(json!({"resourceSpans": {}})),
            "resourceSpans: expected an array, found an object"
        );
        assert_eq!(
            error(json!({"resourceSpans": [{"resource": {"attributes": [1]}}]})),
            "resourceSpans[0].resource.attributes[0]: expected an object, found a number"
        );
        assert_eq!(
            error(json!({"resourceSpans": [{"instrumentationLibrarySpans": [{"spans": [7]}]}]})),
            "resourceSpans[0].instrumentationLibrarySpans[0].spans[0]: expected an object, found a number"
        );
        assert_eq!(
            error(json!([1])),
            "the request is not a JSON object (an ExportTraceServiceRequest), found an array"
        );
        let long = "z".repeat(100);
        assert_eq!(
            error(one(
                json!({"traceId": "5b8efff798038103d269b633813fc60c", "spanId": long})
            )),
            format!("{p}.spanId: not hex or base64 of 8 bytes: \"{}\"…", "z".repeat(60))
        );
    }
}
