//! One audit section of a week, every row, [`MAX_SECTION_ROWS`] a page: `GET
//! /weeks/{week}/sections/{id}?page=N` (HTML, linked from the week page when it shows only the
//! first rows) and `GET /v1/sections/{id}?week=…&page=N` (JSON), from
//! [`laneledger_query::Session::section_page`].

use std::collections::HashMap;

use askama::Template;
use axum::Json;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use laneledger_query::review::sections::MAX_SECTION_ROWS;

use crate::api_error::ApiError;
use crate::error::AppError;
use crate::pages::html::HtmlTemplate;
use crate::pages::sections::{SectionView, encode_segment};
use crate::server::state::AppState;

/// A link of the pager: its label, its URL, whether it is the page shown.
struct Link {
    label: String,
    href: String,
    current: bool,
}

/// One page of one section.
#[derive(Template)]
#[template(path = "section.html")]
struct SectionPageView {
    nav: &'static str,
    title: String,
    week: String,
    /// The section with this page's rows (`s`, as the week page's loop names it).
    s: SectionView,
    /// The first and last row shown (1-based).
    first: usize,
    last: usize,
    /// Rows a page.
    per_page: usize,
    /// Page `page` of `pages`.
    page: usize,
    pages: usize,
    previous_page: Option<String>,
    next_page: Option<String>,
    /// The first page, the pages around this one and the last.
    page_links: Vec<Link>,
}

/// The page's URL.
pub(crate) fn href(week: &str, id: &str, page: usize) -> String {
    let base = format!("/weeks/{}/sections/{}", encode_segment(week), encode_segment(id));
    if page > 1 { format!("{base}?page={page}") } else { base }
}

/// `?page=N`: 1 when absent; `Err` with the reason for anything but a number from 1.
fn page_param(params: &HashMap<String, String>) -> Result<usize, String> {
    match params.get("page") {
        None => Ok(1),
        Some(p) => p
            .parse::<usize>()
            .ok()
            .filter(|&p| p >= 1)
            .ok_or_else(|| format!("{p:?} is not a page number: pages count from 1")),
    }
}

/// The pages to link: all of them when there are few, else the first, the last and the three
/// either side of `page`.
fn page_links(week: &str, id: &str, page: usize, pages: usize) -> Vec<Link> {
    let shown: Vec<usize> = if pages <= 20 {
        (1..=pages).collect()
    } else {
        let mut v = vec![1];
        v.extend(page.saturating_sub(3).max(2)..=(page + 3).min(pages - 1));
        v.push(pages);
        v
    };
    shown
        .into_iter()
        .map(|p| Link {
            label: p.to_string(),
            href: href(week, id, p),
            current: p == page,
        })
        .collect()
}

/// `GET /weeks/{week}/sections/{id}[?page=N]`: 400 for a bad week label or page number, 404 for
/// a week without data or a section the week page does not have; a page past the last shows the
/// last.
pub(crate) async fn page(
    State(state): State<AppState>,
    uri: Uri,
    path: Result<Path<(String, String)>, PathRejection>,
    Query(params): Query<HashMap<String, String>>,
) -> Result<HtmlTemplate<impl Template>, AppError> {
    // Every part of the page reads one write generation (Session::pinned).
    let session = state.session.pinned();
    let Path((week, id)) = path?;
    let page = page_param(&params).map_err(AppError::BadPath)?;
    // A bad label is a 400, a week without data a 404, as for the week page.
    session.review(Some(&week), &state.thresholds).await?;
    let Some(p) = session.section_page(&week, &id, page).await? else {
        return Err(AppError::NoRoute(uri.path().to_string()));
    };
    let shown = p.section.rows.len();
    let mut views = crate::pages::sections::views(vec![p.section]);
    let Some(s) = views.pop() else {
        return Err(AppError::NoRoute(uri.path().to_string()));
    };
    Ok(HtmlTemplate(SectionPageView {
        nav: "weeks",
        title: format!("{}: {week}", s.title),
        first: if shown == 0 { 0 } else { p.first_row + 1 },
        last: p.first_row + shown,
        per_page: MAX_SECTION_ROWS,
        page: p.page,
        pages: p.pages,
        previous_page: (p.page > 1).then(|| href(&week, &id, p.page - 1)),
        next_page: (p.page < p.pages).then(|| href(&week, &id, p.page + 1)),
        page_links: page_links(&week, &id, p.page, p.pages),
        s,
        week,
    }))
}

/// `GET /v1/sections/{id}?week=2026-W47&page=N`: one page of a section of the week (the latest
/// week with data without `week`) as JSON: `{"week", "page", "pages", "per_page", "first_row",
/// "section"}`, `section` as in `/v1/review` with this page's rows. 400 for a bad label or page
/// number, 404 for a week without data or an unknown section.
pub async fn api(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(params): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    // Every part of the answer reads one write generation (Session::pinned).
    let session = state.session.pinned();
    let page = page_param(&params).map_err(ApiError::bad_request)?;
    let week = params.get("week").filter(|w| !w.is_empty()).map(String::as_str);
    let review = session.review(week, &state.thresholds).await?;
    let week = review.week.iso_week;
    let Some(p) = session.section_page(&week, &id, page).await? else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("the review of {week} has no section {id:?}"),
        ));
    };
    Ok(Json(serde_json::json!({
        "week": week,
        "page": p.page,
        "pages": p.pages,
        "per_page": MAX_SECTION_ROWS,
        "first_row": p.first_row,
        "section": p.section,
    }))
    .into_response())
}
