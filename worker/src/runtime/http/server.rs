//! Serving the worker's HTTP port with bounds a slow or hostile client cannot get around: at
//! most [`Limits::connections`] connections at once (the next one waits to be accepted), and
//! a request whose headers do not arrive within [`Limits::header_read`] is dropped with its
//! connection. The operator polls each worker a few times a second with one short request per
//! connection, so neither bound is ever near for it; without them, clients that open
//! connections and send nothing would hold file descriptors for as long as they like.
//!
//! A pod's worker also listens on loopback ([`loopback_companion`]), so `kubectl port-forward`
//! reaches it.

use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// The loopback address to serve as well, when the configured one is a specific outside
/// address. In a cluster the worker listens on its pod IP (so several worker "pods" can share
/// one host in the local node), but `kubectl port-forward` connects to loopback inside the pod.
pub fn loopback_companion(listen: SocketAddr) -> Option<SocketAddr> {
    let ip = listen.ip();
    if ip.is_loopback() || ip.is_unspecified() {
        return None;
    }
    let loopback = match ip {
        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::LOCALHOST),
    };
    Some(SocketAddr::new(loopback, listen.port()))
}

/// The bounds of one listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub connections: usize,
    pub header_read: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            connections: 64,
            header_read: Duration::from_secs(5),
        }
    }
}

/// Serves `app` on `listener` on its own task until the runtime ends.
pub fn spawn(listener: TcpListener, app: axum::Router, limits: Limits) {
    tokio::spawn(serve(listener, app, limits));
}

async fn serve(listener: TcpListener, app: axum::Router, limits: Limits) {
    let permits = Arc::new(Semaphore::new(limits.connections));
    loop {
        // Closed never: the semaphore lives as long as this loop.
        let Ok(permit) = Arc::clone(&permits).acquire_owned().await else {
            return;
        };
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(error) => {
                // Out of file descriptors, say: wait a moment rather than spin.
                tracing::warn!(%error, "cannot accept an HTTP connection");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let service = TowerToHyperService::new(app.clone());
        tokio::spawn(async move {
            let _permit = permit;
            let connection = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_read)
                .serve_connection(TokioIo::new(stream), service);
            if let Err(error) = connection.await {
                tracing::debug!(%error, "HTTP connection ended");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::get;
    use std::time::Instant;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    async fn start(limits: Limits) -> std::net::SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        spawn(
            listener,
            axum::Router::new().route("/healthz", get(|| async { "ok" })),
            limits,
        );
        address
    }

    async fn healthz(address: std::net::SocketAddr) -> String {
        let mut stream = TcpStream::connect(address).await.unwrap();
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: w\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.unwrap();
        answer
    }

    #[tokio::test]
    async fn a_client_that_never_finishes_its_headers_is_cut_off() {
        let limits = Limits {
            connections: 4,
            header_read: Duration::from_millis(300),
        };
        let address = start(limits).await;
        let mut slow = TcpStream::connect(address).await.unwrap();
        slow.write_all(b"GET /healthz HTTP/1.1\r\n").await.unwrap();
        let asked = Instant::now();
        let mut rest = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(5), slow.read_to_end(&mut rest)).await;
        assert!(read.is_ok(), "the server closed the connection");
        assert!(
            asked.elapsed() < Duration::from_secs(2),
            "{:?}",
            asked.elapsed()
        );
        assert!(healthz(address).await.ends_with("ok"));
    }

    #[tokio::test]
    async fn connections_past_the_limit_wait_until_one_ends() {
        let limits = Limits {
            connections: 2,
            header_read: Duration::from_secs(600),
        };
        let address = start(limits).await;
        let idle: Vec<TcpStream> =
            futures::future::join_all((0..2).map(|_| TcpStream::connect(address)))
                .await
                .into_iter()
                .map(Result::unwrap)
                .collect();
        let waiting = tokio::spawn(healthz(address));
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            !waiting.is_finished(),
            "a third connection is not served while two are held"
        );
        drop(idle);
        let answer = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .unwrap()
            .unwrap();
        assert!(answer.ends_with("ok"), "{answer}");
    }

    fn addr(text: &str) -> SocketAddr {
        text.parse().unwrap()
    }

    #[test]
    fn a_pod_address_is_served_on_loopback_too() {
        assert_eq!(
            loopback_companion(addr("10.244.1.7:8080")),
            Some(addr("127.0.0.1:8080"))
        );
        assert_eq!(
            loopback_companion(addr("[fd00::7]:8080")),
            Some(addr("[::1]:8080"))
        );
    }

    #[test]
    fn loopback_and_wildcard_addresses_need_no_companion() {
        // The local node gives each worker pod its own 127.0.0.x; a second listener on
        // 127.0.0.1 would collide between them.
        assert_eq!(loopback_companion(addr("127.0.0.11:8080")), None);
        assert_eq!(loopback_companion(addr("0.0.0.0:8080")), None);
        assert_eq!(loopback_companion(addr("[::]:8080")), None);
        assert_eq!(loopback_companion(addr("[::1]:8080")), None);
    }
}
