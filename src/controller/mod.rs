//! Reconciling a `StatefulStreamJob` is a named pipeline: **validate → build → apply →
//! update_status**. This module holds the pure steps and what they share; only `apply` and
//! `update_status` (and the readers of external facts) may touch the apiserver, Kafka or S3.
//!
//! - [`validate()`]: raw spec in, [`ValidatedJob`] out (every rule checked once).
//! - [`build()`]: [`ValidatedJob`] + [`Facts`] in, [`DesiredResources`] out (pure).
//! - [`conditions`]: condition types, reasons and the merge `update_status` uses.
//! - [`names`], [`labels`]: every derived name, path, label and annotation key.
//!
//! The effectful steps: [`apply`] (server-side apply, Kafka topics), [`observe`] (S3 manifests,
//! log-start offsets), [`operations`] (suspend, pod replacement), [`cleanup`] (what
//! `deletionPolicy: Delete` removes, after the workers stopped), [`worker_token`] (the job's
//! worker token Secret, created once), [`update_status`];
//! [`reconcile`] runs the pipeline and [`run`] wires it into a kube-runtime `Controller`;
//! [`cadence`] says when a job is looked at again without a watch event.
//!
//! Retention rules for the status live in [`crate::retention`].

pub mod apply;
pub mod build;
pub mod cadence;
pub mod cleanup;
pub mod conditions;
pub mod context;
pub mod error;
pub mod events;
pub mod facts;
pub mod judge;
pub mod labels;
pub mod names;
pub mod observe;
pub mod operations;
pub mod ownership;
pub mod reconcile;
pub mod run;
pub mod status;
pub mod task_status;
pub mod update_status;
pub mod validate;
pub mod worker_token;

#[cfg(test)]
pub(crate) mod fixtures;

pub use build::{DesiredResources, DesiredTopics, Facts, build};
pub use context::{Context, Settings};
pub use error::ReconcileError;
pub use validate::{InvalidSpec, ValidatedJob, validate};
