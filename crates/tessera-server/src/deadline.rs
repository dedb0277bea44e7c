//! The request timeout of the routes that write (the admin API and the console), and the
//! point past which it no longer cuts a request: its first store write.
//!
//! A write sent to the store may commit at any moment until the store answers. Cut there,
//! the request would be answered 408 for what was done: a client created and its secret,
//! shown only in the answer, lost. So once a request has sent a write, it is answered with
//! the write's outcome whenever that comes, a success or the store's own 503; what bounds it
//! then is the store: the pool's wait for a connection (5 s) and, on PostgreSQL, the
//! write's lock and statement timeouts (`tessera_store::WRITE_LOCK_TIMEOUT`,
//! `WRITE_STATEMENT_TIMEOUT`). Before its first write (reading its body, checking its
//! token, reading the store) a request is cut at the timeout as everywhere else: nothing is
//! done yet.
//!
//! The store's watch (`store_watch.rs`) marks the request before each write, through a
//! task-local flag: it sees every write the server makes, those of the console's in-process
//! calls to the admin API included, and the flag is read only between polls of the request,
//! so a write is never begun after the timeout was judged.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

tokio::task_local! {
    /// Set once the request this task serves has sent a write to the store.
    static WRITING: Arc<AtomicBool>;
}

/// Marks the request being served, if any, as past its commit point: called before every
/// store write. A write made by no request (housekeeping) marks nothing.
pub(crate) fn writing() {
    let _ = WRITING.try_with(|w| w.store(true, Ordering::Relaxed));
}

/// Runs `request` and answers 408 (RFC 9110 section 15.5.9) if it is not done within
/// `timeout`, unless it has sent a write by then: that one is answered when it is done.
pub(crate) async fn bounded(timeout: Duration, request: Request, next: Next) -> Response {
    let wrote = Arc::new(AtomicBool::new(false));
    let answer = WRITING.scope(wrote.clone(), next.run(request));
    tokio::pin!(answer);
    tokio::select! {
        response = &mut answer => response,
        () = tokio::time::sleep(timeout) => {
            if !wrote.load(Ordering::Relaxed) {
                return StatusCode::REQUEST_TIMEOUT.into_response();
            }
            tracing::warn!(
                timeout_secs = timeout.as_secs_f64(),
                "a request reached its timeout while its store write was in flight; it is \
                 answered when the write is done"
            );
            answer.await
        }
    }
}
