//! What runs tasks in a worker process, standalone or as a pod.
//!
//! - [`run_loop`]: the process from start to SIGTERM: the shared context, the HTTP port, the
//!   input's partitions, the tasks, the shutdown ([`run`]).
//! - [`share`]: which tasks the process runs before the operator says ([`TaskShare`]).
//! - [`assignment`]: acting on the operator's assignment documents: each task's slot and role
//!   ([`Assignments`]).
//! - [`http`]: the HTTP port: probes, metrics, task reports, checkpoint requests and the
//!   assignment documents.
//!
//! The tasks themselves (their threads, roles and restores) are [`crate::task`]'s; this module
//! only starts, re-roles and joins them.

pub mod assignment;
pub mod http;
pub mod run_loop;
pub mod share;

pub use assignment::Assignments;
pub use run_loop::{RunError, run};
pub use share::{ShareError, TaskShare};
