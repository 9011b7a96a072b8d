//! `GET /weeks/{week}/whatif` and `GET /v1/whatif`: one week decided again under settings given
//! as query parameters (`max_attempts`, `pin_on`, `paid_max_attempts`, `max_queue_age_s`,
//! `reserved_service_s`, `seed`), each left out meaning the server's lane.yaml value
//! ([`laneledger_query::Session::whatif`]).

use askama::Template;
use axum::Json;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use laneledger_query::review::whatif::{SettingChange, WhatIf, WhatIfRow, gate_rows};
use laneledger_store::LaneConfig;
use laneledger_store::drill::whatif::DecisionChange;
use laneledger_store::model::record::Outcome;

use crate::api_error::ApiError;
use crate::error::AppError;
use crate::pages::html::HtmlTemplate;
use crate::server::state::AppState;

/// The most attempts a budget may be set to on this page: the default turn bound is 8.
const MAX_BUDGET: u32 = 20;
/// The longest cap in seconds the page takes: a day.
const MAX_SECONDS: f64 = 86_400.0;

/// The query parameters the page and the API read, in the form's order.
const PARAMS: [&str; 6] = [
    "max_attempts",
    "pin_on",
    "paid_max_attempts",
    "max_queue_age_s",
    "reserved_service_s",
    "seed",
];

/// The settings asked for: the server's lane.yaml with the given parameters in place, the seed,
/// and the form's values as given.
#[derive(Debug)]
struct Asked {
    config: LaneConfig,
    seed: u64,
    /// The form's fields: (name, value shown).
    fields: Vec<(&'static str, String)>,
}

fn budget(name: &str, v: &str) -> Result<u32, String> {
    v.trim()
        .parse::<u32>()
        .ok()
        .filter(|n| *n <= MAX_BUDGET)
        .ok_or_else(|| format!("{name} must be a whole number of attempts from 0 to {MAX_BUDGET}, not {v:?}"))
}

fn seconds(name: &str, v: &str) -> Result<f64, String> {
    v.trim()
        .parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && (0.0..=MAX_SECONDS).contains(s))
        .ok_or_else(|| format!("{name} must be a number of seconds from 0 to 86400, not {v:?}"))
}

fn pin_list(v: &str) -> Result<Vec<Outcome>, String> {
    let mut out = Vec::new();
    for word in v.split([',', ' ']).map(str::trim).filter(|w| !w.is_empty()) {
        let o = Outcome::parse(word).ok_or_else(|| {
            format!("pin_on takes outcomes from ok, retryable, ambiguous, permanent (comma-separated), not {word:?}")
        })?;
        if !out.contains(&o) {
            out.push(o);
        }
    }
    Ok(out)
}

/// Reads the parameters over `base`. Errors: an unknown or repeated parameter, or a value out of
/// bounds, in words for the reader.
fn asked(base: &LaneConfig, params: &[(String, String)]) -> Result<Asked, String> {
    let mut config = base.clone();
    let mut seed = 0u64;
    let mut seen: Vec<&str> = Vec::new();
    for (k, v) in params {
        let Some(name) = PARAMS.iter().find(|p| **p == k.as_str()) else {
            let k: String = k.chars().take(40).collect();
            return Err(format!("unknown parameter {k:?}: the page reads {}", PARAMS.join(", ")));
        };
        if seen.contains(name) {
            return Err(format!("{name} is given twice"));
        }
        seen.push(name);
        match *name {
            "max_attempts" => config.lanes.free.max_attempts = budget(name, v)?,
            "pin_on" => config.lanes.free.pin_on = pin_list(v)?,
            "paid_max_attempts" => config.lanes.paid.max_attempts = budget(name, v)?,
            "max_queue_age_s" => config.gate.max_queue_age_s = seconds(name, v)?,
            "reserved_service_s" => config.gate.reserved_service_s = seconds(name, v)?,
            _ => {
                seed = v
                    .trim()
                    .parse()
                    .map_err(|_| format!("seed must be a whole number from 0 to {}, not {v:?}", u64::MAX))?
            }
        }
    }
    Ok(Asked {
        fields: form_fields(&config, seed),
        config,
        seed,
    })
}

fn form_fields(c: &LaneConfig, seed: u64) -> Vec<(&'static str, String)> {
    vec![
        ("max_attempts", c.lanes.free.max_attempts.to_string()),
        (
            "pin_on",
            c.lanes
                .free
                .pin_on
                .iter()
                .map(|o| o.as_str())
                .collect::<Vec<_>>()
                .join(","),
        ),
        ("paid_max_attempts", c.lanes.paid.max_attempts.to_string()),
        ("max_queue_age_s", c.gate.max_queue_age_s.to_string()),
        ("reserved_service_s", c.gate.reserved_service_s.to_string()),
        ("seed", seed.to_string()),
    ]
}

/// One field of the form.
struct Field {
    name: &'static str,
    label: &'static str,
    value: String,
    hint: &'static str,
}

fn fields(values: Vec<(&'static str, String)>) -> Vec<Field> {
    values
        .into_iter()
        .map(|(name, value)| {
            let (label, hint) = match name {
                "max_attempts" => ("free attempts before paid", "lanes.free.max_attempts"),
                "pin_on" => ("outcomes that pin to paid", "lanes.free.pin_on: ambiguous,permanent"),
                "paid_max_attempts" => ("paid attempts", "lanes.paid.max_attempts"),
                "max_queue_age_s" => ("queue-age cap, s", "gate.max_queue_age_s"),
                "reserved_service_s" => ("reserved turn, s", "gate.reserved_service_s"),
                _ => ("replay seed", "same seed, same figures"),
            };
            Field {
                name,
                label,
                value,
                hint,
            }
        })
        .collect()
}

/// One row of the outcome rates table.
struct RateRow {
    name: &'static str,
    attempts: String,
    rates: [String; 4],
}

/// The page.
#[derive(Template)]
#[template(path = "whatif.html")]
struct WhatIfPage {
    nav: &'static str,
    title: String,
    week: String,
    fields: Vec<Field>,
    /// A parameter that could not be used, in words.
    error: Option<String>,
    changes: Vec<SettingChange>,
    /// The figures, when the parameters were usable.
    result: Option<Figures>,
    /// This page's answer as JSON.
    json_link: String,
}

/// The figures of a what-if, formatted.
struct Figures {
    seed: u64,
    jobs: Option<String>,
    rates: Vec<RateRow>,
    assumptions: Vec<String>,
    lane_rows: Vec<WhatIfRow>,
    decisions: Option<String>,
    gate_rows: Vec<WhatIfRow>,
    gate_changes: Vec<DecisionChange>,
    logged_mismatches: u64,
    own_cap: u64,
}

fn figures(w: &WhatIf) -> Figures {
    let lane = w.lane.as_ref();
    let gate = w.gate.as_ref();
    Figures {
        seed: w.seed,
        jobs: lane.map(|l| laneledger_query::format_count(l.logged.jobs)),
        rates: lane.map_or_else(Vec::new, |l| {
            l.rate_rows()
                .into_iter()
                .map(|(name, attempts, rates)| RateRow { name, attempts, rates })
                .collect()
        }),
        assumptions: lane.map_or_else(Vec::new, |l| l.model.assumptions.clone()),
        lane_rows: lane.map_or_else(Vec::new, |l| l.rows()),
        decisions: gate.map(|g| g.logged.decisions.to_string()),
        gate_rows: gate.map_or_else(Vec::new, gate_rows),
        gate_changes: gate.map_or_else(Vec::new, |g| g.changes.clone()),
        logged_mismatches: gate.map_or(0, |g| g.logged_mismatches),
        own_cap: gate.map_or(0, |g| g.own_cap),
    }
}

fn query_string(params: &[(String, String)]) -> String {
    let mut s = String::new();
    for (k, v) in params {
        s += &format!("&{}={}", urlencoding_strict(k), urlencoding_strict(v));
    }
    s
}

/// Percent-encodes everything but unreserved characters (RFC 3986).
fn urlencoding_strict(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out += &format!("%{b:02X}");
        }
    }
    out
}

/// `GET /weeks/{week}/whatif?…`: the form and both tables; 400 (with the form) for a parameter
/// out of bounds, 400 for a bad week label, 404 for a week without jobs or decisions.
pub(crate) async fn page(
    State(state): State<AppState>,
    week: Result<Path<String>, PathRejection>,
    Query(params): Query<Vec<(String, String)>>,
) -> Result<Response, AppError> {
    let Path(week) = week?;
    laneledger_query::review::metrics::parse_iso_week(&week)?;
    let base = state.session.config().clone();
    let json_link = format!("/v1/whatif?week={}{}", urlencoding_strict(&week), query_string(&params));
    let mut page = WhatIfPage {
        nav: "weeks",
        title: format!("What if: {week}"),
        week: week.clone(),
        fields: fields(form_fields(&base, 0)),
        error: None,
        changes: Vec::new(),
        result: None,
        json_link,
    };
    let asked = match asked(&base, &params) {
        Ok(a) => a,
        Err(message) => {
            page.error = Some(message);
            return Ok((StatusCode::BAD_REQUEST, HtmlTemplate(page)).into_response());
        }
    };
    page.fields = fields(asked.fields);
    match state.session.whatif(&week, &asked.config, asked.seed).await {
        Ok(w) => {
            page.changes = w.changes.clone();
            page.result = Some(figures(&w));
            Ok(HtmlTemplate(page).into_response())
        }
        Err(laneledger_query::Error::Plan(message)) => {
            page.error = Some(message);
            Ok((StatusCode::BAD_REQUEST, HtmlTemplate(page)).into_response())
        }
        Err(e) => Err(e.into()),
    }
}

/// `GET /v1/whatif?week=2026-W48&…`: the what-if as JSON (`laneledger whatif --format json`'s
/// document); `{"error": …}` with 400 for a missing or bad week or parameter, 404 for a week
/// without jobs or decisions.
pub async fn api(
    State(state): State<AppState>,
    Query(params): Query<Vec<(String, String)>>,
) -> Result<Response, ApiError> {
    let mut week = None;
    let mut rest = Vec::new();
    for (k, v) in params {
        if k == "week" {
            if week.replace(v).is_some() {
                return Err(ApiError::bad_request("week is given twice"));
            }
        } else {
            rest.push((k, v));
        }
    }
    let week = week.ok_or_else(|| ApiError::bad_request("week is required, e.g. ?week=2026-W48"))?;
    let asked = asked(state.session.config(), &rest).map_err(ApiError::bad_request)?;
    let w = state.session.whatif(&week, &asked.config, asked.seed).await?;
    Ok(Json(w).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn parameters_override_the_servers_settings_within_bounds() {
        let base = LaneConfig::default();
        let a = asked(&base, &p(&[("pin_on", ""), ("max_attempts", "1"), ("seed", "9")])).unwrap();
        assert!(a.config.lanes.free.pin_on.is_empty());
        assert_eq!(a.config.lanes.free.max_attempts, 1);
        assert_eq!(a.seed, 9);
        assert_eq!(a.config.gate, base.gate);
        for (params, message) in [
            (
                p(&[("max_attempts", "21")]),
                "max_attempts must be a whole number of attempts from 0 to 20, not \"21\"",
            ),
            (
                p(&[("max_queue_age_s", "NaN")]),
                "max_queue_age_s must be a number of seconds from 0 to 86400, not \"NaN\"",
            ),
            (
                p(&[("pin_on", "ambiguous,maybe")]),
                "pin_on takes outcomes from ok, retryable, ambiguous, permanent (comma-separated), not \"maybe\"",
            ),
            (p(&[("seed", "1"), ("seed", "2")]), "seed is given twice"),
        ] {
            assert_eq!(asked(&base, &params).err().as_deref(), Some(message));
        }
        assert!(
            asked(&base, &p(&[("max_atempts", "1")]))
                .unwrap_err()
                .starts_with("unknown parameter \"max_atempts\"")
        );
    }
}
