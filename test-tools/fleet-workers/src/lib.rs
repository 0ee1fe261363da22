//! `streamkeeper-fleet-workers`: one process that answers the worker HTTP contract for every
//! simulated worker pod of a fleet, so the operator can be measured against thousands of pods
//! that KWOK runs without kubelets (tests/services/kwok.sh gives each pod a loopback address).
//! It is a test tool for the operator's control plane, not a second worker: it never touches
//! Kafka or S3, and its tasks only report what the operator reads.
//!
//! Written here rather than taken from a tool because no existing one speaks our contract:
//! KWOK simulates pod status, not what a pod answers on its port.
//!
//! The modules:
//! - [`pod`]: one simulated process, pure: its assignment, reports and faults;
//! - [`answer`]: the contract's routes over a [`pod::PodState`], pure;
//! - [`fleet`]: every pod served, by address, and the faults applied to them;
//! - [`serve`]: a pod's listener on its own address (hyper);
//! - [`control`]: the control API a bench drives (faults, arrivals, stats);
//! - [`discover`]: the pod watch that tells the fleet which pods exist.

pub mod answer;
pub mod control;
pub mod discover;
pub mod fleet;
pub mod pod;
pub mod serve;

pub use fleet::{Command, Fleet, FleetError};
