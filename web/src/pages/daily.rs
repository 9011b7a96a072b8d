//! The week page's daily chart: the attempts of the week's jobs by day of `started_at`, lane and
//! outcome, as a table (one row a day, from [`daily_sql`]) and as stacked bars, a free and a paid
//! bar a day, each split by outcome.
//!
//! The jobs are those counted in the week (the ISO week of their first attempt, view `job_week`),
//! so the free and paid bars add up to the drill table's free and paid attempts; a late retry of
//! a Sunday job shows on the Monday after.

use chrono::{Datelike, NaiveDate};
use laneledger_query::{OutputFormat, Session, format_count, format_result};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, VPos};
use serde::Deserialize;

use crate::error::Error;
use crate::pages::charts::{
    ChartError, GRID, INK, MUTED, Mark, annotate, finish, label, nice_max, outcome_colour, text_style,
};

/// The outcomes a bar is split into, bottom to top: the SQL column suffix, the outcome as stored
/// (`None`: no outcome yet, an open attempt) and the legend's word.
pub(crate) const OUTCOMES: [(&str, Option<&str>, &str); 5] = [
    ("ok", Some("ok"), "ok"),
    ("retryable", Some("retryable"), "retryable"),
    ("ambiguous", Some("ambiguous"), "ambiguous"),
    ("permanent", Some("permanent"), "permanent"),
    ("open", None, "no outcome (open)"),
];

/// The lanes, left bar then right bar.
pub(crate) const LANES: [&str; 2] = ["free", "paid"];

/// The SQL of the daily table for ISO week `week` (a checked label): one row a day, a column per
/// lane and outcome, and the day's attempts.
pub(crate) fn daily_sql(week: &str) -> String {
    let (mut cols, mut names) = (String::new(), String::new());
    for lane in LANES {
        for (suffix, outcome, _) in OUTCOMES {
            let test = match outcome {
                Some(o) => format!("a.outcome = '{o}'"),
                None => "a.outcome IS NULL".to_string(),
            };
            cols.push_str(&format!(
                "         SUM(CASE WHEN a.lane = '{lane}' AND {test} THEN 1 ELSE 0 END) AS {lane}_{suffix},\n"
            ));
            names.push_str(&format!("{lane}_{suffix}, "));
        }
    }
    // Grouped by the day's first instant, so that only each day's label is formatted, not each
    // attempt's start.
    format!(
        "SELECT to_char(day_start, '%Y-%m-%d') AS day, {names}attempts FROM (\n\
         SELECT date_trunc('day', a.started_at) AS day_start,\n{cols}         COUNT(*) AS attempts\n\
         FROM week_attempt a\n\
         WHERE a.iso_week = '{week}'\n\
         GROUP BY date_trunc('day', a.started_at))\n\
         ORDER BY day"
    )
}

/// One row of [`daily_sql`].
#[derive(Debug, Deserialize)]
struct DayRow {
    day: String,
    free_ok: i64,
    free_retryable: i64,
    free_ambiguous: i64,
    free_permanent: i64,
    free_open: i64,
    paid_ok: i64,
    paid_retryable: i64,
    paid_ambiguous: i64,
    paid_permanent: i64,
    paid_open: i64,
    attempts: i64,
}

impl DayRow {
    /// Attempts by lane (free, paid), then by outcome in [`OUTCOMES`] order.
    fn counts(&self) -> [[i64; 5]; 2] {
        [
            [
                self.free_ok,
                self.free_retryable,
                self.free_ambiguous,
                self.free_permanent,
                self.free_open,
            ],
            [
                self.paid_ok,
                self.paid_retryable,
                self.paid_ambiguous,
                self.paid_permanent,
                self.paid_open,
            ],
        ]
    }
}

/// The daily table and chart of one week, ready for the page.
pub(crate) struct DailyView {
    /// The SQL behind both.
    pub(crate) sql: String,
    /// Column names, as the SQL names them.
    pub(crate) columns: Vec<String>,
    /// One row a day, counts formatted.
    pub(crate) rows: Vec<Vec<String>>,
    /// The chart, an inline `<svg>`.
    pub(crate) svg: String,
}

/// `Mon 16 Nov` for `2026-11-16`.
fn day_label(day: &str) -> String {
    NaiveDate::parse_from_str(day, "%Y-%m-%d").map_or_else(
        |_| day.to_string(),
        |d| format!("{} {} {}", d.weekday(), d.day(), d.format("%b")),
    )
}

/// Reads the daily table of `week` and draws its chart.
pub(crate) async fn daily(session: &Session, week: &str) -> Result<DailyView, Error> {
    let sql = daily_sql(week);
    let result = session.query(&sql).await?;
    let columns = result.schema.fields().iter().map(|f| f.name().clone()).collect();
    let json = format_result(&result, OutputFormat::Json)?;
    let days: Vec<DayRow> = serde_json::from_str(&json)?;
    let svg = chart(week, &days)?;
    let rows = days
        .iter()
        .map(|d| {
            let mut row = vec![d.day.clone()];
            row.extend(d.counts().iter().flatten().map(|n| format_count(*n)));
            row.push(format_count(d.attempts));
            row
        })
        .collect();
    Ok(DailyView {
        sql,
        columns,
        rows,
        svg,
    })
}

/// Width and height of the chart, px (it scales to the page's width).
const SIZE: (u32, u32) = (1140, 340);

/// A label colour that reads on an outcome's colour.
fn ink_on(outcome: Option<&str>) -> RGBColor {
    match outcome {
        Some("ok") | Some("ambiguous") | Some("permanent") => WHITE,
        _ => INK,
    }
}

/// Stacked bars: for each day a free and a paid bar, split by outcome, each segment carrying its
/// day, lane, outcome and attempts (`data-*`), with the count written on it where it fits and
/// each bar's total above it.
fn chart(week: &str, days: &[DayRow]) -> Result<String, ChartError> {
    let mut svg = String::new();
    let mut marks = Vec::new();
    let mut legend_rects = 0;
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE)?;
        let n = days.len().max(1) as f64;
        let pad = (4.0 - n).max(0.0) / 2.0;
        let top = days
            .iter()
            .flat_map(|d| d.counts().map(|lane| lane.iter().sum::<i64>()))
            .max()
            .unwrap_or(0);
        let y_max = nice_max(top as f64 * 1.08);
        let mut chart = ChartBuilder::on(&root)
            .margin_top(40)
            .margin_right(16)
            .margin_left(8)
            .x_label_area_size(44)
            .y_label_area_size(64)
            // At least four days' room, so a week of one or two days has bars of a usual width.
            .build_cartesian_2d(-pad..n + pad, 0f64..y_max)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(0)
            .y_labels(6)
            .y_desc("attempts")
            .y_label_formatter(&|v| format_count(v.round() as i64))
            .label_style(text_style(13, MUTED, HPos::Right, VPos::Center))
            .axis_desc_style(crate::pages::charts::font(13).color(&MUTED))
            .bold_line_style(GRID)
            .light_line_style(TRANSPARENT)
            .axis_style(MUTED)
            .draw()?;

        let mut bars = Vec::new();
        let mut texts: Vec<(String, (i32, i32), TextStyle<'static>)> = Vec::new();
        for (i, d) in days.iter().enumerate() {
            let day = day_label(&d.day);
            for (l, (lane, counts)) in LANES.iter().zip(d.counts()).enumerate() {
                let x0 = i as f64 + 0.1 + 0.41 * l as f64;
                let x1 = x0 + 0.38;
                let mut y = 0f64;
                for ((_, outcome, word), count) in OUTCOMES.iter().zip(counts) {
                    if count == 0 {
                        continue;
                    }
                    let (lo, hi) = (y, y + count as f64);
                    y = hi;
                    let colour = outcome_colour(*outcome);
                    bars.push(Rectangle::new([(x0, lo), (x1, hi)], colour.filled()));
                    marks.push(Mark {
                        data: vec![
                            ("day", d.day.clone()),
                            ("lane", lane.to_string()),
                            ("outcome", outcome.unwrap_or("").to_string()),
                            ("attempts", count.to_string()),
                        ],
                        title: format!("{day} · {lane} · {word}: {} attempts", format_count(count)),
                    });
                    let (px0, py_hi) = chart.backend_coord(&(x0, hi));
                    let (px1, py_lo) = chart.backend_coord(&(x1, lo));
                    let text = format_count(count);
                    if py_lo - py_hi >= 15 && (px1 - px0) as usize >= 8 * text.len() {
                        texts.push((
                            text,
                            ((px0 + px1) / 2, (py_lo + py_hi) / 2),
                            text_style(12, ink_on(*outcome), HPos::Center, VPos::Center),
                        ));
                    }
                }
                let total: i64 = counts.iter().sum();
                let (px, py) = chart.backend_coord(&((x0 + x1) / 2.0, total as f64));
                texts.push((
                    format_count(total),
                    (px, py - 3),
                    text_style(12, INK, HPos::Center, VPos::Bottom),
                ));
                let (_, base) = chart.backend_coord(&(x0, 0.0));
                texts.push((
                    lane.to_string(),
                    (px, base + 4),
                    text_style(11, MUTED, HPos::Center, VPos::Top),
                ));
            }
            let (cx, base) = chart.backend_coord(&(i as f64 + 0.5, 0.0));
            texts.push((day, (cx, base + 21), text_style(13, INK, HPos::Center, VPos::Top)));
        }
        chart.draw_series(bars)?;
        for (text, pos, style) in &texts {
            label(&root, text, *pos, style)?;
        }
        // The legend: the outcomes the week has, left to right, above the plot.
        let mut x = 72;
        for (k, (_, outcome, word)) in OUTCOMES.iter().enumerate() {
            if !days.iter().any(|d| d.counts().iter().any(|lane| lane[k] > 0)) {
                continue;
            }
            root.draw(&Rectangle::new(
                [(x, 12), (x + 12, 24)],
                outcome_colour(*outcome).filled(),
            ))?;
            legend_rects += 1;
            label(
                &root,
                word,
                (x + 17, 18),
                &text_style(13, INK, HPos::Left, VPos::Center),
            )?;
            x += 30 + 8 * word.len() as i32;
        }
        label(
            &root,
            &format!("{week}: attempts a day · left bar free lane, right bar paid lane"),
            (SIZE.0 as i32 - 16, 18),
            &text_style(13, MUTED, HPos::Right, VPos::Center),
        )?;
        root.present()?;
    }
    // Rects: the background, the bars, the legend swatches.
    let svg = annotate(&svg, "rect", 1, &marks, legend_rects)?;
    Ok(finish(
        &svg,
        "chart daily",
        &format!("Attempts a day in {week} by lane and outcome"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn day_labels_name_the_weekday() {
        assert_eq!(day_label("2026-11-16"), "Mon 16 Nov");
        assert_eq!(day_label("nonsense"), "nonsense");
    }

    #[test]
    fn the_chart_marks_every_nonzero_segment_with_its_figure() {
        let row = |day: &str, free_ok, free_retryable, paid_ok| DayRow {
            day: day.into(),
            free_ok,
            free_retryable,
            free_ambiguous: 0,
            free_permanent: 0,
            free_open: 0,
            paid_ok,
            paid_retryable: 0,
            paid_ambiguous: 0,
            paid_permanent: 0,
            paid_open: 0,
            attempts: free_ok + free_retryable + paid_ok,
        };
        let svg = chart("2026-W47", &[row("2026-11-16", 40, 12, 3), row("2026-11-17", 0, 5, 0)]).unwrap();
        assert!(svg.starts_with("<svg class=\"chart daily\""), "{svg}");
        for (day, lane, outcome, n) in [
            ("2026-11-16", "free", "ok", 40),
            ("2026-11-16", "free", "retryable", 12),
            ("2026-11-16", "paid", "ok", 3),
            ("2026-11-17", "free", "retryable", 5),
        ] {
            let want =
                format!("data-day=\"{day}\" data-lane=\"{lane}\" data-outcome=\"{outcome}\" data-attempts=\"{n}\"");
            assert!(svg.contains(&want), "{want} in {svg}");
        }
        assert_eq!(svg.matches("data-attempts=").count(), 4);
        assert!(svg.contains(">\nMon 16 Nov\n</text>"), "{svg}");
        assert!(svg.contains(">\nretryable\n</text>"));
        assert!(
            !svg.contains(">\nambiguous\n</text>"),
            "the legend names only outcomes the week has"
        );
    }
}
