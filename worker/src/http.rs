//! The worker's HTTP port: `/healthz` (the process serves), `/readyz` (every assigned active
//! task is Running), `/metrics` (Prometheus text), `/v1/tasks` (each task's report) and
//! `POST /v1/checkpoints` (a checkpoint of every task now; answers once they are durable) and
//! `PUT /v1/assignment` (the operator's assignment document; see [`crate::assignment`]).

use crate::assignment::Assignments;
use crate::checkpoint::CheckpointService;
use crate::metrics::WorkerMetrics;
use crate::status::TaskBoard;
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::{get, post, put};
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;
use streamkeeper_contract::TaskReportsDocument;

/// How long `POST /v1/checkpoints` waits for durable checkpoints.
const CHECKPOINT_REQUEST_LIMIT: Duration = Duration::from_secs(120);

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

#[derive(Clone)]
struct HttpState {
    board: TaskBoard,
    metrics: WorkerMetrics,
    checkpoints: Option<Arc<CheckpointService>>,
    assignments: Option<Arc<Assignments>>,
}

pub fn router(
    board: TaskBoard,
    metrics: WorkerMetrics,
    checkpoints: Option<Arc<CheckpointService>>,
    assignments: Option<Arc<Assignments>>,
) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(ready))
        .route("/metrics", get(metrics_text))
        .route("/v1/tasks", get(tasks))
        .route("/v1/checkpoints", post(checkpoint_now))
        .route("/v1/assignment", put(assign))
        .with_state(HttpState {
            board,
            metrics,
            checkpoints,
            assignments,
        })
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

async fn tasks(State(state): State<HttpState>) -> impl IntoResponse {
    axum::Json(TaskReportsDocument::new(state.board.snapshot()))
}

async fn checkpoint_now(State(state): State<HttpState>) -> impl IntoResponse {
    let Some(service) = state.checkpoints else {
        return (
            StatusCode::NOT_FOUND,
            axum::Json(serde_json::json!({
                "version": 1,
                "error": "checkpoints are off: the worker config has no checkpoint.s3",
            })),
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
}

async fn assign(State(state): State<HttpState>, body: axum::body::Bytes) -> impl IntoResponse {
    let refused = |status: StatusCode, error: String| {
        (
            status,
            axum::Json(serde_json::json!({ "version": 1, "error": error })),
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
