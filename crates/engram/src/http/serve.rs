//! The connection loop of `engram serve`: accept TCP connections and serve HTTP/1.1 on each
//! with hyper, until a stop is asked.
//!
//! `axum::serve` builds hyper's connection without a timer, so hyper's header read timeout
//! never runs and a client that opens a connection and sends its request line and headers
//! slowly, or never, holds a socket and a task for good. Here each connection gets a Tokio
//! timer and a header timeout: a request's headers must arrive whole within it, and a kept-
//! alive connection that starts no new request within it is closed. Bodies have their own
//! rule (`limits::guard_body`, 408 after a pause).
//!
//! Every request carries `ConnectInfo<SocketAddr>` as `into_make_service_with_connect_info`
//! would add it: the rate limit of requests without a valid key is keyed by it.

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt as _;

/// Serve `router` on `listener` until `stop` is cancelled, then stop accepting and let the
/// open connections finish their requests (the caller bounds how long).
pub async fn serve(
    listener: TcpListener,
    router: Router,
    header_timeout: Duration,
    stop: CancellationToken,
) {
    let graceful = GracefulShutdown::new();
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(header_timeout);
    loop {
        let (tcp, remote) = tokio::select! {
            () = stop.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors and the like: the listener itself is fine,
                    // so wait a little instead of spinning (what axum::serve does too).
                    tracing::warn!(error = %e, "cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        // Small writes (a streamed chunk, an SSE event) go out at once, not after the
        // peer's delayed ACK.
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "cannot set TCP_NODELAY");
        }
        let service = router.clone().map_request(move |req: hyper::Request<Incoming>| {
            let mut req = req.map(Body::new);
            req.extensions_mut().insert(ConnectInfo::<SocketAddr>(remote));
            req
        });
        let conn = builder.serve_connection(TokioIo::new(tcp), TowerToHyperService::new(service));
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::trace!(error = %e, %remote, "connection ended with an error");
            }
        });
    }
    drop(listener);
    graceful.shutdown().await;
}
