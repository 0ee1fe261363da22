//! The operator's calls to a worker's HTTP port: `GET /v1/tasks` (each task's report, for the
//! job's status) and `POST /v1/checkpoints` (take a checkpoint of every active task now, answered
//! when the manifests are written), before suspend.
//!
//! A plain HTTP/1.1 exchange over one TCP connection: one request, the answer read to the end,
//! connection closed. That is all this needs, and it keeps an HTTP client stack out of the
//! operator.

use std::time::Duration;
use streamkeeper_contract::{AssignmentDocument, TaskReportsDocument, Versioned};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

pub const CHECKPOINT_PATH: &str = "/v1/checkpoints";
pub const TASKS_PATH: &str = "/v1/tasks";
pub const ASSIGNMENT_PATH: &str = "/v1/assignment";

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
    #[error("worker {host}:{port} answered something unreadable: {reason}")]
    Unreadable {
        host: String,
        port: u16,
        reason: String,
    },
}

/// `POST /v1/checkpoints` on `host:port`; `Ok` on a 2xx answer.
pub async fn request_checkpoint(
    host: &str,
    port: u16,
    timeout: Duration,
) -> Result<(), WorkerCallError> {
    exchange(host, port, "POST", CHECKPOINT_PATH, b"", timeout)
        .await
        .map(drop)
}

/// `PUT /v1/assignment` on `host:port`: the worker acts on `document` (or refuses an older
/// generation than it has seen, which is a `Refused` error).
pub async fn put_assignment(
    host: &str,
    port: u16,
    document: &AssignmentDocument,
    timeout: Duration,
) -> Result<(), WorkerCallError> {
    exchange(
        host,
        port,
        "PUT",
        ASSIGNMENT_PATH,
        &document.to_json(),
        timeout,
    )
    .await
    .map(drop)
}

/// `GET /v1/tasks` on `host:port`: the reports of every task the worker hosts.
pub async fn task_reports(
    host: &str,
    port: u16,
    timeout: Duration,
) -> Result<TaskReportsDocument, WorkerCallError> {
    let body = exchange(host, port, "GET", TASKS_PATH, b"", timeout).await?;
    TaskReportsDocument::from_json(&body).map_err(|error| WorkerCallError::Unreadable {
        host: host.to_string(),
        port,
        reason: error.to_string(),
    })
}

/// One request; the body of a 2xx answer.
async fn exchange(
    host: &str,
    port: u16,
    method: &str,
    path: &str,
    body: &[u8],
    timeout: Duration,
) -> Result<Vec<u8>, WorkerCallError> {
    match tokio::time::timeout(timeout, exchange_unbounded(host, port, method, path, body)).await {
        Ok(result) => result,
        Err(_) => Err(WorkerCallError::Timeout {
            host: host.to_string(),
            port,
            timeout,
        }),
    }
}

async fn exchange_unbounded(
    host: &str,
    port: u16,
    method: &str,
    path: &str,
    body: &[u8],
) -> Result<Vec<u8>, WorkerCallError> {
    let unreachable = |source| WorkerCallError::Unreachable {
        host: host.to_string(),
        port,
        source,
    };
    let mut stream = TcpStream::connect((host, port))
        .await
        .map_err(unreachable)?;
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    request.extend_from_slice(body);
    stream.write_all(&request).await.map_err(unreachable)?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.map_err(unreachable)?;
    let unreadable = |reason: &str| WorkerCallError::Unreadable {
        host: host.to_string(),
        port,
        reason: reason.to_string(),
    };
    let split = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| unreadable("no end of the headers"))?;
    let head = String::from_utf8_lossy(&answer[..split]).to_string();
    let body = &answer[split + 4..];
    let status_line = head.lines().next().unwrap_or_default().to_string();
    let success = status_line
        .split_whitespace()
        .nth(1)
        .is_some_and(|code| code.starts_with('2'));
    if !success {
        return Err(WorkerCallError::Refused {
            host: host.to_string(),
            port,
            status_line,
        });
    }
    let chunked = head.lines().any(|line| {
        let line = line.to_ascii_lowercase();
        line.starts_with("transfer-encoding:") && line.contains("chunked")
    });
    if chunked {
        dechunk(body).ok_or_else(|| unreadable("a broken chunked body"))
    } else {
        Ok(body.to_vec())
    }
}

/// The payload of a `Transfer-Encoding: chunked` body.
fn dechunk(mut body: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let line_end = body.windows(2).position(|w| w == b"\r\n")?;
        let size_text = std::str::from_utf8(&body[..line_end]).ok()?;
        let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
        body = &body[line_end + 2..];
        if size == 0 {
            return Some(out);
        }
        out.extend_from_slice(body.get(..size)?);
        body = body.get(size + 2..)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    async fn serve_once(answer: &'static str) -> u16 {
        serve_once_at(CHECKPOINT_PATH, "POST", answer).await
    }

    async fn serve_once_at(path: &'static str, method: &'static str, answer: &'static str) -> u16 {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut buffer = [0u8; 1024];
            let read = socket.read(&mut buffer).await.unwrap();
            let request = String::from_utf8_lossy(&buffer[..read]).to_string();
            assert!(
                request.starts_with(&format!("{method} {path} HTTP/1.1\r\n")),
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
    async fn task_reports_are_read_plain_or_chunked() {
        let document = TaskReportsDocument::new(vec![streamkeeper_contract::TaskReport::new(
            3,
            streamkeeper_contract::task_report::TaskRole::Active,
        )]);
        let json = String::from_utf8(document.to_json()).unwrap();
        let plain = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{json}",
            json.len()
        );
        let (head, tail) = json.split_at(10);
        let chunked = format!(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{head}\r\n{:x}\r\n{tail}\r\n0\r\n\r\n",
            head.len(),
            tail.len()
        );
        for answer in [plain, chunked] {
            let answer: &'static str = Box::leak(answer.into_boxed_str());
            let port = serve_once_at(TASKS_PATH, "GET", answer).await;
            let got = task_reports("127.0.0.1", port, Duration::from_secs(5))
                .await
                .unwrap();
            assert_eq!(got, document);
        }
        let port = serve_once_at(TASKS_PATH, "GET", "HTTP/1.1 200 OK\r\n\r\n{\"version\":9}").await;
        let error = task_reports("127.0.0.1", port, Duration::from_secs(5))
            .await
            .unwrap_err();
        assert!(error.to_string().contains("version 9"), "{error}");
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
