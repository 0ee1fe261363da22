//! The operator's clients of everything it talks to besides the apiserver's own objects. Each
//! turns a service's answers and failures into typed results the controller and the failover
//! loops judge; none decides anything on its own.
//!
//! - [`kafka_admin`]: topics (the changelog, the dead-letter topic), their configs and the
//!   input's offsets, through one cached admin client per cluster; [`kafka_security`] turns a
//!   job's TLS and SASL settings into client settings; [`changelog_owner`] reads and writes the
//!   owner record at the start of a job's changelog.
//! - [`checkpoints`]: the checkpoint manifests in S3, read as the workers wrote them, and the
//!   deletion of a job's objects; [`manifest_cache`] keeps the manifests read, so that a refresh
//!   reads only new ones; [`s3_clients`] keeps one client per server and credentials.
//! - [`wasm_module`]: a WebAssembly processor's component in S3: there or not, and its digest.
//! - [`secret_reads`]: the Secrets holding those services' credentials (and the worker token),
//!   kept a while instead of read at every reconcile.
//! - [`worker_client`]: the workers' HTTP API: task reports, assignment documents, checkpoint
//!   requests; [`report_stream`] reads a worker's reports as a stream.

pub mod changelog_owner;
pub mod checkpoints;
pub mod kafka_admin;
mod kafka_offsets;
pub mod kafka_security;
pub mod manifest_cache;
pub mod report_stream;
pub mod s3_clients;
pub mod secret_reads;
pub mod wasm_module;
pub mod worker_client;
