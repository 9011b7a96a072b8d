//! Server-side SVG charts drawn with plotters' SVG backend: no JavaScript, no fonts on the
//! server. Plotters writes each label as an SVG `<text>` element with `font-family="sans-serif"`
//! and the browser lays it out; without plotters' `ttf` or `ab_glyph` features it estimates text
//! sizes itself, which is all the layout needs since every label here sits at a fixed place.
//!
//! After plotters has drawn a chart, [`annotate`] gives each mark (a bar's `<rect>`, a point's
//! `<circle>`) a `<title>` (a tooltip in the browser, read aloud by screen readers) and `data-*`
//! attributes naming its series and value, so the figure behind every mark can be read from the
//! page and checked by tests.

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// A chart that could not be drawn.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ChartError {
    /// Plotters failed while drawing.
    #[error("drawing a chart: {0}")]
    Draw(String),
    /// The drawn SVG did not hold the marks the chart drew (a plotters change).
    #[error("annotating a chart: expected {expected} <{tag}> elements from {first}, found {found}")]
    Marks {
        /// The element looked for.
        tag: &'static str,
        /// The index of the first mark.
        first: usize,
        /// Marks drawn.
        expected: usize,
        /// Elements found in all.
        found: usize,
    },
}

impl<E: std::error::Error + Send + Sync> From<DrawingAreaErrorKind<E>> for ChartError {
    fn from(e: DrawingAreaErrorKind<E>) -> Self {
        ChartError::Draw(e.to_string())
    }
}

impl From<ChartError> for crate::error::Error {
    /// A chart is part of its page: a failure is a page that failed to render.
    fn from(e: ChartError) -> Self {
        crate::error::Error::Render(askama::Error::custom(e))
    }
}

/// The font family of every label (the browser's sans-serif).
pub(crate) const FONT: &str = "sans-serif";
/// Ink for axes and labels.
pub(crate) const INK: RGBColor = RGBColor(0x1c, 0x23, 0x29);
/// Muted labels.
pub(crate) const MUTED: RGBColor = RGBColor(0x5a, 0x65, 0x70);
/// Grid lines.
pub(crate) const GRID: RGBColor = RGBColor(0xe3, 0xe7, 0xeb);
/// A passing value (the site's pass green).
pub(crate) const PASS: RGBColor = RGBColor(0x17, 0x70, 0x2f);
/// A value above its threshold, and the threshold line (the site's alert red).
pub(crate) const ALERT: RGBColor = RGBColor(0xb3, 0x26, 0x1e);
/// The free lane.
pub(crate) const FREE: RGBColor = RGBColor(0x1d, 0x5e, 0xa8);
/// The paid lane.
pub(crate) const PAID: RGBColor = RGBColor(0x8a, 0x4b, 0xaf);

/// The colour of an attempt outcome (`None`: the attempt has not ended).
pub(crate) fn outcome_colour(outcome: Option<&str>) -> RGBColor {
    match outcome {
        Some("ok") => RGBColor(0x2f, 0x85, 0x5a),
        Some("retryable") => RGBColor(0xd6, 0x9e, 0x2e),
        Some("ambiguous") => RGBColor(0x80, 0x5a, 0xd5),
        Some("permanent") => RGBColor(0xc5, 0x30, 0x30),
        _ => RGBColor(0xa0, 0xa8, 0xb0),
    }
}

/// The colour of a lane.
pub(crate) fn lane_colour(lane: &str) -> RGBColor {
    if lane == "paid" { PAID } else { FREE }
}

/// The font at `px` pixels in the SVG (plotters writes a font's size ÷ 1.24 as `font-size`).
pub(crate) fn font(px: u32) -> FontDesc<'static> {
    (FONT, f64::from(px) * 1.24).into_font()
}

/// A text style: `size` px, `colour`, anchored at `pos`.
pub(crate) fn text_style(size: u32, colour: RGBColor, h: HPos, v: VPos) -> TextStyle<'static> {
    TextStyle {
        font: font(size),
        color: colour.to_backend_color(),
        pos: Pos::new(h, v),
    }
}

/// Draws `text` on `area` at pixel `pos`.
pub(crate) fn label(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    text: &str,
    pos: (i32, i32),
    style: &TextStyle<'static>,
) -> Result<(), ChartError> {
    area.draw(&Text::new(text.to_string(), pos, style.clone()))?;
    Ok(())
}

/// What one mark carries: `data-*` attributes and a tooltip.
pub(crate) struct Mark {
    /// `(name, value)` pairs written as `data-name="value"`.
    pub(crate) data: Vec<(&'static str, String)>,
    /// The `<title>` text.
    pub(crate) title: String,
}

/// XML-escapes text for an attribute value or element content.
pub(crate) fn xml_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Gives the `<tag …/>` elements number `first`, `first + 1`, … of `svg` (in document order) the
/// attributes and title of `marks`, one each. `after` is how many such elements the chart drew
/// after the marks: unless the SVG holds exactly `first + marks.len() + after` of them, the marks
/// are not where the chart drew them and this is an error rather than a mislabelled chart.
pub(crate) fn annotate(
    svg: &str,
    tag: &'static str,
    first: usize,
    marks: &[Mark],
    after: usize,
) -> Result<String, ChartError> {
    let open = format!("<{tag} ");
    let starts: Vec<usize> = svg.match_indices(&open).map(|(i, _)| i).collect();
    if starts.len() != first + marks.len() + after {
        return Err(ChartError::Marks {
            tag,
            first,
            expected: marks.len(),
            found: starts.len(),
        });
    }
    let mut out = String::with_capacity(svg.len() + marks.len() * 120);
    let mut done = 0;
    for (start, mark) in starts[first..].iter().zip(marks) {
        let Some(end) = svg[*start..].find("/>").map(|e| start + e) else {
            return Err(ChartError::Marks {
                tag,
                first,
                expected: marks.len(),
                found: starts.len(),
            });
        };
        out.push_str(&svg[done..end]);
        for (name, value) in &mark.data {
            out.push_str(&format!(" data-{name}=\"{}\"", xml_escape(value)));
        }
        out.push_str(&format!("><title>{}</title></{tag}>", xml_escape(&mark.title)));
        done = end + 2;
    }
    out.push_str(&svg[done..]);
    Ok(out)
}

/// Makes plotters' SVG a labelled figure: `class`, `role="img"`, and a `<title>` first.
pub(crate) fn finish(svg: &str, class: &str, title: &str) -> String {
    let head = format!(
        "<svg class=\"{}\" role=\"img\" aria-label=\"{}\" ",
        xml_escape(class),
        xml_escape(title)
    );
    let mut out = svg.replacen("<svg ", &head, 1);
    if let Some(end) = out.find('>') {
        out.insert_str(end + 1, &format!("\n<title>{}</title>", xml_escape(title)));
    }
    out
}

/// A "nice" upper bound for an axis starting at 0 that holds `max` (1, 2, 2.5 or 5 × 10ⁿ).
pub(crate) fn nice_max(max: f64) -> f64 {
    if !max.is_finite() || max <= 0.0 {
        return 1.0;
    }
    let exp = max.log10().floor();
    let base = 10f64.powf(exp);
    for step in [1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0] {
        if max <= step * base + 1e-12 {
            return step * base;
        }
    }
    10.0 * base
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn annotate_adds_data_and_a_title_to_the_marks_in_order() {
        let svg = r##"<svg width="1" height="1"><rect x="0"/><rect x="1" fill="#fff"/><rect x="2"/></svg>"##;
        let marks = [Mark {
            data: vec![("series", "free <ok>".to_string())],
            title: "free & ok: 3".to_string(),
        }];
        let out = annotate(svg, "rect", 1, &marks, 1).unwrap();
        assert_eq!(
            out,
            r##"<svg width="1" height="1"><rect x="0"/><rect x="1" fill="#fff" data-series="free &lt;ok&gt;"><title>free &amp; ok: 3</title></rect><rect x="2"/></svg>"##
        );
        assert!(annotate(svg, "rect", 1, &marks, 0).is_err());
        assert!(annotate(svg, "rect", 3, &marks, 0).is_err());
    }

    #[test]
    fn finish_labels_the_figure() {
        let out = finish(r#"<svg width="1" height="1"></svg>"#, "chart", "A & B");
        assert_eq!(
            out,
            "<svg class=\"chart\" role=\"img\" aria-label=\"A &amp; B\" width=\"1\" height=\"1\">\n<title>A &amp; B</title></svg>"
        );
    }

    #[test]
    fn nice_bounds() {
        assert_eq!(nice_max(0.0), 1.0);
        assert!((nice_max(0.147) - 0.15).abs() < 1e-12);
        assert_eq!(nice_max(61.0), 80.0);
        assert_eq!(nice_max(100.0), 100.0);
        assert_eq!(nice_max(7.0), 8.0);
    }
}
