//! Stopping on a signal.

use std::future::Future;

/// Listens for SIGINT and SIGTERM from this call on, and returns a future that resolves on
/// the first of them. The handlers are in place when the function returns, not when the
/// future is first polled: call it before the server says it listens, so that a signal sent
/// as soon as it does (a supervisor stopping a server that just started) stops it cleanly
/// rather than meeting the default action, which kills the process.
pub fn shutdown_signal() -> impl Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    let stop = {
        use tokio::signal::unix::{signal, SignalKind};
        let interrupt = signal(SignalKind::interrupt()).ok();
        let terminate = signal(SignalKind::terminate()).ok();
        async move {
            let received = |stream: Option<tokio::signal::unix::Signal>| async move {
                match stream {
                    Some(mut stream) => {
                        stream.recv().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                () = received(interrupt) => {},
                () = received(terminate) => {},
            }
        }
    };
    #[cfg(not(unix))]
    let stop = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    async move {
        stop.await;
        tracing::info!("shutting down; finishing in-flight requests");
    }
}
