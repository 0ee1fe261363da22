//! The operator's calls to a worker's HTTP port. Only `POST /v1/checkpoints` (take a checkpoint
//! of every active task now, answered when the manifests are written) is used, before suspend.
//!
//! A plain HTTP/1.1 exchange over one TCP connection: one request, status line read, connection
//! closed. That is all this needs, and it keeps an HTTP client stack out of the operator.

use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

pub const CHECKPOINT_PATH: &str = "/v1/checkpoints";

#[derive(Debug, thiserror::Error)]
pub enum WorkerCallError {
    #[error("worker {host}:{port} is unreachable: {source}")]
    Unreachable {
        host: String,
        port: u16,
        #[source]
        source: std::io::Error,
    },
    #[error("worker {host}:{port} did not answer within {timeout:?}")]
    Timeout {
        host: String,
        port: u16,
        timeout: Duration,
    },
    #[error("worker {host}:{port} answered {status_line:?}")]
    Refused {
        host: String,
        port: u16,
        status_line: String,
    },
}

/// `POST /v1/checkpoints` on `host:port`; `Ok` on a 2xx answer.
pub async fn request_checkpoint(
    host: &str,
    port: u16,
    timeout: Duration,
) -> Result<(), WorkerCallError> {
    match tokio::time::timeout(timeout, post(host, port, CHECKPOINT_PATH)).await {
        Ok(result) => result,
        Err(_) => Err(WorkerCallError::Timeout {
            host: host.to_string(),
            port,
            timeout,
        }),
    }
}

async fn post(host: &str, port: u16, path: &str) -> Result<(), WorkerCallError> {
    let unreachable = |source| WorkerCallError::Unreachable {
        host: host.to_string(),
        port,
        source,
    };
    let mut stream = TcpStream::connect((host, port))
        .await
        .map_err(unreachable)?;
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(unreachable)?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.map_err(unreachable)?;
    let text = String::from_utf8_lossy(&answer);
    let status_line = text.lines().next().unwrap_or_default().to_string();
    let success = status_line
        .split_whitespace()
        .nth(1)
        .is_some_and(|code| code.starts_with('2'));
    if success {
        Ok(())
    } else {
        Err(WorkerCallError::Refused {
            host: host.to_string(),
            port,
            status_line,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    async fn serve_once(answer: &'static str) -> u16 {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut buffer = [0u8; 1024];
            let read = socket.read(&mut buffer).await.unwrap();
            let request = String::from_utf8_lossy(&buffer[..read]).to_string();
            assert!(
                request.starts_with("POST /v1/checkpoints HTTP/1.1\r\n"),
                "{request}"
            );
            socket.write_all(answer.as_bytes()).await.unwrap();
        });
        port
    }

    #[tokio::test]
    async fn a_2xx_answer_is_success_and_anything_else_is_refused() {
        let port = serve_once("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n").await;
        request_checkpoint("127.0.0.1", port, Duration::from_secs(5))
            .await
            .unwrap();
        let port = serve_once("HTTP/1.1 503 Service Unavailable\r\n\r\n").await;
        let error = request_checkpoint("127.0.0.1", port, Duration::from_secs(5))
            .await
            .unwrap_err();
        assert!(error.to_string().contains("503"), "{error}");
    }

    #[tokio::test]
    async fn a_closed_port_is_unreachable() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        let error = request_checkpoint("127.0.0.1", port, Duration::from_secs(5))
            .await
            .unwrap_err();
        assert!(
            matches!(error, WorkerCallError::Unreachable { .. }),
            "{error}"
        );
    }
}
