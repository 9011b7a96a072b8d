//! The weeks index's trend charts: one alert ratio per ISO week against its threshold (seed 000's
//! two alerts from `weekly_metrics`, seed 003's free-admit miss rate from `gate_weekly`), a point a
//! week in green (pass) or red (alert), the threshold as a red line.

use laneledger_query::format_ratio;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, VPos};

use crate::charts::{ALERT, ChartError, GRID, INK, MUTED, Mark, PASS, annotate, finish, label, nice_max, text_style};

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

/// Draws `points` (ISO week, value; oldest first) against `threshold`; values show with `decimals`.
pub(crate) fn trend_chart(
    title: &str,
    metric: &str,
    points: &[(String, Option<f64>)],
    threshold: f64,
    threshold_text: &str,
    decimals: usize,
) -> Result<String, ChartError> {
    let mut svg = String::new();
    let mut marks = Vec::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE)?;
        let n = points.len().max(1) as f64;
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
        // The values, joined where consecutive weeks have one.
        let at = |i: usize| i as f64 + 0.5;
        let mut run: Vec<(f64, f64)> = Vec::new();
        let mut runs = Vec::new();
        for (i, (_, v)) in points.iter().enumerate() {
            match v {
                Some(v) => run.push((at(i), *v)),
                None => runs.push(std::mem::take(&mut run)),
            }
        }
        runs.push(run);
        chart.draw_series(
            runs.into_iter()
                .filter(|r| r.len() > 1)
                .map(|r| PathElement::new(r, INK.stroke_width(2))),
        )?;
        let mut dots = Vec::new();
        for (i, (week, v)) in points.iter().enumerate() {
            let (cx, base) = chart.backend_coord(&(at(i), 0.0));
            label(
                &root,
                week,
                (cx, base + 8),
                &text_style(13, INK, HPos::Center, VPos::Top),
            )?;
            let Some(v) = *v else {
                label(
                    &root,
                    "—",
                    (cx, base - 6),
                    &text_style(12, MUTED, HPos::Center, VPos::Bottom),
                )?;
                continue;
            };
            let alert = v > threshold;
            let colour = if alert { ALERT } else { PASS };
            let shown = format_ratio(Some(v), decimals);
            dots.push(Circle::new((at(i), v), 5, colour.filled()));
            let state = if alert { "alert" } else { "pass" };
            marks.push(Mark {
                data: vec![
                    ("week", week.clone()),
                    ("metric", metric.to_string()),
                    ("value", shown.clone()),
                    ("state", state.to_string()),
                ],
                title: format!("{week}: {title} {shown} ({state}; alert above {threshold_text})"),
            });
            let (px, py) = chart.backend_coord(&(at(i), v));
            label(
                &root,
                &shown,
                (px, py - 9),
                &text_style(13, colour, HPos::Center, VPos::Bottom),
            )?;
        }
        chart.draw_series(dots)?;
        label(&root, title, (8, 16), &text_style(15, INK, HPos::Left, VPos::Center))?;
        root.present()?;
    }
    let svg = annotate(&svg, "circle", 0, &marks, 0)?;
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
