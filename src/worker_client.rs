//! The operator's calls to a worker's HTTP port: `GET /v1/tasks` (each task's report, for the
//! job's status) and `POST /v1/checkpoints` (take a checkpoint of every active task now, answered
//! when the manifests are written), before suspend. The second changes the worker, so it carries
//! the job's worker token (`Authorization: Bearer`); paths and header are the contract's
//! `worker_http`.
//!
//! A plain HTTP/1.1 exchange over one TCP connection: one request, the answer read to the end,
//! connection closed. That is all this needs, and it keeps an HTTP client stack out of the
//! operator.

use std::time::Duration;
use streamkeeper_contract::worker_http::{
    ASSIGNMENT_PATH, AUTHORIZATION_HEADER, CHECKPOINTS_PATH, TASKS_PATH,
};
use streamkeeper_contract::{
    AssignmentDocument, ErrorDocument, TaskReportsDocument, Versioned, WorkerToken,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

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
    #[error("worker {host}:{port} answered {status_line:?}{}", detail.as_ref().map(|d| format!(": {d}")).unwrap_or_default())]
    Refused {
        host: String,
        port: u16,
        status_line: String,
        /// The worker's own reason, when the body is its error document.
        detail: Option<String>,
    },
    #[error("worker {host}:{port} answered something unreadable: {reason}")]
    Unreadable {
        host: String,
        port: u16,
        reason: String,
    },
}

/// `POST /v1/checkpoints` on `host:port` with the job's `token` (`None` when the job has no
/// token Secret yet: the worker then refuses, and says why); `Ok` on a 2xx answer.
pub async fn request_checkpoint(
    host: &str,
    port: u16,
    token: Option<&WorkerToken>,
    timeout: Duration,
) -> Result<(), WorkerCallError> {
    let request = Request {
        method: "POST",
        path: CHECKPOINTS_PATH,
        authorization: token.map(WorkerToken::authorization),
        body: Vec::new(),
    };
    exchange(host, port, &request, timeout).await.map(drop)
}

/// `PUT /v1/assignment` on `host:port` with the job's `token`: the worker acts on `document`,
/// or refuses an older generation than it has seen (a `Refused` error).
pub async fn put_assignment(
    host: &str,
    port: u16,
    token: Option<&WorkerToken>,
    document: &AssignmentDocument,
    timeout: Duration,
) -> Result<(), WorkerCallError> {
    let request = Request {
        method: "PUT",
        path: ASSIGNMENT_PATH,
        authorization: token.map(WorkerToken::authorization),
        body: document.to_json(),
    };
    exchange(host, port, &request, timeout).await.map(drop)
}

/// `GET /v1/tasks` on `host:port`: the reports of every task the worker hosts.
pub async fn task_reports(
    host: &str,
    port: u16,
    timeout: Duration,
) -> Result<TaskReportsDocument, WorkerCallError> {
    let request = Request {
        method: "GET",
        path: TASKS_PATH,
        authorization: None,
        body: Vec::new(),
    };
    let body = exchange(host, port, &request, timeout).await?;
    TaskReportsDocument::from_json(&body).map_err(|error| WorkerCallError::Unreadable {
        host: host.to_string(),
        port,
        reason: error.to_string(),
    })
}

/// A request without a body.
struct Request {
    method: &'static str,
    path: &'static str,
    /// The value of the `Authorization` header, if any.
    authorization: Option<String>,
    /// A JSON body (empty for none).
    body: Vec<u8>,
}

/// One request; the body of a 2xx answer.
async fn exchange(
    host: &str,
    port: u16,
    request: &Request,
    timeout: Duration,
) -> Result<Vec<u8>, WorkerCallError> {
    match tokio::time::timeout(timeout, exchange_unbounded(host, port, request)).await {
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
    request: &Request,
) -> Result<Vec<u8>, WorkerCallError> {
    let unreachable = |source| WorkerCallError::Unreachable {
        host: host.to_string(),
        port,
        source,
    };
    let mut stream = TcpStream::connect((host, port))
        .await
        .map_err(unreachable)?;
    let Request {
        method,
        path,
        authorization,
        body,
    } = request;
    let authorization = authorization
        .as_ref()
        .map(|value| format!("{AUTHORIZATION_HEADER}: {value}\r\n"))
        .unwrap_or_default();
    let content_type = if body.is_empty() {
        ""
    } else {
        "Content-Type: application/json\r\n"
    };
    let mut bytes = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}:{port}\r\n{authorization}{content_type}Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    bytes.extend_from_slice(body);
    stream.write_all(&bytes).await.map_err(unreachable)?;
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
    let chunked = head.lines().any(|line| {
        let line = line.to_ascii_lowercase();
        line.starts_with("transfer-encoding:") && line.contains("chunked")
    });
    let body = if chunked {
        dechunk(body)
    } else {
        Some(body.to_vec())
    };
    if !success {
        return Err(WorkerCallError::Refused {
            host: host.to_string(),
            port,
            status_line,
            detail: body
                .and_then(|body| ErrorDocument::from_json(&body).ok())
                .map(|document| document.error),
        });
    }
    body.ok_or_else(|| unreadable("a broken chunked body"))
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
    use streamkeeper_contract::worker_http::TOKEN_BYTES;
    use tokio::net::TcpListener;
    use tokio::task::JoinHandle;

    fn token() -> WorkerToken {
        WorkerToken::from_random_bytes(&[7; TOKEN_BYTES])
    }

    /// Answers one request with `answer`; the handle yields the request's head.
    async fn serve_once(answer: &'static str) -> (u16, JoinHandle<String>) {
        serve_once_at(CHECKPOINTS_PATH, "POST", answer).await
    }

    async fn serve_once_at(
        path: &'static str,
        method: &'static str,
        answer: &'static str,
    ) -> (u16, JoinHandle<String>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let handle = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut buffer = [0u8; 1024];
            let read = socket.read(&mut buffer).await.unwrap();
            let request = String::from_utf8_lossy(&buffer[..read]).to_string();
            assert!(
                request.starts_with(&format!("{method} {path} HTTP/1.1\r\n")),
                "{request}"
            );
            socket.write_all(answer.as_bytes()).await.unwrap();
            request
        });
        (port, handle)
    }

    #[tokio::test]
    async fn a_2xx_answer_is_success_and_anything_else_is_refused() {
        let (port, _) = serve_once("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n").await;
        request_checkpoint("127.0.0.1", port, Some(&token()), Duration::from_secs(5))
            .await
            .unwrap();
        let (port, _) = serve_once("HTTP/1.1 503 Service Unavailable\r\n\r\n").await;
        let error = request_checkpoint("127.0.0.1", port, Some(&token()), Duration::from_secs(5))
            .await
            .unwrap_err();
        assert!(error.to_string().contains("503"), "{error}");
    }

    #[tokio::test]
    async fn a_checkpoint_request_carries_the_token_and_a_read_does_not() {
        let (port, request) = serve_once("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n").await;
        request_checkpoint("127.0.0.1", port, Some(&token()), Duration::from_secs(5))
            .await
            .unwrap();
        let head = request.await.unwrap();
        let expected = format!("\r\nauthorization: Bearer {}\r\n", token().as_str());
        assert!(head.contains(&expected), "{head}");

        let (port, request) = serve_once_at(
            TASKS_PATH,
            "GET",
            "HTTP/1.1 200 OK\r\n\r\n{\"version\":1,\"tasks\":[]}",
        )
        .await;
        task_reports("127.0.0.1", port, Duration::from_secs(5))
            .await
            .unwrap();
        let head = request.await.unwrap();
        assert!(
            !head.to_ascii_lowercase().contains("authorization"),
            "{head}"
        );
    }

    #[tokio::test]
    async fn a_refusal_carries_the_workers_reason() {
        let (port, _) = serve_once(
            "HTTP/1.1 401 Unauthorized\r\ncontent-length: 40\r\n\r\n{\"version\":1,\"error\":\"wrong token here\"}",
        )
        .await;
        let error = request_checkpoint("127.0.0.1", port, None, Duration::from_secs(5))
            .await
            .unwrap_err();
        let message = error.to_string();
        assert!(message.contains("401 Unauthorized"), "{message}");
        assert!(message.ends_with(": wrong token here"), "{message}");
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
            let (port, _) = serve_once_at(TASKS_PATH, "GET", answer).await;
            let got = task_reports("127.0.0.1", port, Duration::from_secs(5))
                .await
                .unwrap();
            assert_eq!(got, document);
        }
        let (port, _) =
            serve_once_at(TASKS_PATH, "GET", "HTTP/1.1 200 OK\r\n\r\n{\"version\":9}").await;
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
        let error = request_checkpoint("127.0.0.1", port, None, Duration::from_secs(5))
            .await
            .unwrap_err();
        assert!(
            matches!(error, WorkerCallError::Unreachable { .. }),
            "{error}"
        );
    }
}
