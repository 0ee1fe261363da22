//! The worker's HTTP port: `/healthz` (the process serves), `/readyz` (every assigned active
//! task is Running), `/metrics` (Prometheus text), `/v1/tasks` (each task's report),
//! `/v1/tasks/stream` (the same reports as they change, with a heartbeat: the operator's
//! failover loop reads it) and
//! `POST /v1/checkpoints` (a checkpoint of every task now; answers once they are durable) and
//! `PUT /v1/assignment` (the operator's assignment document; see [`super::assignment`]).
//!
//! Reads are open (probes and Prometheus need them). Every other request must carry the job's
//! worker token (`Authorization: Bearer <token>`, the contract's `worker_http` rule), read from
//! `http.tokenFile` on each such request; without a token file they are all refused, so a worker
//! started by hand never takes orders from anyone who can reach its port.
//!
//! - `routes`: the routes and the token check in front of them ([`router`], [`TokenSource`]).
//! - `stream`: the report stream's answer.
//! - `server`: serving a listener with bounds a slow or hostile client cannot get around
//!   ([`spawn`], [`Limits`]), and the loopback address a pod serves as well.

mod routes;
mod server;
mod stream;

pub use routes::{TokenFileError, TokenSource, router};
pub use server::{Limits, loopback_companion, spawn};
