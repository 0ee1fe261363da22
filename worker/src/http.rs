//! The worker's HTTP port: `/healthz` (the process serves), `/readyz` (every assigned active
//! task is Running), `/metrics` (Prometheus text) and `/v1/tasks` (each task's report).

use crate::metrics::WorkerMetrics;
use crate::status::TaskBoard;
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

#[derive(Clone)]
struct HttpState {
    board: TaskBoard,
    metrics: WorkerMetrics,
}

pub fn router(board: TaskBoard, metrics: WorkerMetrics) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(ready))
        .route("/metrics", get(metrics_text))
        .route("/v1/tasks", get(tasks))
        .with_state(HttpState { board, metrics })
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
    axum::Json(serde_json::json!({ "version": 1, "tasks": state.board.snapshot() }))
}
