//! The Kubernetes plumbing that both the reconcile ([`crate::controller`]) and the failover
//! loops ([`crate::failover`]) use, below both of them:
//!
//! - [`apply`]: server-side apply with the operator's one field manager, and [`apply::ApiError`],
//!   which names the object a failed request was about;
//! - [`names`], [`labels`]: every name, path, label and annotation derived from a job;
//! - [`ownership`]: which existing objects the operator may write (only its job's own);
//! - [`events`]: Events about a job;
//! - [`status`]: merge patches of a job's status fields;
//! - [`worker_token`]: the job's worker token Secret, created once and read back;
//! - [`pod_cache`]: the one watch of the worker pods, read instead of a list per job;
//! - [`owned_cache`], [`unchanged`]: the watch caches of the objects applied for the jobs, and
//!   whether an apply would change anything, so that steady state sends no apply.

pub mod apply;
pub mod events;
pub mod labels;
pub mod names;
pub mod owned_cache;
pub mod ownership;
pub mod pod_cache;
pub mod status;
pub mod unchanged;
pub mod worker_token;
