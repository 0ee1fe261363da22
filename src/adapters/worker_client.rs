//! The operator's calls to a worker's HTTP port: `GET /v1/tasks` (each task's report, for the
//! job's status, and for the failover loop's links to workers older than the report stream of
//! [`super::report_stream`]), `PUT /v1/assignment`
//! (the failover loop's decision) and `POST /v1/checkpoints` (take a checkpoint of every active
//! task now, answered when the manifests are written), before suspend. The mutating ones carry
//! the job's worker token (`Authorization: Bearer`); paths and header are the contract's
//! `worker_http`.
//!
//! HTTP is hyper's (`client::conn::http1`), over a TCP connection this module opens itself, one
//! per call: so a refused connection is the connect's own `io::Error`, which the failover loop
//! reads as "the pod is down" at once, and a pooled connection that went stale can never stand in
//! for a live worker. Every call has a timeout for the whole exchange, and an answer's body is
//! read up to [`MAX_ANSWER_BYTES`], never further.

use http::header::{CONNECTION, CONTENT_TYPE, HOST};
use http::{Method, Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Bytes, Incoming};
use hyper_util::rt::TokioIo;
use std::time::Duration;
use streamkeeper_contract::worker_http::{
    ASSIGNMENT_PATH, AUTHORIZATION_HEADER, CHECKPOINTS_PATH, TASKS_PATH,
};
use streamkeeper_contract::{
    AssignmentDocument, ErrorDocument, TaskReportsDocument, Versioned, WorkerToken,
};
use tokio::net::TcpStream;

/// The largest answer body read. A worker's biggest answer, `GET /v1/tasks`, is well under a
/// kilobyte per task; anything near this is not a worker answering, and reading it would only
/// cost the operator memory.
pub const MAX_ANSWER_BYTES: usize = 8 << 20;

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
        /// The answer's status code.
        status: u16,
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

impl WorkerCallError {
    /// Whether the worker refused the call's token (401): it holds another one.
    pub fn is_unauthorized(&self) -> bool {
        matches!(self, WorkerCallError::Refused { status: 401, .. })
    }
}

/// `POST /v1/checkpoints` on `host:port` with the job's `token` (`None` when the job has no
/// token Secret yet: the worker then refuses, and says why); `Ok` on a 2xx answer.
pub async fn request_checkpoint(
    host: &str,
    port: u16,
    token: Option<&WorkerToken>,
    timeout: Duration,
) -> Result<(), WorkerCallError> {
    let call = Call {
        method: Method::POST,
        path: CHECKPOINTS_PATH.to_string(),
        authorization: token.map(WorkerToken::authorization),
        body: Vec::new(),
    };
    exchange(&Worker { host, port }, call, timeout)
        .await
        .map(drop)
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
    let call = Call {
        method: Method::PUT,
        path: ASSIGNMENT_PATH.to_string(),
        authorization: token.map(WorkerToken::authorization),
        body: document.to_json(),
    };
    exchange(&Worker { host, port }, call, timeout)
        .await
        .map(drop)
}

/// `GET /v1/tasks` on `host:port`: the reports of every task the worker hosts.
pub async fn task_reports(
    host: &str,
    port: u16,
    timeout: Duration,
) -> Result<TaskReportsDocument, WorkerCallError> {
    let worker = Worker { host, port };
    let call = Call {
        method: Method::GET,
        path: TASKS_PATH.to_string(),
        authorization: None,
        body: Vec::new(),
    };
    let body = exchange(&worker, call, timeout).await?;
    TaskReportsDocument::from_json(&body).map_err(|error| worker.unreadable(error.to_string()))
}

/// One request to send.
pub(super) struct Call {
    pub(super) method: Method,
    pub(super) path: String,
    /// The value of the `Authorization` header, if any.
    pub(super) authorization: Option<String>,
    /// A JSON body (empty for none).
    pub(super) body: Vec<u8>,
}

/// The worker called, for the errors.
pub(super) struct Worker<'a> {
    pub(super) host: &'a str,
    pub(super) port: u16,
}

impl Worker<'_> {
    pub(super) fn unreachable(&self, source: std::io::Error) -> WorkerCallError {
        WorkerCallError::Unreachable {
            host: self.host.to_string(),
            port: self.port,
            source,
        }
    }

    pub(super) fn unreadable(&self, reason: String) -> WorkerCallError {
        WorkerCallError::Unreadable {
            host: self.host.to_string(),
            port: self.port,
            reason,
        }
    }

    /// A failure hyper reports: one of the connection (its `io::Error`, kind kept) is
    /// `Unreachable`, one of the answer's framing is `Unreadable`.
    pub(super) fn failed(&self, error: hyper::Error) -> WorkerCallError {
        let io = std::error::Error::source(&error)
            .and_then(|source| source.downcast_ref::<std::io::Error>())
            .map(std::io::Error::kind);
        match io {
            Some(kind) => self.unreachable(std::io::Error::new(kind, error)),
            None if error.is_incomplete_message() || error.is_closed() => self.unreachable(
                std::io::Error::new(std::io::ErrorKind::UnexpectedEof, error),
            ),
            None => self.unreadable(error.to_string()),
        }
    }
}

/// One call; the body of a 2xx answer.
async fn exchange(
    worker: &Worker<'_>,
    call: Call,
    timeout: Duration,
) -> Result<Vec<u8>, WorkerCallError> {
    match tokio::time::timeout(timeout, exchange_unbounded(worker, call)).await {
        Ok(result) => result,
        Err(_) => Err(WorkerCallError::Timeout {
            host: worker.host.to_string(),
            port: worker.port,
            timeout,
        }),
    }
}

async fn exchange_unbounded(worker: &Worker<'_>, call: Call) -> Result<Vec<u8>, WorkerCallError> {
    let request = request(worker, call)?;
    let stream = TcpStream::connect((worker.host, worker.port))
        .await
        .map_err(|source| worker.unreachable(source))?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|error| worker.failed(error))?;
    let answer = async move {
        let response = sender
            .send_request(request)
            .await
            .map_err(|error| worker.failed(error))?;
        // The connection ends once the sender is gone and the answer read.
        drop(sender);
        read_answer(worker, response).await
    };
    // The connection is driven beside the call, on this task: when the call times out, both
    // are dropped and the socket closed, nothing is left running.
    let (answer, _connection) = futures::future::join(answer, connection).await;
    answer
}

/// The request `call` describes. Every header is the contract's or a constant; the one that
/// could be refused, the token, comes from a parsed `WorkerToken`.
pub(super) fn request(
    worker: &Worker<'_>,
    call: Call,
) -> Result<Request<Full<Bytes>>, WorkerCallError> {
    let Call {
        method,
        path,
        authorization,
        body,
    } = call;
    let mut builder = Request::builder()
        .method(method)
        .uri(path)
        .header(HOST, format!("{}:{}", worker.host, worker.port))
        .header(CONNECTION, "close");
    if let Some(value) = authorization {
        builder = builder.header(AUTHORIZATION_HEADER, value);
    }
    if !body.is_empty() {
        builder = builder.header(CONTENT_TYPE, "application/json");
    }
    builder.body(Full::new(Bytes::from(body))).map_err(|error| {
        worker.unreachable(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("the request cannot be written: {error}"),
        ))
    })
}

/// The body of a 2xx answer; any other status is `Refused`, with the worker's reason when its
/// body is the worker's error document.
pub(super) async fn read_answer(
    worker: &Worker<'_>,
    response: Response<Incoming>,
) -> Result<Vec<u8>, WorkerCallError> {
    let (parts, body) = response.into_parts();
    let body = read_body(worker, body).await;
    if parts.status.is_success() {
        return body;
    }
    Err(WorkerCallError::Refused {
        host: worker.host.to_string(),
        port: worker.port,
        status: parts.status.as_u16(),
        status_line: format!("{:?} {}", parts.version, parts.status),
        detail: body
            .ok()
            .and_then(|body| ErrorDocument::from_json(&body).ok())
            .map(|document| document.error),
    })
}

/// The body, read up to [`MAX_ANSWER_BYTES`]: an answer that says or turns out to be longer is
/// refused as soon as that is known, before the rest is read.
async fn read_body(worker: &Worker<'_>, mut body: Incoming) -> Result<Vec<u8>, WorkerCallError> {
    let too_large = || {
        worker.unreadable(format!(
            "an answer larger than {MAX_ANSWER_BYTES} bytes, not read"
        ))
    };
    if body.size_hint().lower() > MAX_ANSWER_BYTES as u64 {
        return Err(too_large());
    }
    let mut bytes = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|error| worker.failed(error))?;
        if let Ok(data) = frame.into_data() {
            if bytes.len() + data.len() > MAX_ANSWER_BYTES {
                return Err(too_large());
            }
            bytes.extend_from_slice(&data);
        }
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use streamkeeper_contract::worker_http::TOKEN_BYTES;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
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
            let request = read_request(&mut socket).await;
            assert!(
                request.starts_with(&format!("{method} {path} HTTP/1.1\r\n")),
                "{request}"
            );
            socket.write_all(answer.as_bytes()).await.unwrap();
            request
        });
        (port, handle)
    }

    /// The whole request: its head, and as many body bytes as its `content-length` says (a
    /// socket closed with unread bytes is reset, and the client would see no answer).
    async fn read_request(socket: &mut tokio::net::TcpStream) -> String {
        let mut request = Vec::new();
        let mut buffer = [0u8; 1024];
        loop {
            let read = socket.read(&mut buffer).await.unwrap();
            assert!(read > 0, "the client closed mid-request");
            request.extend_from_slice(&buffer[..read]);
            let text = String::from_utf8_lossy(&request).to_string();
            let Some(end) = text.find("\r\n\r\n") else {
                continue;
            };
            let length: usize = text[..end]
                .lines()
                .find_map(|line| line.strip_prefix("content-length: "))
                .map_or(0, |value| value.trim().parse().unwrap());
            if request.len() >= end + 4 + length {
                return text;
            }
        }
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
        assert!(error.is_unauthorized(), "{error:?}");
    }

    #[tokio::test]
    async fn an_assignment_is_put_with_the_token_and_its_json_body() {
        let document = AssignmentDocument {
            version: 1,
            generation: 3,
            tasks: vec![],
        };
        let (port, request) =
            serve_once_at(ASSIGNMENT_PATH, "PUT", "HTTP/1.1 204 No Content\r\n\r\n").await;
        put_assignment(
            "127.0.0.1",
            port,
            Some(&token()),
            &document,
            Duration::from_secs(5),
        )
        .await
        .unwrap();
        let request = request.await.unwrap();
        let expected = format!("\r\nauthorization: Bearer {}\r\n", token().as_str());
        assert!(request.contains(&expected), "{request}");
        assert!(
            request.contains("\r\ncontent-type: application/json\r\n"),
            "{request}"
        );
        assert!(
            request.ends_with(&String::from_utf8(document.to_json()).unwrap()),
            "{request}"
        );
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
    async fn a_closed_port_is_unreachable_and_refused() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        let error = task_reports("127.0.0.1", port, Duration::from_secs(5))
            .await
            .unwrap_err();
        // The failover loop's test for "the pod is down" (failover::heartbeat::poll).
        match error {
            WorkerCallError::Unreachable { source, .. } => {
                assert_eq!(
                    source.kind(),
                    std::io::ErrorKind::ConnectionRefused,
                    "{source}"
                );
            }
            other => panic!("not unreachable: {other}"),
        }
    }

    #[tokio::test]
    async fn a_worker_that_never_answers_times_out() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let _held = tokio::spawn(async move {
            let (socket, _) = listener.accept().await.unwrap();
            tokio::time::sleep(Duration::from_secs(30)).await;
            drop(socket);
        });
        let started = std::time::Instant::now();
        let error = task_reports("127.0.0.1", port, Duration::from_millis(200))
            .await
            .unwrap_err();
        assert!(matches!(error, WorkerCallError::Timeout { .. }), "{error}");
        assert!(started.elapsed() < Duration::from_secs(5), "{error}");
    }

    /// Answers one request with `head`, then body bytes without end until the client leaves;
    /// the handle yields how many body bytes were sent.
    async fn serve_endless(head: &'static str) -> (u16, JoinHandle<usize>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let handle = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            read_request(&mut socket).await;
            socket.write_all(head.as_bytes()).await.unwrap();
            let chunk = vec![b'x'; 64 * 1024];
            let mut sent = 0;
            while socket.write_all(&chunk).await.is_ok() {
                sent += chunk.len();
            }
            sent
        });
        (port, handle)
    }

    #[tokio::test]
    async fn an_answer_over_the_bound_is_refused_not_read() {
        // A length that says so up front: refused before any of the body is read.
        let (port, _) =
            serve_endless("HTTP/1.1 200 OK\r\nContent-Length: 1073741824\r\n\r\n").await;
        let error = task_reports("127.0.0.1", port, Duration::from_secs(30))
            .await
            .unwrap_err();
        assert!(error.to_string().contains("larger than"), "{error}");
        // No length: refused once the bound is passed, with the connection closed there.
        let (port, sent) = serve_endless("HTTP/1.1 200 OK\r\n\r\n").await;
        let error = task_reports("127.0.0.1", port, Duration::from_secs(30))
            .await
            .unwrap_err();
        assert!(
            matches!(&error, WorkerCallError::Unreadable { reason, .. } if reason.contains("larger than")),
            "{error}"
        );
        let sent = sent.await.unwrap();
        assert!(sent < 4 * MAX_ANSWER_BYTES, "the server sent {sent} bytes");
    }
}

/// Why a worker refused a request (an assignment document, say), by its HTTP status: the
/// words the operator's refusal metric labels it with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusalReason {
    /// 401: it holds neither token the loop tried.
    Unauthorized,
    /// 409: it has seen a newer generation (a late delivery), or the document contradicts its
    /// own; harmless, the next delivery carries the newer one.
    Conflict,
    /// 400: it cannot read the document.
    Invalid,
    /// 503: it is shutting down.
    ShuttingDown,
    Other,
}

impl RefusalReason {
    pub const ALL: [RefusalReason; 5] = [
        RefusalReason::Unauthorized,
        RefusalReason::Conflict,
        RefusalReason::Invalid,
        RefusalReason::ShuttingDown,
        RefusalReason::Other,
    ];

    pub fn of_status(status: u16) -> Self {
        match status {
            401 => RefusalReason::Unauthorized,
            409 => RefusalReason::Conflict,
            400 => RefusalReason::Invalid,
            503 => RefusalReason::ShuttingDown,
            _ => RefusalReason::Other,
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            RefusalReason::Unauthorized => "Unauthorized",
            RefusalReason::Conflict => "Conflict",
            RefusalReason::Invalid => "Invalid",
            RefusalReason::ShuttingDown => "ShuttingDown",
            RefusalReason::Other => "Other",
        }
    }
}
