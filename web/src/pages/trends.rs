//! The weeks index's trend charts: one alert ratio per ISO week against its threshold (seed 000's
//! two alerts from `weekly_metrics`, seed 003's free-admit miss rate from `gate_weekly`), a point a
//! week in green (pass) or red (alert), the threshold as a red line. Weeks sit at their place in
//! time, and the line breaks over the weeks without data.

use laneledger_query::format_ratio;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, VPos};

use chrono::Datelike;

use crate::pages::charts::{
    ALERT, ChartError, GRID, INK, MUTED, Mark, PASS, annotate, finish, label, nice_max, text_style,
};

/// A value above its threshold from too few jobs to alert (the site's amber).
const FEW: RGBColor = RGBColor(0x7a, 0x53, 0x00);

/// The shade of the weeks without data between two weeks with data.
const GAP: RGBColor = RGBColor(0xf1, 0xf3, 0xf5);

/// One trend chart, ready for the page.
pub(crate) struct TrendView {
    /// The alert in words, `cross-lane retries per job`.
    pub(crate) title: &'static str,
    /// The seed's metric name, `cross_lane_retries_per_job`.
    pub(crate) metric: &'static str,
    /// What the ratio divides and where it comes from.
    pub(crate) description: &'static str,
    /// The threshold as the seed writes it, `0.20`.
    pub(crate) threshold: String,
    /// The SQL behind the points.
    pub(crate) sql: String,
    /// The chart, an inline `<svg>`.
    pub(crate) svg: String,
}

/// Width and height of a trend chart, px (it scales to its column).
const SIZE: (u32, u32) = (560, 270);

/// The fewest pixels between two week labels (or two value labels) drawn on the x axis; closer
/// ones are left out (each point keeps its tooltip and `data-*` attributes).
const LABEL_GAP: i32 = 72;

/// About how wide a week label (`2026-W48`, 13 px) is drawn, px.
const WEEK_LABEL_WIDTH: i32 = 62;

/// µs in a week.
const WEEK_MICROS: i64 = 7 * 86_400_000_000;

/// The number of an ISO week label counted from the week of Monday 1970-01-05 (consecutive weeks
/// differ by 1), so that the chart spaces weeks by time.
fn week_number(label: &str) -> Result<i64, ChartError> {
    let end = laneledger_query::review::metrics::week_end_micros(label)
        .map_err(|e| ChartError::Draw(format!("week {label:?}: {e}")))?;
    // 1970-01-01 was a Thursday: Mondays fall 4 days past a multiple of 7 days.
    Ok((end - 4 * 86_400_000_000).div_euclid(WEEK_MICROS) - 1)
}

/// Draws `points` (ISO week, value; oldest first) against `threshold`; values show with `decimals`.
/// A value above the threshold in one of the `too_few` weeks (fewer jobs than `alerts.min_jobs`)
/// is drawn amber with `data-state="too_few_jobs"`, not as an alert.
///
/// The x axis is time: a week a slot from the first week to the last, so weeks without data
/// between them are drawn as shaded gaps (`<rect data-gap-from data-gap-to data-gap-weeks>`),
/// and the line joins only points of consecutive weeks that both have a value: each run is one
/// `<polyline data-segment-from data-segment-to data-points>`, none bridges a gap.
pub(crate) fn trend_chart(
    title: &str,
    metric: &str,
    points: &[(String, Option<f64>)],
    too_few: &[String],
    threshold: f64,
    threshold_text: &str,
    decimals: usize,
) -> Result<String, ChartError> {
    // The state of a week's value: `alert`, `too_few_jobs` or `pass`.
    let state_of = |week: &String, v: f64| match (v > threshold, too_few.contains(week)) {
        (true, false) => "alert",
        (true, true) => "too_few_jobs",
        (false, _) => "pass",
    };
    let colour_of = |state: &str| match state {
        "alert" => ALERT,
        "too_few_jobs" => FEW,
        _ => PASS,
    };
    let numbers = points
        .iter()
        .map(|(w, _)| week_number(w))
        .collect::<Result<Vec<i64>, _>>()?;
    let first = numbers.iter().copied().min().unwrap_or(0);
    let last = numbers.iter().copied().max().unwrap_or(0);
    let mut svg = String::new();
    let mut marks = Vec::new();
    let mut segment_marks = Vec::new();
    let mut gap_marks = Vec::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE)?;
        let n = (last - first + 1) as f64;
        let top = points.iter().filter_map(|(_, v)| *v).fold(threshold, f64::max);
        let y_max = nice_max(top * 1.2);
        let mut chart = ChartBuilder::on(&root)
            .margin_top(34)
            .margin_right(18)
            .margin_left(6)
            .x_label_area_size(30)
            .y_label_area_size(54)
            .build_cartesian_2d(0f64..n, 0f64..y_max)?;
        let y_decimals = if y_max < 0.1 {
            3
        } else if y_max < 1.0 {
            2
        } else if y_max < 10.0 {
            1
        } else {
            0
        };
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(0)
            .y_labels(5)
            .y_label_formatter(&|v| format!("{v:.y_decimals$}"))
            .label_style(text_style(13, MUTED, HPos::Right, VPos::Center))
            .bold_line_style(GRID)
            .light_line_style(TRANSPARENT)
            .axis_style(MUTED)
            .draw()?;
        // The weeks without data between two weeks with data, shaded.
        let slot = |number: i64| (number - first) as f64;
        let mut order: Vec<usize> = (0..points.len()).collect();
        order.sort_by_key(|&i| numbers[i]);
        let mut gaps = Vec::new();
        for pair in order.windows(2) {
            let (a, b) = (numbers[pair[0]], numbers[pair[1]]);
            if b - a > 1 {
                gaps.push((a + 1, b - 1));
            }
        }
        chart.draw_series(
            gaps.iter()
                .map(|&(from, to)| Rectangle::new([(slot(from), 0.0), (slot(to) + 1.0, y_max)], GAP.filled())),
        )?;
        for &(from, to) in &gaps {
            let weeks = to - from + 1;
            let label_of = |number: i64| {
                let monday = chrono::DateTime::from_timestamp_micros(number * WEEK_MICROS + 4 * 86_400_000_000)
                    .map(|t| t.date_naive().iso_week());
                monday.map_or(String::new(), |w| format!("{}-W{:02}", w.year(), w.week()))
            };
            let (from_label, to_label) = (label_of(from), label_of(to));
            let what = if weeks == 1 {
                format!("no data in {from_label}")
            } else {
                format!("no data in the {weeks} weeks {from_label} to {to_label}")
            };
            gap_marks.push(Mark {
                data: vec![
                    ("gap-from", from_label),
                    ("gap-to", to_label),
                    ("gap-weeks", weeks.to_string()),
                ],
                title: what,
            });
            let (x0, y0) = chart.backend_coord(&(slot(from), y_max));
            let (x1, _) = chart.backend_coord(&(slot(to) + 1.0, y_max));
            if x1 - x0 >= 48 {
                label(
                    &root,
                    "no data",
                    ((x0 + x1) / 2, y0 + 6),
                    &text_style(12, MUTED, HPos::Center, VPos::Top),
                )?;
            }
        }
        // The threshold, named in the top right corner.
        chart.draw_series(std::iter::once(PathElement::new(
            vec![(0.0, threshold), (n, threshold)],
            ALERT.stroke_width(2),
        )))?;
        let right = SIZE.0 as i32 - 18;
        label(
            &root,
            &format!("alert above {threshold_text}"),
            (right, 16),
            &text_style(13, ALERT, HPos::Right, VPos::Center),
        )?;
        root.draw(&PathElement::new(
            vec![(right - 150, 16), (right - 126, 16)],
            ALERT.stroke_width(2),
        ))?;
        // The values, joined where consecutive weeks both have one.
        let at = |i: usize| slot(numbers[i]) + 0.5;
        let mut runs: Vec<Vec<usize>> = Vec::new();
        let mut run: Vec<usize> = Vec::new();
        for &i in &order {
            let joins = run.last().is_some_and(|&p| numbers[i] == numbers[p] + 1);
            if !joins {
                runs.push(std::mem::take(&mut run));
            }
            if points[i].1.is_some() {
                run.push(i);
            } else {
                runs.push(std::mem::take(&mut run));
            }
        }
        runs.push(run);
        runs.retain(|r| r.len() > 1);
        for r in &runs {
            let (from, to) = (&points[r[0]].0, &points[r[r.len() - 1]].0);
            segment_marks.push(Mark {
                data: vec![
                    ("segment-from", from.clone()),
                    ("segment-to", to.clone()),
                    ("points", r.len().to_string()),
                ],
                title: format!("{title}, {from} to {to}"),
            });
        }
        chart.draw_series(runs.iter().map(|r| {
            PathElement::new(
                r.iter()
                    .map(|&i| (at(i), points[i].1.unwrap_or(0.0)))
                    .collect::<Vec<_>>(),
                INK.stroke_width(2),
            )
        }))?;
        // Week and value labels, newest first, leaving out those too close to the last drawn.
        let mut week_label_x = i32::MAX;
        let mut value_label_x = i32::MAX;
        let mut dots = Vec::new();
        for &i in order.iter().rev() {
            let (week, v) = &points[i];
            let (cx, base) = chart.backend_coord(&(at(i), 0.0));
            if week_label_x - cx >= LABEL_GAP {
                // A label that would run past the chart's edge is set against that edge.
                let half = WEEK_LABEL_WIDTH / 2;
                let (x, h) = if cx + half > SIZE.0 as i32 - 2 {
                    (SIZE.0 as i32 - 2, HPos::Right)
                } else if cx - half < 2 {
                    (2, HPos::Left)
                } else {
                    (cx, HPos::Center)
                };
                label(&root, week, (x, base + 8), &text_style(13, INK, h, VPos::Top))?;
                week_label_x = cx;
            }
            let Some(v) = *v else {
                label(
                    &root,
                    "—",
                    (cx, base - 6),
                    &text_style(12, MUTED, HPos::Center, VPos::Bottom),
                )?;
                continue;
            };
            let colour = colour_of(state_of(week, v));
            let shown = format_ratio(Some(v), decimals);
            dots.push((i, Circle::new((at(i), v), 5, colour.filled())));
            let (px, py) = chart.backend_coord(&(at(i), v));
            if value_label_x - px >= LABEL_GAP / 2 {
                label(
                    &root,
                    &shown,
                    (px, py - 9),
                    &text_style(13, colour, HPos::Center, VPos::Bottom),
                )?;
                value_label_x = px;
            }
        }
        // The dots in time order, so that their marks follow the weeks.
        dots.reverse();
        for (i, _) in &dots {
            let (week, v) = &points[*i];
            let v = v.unwrap_or(0.0);
            let state = state_of(week, v);
            let shown = format_ratio(Some(v), decimals);
            marks.push(Mark {
                data: vec![
                    ("week", week.clone()),
                    ("metric", metric.to_string()),
                    ("value", shown.clone()),
                    ("state", state.to_string()),
                ],
                title: format!(
                    "{week}: {title} {shown} ({}; alert above {threshold_text})",
                    state.replace('_', " ")
                ),
            });
        }
        chart.draw_series(dots.into_iter().map(|(_, d)| d))?;
        label(&root, title, (8, 16), &text_style(15, INK, HPos::Left, VPos::Center))?;
        root.present()?;
    }
    let svg = annotate(&svg, "circle", 0, &marks, 0)?;
    // The line's runs are the last polylines drawn, the gaps the last rectangles.
    let polylines = svg.matches("<polyline ").count();
    let svg = annotate(&svg, "polyline", polylines - segment_marks.len(), &segment_marks, 0)?;
    let rects = svg.matches("<rect ").count();
    let svg = annotate(&svg, "rect", rects - gap_marks.len(), &gap_marks, 0)?;
    Ok(finish(
        &svg,
        "chart trend",
        &format!("{title} by ISO week, alert above {threshold_text}"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_week_is_a_point_coloured_by_its_state() {
        let points = vec![
            ("2026-W46".to_string(), Some(0.1)),
            ("2026-W47".to_string(), None),
            ("2026-W48".to_string(), Some(0.25)),
        ];
        let svg = trend_chart(
            "cross-lane retries per job",
            "cross_lane_retries_per_job",
            &points,
            &["2026-W46".to_string()],
            0.2,
            "0.20",
            3,
        )
        .unwrap();
        assert!(
            svg.contains(
                r#"data-week="2026-W46" data-metric="cross_lane_retries_per_job" data-value="0.100" data-state="pass""#
            ),
            "{svg}"
        );
        assert!(svg.contains(
            r#"data-week="2026-W48" data-metric="cross_lane_retries_per_job" data-value="0.250" data-state="alert""#
        ));
        assert_eq!(svg.matches("<circle ").count(), 2, "no point for a week without data");
        assert!(svg.contains(">\nalert above 0.20\n</text>"));
        assert!(svg.contains(">\n2026-W47\n</text>"));
    }
}
