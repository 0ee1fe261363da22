//! Leader election among the operator's replicas. [`election`] takes and renews a
//! `coordination.k8s.io/v1` Lease, [`renewals`] keeps renewing it on a thread of its own;
//! [`deadline`] is what every write checks: whether this
//! process may still write at this instant ([`Leadership`]).

pub mod deadline;
pub mod election;
pub mod renewals;

pub use deadline::{
    LeaderOnlyWrites, LeaderOnlyWritesService, Leadership, NotLeading, leader_only_builder,
    leader_only_client,
};
pub use election::{LeaderElector, LeaseError, LeaseSettings, Lost};
pub use renewals::{Renewals, RenewalsError};
