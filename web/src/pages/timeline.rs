//! The job page's timeline: each attempt of one job as a bar from its `started_at` to its
//! `ended_at`, a row an attempt in `attempt_no` order, coloured by outcome, with the attempt's
//! number, lane, outcome, key (and pool) and refusal kind (seed 002 `error_kind`, with the HTTP
//! status and provider code) written beside it. The gaps between bars are the job's waits: a
//! cooldown, a key's rest, the router's backoff.

use laneledger_query::tables::job_attempt::error_kind_of;
use laneledger_store::{StoredAttempt, format_timestamp};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, VPos};

use crate::pages::charts::{
    ChartError, GRID, INK, MUTED, Mark, annotate, finish, label, lane_colour, nice_max, outcome_colour, text_style,
};

/// What the timeline writes beside one attempt.
struct RowText {
    attempt_no: String,
    lane: &'static str,
    outcome: Option<&'static str>,
    /// `p2-key-9 (pool-2)`, or `—`.
    key: String,
    /// `transient 429/1305`, or `—`.
    refusal: String,
}

/// `s`, cut to `max` characters with an ellipsis.
fn clip(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let mut out: String = s.chars().take(max - 1).collect();
        out.push('…');
        out
    }
}

fn row_text(s: &StoredAttempt) -> RowText {
    let a = &s.attempt;
    let key = match (&a.key_id, &a.pool_id) {
        (Some(k), Some(p)) => format!("{k} ({p})"),
        (Some(k), None) => k.clone(),
        (None, Some(p)) => format!("— ({p})"),
        (None, None) => "—".to_string(),
    };
    let refusal = match error_kind_of(a.http_status, a.provider_code) {
        None => "—".to_string(),
        Some(kind) => {
            let status = a.http_status.map_or_else(|| "—".to_string(), |h| h.to_string());
            match a.provider_code {
                Some(code) => format!("{} {status}/{code}", kind.as_str()),
                None => format!("{} {status}", kind.as_str()),
            }
        }
    };
    RowText {
        attempt_no: format!("#{}", a.attempt_no),
        lane: a.lane.as_str(),
        outcome: a.outcome.map(|o| o.as_str()),
        key,
        refusal,
    }
}

/// Width of the chart, px; its height grows with the attempts.
const WIDTH: u32 = 1140;
/// Height of one attempt's row, px.
const ROW: u32 = 30;
/// The left columns: attempt, lane, outcome, key, refusal (x of each, px), and the plot's start.
const COLUMNS: [(i32, &str); 5] = [
    (10, "attempt"),
    (74, "lane"),
    (124, "outcome"),
    (214, "key (pool)"),
    (384, "refusal"),
];
const LABEL_AREA: u32 = 540;

/// Draws `attempts` (in `attempt_no` order) of job `job_id` as a timeline.
pub(crate) fn timeline(job_id: &str, attempts: &[StoredAttempt]) -> Result<String, ChartError> {
    let Some(t0) = attempts.iter().map(|s| s.attempt.started_at).min() else {
        return Ok(String::new());
    };
    let last = attempts
        .iter()
        .map(|s| {
            s.attempt
                .ended_at
                .unwrap_or(s.attempt.started_at)
                .max(s.attempt.started_at)
        })
        .max()
        .unwrap_or(t0);
    let secs = |us: i64| (us - t0) as f64 / 1e6;
    let x_max = nice_max(secs(last).max(1.0) * 1.04);
    let n = attempts.len();
    let height = 44 + ROW * n as u32 + 50;
    let mut svg = String::new();
    let mut marks = Vec::new();
    let mut legend_rects = 0;
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, height)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .margin_top(44)
            .margin_right(24)
            .x_label_area_size(50)
            .y_label_area_size(LABEL_AREA)
            .build_cartesian_2d(0f64..x_max, 0f64..n as f64)?;
        let x_decimals = if x_max <= 5.0 { 1 } else { 0 };
        chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(0)
            .x_labels(8)
            .x_label_formatter(&|v| format!("{v:.x_decimals$} s"))
            .x_desc(format!(
                "seconds since attempt {} started ({})",
                attempts[0].attempt.attempt_no,
                format_timestamp(t0)
            ))
            .label_style(text_style(12, MUTED, HPos::Center, VPos::Top))
            .axis_desc_style(crate::pages::charts::font(13).color(&MUTED))
            .bold_line_style(GRID)
            .light_line_style(TRANSPARENT)
            .axis_style(MUTED)
            .draw()?;
        // Bars at least 3 px wide, so an instant refusal still shows.
        let min_w = x_max * 3.0 / f64::from(WIDTH - LABEL_AREA - 24);
        let mut bars = Vec::new();
        for (i, s) in attempts.iter().enumerate() {
            let a = &s.attempt;
            let text = row_text(s);
            // Row i from the top.
            let y_hi = (n - i) as f64 - 0.18;
            let y_lo = (n - i - 1) as f64 + 0.18;
            let x0 = secs(a.started_at);
            let x1 = a.ended_at.map_or(x_max, secs).max(x0 + min_w);
            let colour = outcome_colour(text.outcome);
            let style = if a.ended_at.is_some() {
                colour.filled()
            } else {
                colour.mix(0.35).filled()
            };
            bars.push(Rectangle::new([(x0, y_lo), (x1, y_hi)], style));
            let duration = a.ended_at.map_or_else(
                || "open".to_string(),
                |e| format!("{:.1} s", (e - a.started_at) as f64 / 1e6),
            );
            marks.push(Mark {
                data: vec![
                    ("attempt-no", a.attempt_no.to_string()),
                    ("lane", text.lane.to_string()),
                    ("outcome", text.outcome.unwrap_or("").to_string()),
                    ("key", a.key_id.clone().unwrap_or_default()),
                    ("error-kind", text.refusal.split(' ').next().unwrap_or("—").to_string()),
                ],
                title: format!(
                    "{} {} · {} · key {} · refusal {} · started {} · {duration}",
                    text.attempt_no,
                    text.lane,
                    text.outcome.unwrap_or("no outcome"),
                    text.key,
                    text.refusal,
                    format_timestamp(a.started_at)
                ),
            });
            let (_, cy) = chart.backend_coord(&(0.0, (y_lo + y_hi) / 2.0));
            let row_style = |c: RGBColor| text_style(13, c, HPos::Left, VPos::Center);
            label(&root, &text.attempt_no, (COLUMNS[0].0, cy), &row_style(INK))?;
            label(&root, text.lane, (COLUMNS[1].0, cy), &row_style(lane_colour(text.lane)))?;
            label(
                &root,
                text.outcome.unwrap_or("no outcome"),
                (COLUMNS[2].0, cy),
                &row_style(if text.outcome.is_some() { INK } else { MUTED }),
            )?;
            label(&root, &clip(&text.key, 24), (COLUMNS[3].0, cy), &row_style(INK))?;
            label(&root, &clip(&text.refusal, 22), (COLUMNS[4].0, cy), &row_style(INK))?;
            // The duration after the bar, or before it when the bar reaches the right edge.
            let (px1, _) = chart.backend_coord(&(x1, 0.0));
            let (px0, _) = chart.backend_coord(&(x0, 0.0));
            if px1 + 60 < (WIDTH - 24) as i32 {
                label(
                    &root,
                    &duration,
                    (px1 + 5, cy),
                    &text_style(12, MUTED, HPos::Left, VPos::Center),
                )?;
            } else if px0 - 60 > LABEL_AREA as i32 {
                label(
                    &root,
                    &duration,
                    (px0 - 5, cy),
                    &text_style(12, MUTED, HPos::Right, VPos::Center),
                )?;
            }
        }
        chart.draw_series(bars)?;
        for (x, head) in COLUMNS {
            label(&root, head, (x, 30), &text_style(12, MUTED, HPos::Left, VPos::Center))?;
        }
        // The legend: the outcomes this job's bars show, above the plot.
        let mut x = LABEL_AREA as i32;
        label(
            &root,
            "bar colour, the outcome:",
            (x, 12),
            &text_style(12, MUTED, HPos::Left, VPos::Center),
        )?;
        x += 160;
        for (outcome, word) in [
            (Some("ok"), "ok"),
            (Some("retryable"), "retryable"),
            (Some("ambiguous"), "ambiguous"),
            (Some("permanent"), "permanent"),
            (None, "no outcome"),
        ] {
            if !attempts
                .iter()
                .any(|s| s.attempt.outcome.map(|o| o.as_str()) == outcome)
            {
                continue;
            }
            root.draw(&Rectangle::new(
                [(x, 6), (x + 12, 18)],
                outcome_colour(outcome).filled(),
            ))?;
            legend_rects += 1;
            label(
                &root,
                word,
                (x + 17, 12),
                &text_style(12, INK, HPos::Left, VPos::Center),
            )?;
            x += 32 + 7 * word.len() as i32;
        }
        root.present()?;
    }
    let svg = annotate(&svg, "rect", 1, &marks, legend_rects)?;
    Ok(finish(
        &svg,
        "chart timeline",
        &format!("Timeline of job {job_id}: {n} attempts"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_keys_are_clipped() {
        assert_eq!(clip("p2-key-9 (pool-2)", 24), "p2-key-9 (pool-2)");
        assert_eq!(clip("abcdefgh", 5), "abcd…");
    }
}
