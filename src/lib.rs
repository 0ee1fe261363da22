//! streamkeeper, the operator: turns `StatefulStreamJob` resources into StatefulSets of workers,
//! changelog topics and checkpoint settings, and keeps their state exact through failures.
//!
//! The modules, lowest layer first. Each may use the ones above it in this list, never one
//! below it (`tests/layering.rs` checks it):
//!
//! 1. [`api`], [`vocabulary`], [`retention`]: the resource's types, the words of its status and
//!    the pure retention rules.
//! 2. [`leader`]: leader election, and the deadline every write checks.
//! 3. [`adapters`]: the clients of what the operator talks to besides the apiserver: Kafka,
//!    S3 (checkpoint manifests) and the workers' HTTP API.
//! 4. [`telemetry`]: the operator's metrics and the port that serves them.
//! 5. [`k8s`]: the Kubernetes plumbing both loops use: server-side apply, derived names and
//!    labels, ownership, Events and the job's worker token.
//! 6. [`failover`]: one loop per job that owns its assignment and moves tasks off failed pods.
//! 7. [`controller`]: the reconcile pipeline of a job (validate → read facts → build → apply →
//!    observe → judge → update status).
//! 8. [`mod@bench`]: `bench-reconcile`, which drives the controller against real services.

// In layer order (rustfmt keeps the order of declarations a blank line separates).
pub mod api;
pub mod retention;
pub mod vocabulary;

pub mod leader;

pub mod adapters;

pub mod telemetry;

pub mod k8s;

pub mod failover;

pub mod controller;

pub mod bench;
