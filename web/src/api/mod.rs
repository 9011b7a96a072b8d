//! The JSON routes: writes of records, decisions, a router's own log and OTLP traces; reads of
//! SQL, the review, one job or idempotency key, `/metrics`; the export and verify that the
//! command line uses beside a running server. It imports `server/`, never `pages/`.

pub mod cli_api;
pub mod ingest_api;
pub mod mapped_api;
pub mod otlp;
pub mod read_api;
