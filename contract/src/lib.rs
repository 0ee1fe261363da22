//! Formats shared by the streamkeeper operator and worker.
//!
//! This crate owns the documents that cross the operator/worker boundary: the worker config the
//! operator renders, the assignment document that says which pod owns which task, and the
//! checkpoint manifest a worker writes to S3. It must not depend on Kubernetes or Kafka clients,
//! so the worker can use it without pulling in the operator's dependencies.
//!
//! [`rules`] holds the validation both sides apply to a job's settings, once; [`worker_http`] the
//! worker's HTTP paths and the token rule of its mutating requests; [`checkpoint_choice`] which
//! checkpoint a restore uses (the worker restores from it, the operator shows it).
//!
//! Every format carries a `version` field; readers refuse versions they do not know instead of
//! guessing, and each format has a round-trip test.

pub mod assign;
pub mod assignment;
pub mod checkpoint_choice;
pub mod checkpoint_layout;
pub mod duration;
pub mod failpoint;
pub mod manifest;
pub mod restore_request;
pub mod rules;
pub mod task_report;
pub mod version;
pub mod worker_config;
pub mod worker_http;

pub use assign::{AssignmentFacts, CopyLag, PodPlace, next_assignment};
pub use assignment::{AssignmentDocument, TaskAssignment};
pub use checkpoint_layout::TaskPrefix;
pub use duration::{DurationError, format_go_duration, parse_go_duration};
pub use manifest::{CheckpointFile, CheckpointManifest};
pub use restore_request::{
    RESTORE_REQUEST_ENV, RestoreCheckpoint, RestoreReplaySource, RestoreRequestDocument,
};
pub use task_report::{TaskReport, TaskReportsDocument};
pub use version::{FormatError, Versioned};
pub use worker_config::WorkerConfig;
pub use worker_http::{ErrorDocument, WorkerToken};
