//! Serving: the accept loop with its connection limits, request bodies, the tokens, the turns
//! SQL requests wait for, and the one writer thread. It imports nothing of `api/` or `pages/`.

pub mod admission;
pub mod auth;
pub mod body;
pub mod connections;
pub mod state;
pub mod writer;
