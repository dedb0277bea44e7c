//! All integration tests of tessera-verify, in one binary.

mod cache;
mod defaults;
mod dpop;
mod helpers;
mod hostile;
mod limits;
mod plain_http;
mod router;
mod tessera;
mod token_cache;
