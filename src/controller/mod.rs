//! The reconcile of a `StatefulStreamJob`: a pipeline of seven steps, each a module, run in
//! order by [`reconcile`] behind a finalizer:
//!
//! 1. [`mod@validate`]: the raw spec in, a [`ValidatedJob`] ([`valid_job`]) out (every rule checked
//!    once; pure).
//! 2. [`read_facts`]: what the job's Kafka cluster says about its input topic.
//! 3. [`mod@build`]: every object the job should have, from the [`ValidatedJob`] and the
//!    [`Facts`] (pure).
//! 4. [`apply`]: server-side apply of those objects and the topics; the operations beyond an
//!    apply ([`apply::operations`]: the final checkpoint before suspend, replacing outdated
//!    pods) and the clean-up of `deletionPolicy: Delete` ([`apply::cleanup`]).
//! 5. [`observe`]: the checkpoints in S3, the input's log-start offsets and the workers' task
//!    reports.
//! 6. [`judge`]: what all of it means for the conditions, the phase and when to look again
//!    (pure; every verdict is unit-tested from fixtures).
//! 7. [`update_status`]: the merged status, written only when it changed, with an Event for
//!    each watched condition that changed.
//!
//! Around the steps: [`run`] wires [`reconcile`] into a kube-runtime `Controller` (and, on a
//! takeover, [`resume`]s the loops the last leader ran before any reconcile); [`context`]
//! is what every reconcile shares; [`error`] types a reconcile that failed; [`cadence`] says
//! when a job is looked at again without a watch event. What the failover loops also use (names,
//! labels, server-side apply, ownership, Events, the worker token) is in [`crate::k8s`].

// The steps, in pipeline order (rustfmt keeps the order of declarations a blank line separates).
pub mod valid_job;
pub mod validate;

pub mod read_facts;

pub mod build;

pub mod apply;

pub mod observe;

pub mod judge;

pub mod update_status;

// What runs them.
pub mod cadence;
pub mod context;
pub mod error;
pub mod reconcile;
pub mod relevant;
pub mod resume;
pub mod run;

#[cfg(test)]
pub(crate) mod test_support;

pub use build::{DesiredResources, DesiredTopics, Facts, build};
pub use context::{Context, Settings};
pub use error::ReconcileError;
pub use valid_job::ValidatedJob;
pub use validate::{InvalidSpec, validate};
