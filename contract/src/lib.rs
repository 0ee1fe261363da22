//! The shared formats and pure rules of streamkeeper's operator and worker.
//!
//! What crosses the operator/worker boundary is defined here once, so the two sides cannot
//! disagree: the documents each writes for the other, and the rules both apply. It depends on
//! no Kubernetes, Kafka or S3 client, so the worker uses it without the operator's
//! dependencies. Nothing here performs I/O.
//!
//! The modules, lowest layer first (each uses only the layers before it; `tests/layering.rs`
//! in the operator checks it):
//!
//! 1. What every format is made of: [`version`] (the `version` field every format carries, and
//!    readers that refuse a version they do not know) and [`duration`] (Go-syntax durations).
//! 2. The formats, each with a round-trip test:
//!    - [`worker_config`]: the config the operator renders for each worker;
//!    - [`task_report`]: what a worker reports about its tasks (`GET /v1/tasks`);
//!    - [`report_stream`]: the same reports as a stream of changes and heartbeats
//!      (`GET /v1/tasks/stream`);
//!    - [`worker_http`]: the worker's HTTP paths, its error document and the token rule of its
//!      mutating requests;
//!    - [`manifest`] and [`checkpoint_layout`]: a checkpoint in S3, and where its objects live;
//!    - [`owner_marker`]: which cluster's job a prefix in S3 or a changelog belongs to;
//!    - [`restore_request`]: what a restore from a chosen checkpoint asks of a worker;
//!    - [`co_partitioning`]: how a producer places a key in a partition (a join's
//!      `partitioner`), what a record's partition says about it, and the evidence a task
//!      reports of it.
//! 3. The pure rules both sides apply:
//!    - [`rules`]: the validation of a job's settings (the operator checks a spec with it, the
//!      worker its config);
//!    - [`assignment`]: the assignment document and the rule that decides it;
//!    - [`checkpoint_choice`]: which checkpoint a restore uses (the worker restores from it,
//!      the operator shows it).

// In layer order (rustfmt keeps the order of declarations a blank line separates).
pub mod duration;
pub mod version;

pub mod checkpoint_layout;
pub mod co_partitioning;
pub mod manifest;
pub mod module_digest;
pub mod owner_marker;
pub mod report_stream;
pub mod restore_request;
pub mod task_report;
pub mod worker_config;
pub mod worker_http;

pub mod assignment;
pub mod checkpoint_choice;
pub mod rules;

pub use assignment::{
    AssignmentDocument, AssignmentInputs, CopyLag, GenerationsExhausted, PodPlace, TaskAssignment,
    next_assignment,
};
pub use checkpoint_layout::{JobPrefix, TaskPrefix};
pub use duration::{DurationError, format_go_duration, parse_go_duration};
pub use manifest::{CheckpointFile, CheckpointManifest};
pub use owner_marker::OwnerMarker;
pub use restore_request::{
    RESTORE_REQUEST_ENV, RestoreCheckpoint, RestoreReplaySource, RestoreRequestDocument,
};
pub use task_report::{TaskReport, TaskReportsDocument};
pub use version::{FormatError, Versioned};
pub use worker_config::WorkerConfig;
pub use worker_http::{ErrorDocument, WorkerToken};
