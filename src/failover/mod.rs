//! Failover: the operator owns each job's assignment and moves tasks off a failed pod within
//! about a second, not at the reconcile's pace.
//!
//! One loop per job ([`poll`]) runs beside the reconciles while this process leads, started and
//! stopped by the reconcile through the [`registry`]. Each poll, a few times a second, takes the
//! same steps, each a module of [`poll`]:
//!
//! 1. refresh: the job's pods, from the apiserver;
//! 2. heartbeat: every worker pod's task reports, as its report stream brought them
//!    ([`links`]), whose answers or silence say which pods are alive ([`health`]);
//! 3. decide: the next assignment, by the contract's rule, from the live pods and each copy's
//!    lag ([`rule_inputs`]);
//! 4. store: a changed document is stored ([`document_store`]) before any worker hears of it;
//! 5. send: the document goes to every pod that answers, with the job's worker token
//!    ([`delivery`]);
//! 6. publish: the moves it made are reported ([`moves`], and as Events) and the loop's view is
//!    published for the reconciles ([`shared`]).
//!
//! A pod whose process is gone (connection refused) loses its tasks at the next
//! poll; a silent one (frozen, partitioned, its node lost) after the job's heartbeat timeout
//! ([`health::DEFAULT_SUSPECT_AFTER`] unless `spec.recovery.heartbeatTimeout` says otherwise).
//! The promoted standby fences the old owner, so a wrong suspicion costs a handoff, never
//! exactness.
//!
//! A new job's first document waits until every pod answers (up to [`FIRST_DECISION_WAIT`]),
//! so tasks do not pile up on the first pod to start. A new leader reads the stored document
//! back and goes on from it.

pub mod delivery;
pub mod document_store;
mod events;
pub mod health;
pub mod job;
pub mod links;
pub mod moves;
pub mod poll;
pub mod registry;
pub mod rule_inputs;
pub mod scale_down;
pub mod shared;
pub mod status_requests;
pub mod zones;

pub use job::{FailoverDeps, FailoverJob};
pub use poll::{BALANCE_AFTER_FAILOVER, FIRST_DECISION_WAIT, POLL_EVERY};
pub use registry::{Failovers, ScaleDown};
pub use shared::{DrainTarget, LastMoves};
