//! The control API, on a loopback port of its own, for a bench or a test to drive the fleet:
//!
//! | Request | Effect |
//! |---|---|
//! | `GET /healthz` | `ok` |
//! | `GET /pods` | every pod served: name, process, generation, faults, request count |
//! | `PUT /pods/{ip}` with `{"name": "<pod>"}` | serve a pod (when there is no pod watch) |
//! | `DELETE /pods/{ip}` | stop serving it |
//! | `GET /pods/{ip}` | one pod |
//! | `POST /pods/{ip}/refuse`, `/silent`, `/restart`, `/normal` | that fault ([`Command`]) |
//! | `POST /pods/{ip}/slow?ms=N`, `/lag?records=N` | answer after N ms; report lag N |
//! | `POST /pods/{ip}/older` | answer as a worker from before the report stream, until restarted |
//! | `GET /pods/{ip}/assignments` | each new document's arrival (`atMs`, unix ms) and generation |
//! | `GET /stats` | pods, connections, and requests by `METHOD path` |
//!
//! Answers are JSON; an unknown pod is 404 and a listener that cannot open is 500, each with
//! `{"error": "..."}`.

use crate::fleet::{Command, Fleet, FleetError};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use std::net::Ipv4Addr;

pub fn router(fleet: Fleet) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/pods", get(pods))
        .route("/pods/{ip}", get(pod).put(add).delete(remove))
        .route("/pods/{ip}/assignments", get(assignments))
        .route("/pods/{ip}/{action}", post(act))
        .route("/stats", get(stats))
        .with_state(fleet)
}

/// Serves the control API on `listener` until the process ends.
pub async fn serve(listener: tokio::net::TcpListener, fleet: Fleet) -> std::io::Result<()> {
    axum::serve(listener, router(fleet)).await
}

impl IntoResponse for FleetError {
    fn into_response(self) -> Response {
        let status = match self {
            FleetError::UnknownPod(_) => StatusCode::NOT_FOUND,
            FleetError::Listen { .. } => StatusCode::INTERNAL_SERVER_ERROR,
        };
        error(status, self.to_string())
    }
}

fn error(status: StatusCode, message: String) -> Response {
    (status, Json(serde_json::json!({ "error": message }))).into_response()
}

async fn pods(State(fleet): State<Fleet>) -> Response {
    Json(fleet.views()).into_response()
}

async fn pod(State(fleet): State<Fleet>, Path(ip): Path<Ipv4Addr>) -> Response {
    fleet.view(ip).map(Json).into_response()
}

#[derive(Deserialize)]
struct NewPod {
    name: String,
}

async fn add(
    State(fleet): State<Fleet>,
    Path(ip): Path<Ipv4Addr>,
    Json(new): Json<NewPod>,
) -> Response {
    match fleet.add(ip, &new.name) {
        Ok(()) => fleet.view(ip).map(Json).into_response(),
        Err(failed) => failed.into_response(),
    }
}

async fn remove(State(fleet): State<Fleet>, Path(ip): Path<Ipv4Addr>) -> Response {
    if fleet.remove(ip) {
        StatusCode::NO_CONTENT.into_response()
    } else {
        FleetError::UnknownPod(ip).into_response()
    }
}

async fn assignments(State(fleet): State<Fleet>, Path(ip): Path<Ipv4Addr>) -> Response {
    fleet.arrivals(ip).map(Json).into_response()
}

#[derive(Deserialize)]
struct Amount {
    ms: Option<u64>,
    records: Option<i64>,
}

async fn act(
    State(fleet): State<Fleet>,
    Path((ip, action)): Path<(Ipv4Addr, String)>,
    Query(amount): Query<Amount>,
) -> Response {
    let command = match (action.as_str(), amount.ms, amount.records) {
        ("refuse", ..) => Command::Refuse,
        ("silent", ..) => Command::Silent,
        ("restart", ..) => Command::Restart,
        ("normal", ..) => Command::Normal,
        ("slow", Some(ms), _) => Command::Slow(ms),
        ("lag", _, Some(records)) => Command::Lag(records),
        ("older", ..) => Command::Older,
        _ => {
            return error(
                StatusCode::BAD_REQUEST,
                format!(
                    "unknown action {action:?}: refuse, silent, restart, normal, older, slow?ms=N or lag?records=N"
                ),
            );
        }
    };
    fleet.apply(ip, command).map(Json).into_response()
}

async fn stats(State(fleet): State<Fleet>) -> Response {
    Json(fleet.stats()).into_response()
}
