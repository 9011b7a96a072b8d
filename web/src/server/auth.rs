//! Who may write and read: one bearer token, compared in constant time.
//!
//! Writes (`POST /v1/attempts`, `POST /v1/decisions`) need `Authorization: Bearer <token>`, and
//! are off when no token is configured. Reads (pages, `GET` APIs, `POST /v1/sql`) are open unless
//! [`Auth::reads_need_token`]; then they take the same token, as `Bearer`, or as the password of
//! HTTP Basic (so that a browser can ask for it). `/healthz` is always open.

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use subtle::ConstantTimeEq;

use crate::api_error::ApiError;

/// The shortest token accepted, in bytes.
pub const MIN_TOKEN_BYTES: usize = 16;

/// The shared secret of writers (and readers, with `--read-token`).
#[derive(Clone)]
pub struct Token(Vec<u8>);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(…)")
    }
}

/// Why a token was refused at start.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TokenError {
    /// Shorter than [`MIN_TOKEN_BYTES`] once trimmed.
    #[error("the token is {0} bytes long; use at least {MIN_TOKEN_BYTES} (e.g. `openssl rand -hex 32`)")]
    TooShort(usize),
    /// Holds whitespace or a control character inside.
    #[error("the token holds whitespace or a control character")]
    BadCharacter,
}

impl Token {
    /// A token from its text; surrounding whitespace (a file's final newline) is dropped.
    ///
    /// Errors: [`TokenError::TooShort`], [`TokenError::BadCharacter`].
    pub fn new(text: &str) -> Result<Self, TokenError> {
        let t = text.trim();
        if t.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(TokenError::BadCharacter);
        }
        if t.len() < MIN_TOKEN_BYTES {
            return Err(TokenError::TooShort(t.len()));
        }
        Ok(Token(t.as_bytes().to_vec()))
    }

    /// True when `offered` is this token, compared in time that does not depend on where they
    /// first differ (a prefix or an extension of the token is refused).
    pub fn matches(&self, offered: &[u8]) -> bool {
        // `ct_eq` on slices of different lengths is false without looking at the bytes; the length
        // of the token is not a secret worth hiding.
        bool::from(self.0.as_slice().ct_eq(offered))
    }
}

/// The server's access rules.
#[derive(Debug, Clone, Default)]
pub struct Auth {
    /// The token writers (and, when reads need one, readers) present; `None` turns writes off.
    pub token: Option<Token>,
    /// Whether reads need the token too (`--read-token`, or any address other than loopback).
    pub reads_need_token: bool,
}

/// What the `Authorization` header offered.
enum Offered<'a> {
    None,
    Bearer(&'a [u8]),
    Basic(Vec<u8>),
    Other,
}

fn offered(headers: &HeaderMap) -> Offered<'_> {
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return Offered::None;
    };
    let bytes = value.as_bytes();
    let (scheme, rest) = match bytes.iter().position(|&b| b == b' ') {
        Some(i) => (&bytes[..i], &bytes[i + 1..]),
        None => (bytes, &b""[..]),
    };
    if scheme.eq_ignore_ascii_case(b"bearer") {
        Offered::Bearer(rest)
    } else if scheme.eq_ignore_ascii_case(b"basic") {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(rest)
            .unwrap_or_default();
        // user:password; the password is the token, the user is anything.
        match decoded.iter().position(|&b| b == b':') {
            Some(i) => Offered::Basic(decoded[i + 1..].to_vec()),
            None => Offered::Other,
        }
    } else {
        Offered::Other
    }
}

fn unauthorized(message: &str, basic: bool) -> Response {
    let mut r = ApiError::new(StatusCode::UNAUTHORIZED, message).into_response();
    let challenge = if basic {
        r#"Basic realm="laneledger", charset="UTF-8""#
    } else {
        r#"Bearer realm="laneledger""#
    };
    r.headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static(challenge));
    r
}

/// Middleware of the write routes: `Authorization: Bearer <token>` or 401; 403 when writes are
/// off (no token configured).
pub async fn require_write(State(auth): State<std::sync::Arc<Auth>>, request: Request, next: Next) -> Response {
    let Some(token) = &auth.token else {
        return ApiError::new(
            StatusCode::FORBIDDEN,
            "writes are off: start `laneledger serve` with LANELEDGER_TOKEN or --token-file",
        )
        .into_response();
    };
    match offered(request.headers()) {
        Offered::Bearer(t) if token.matches(t) => next.run(request).await,
        Offered::None => unauthorized("missing Authorization: Bearer <token>", false),
        Offered::Bearer(_) => unauthorized("wrong token", false),
        Offered::Basic(_) | Offered::Other => unauthorized("writes take Authorization: Bearer <token>", false),
    }
}

/// Middleware of the read routes: open unless [`Auth::reads_need_token`]; then the token as
/// `Bearer`, or as the password of HTTP Basic, or 401 with a Basic challenge.
pub async fn require_read(State(auth): State<std::sync::Arc<Auth>>, request: Request, next: Next) -> Response {
    if !auth.reads_need_token {
        return next.run(request).await;
    }
    let Some(token) = &auth.token else {
        return ApiError::new(StatusCode::FORBIDDEN, "reads need a token and none is configured").into_response();
    };
    let ok = match offered(request.headers()) {
        Offered::Bearer(t) => token.matches(t),
        Offered::Basic(t) => token.matches(&t),
        Offered::None | Offered::Other => false,
    };
    if ok {
        next.run(request).await
    } else {
        unauthorized("this server needs its token to read", true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_match_exactly() {
        let t = Token::new("s3cret-token-0123456789\n").unwrap();
        assert!(t.matches(b"s3cret-token-0123456789"));
        for wrong in [
            &b""[..],
            b"s3cret-token-012345678",
            b"s3cret-token-0123456789x",
            b"S3cret-token-0123456789",
        ] {
            assert!(!t.matches(wrong), "{:?}", String::from_utf8_lossy(wrong));
        }
        assert_eq!(Token::new("short").unwrap_err(), TokenError::TooShort(5));
        assert_eq!(
            Token::new("has a space inside!!").unwrap_err(),
            TokenError::BadCharacter
        );
    }
}
