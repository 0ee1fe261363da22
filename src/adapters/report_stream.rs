//! The operator's reader of a worker's report stream, `GET /v1/tasks/stream` (the contract's
//! `report_stream`): one connection per pod that stays open, and yields each frame as it
//! arrives.
//!
//! As with [`super::worker_client`]'s calls, the connection is this module's own, never pooled:
//! a refused connect is the connect's `io::Error`, and the end of the stream is the end of the
//! process that wrote it (or of its connection). A worker that predates the stream answers 404
//! ([`OpenError::Unsupported`]); the caller polls it instead.

use super::worker_client::{Call, Worker, WorkerCallError, read_answer, request};
use http::Method;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use std::time::Duration;
use streamkeeper_contract::Versioned;
use streamkeeper_contract::report_stream::{self, ReportFrame};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

/// The longest frame read: a whole document, which `GET /v1/tasks` bounds the same way.
pub const MAX_FRAME_BYTES: usize = super::worker_client::MAX_ANSWER_BYTES;

/// Why a stream did not open.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The worker answered 404: it predates the stream.
    #[error("worker {host}:{port} has no report stream (a worker older than the stream)")]
    Unsupported { host: String, port: u16 },
    #[error(transparent)]
    Call(#[from] WorkerCallError),
}

/// An open stream. Dropping it closes the connection.
pub struct ReportStream {
    host: String,
    port: u16,
    body: Incoming,
    /// Bytes of a frame whose newline has not arrived yet.
    pending: Vec<u8>,
    connection: JoinHandle<()>,
}

impl Drop for ReportStream {
    fn drop(&mut self) {
        self.connection.abort();
    }
}

/// Opens the stream on `host:port` with a frame every `beat`; `timeout` bounds the connect and
/// the wait for the answer's head.
pub async fn open(
    host: &str,
    port: u16,
    beat: Duration,
    timeout: Duration,
) -> Result<ReportStream, OpenError> {
    match tokio::time::timeout(timeout, open_unbounded(host, port, beat)).await {
        Ok(opened) => opened,
        Err(_) => Err(OpenError::Call(WorkerCallError::Timeout {
            host: host.to_string(),
            port,
            timeout,
        })),
    }
}

async fn open_unbounded(host: &str, port: u16, beat: Duration) -> Result<ReportStream, OpenError> {
    let worker = Worker { host, port };
    let call = Call {
        method: Method::GET,
        path: report_stream::request_path(beat),
        authorization: None,
        body: Vec::new(),
    };
    let request = request(&worker, call)?;
    let stream = TcpStream::connect((host, port))
        .await
        .map_err(|source| worker.unreachable(source))?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|error| worker.failed(error))?;
    // Driven on its own task, for as long as the stream is read; aborted with the stream.
    let connection = tokio::spawn(async move {
        let _ = connection.await;
    });
    let response = sender
        .send_request(request)
        .await
        .map_err(|error| worker.failed(error))?;
    if response.status() == http::StatusCode::NOT_FOUND {
        connection.abort();
        return Err(OpenError::Unsupported {
            host: host.to_string(),
            port,
        });
    }
    if !response.status().is_success() {
        connection.abort();
        // Refused, with the worker's reason: `read_answer` is `Ok` only for a success status.
        let refused = match read_answer(&worker, response).await {
            Err(refused) => refused,
            Ok(_) => worker.unreadable("a success status read as a refusal".into()),
        };
        return Err(refused.into());
    }
    Ok(ReportStream {
        host: host.to_string(),
        port,
        body: response.into_body(),
        pending: Vec::new(),
        connection,
    })
}

impl ReportStream {
    /// The next frame; `None` when the worker ended the stream (its process is going, or its
    /// connection was closed).
    pub async fn next(&mut self) -> Result<Option<ReportFrame>, WorkerCallError> {
        loop {
            if let Some(end) = self.pending.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.pending.drain(..=end).collect();
                return ReportFrame::from_json(&line)
                    .map(Some)
                    .map_err(|error| self.worker().unreadable(error.to_string()));
            }
            if self.pending.len() > MAX_FRAME_BYTES {
                return Err(self.worker().unreadable(format!(
                    "a frame longer than {MAX_FRAME_BYTES} bytes, not read"
                )));
            }
            let Some(frame) = self.body.frame().await else {
                return Ok(None);
            };
            let frame = frame.map_err(|error| self.worker().failed(error))?;
            if let Ok(data) = frame.into_data() {
                self.pending.extend_from_slice(&data);
            }
        }
    }

    fn worker(&self) -> Worker<'_> {
        Worker {
            host: &self.host,
            port: self.port,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    /// Answers one connection with `head`, then writes each of `chunks` (chunked encoding), then
    /// closes; yields the request's first line.
    async fn serve(head: &'static str, chunks: Vec<&'static str>) -> (u16, JoinHandle<String>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let handle = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut request = vec![0u8; 1024];
            let read = socket.read(&mut request).await.unwrap();
            socket.write_all(head.as_bytes()).await.unwrap();
            for chunk in chunks {
                let framed = format!("{:x}\r\n{chunk}\r\n", chunk.len());
                socket.write_all(framed.as_bytes()).await.unwrap();
            }
            socket.write_all(b"0\r\n\r\n").await.unwrap();
            let text = String::from_utf8_lossy(&request[..read]).to_string();
            text.lines().next().unwrap_or_default().to_string()
        });
        (port, handle)
    }

    const STREAM_HEAD: &str = "HTTP/1.1 200 OK\r\ncontent-type: application/x-ndjson\r\ntransfer-encoding: chunked\r\n\r\n";

    #[tokio::test]
    async fn frames_are_read_across_chunk_boundaries_until_the_stream_ends() {
        let (port, request) = serve(
            STREAM_HEAD,
            vec![
                "{\"version\":1,\"document\":{\"version\":1,",
                "\"tasks\":[],\"process\":\"9-1\"}}\n{\"vers",
                "ion\":1}\n",
            ],
        )
        .await;
        let beat = Duration::from_millis(250);
        let mut stream = open("127.0.0.1", port, beat, Duration::from_secs(5))
            .await
            .unwrap();
        let first = stream.next().await.unwrap().unwrap();
        let document = first.document.unwrap();
        assert_eq!(document.process.as_deref(), Some("9-1"));
        assert!(stream.next().await.unwrap().unwrap().is_beat());
        assert!(
            stream.next().await.unwrap().is_none(),
            "the end of the stream"
        );
        let line = request.await.unwrap();
        assert_eq!(line, "GET /v1/tasks/stream?beatMs=250 HTTP/1.1");
    }

    /// The error of opening a stream on a worker that answers `head` and no body.
    async fn refused_with(head: &'static str) -> OpenError {
        let (port, _) = serve(head, vec![]).await;
        let beat = Duration::from_millis(250);
        open("127.0.0.1", port, beat, Duration::from_secs(5))
            .await
            .err()
            .unwrap()
    }

    #[tokio::test]
    async fn a_worker_without_the_stream_is_told_apart_from_a_refusal() {
        let error = refused_with("HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n").await;
        assert!(matches!(error, OpenError::Unsupported { .. }), "{error}");
        let error =
            refused_with("HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n\r\n").await;
        assert!(error.to_string().contains("503"), "{error}");
    }

    #[tokio::test]
    async fn a_broken_frame_is_unreadable() {
        let (port, _) = serve(STREAM_HEAD, vec!["{\"version\":7}\n"]).await;
        let mut stream = open(
            "127.0.0.1",
            port,
            Duration::from_millis(250),
            Duration::from_secs(5),
        )
        .await
        .unwrap();
        let error = stream.next().await.unwrap_err();
        assert!(error.to_string().contains("version 7"), "{error}");
    }
}
