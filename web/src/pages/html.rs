//! [`HtmlTemplate`]: a rendered askama page as a response, or the 500 page when rendering fails;
//! and the small formatting helpers the pages share.

use askama::Template;
use axum::response::{Html, IntoResponse, Response};

use crate::error::{AppError, Error};

/// An askama page as a 200 HTML response; a rendering failure becomes the 500 page.
pub(crate) struct HtmlTemplate<T>(pub T);

impl<T: Template> IntoResponse for HtmlTemplate<T> {
    fn into_response(self) -> Response {
        match self.0.render() {
            Ok(html) => Html(html).into_response(),
            Err(e) => AppError::Internal(Error::Render(e)).into_response(),
        }
    }
}

/// `—` for an absent value, else the value.
pub(crate) fn or_dash(v: Option<impl ToString>) -> String {
    v.map_or_else(|| "—".to_string(), |v| v.to_string())
}

/// A signed figure for a change column: `+1,200`, `−3`, `0`; a leading `-` becomes a minus sign.
pub(crate) fn signed(formatted: String) -> String {
    let zero = !formatted.chars().any(|c| c.is_ascii_digit() && c != '0');
    match formatted.strip_prefix('-') {
        _ if zero => formatted.trim_start_matches('-').to_string(),
        Some(rest) => format!("−{rest}"),
        None => format!("+{formatted}"),
    }
}
