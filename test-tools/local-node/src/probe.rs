//! HTTP GET probes, as the kubelet runs them: success is a status from 200 to 399 within the
//! timeout.

use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub async fn http_get(address: &str, port: u16, path: &str, timeout: Duration) -> bool {
    tokio::time::timeout(timeout, get(address, port, path))
        .await
        .ok()
        .flatten()
        .is_some_and(|status| (200..400).contains(&status))
}

async fn get(address: &str, port: u16, path: &str) -> Option<u16> {
    let mut stream = tokio::net::TcpStream::connect((address, port)).await.ok()?;
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {address}:{port}\r\nUser-Agent: kube-probe/1.34\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut head = vec![0u8; 64];
    let n = stream.read(&mut head).await.ok()?;
    let line = std::str::from_utf8(&head[..n]).ok()?;
    line.split_whitespace().nth(1)?.parse().ok()
}
