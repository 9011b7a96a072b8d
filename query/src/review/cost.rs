//! Cost and latency of one ISO week (issue 31): the drill table's spend figures ([`WeekSpend`]) and
//! two sections, spend and latency by lane and model.
//!
//! An attempt's cost is its router's figure (`attrs.response_cost`), else its tokens at the price
//! `lane.yaml` gives its model or lane ([`laneledger_store::config::prices`]); an attempt with neither is
//! counted as unpriced, never guessed. Latency is `ended_at − started_at`; the time to first token
//! is `attrs.first_token_at − started_at`, where a mapping kept it. Percentiles interpolate
//! linearly between the two nearest ranks (p95 of 1, 2, 3, 4 s is 3.85 s).
//! Attempts that ended before they started are left out of the percentiles and counted.

use std::collections::{BTreeMap, HashMap};

use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Int64Type, TimestampMicrosecondType};
use laneledger_store::config::prices::{AttemptCost, PricesConfig};
use serde::Serialize;

use crate::error::{Error, Result};
use crate::review::metrics::parse_iso_week;
use crate::review::sections::{Group, Section};
use crate::session::Session;
use crate::words::{format_count, format_ratio};

/// One week's spend: the drill table's cost rows.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WeekSpend {
    /// `prices.currency` of `lane.yaml` (`USD`), when set; the figures are plain numbers without it.
    pub currency: Option<String>,
    /// Σ cost of the week's priced attempts; `None` when no attempt of the week is priced.
    pub spend: Option<f64>,
    /// spend ÷ unique accepted artifacts; `None` without spend or artifacts.
    pub spend_per_accepted_artifact: Option<f64>,
    /// Σ cost of the attempts that returned a duplicate artifact (every artifact of an idem_key
    /// but the first to land); `None` without spend.
    pub duplicate_artifact_spend: Option<f64>,
    /// The week's attempts.
    pub attempts: i64,
    /// Attempts whose cost the router reported (`attrs.response_cost`).
    pub router_priced_attempts: i64,
    /// Attempts priced by `lane.yaml` `prices` (their model's price, else their lane's).
    pub table_priced_attempts: i64,
    /// Attempts with neither: left out of the spend, never guessed.
    pub unpriced_attempts: i64,
}

impl WeekSpend {
    /// A spend figure for people: 4 decimals (costs of single calls are fractions of a cent),
    /// thousands grouped, the currency after it when set; `—` when there is none.
    pub fn money(&self, v: Option<f64>) -> String {
        match (v, &self.currency) {
            (None, _) => "—".to_string(),
            (Some(v), Some(c)) => format!("{} {c}", format_ratio(Some(v), 4)),
            (Some(v), None) => format_ratio(Some(v), 4),
        }
    }

    /// The counts behind the spend, in words: `412 attempts: 12 priced by the router, 380 by
    /// lane.yaml, 20 unpriced`.
    pub fn basis(&self) -> String {
        format!(
            "{} attempts: {} priced by their router, {} by lane.yaml prices, {} unpriced",
            format_count(self.attempts),
            format_count(self.router_priced_attempts),
            format_count(self.table_priced_attempts),
            format_count(self.unpriced_attempts)
        )
    }
}

/// The drill table's spend rows as text: (name, this week, the week before); `—` where a week
/// has no spend.
pub fn spend_rows(w: &crate::WeekMetrics, p: Option<&crate::WeekMetrics>) -> Vec<(&'static str, String, String)> {
    let cell = |m: Option<&crate::WeekMetrics>, f: fn(&WeekSpend) -> Option<f64>| {
        m.and_then(|m| m.spend.as_ref())
            .map_or("—".to_string(), |s| s.money(f(s)))
    };
    let row = |name, f: fn(&WeekSpend) -> Option<f64>| (name, cell(Some(w), f), cell(p, f));
    vec![
        row("spend", |s| s.spend),
        row("spend per accepted artifact", |s| s.spend_per_accepted_artifact),
        row("spend of duplicate artifacts", |s| s.duplicate_artifact_spend),
    ]
}

/// A week's cost and latency: the spend figures and the two sections.
#[derive(Debug, Clone, PartialEq)]
pub struct WeekCost {
    /// The drill table's spend rows.
    pub spend: WeekSpend,
    /// "Spend by lane and model".
    pub spend_section: Section,
    /// "Latency by lane and model".
    pub latency_section: Section,
}

/// The SQL of the attempts a week's cost and latency are computed from: every attempt of the
/// jobs whose first attempt started in the week (as the drill table counts them).
pub fn week_attempts_sql(week: &str) -> String {
    format!(
        "SELECT a.lane, a.model, a.started_at, a.ended_at, a.tokens_in, a.tokens_out, a.idem_key, a.artifact_id, a.attrs \
         FROM job_attempt a JOIN job_week w ON a.job_id = w.job_id WHERE w.iso_week = '{week}'"
    )
}

/// The `q`-th percentile (0 ≤ q ≤ 1) of `sorted` (ascending), interpolated linearly between the
/// two nearest ranks; `None` when empty.
pub fn percentile(sorted: &[f64], q: f64) -> Option<f64> {
    let last = sorted.len().checked_sub(1)?;
    let rank = q * last as f64;
    let (lo, hi) = (rank.floor() as usize, rank.ceil() as usize);
    Some(sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - lo as f64))
}

/// One attempt, as read for cost and latency.
struct Row {
    lane: String,
    model: Option<String>,
    started_at: i64,
    ended_at: Option<i64>,
    cost: AttemptCost,
    tokens_in: i64,
    tokens_out: i64,
    idem_key: String,
    artifact_id: Option<String>,
    first_token_at: Option<i64>,
}

fn strings(b: &RecordBatch, name: &str) -> Result<Vec<Option<String>>> {
    let col = b
        .column_by_name(name)
        .ok_or_else(|| Error::Internal(format!("cost rows without {name}")))?;
    let col = datafusion::arrow::compute::cast(col, &DataType::Utf8)?;
    let s = col.as_string::<i32>();
    Ok((0..s.len())
        .map(|i| s.is_valid(i).then(|| s.value(i).to_string()))
        .collect())
}

fn ints(b: &RecordBatch, name: &str) -> Result<Vec<Option<i64>>> {
    let col = b
        .column_by_name(name)
        .ok_or_else(|| Error::Internal(format!("cost rows without {name}")))?;
    if let Some(t) = col.as_primitive_opt::<TimestampMicrosecondType>() {
        return Ok((0..t.len()).map(|i| t.is_valid(i).then(|| t.value(i))).collect());
    }
    let col = datafusion::arrow::compute::cast(col, &DataType::Int64)?;
    let n = col.as_primitive::<Int64Type>();
    Ok((0..n.len()).map(|i| n.is_valid(i).then(|| n.value(i))).collect())
}

fn read_rows(batches: &[RecordBatch], prices: &PricesConfig) -> Result<Vec<Row>> {
    let mut out = Vec::new();
    for b in batches {
        let lane = strings(b, "lane")?;
        let model = strings(b, "model")?;
        let started = ints(b, "started_at")?;
        let ended = ints(b, "ended_at")?;
        let tin = ints(b, "tokens_in")?;
        let tout = ints(b, "tokens_out")?;
        let idem = strings(b, "idem_key")?;
        let artifact = strings(b, "artifact_id")?;
        let attrs = strings(b, "attrs")?;
        for i in 0..b.num_rows() {
            let lane = lane[i].clone().unwrap_or_default();
            let (tokens_in, tokens_out) = (tin[i].unwrap_or(0), tout[i].unwrap_or(0));
            let attrs = attrs[i].as_deref();
            out.push(Row {
                cost: prices.cost_of(&lane, model[i].as_deref(), tokens_in, tokens_out, attrs),
                first_token_at: attrs.and_then(laneledger_store::config::prices::first_token_at),
                lane,
                model: model[i].clone(),
                started_at: started[i].unwrap_or(0),
                ended_at: ended[i],
                tokens_in,
                tokens_out,
                idem_key: idem[i].clone().unwrap_or_default(),
                artifact_id: artifact[i].clone(),
            });
        }
    }
    Ok(out)
}

/// Σ cost of the attempts that returned a duplicate artifact: per idem_key, its artifacts by the
/// time they first landed (`ended_at`, open ones last, then the id), all but the first.
fn duplicate_spend(rows: &[Row]) -> f64 {
    // idem_key → artifact → first landing (open last).
    let mut landed: HashMap<&str, HashMap<&str, (bool, i64)>> = HashMap::new();
    for r in rows {
        if let Some(a) = r.artifact_id.as_deref() {
            let at = (r.ended_at.is_none(), r.ended_at.unwrap_or(i64::MAX));
            let e = landed.entry(&r.idem_key).or_default().entry(a).or_insert(at);
            *e = (*e).min(at);
        }
    }
    let first: HashMap<&str, &str> = landed
        .iter()
        .filter_map(|(k, arts)| arts.iter().min_by_key(|(a, at)| (**at, **a)).map(|(a, _)| (*k, *a)))
        .collect();
    rows.iter()
        .filter(|r| {
            r.artifact_id
                .as_deref()
                .is_some_and(|a| first.get(r.idem_key.as_str()) != Some(&a))
        })
        .filter_map(|r| r.cost.value())
        // An empty f64 sum is −0.0, which would print as "-0.0000".
        .fold(0.0, |a, b| a + b)
}

/// Seconds with 3 decimals.
fn secs(v: Option<f64>) -> Option<String> {
    v.map(|v| format!("{v:.3}"))
}

/// The figures of one (lane, model) group.
#[derive(Default)]
struct LaneModel {
    attempts: i64,
    tokens_in: i64,
    tokens_out: i64,
    router: i64,
    table: i64,
    unpriced: i64,
    spend: f64,
    latencies: Vec<f64>,
    open: i64,
    left_out: i64,
    ttfts: Vec<f64>,
}

/// The week's cost and latency from its attempts.
fn week_cost(week: &str, rows: &[Row], prices: &PricesConfig, accepted_artifacts: i64) -> WeekCost {
    let mut groups: BTreeMap<(String, Option<String>), LaneModel> = BTreeMap::new();
    for r in rows {
        let g = groups.entry((r.lane.clone(), r.model.clone())).or_default();
        g.attempts += 1;
        g.tokens_in += r.tokens_in;
        g.tokens_out += r.tokens_out;
        match r.cost {
            AttemptCost::Router(v) => {
                g.router += 1;
                g.spend += v;
            }
            AttemptCost::Table(v) => {
                g.table += 1;
                g.spend += v;
            }
            AttemptCost::Unpriced => g.unpriced += 1,
        }
        match r.ended_at {
            None => g.open += 1,
            Some(e) if e < r.started_at => g.left_out += 1,
            Some(e) => g.latencies.push((e - r.started_at) as f64 / 1e6),
        }
        if let Some(t) = r.first_token_at {
            if t < r.started_at {
                g.left_out += 1;
            } else {
                g.ttfts.push((t - r.started_at) as f64 / 1e6);
            }
        }
    }
    let total = |f: fn(&LaneModel) -> i64| groups.values().map(f).sum::<i64>();
    let priced = total(|g| g.router + g.table);
    let spend_sum: f64 = groups.values().map(|g| g.spend).fold(0.0, |a, b| a + b);
    let spend_value = (priced > 0).then_some(spend_sum);
    let spend = WeekSpend {
        currency: prices.currency.clone(),
        spend: spend_value,
        spend_per_accepted_artifact: spend_value
            .filter(|_| accepted_artifacts > 0)
            .map(|s| s / accepted_artifacts as f64),
        duplicate_artifact_spend: spend_value.map(|_| duplicate_spend(rows)),
        attempts: rows.len() as i64,
        router_priced_attempts: total(|g| g.router),
        table_priced_attempts: total(|g| g.table),
        unpriced_attempts: total(|g| g.unpriced),
    };
    let n = |v: i64| Some(format_count(v));
    let money = |g: &LaneModel| {
        if g.router + g.table == 0 {
            Some("unpriced".to_string())
        } else {
            Some(spend.money(Some(g.spend)))
        }
    };
    let spend_rows: Vec<Vec<Option<String>>> = groups
        .iter()
        .map(|((lane, model), g)| {
            vec![
                Some(lane.clone()),
                model.clone(),
                n(g.attempts),
                n(g.tokens_in),
                n(g.tokens_out),
                n(g.router),
                n(g.table),
                n(g.unpriced),
                money(g),
            ]
        })
        .collect();
    let latency_rows: Vec<Vec<Option<String>>> = groups
        .iter_mut()
        .map(|((lane, model), g)| {
            g.latencies.sort_by(f64::total_cmp);
            g.ttfts.sort_by(f64::total_cmp);
            let ttft = |q: f64| match percentile(&g.ttfts, q) {
                None => Some("not sent".to_string()),
                v => secs(v),
            };
            vec![
                Some(lane.clone()),
                model.clone(),
                n(g.attempts),
                n(g.latencies.len() as i64),
                n(g.open),
                n(g.left_out),
                secs(percentile(&g.latencies, 0.50)),
                secs(percentile(&g.latencies, 0.95)),
                secs(percentile(&g.latencies, 0.99)),
                n(g.ttfts.len() as i64),
                ttft(0.50),
                ttft(0.95),
            ]
        })
        .collect();
    let sql = week_attempts_sql(week);
    let section = |id, title, description, columns: &[&str], rows: Vec<Vec<Option<String>>>| Section {
        id,
        group: Group::Cost,
        title,
        description,
        sql: sql.clone(),
        columns: columns.iter().map(|c| c.to_string()).collect(),
        total_rows: rows.len(),
        rows,
        summary: None,
    };
    WeekCost {
        spend_section: section(
            "spend_by_lane_model",
            "Spend by lane and model",
            "The week's attempts by lane and model: tokens, how each attempt was priced (the cost its router reported in attrs.response_cost wins; else lane.yaml's prices per million tokens, a model's before its lane's) and the spend. An attempt with neither is unpriced: counted here, left out of the spend, never guessed.",
            &[
                "lane",
                "model",
                "attempts",
                "tokens_in",
                "tokens_out",
                "priced_by_router",
                "priced_by_lane_yaml",
                "unpriced",
                "spend",
            ],
            spend_rows,
        ),
        latency_section: section(
            "latency_by_lane_model",
            "Latency by lane and model",
            "Seconds from started_at to ended_at of the week's attempts, p50, p95 and p99 (interpolated linearly between the nearest ranks), and the time to first token where the router sends it (attrs.first_token_at less started_at). Open attempts have no latency; attempts that ended, or got their first token, before they started are left out of the percentiles and counted in left_out.",
            &[
                "lane",
                "model",
                "attempts",
                "timed",
                "open",
                "left_out",
                "p50_s",
                "p95_s",
                "p99_s",
                "first_token_sent",
                "ttft_p50_s",
                "ttft_p95_s",
            ],
            latency_rows,
        ),
        spend,
    }
}

impl Session {
    /// The cost and latency of ISO week `week` (`2026-W47`): its attempts priced by `lane.yaml`'s
    /// `prices` and their routers' figures, remembered until the next write. A week with no
    /// attempt has every count 0 and no spend.
    ///
    /// Errors: [`Error::BadWeek`] for a label that is not an ISO week; the query's.
    pub async fn week_cost(&self, week: &str) -> Result<WeekCost> {
        parse_iso_week(week)?;
        self.memo(format!("cost:{week}"), || async {
            let result = self.query(&week_attempts_sql(week)).await?;
            let prices = self.config().prices.clone();
            let rows = read_rows(&result.batches, &prices)?;
            let accepted = accepted_artifacts(&rows);
            Ok(week_cost(week, &rows, &prices, accepted))
        })
        .await
    }
}

impl Session {
    /// Fills `m.spend`, unless a retention sweep touched the week: its removed attempts' costs
    /// were not kept, and a spend of what is left would pass for the week's.
    pub(crate) async fn add_spend(&self, m: &mut crate::WeekMetrics) -> Result<()> {
        let sql = format!(
            "SELECT COUNT(*) AS n FROM week_snapshot WHERE iso_week = '{}'",
            m.iso_week
        );
        let swept = self.query(&sql).await?;
        let swept = swept
            .batches
            .iter()
            .find(|b| b.num_rows() > 0)
            .is_some_and(|b| crate::review::metrics::i64_col(b, "n", 0) > 0);
        if !swept {
            m.spend = Some(self.week_cost(&m.iso_week).await?.spend);
        }
        Ok(())
    }
}

/// Distinct idem_key with at least one artifact (the drill table's unique accepted artifacts).
fn accepted_artifacts(rows: &[Row]) -> i64 {
    let keys: std::collections::HashSet<&str> = rows
        .iter()
        .filter(|r| r.artifact_id.is_some())
        .map(|r| r.idem_key.as_str())
        .collect();
    keys.len() as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_interpolate_between_ranks() {
        let v = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(percentile(&v, 0.5), Some(2.5));
        assert_eq!(percentile(&v, 0.0), Some(1.0));
        assert_eq!(percentile(&v, 1.0), Some(4.0));
        assert!((percentile(&v, 0.95).unwrap() - 3.85).abs() < 1e-12);
        assert_eq!(percentile(&[7.0], 0.99), Some(7.0));
        assert_eq!(percentile(&[], 0.5), None);
    }
}
