//! The routes of the worker's HTTP port (listed in [`super`]) and the token check in front of
//! every request but a read.

use crate::board::TaskBoard;
use crate::checkpoint::CheckpointService;
use crate::metrics::WorkerMetrics;
use crate::runtime::assignment::Assignments;
use axum::Router;
use axum::extract::{RawQuery, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use streamkeeper_contract::report_stream::{self, REPORT_STREAM_PATH};
use streamkeeper_contract::worker_http::{
    self, ASSIGNMENT_PATH, CHECKPOINTS_PATH, HEALTHZ_PATH, METRICS_PATH, READYZ_PATH, Refusal,
    TASKS_PATH, TokenError, WWW_AUTHENTICATE_CHALLENGE,
};
use streamkeeper_contract::{ErrorDocument, TaskReportsDocument, WorkerToken};

/// How long `POST /v1/checkpoints` waits for durable checkpoints.
const CHECKPOINT_REQUEST_LIMIT: Duration = Duration::from_secs(120);

#[derive(Clone)]
struct HttpState {
    board: TaskBoard,
    metrics: WorkerMetrics,
    checkpoints: Option<Arc<CheckpointService>>,
    assignments: Option<Arc<Assignments>>,
}

/// Where the token of requests that change something comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenSource {
    /// No `http.tokenFile`: every such request is refused.
    Unset,
    /// Read on each such request, so a rotated Secret works once the kubelet updated the file.
    File(PathBuf),
}

/// A token file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TokenFileError {
    #[error("http.tokenFile {path}: cannot read it: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("http.tokenFile {path}: {source}")]
    Invalid {
        path: String,
        #[source]
        source: TokenError,
    },
}

impl TokenSource {
    pub fn from_config(token_file: Option<&Path>) -> Self {
        token_file.map_or(TokenSource::Unset, |path| {
            TokenSource::File(path.to_path_buf())
        })
    }

    /// The token now; `None` when none is configured.
    pub async fn current(&self) -> Result<Option<WorkerToken>, TokenFileError> {
        let TokenSource::File(path) = self else {
            return Ok(None);
        };
        let shown = || path.display().to_string();
        let text =
            tokio::fs::read_to_string(path)
                .await
                .map_err(|source| TokenFileError::Read {
                    path: shown(),
                    source,
                })?;
        WorkerToken::parse(&text)
            .map(Some)
            .map_err(|source| TokenFileError::Invalid {
                path: shown(),
                source,
            })
    }
}

pub fn router(
    board: TaskBoard,
    metrics: WorkerMetrics,
    checkpoints: Option<Arc<CheckpointService>>,
    assignments: Option<Arc<Assignments>>,
    token: TokenSource,
) -> Router {
    Router::new()
        .route(HEALTHZ_PATH, get(|| async { "ok" }))
        .route(READYZ_PATH, get(ready))
        .route(METRICS_PATH, get(metrics_text))
        .route(TASKS_PATH, get(tasks))
        .route(REPORT_STREAM_PATH, get(task_stream))
        .route(CHECKPOINTS_PATH, post(checkpoint_now))
        .route(ASSIGNMENT_PATH, put(assign))
        .with_state(HttpState {
            board,
            metrics,
            checkpoints,
            assignments,
        })
        // `layer`, not `route_layer`: an unknown path that is not a read is refused the same way.
        .layer(middleware::from_fn_with_state(
            Arc::new(token),
            require_token,
        ))
}

/// Lets reads through; anything else only with the job's worker token.
async fn require_token(
    State(token): State<Arc<TokenSource>>,
    request: Request,
    next: Next,
) -> Response {
    if !worker_http::needs_token(request.method().as_str()) {
        return next.run(request).await;
    }
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .map(HeaderValue::as_bytes);
    let refusal = match token.current().await {
        Ok(Some(expected)) => match expected.check(presented) {
            Ok(()) => return next.run(request).await,
            Err(refusal) => refusal,
        },
        Ok(None) => {
            return error(
                StatusCode::FORBIDDEN,
                format!(
                    "{} {} changes the worker, and this worker has no http.tokenFile (or --http-token-file) to check a token against, so it refuses every such request",
                    request.method(),
                    request.uri().path()
                ),
            );
        }
        Err(unusable) => {
            tracing::error!(error = %unusable, "cannot check a request's token");
            return error(StatusCode::INTERNAL_SERVER_ERROR, unusable.to_string());
        }
    };
    tracing::warn!(method = %request.method(), path = %request.uri().path(), reason = %refusal, "refused a request without the worker token");
    let mut response = error(StatusCode::UNAUTHORIZED, refusal_message(refusal));
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static(WWW_AUTHENTICATE_CHALLENGE),
    );
    response
}

fn refusal_message(refusal: Refusal) -> String {
    format!(
        "{refusal}; the token is in the job's Secret <job>-worker-token (key `token`), mounted at the worker's http.tokenFile"
    )
}

fn error(status: StatusCode, message: String) -> Response {
    (status, axum::Json(ErrorDocument::new(message))).into_response()
}

async fn ready(State(state): State<HttpState>) -> impl IntoResponse {
    if state.board.ready() {
        (StatusCode::OK, "ready")
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: some active task is not Running",
        )
    }
}

async fn metrics_text(State(state): State<HttpState>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.metrics.encode(),
    )
}

/// This process's name in its reports: its pid and the time it first answered, so a restarted
/// worker (pid 1 again, in a container) is told apart from the one before it.
fn process_name() -> &'static str {
    static NAME: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    NAME.get_or_init(|| {
        let since_epoch = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        format!("{}-{}", std::process::id(), since_epoch.as_nanos())
    })
}

async fn tasks(State(state): State<HttpState>) -> impl IntoResponse {
    axum::Json(reports_now(&state))
}

/// The reports as a stream: a frame every beat the query asks for (see `stream`).
async fn task_stream(State(state): State<HttpState>, RawQuery(query): RawQuery) -> Response {
    let beat = report_stream::beat_from_query(query.as_deref());
    super::stream::answer(beat, move || reports_now(&state))
}

/// What `GET /v1/tasks` answers, and each frame of the stream is made from.
fn reports_now(state: &HttpState) -> TaskReportsDocument {
    let generation = state.assignments.as_ref().and_then(|a| a.generation());
    let reports = TaskReportsDocument::new(state.board.snapshot())
        .acting_on(generation)
        .answered_by(process_name());
    let stopping = state.assignments.as_ref().is_some_and(|a| a.stopping());
    if stopping {
        reports.stopping()
    } else {
        reports
    }
}

async fn checkpoint_now(State(state): State<HttpState>) -> Response {
    let Some(service) = state.checkpoints else {
        return error(
            StatusCode::NOT_FOUND,
            "checkpoints are off: the worker config has no checkpoint.s3".into(),
        );
    };
    let answers = service.request_all(CHECKPOINT_REQUEST_LIMIT).await;
    let all_durable = !answers.is_empty() && answers.iter().all(|(_, a)| a.is_ok());
    let checkpoints: Vec<serde_json::Value> = answers
        .into_iter()
        .map(|(task, answer)| match answer {
            Ok(report) => serde_json::json!({ "task": task, "checkpoint": report }),
            Err(error) => serde_json::json!({ "task": task, "error": error }),
        })
        .collect();
    let status = if all_durable {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (
        status,
        axum::Json(serde_json::json!({ "version": 1, "checkpoints": checkpoints })),
    )
        .into_response()
}

async fn assign(State(state): State<HttpState>, body: axum::body::Bytes) -> impl IntoResponse {
    let refused = |status: StatusCode, error: String| {
        (
            status,
            axum::Json(serde_json::json!(ErrorDocument::new(error))),
        )
    };
    let Some(assignments) = state.assignments else {
        return refused(
            StatusCode::NOT_FOUND,
            "standalone mode runs every task; it takes no assignment".into(),
        );
    };
    // Joining the threads of released tasks blocks; keep it off the async workers.
    let applied = tokio::task::spawn_blocking(move || assignments.apply(&body)).await;
    match applied {
        Ok(Ok(roles)) => {
            let roles: BTreeMap<String, String> = roles
                .into_iter()
                .map(|(task, role)| (task.to_string(), format!("{role:?}")))
                .collect();
            (
                StatusCode::OK,
                axum::Json(serde_json::json!({ "version": 1, "roles": roles })),
            )
        }
        Ok(Err(error)) => refused(
            StatusCode::from_u16(error.status()).unwrap_or(StatusCode::CONFLICT),
            error.to_string(),
        ),
        Err(error) => refused(StatusCode::INTERNAL_SERVER_ERROR, error.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;
    use streamkeeper_contract::Versioned;
    use streamkeeper_contract::report_stream::ReportFrame;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    const TOKEN: &str = "0123456789abcdef0123456789abcdef-test-token";

    /// Serves the router (checkpoints off) on a loopback port.
    async fn serve_router(token: TokenSource) -> SocketAddr {
        let app = router(
            TaskBoard::default(),
            WorkerMetrics::new(),
            None,
            None,
            token,
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        address
    }

    /// (status, head, body) of one request.
    async fn call(address: SocketAddr, head: &str) -> (u16, String, String) {
        let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
        let request =
            format!("{head}\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.unwrap();
        let (head, body) = answer.split_once("\r\n\r\n").unwrap();
        let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
        (status, head.to_ascii_lowercase(), body.to_string())
    }

    fn token_file() -> tempfile::NamedTempFile {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), format!("{TOKEN}\n")).unwrap();
        file
    }

    #[tokio::test]
    async fn a_change_needs_the_token_and_a_read_does_not() {
        let file = token_file();
        let address = serve_router(TokenSource::File(file.path().to_path_buf())).await;
        let post = "POST /v1/checkpoints HTTP/1.1";

        let (status, head, body) = call(address, post).await;
        assert_eq!(status, 401, "{body}");
        assert!(head.contains("www-authenticate: bearer"), "{head}");
        assert!(
            body.contains("needs `Authorization: Bearer <token>`"),
            "{body}"
        );

        let (status, _, body) = call(
            address,
            &format!("{post}\r\nAuthorization: Bearer wrong-{TOKEN}"),
        )
        .await;
        assert_eq!(status, 401);
        assert!(body.contains("not this job's worker token"), "{body}");

        // Past the check: the handler answers (checkpoints are off here).
        let (status, _, body) =
            call(address, &format!("{post}\r\nAuthorization: Bearer {TOKEN}")).await;
        assert_eq!(status, 404, "{body}");
        assert!(body.contains("checkpoints are off"), "{body}");

        let (status, _, _) = call(address, "DELETE /v1/tasks HTTP/1.1").await;
        assert_eq!(status, 401, "any method but a read");
        let (status, _, _) = call(address, "GET /v1/tasks HTTP/1.1").await;
        assert_eq!(status, 200);
        let (status, _, _) = call(address, "GET /healthz HTTP/1.1").await;
        assert_eq!(status, 200);
    }

    /// The frames of a report stream read from `address` until `count` have arrived.
    async fn stream_frames(address: SocketAddr, count: usize) -> (String, Vec<ReportFrame>) {
        let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
        let request = "GET /v1/tasks/stream?beatMs=50 HTTP/1.1\r\nHost: x\r\n\r\n";
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut seen = Vec::new();
        let mut buffer = [0u8; 4096];
        loop {
            let read = stream.read(&mut buffer).await.unwrap();
            assert!(
                read > 0,
                "the stream ended: {}",
                String::from_utf8_lossy(&seen)
            );
            seen.extend_from_slice(&buffer[..read]);
            let text = String::from_utf8_lossy(&seen).to_string();
            let Some((head, body)) = text.split_once("\r\n\r\n") else {
                continue;
            };
            // Chunked: the frames are the lines that hold JSON, between the chunk sizes.
            let frames: Vec<ReportFrame> = body
                .split(['\r', '\n'])
                .filter(|line| line.starts_with('{'))
                .map(|line| ReportFrame::from_json(line.as_bytes()).unwrap())
                .collect();
            if frames.len() >= count {
                return (head.to_ascii_lowercase(), frames);
            }
        }
    }

    #[tokio::test]
    async fn the_report_stream_sends_the_document_then_beats_while_the_poll_still_answers() {
        let address = serve_router(TokenSource::Unset).await;
        let (head, frames) = stream_frames(address, 3).await;
        assert!(head.starts_with("http/1.1 200"), "{head}");
        assert!(
            head.contains("content-type: application/x-ndjson"),
            "{head}"
        );
        let document = frames[0]
            .document
            .clone()
            .expect("the whole document first");
        assert_eq!(document.process.as_deref(), Some(process_name()));
        assert!(frames[1..].iter().all(ReportFrame::is_beat), "{frames:?}");

        // An operator of the version before the stream polls; the worker still answers it.
        let (status, _, body) = call(address, "GET /v1/tasks HTTP/1.1").await;
        assert_eq!(status, 200);
        assert_eq!(
            TaskReportsDocument::from_json(body.as_bytes()).unwrap(),
            document
        );
    }

    #[tokio::test]
    async fn without_a_token_file_every_change_is_refused() {
        let address = serve_router(TokenSource::Unset).await;
        let (status, _, body) = call(
            address,
            &format!("POST /v1/checkpoints HTTP/1.1\r\nAuthorization: Bearer {TOKEN}"),
        )
        .await;
        assert_eq!(status, 403);
        assert!(body.contains("no http.tokenFile"), "{body}");
        let (status, _, _) = call(address, "GET /v1/tasks HTTP/1.1").await;
        assert_eq!(status, 200);
    }

    #[tokio::test]
    async fn the_token_file_is_read_on_each_request() {
        let file = token_file();
        let source = TokenSource::File(file.path().to_path_buf());
        assert_eq!(source.current().await.unwrap().unwrap().as_str(), TOKEN);
        let rotated = format!("{TOKEN}-rotated");
        std::fs::write(file.path(), &rotated).unwrap();
        assert_eq!(source.current().await.unwrap().unwrap().as_str(), rotated);
        std::fs::write(file.path(), "short").unwrap();
        let error = source.current().await.unwrap_err();
        assert!(error.to_string().contains("at least 32"), "{error}");
        assert_eq!(TokenSource::Unset.current().await.unwrap(), None);
    }
}
