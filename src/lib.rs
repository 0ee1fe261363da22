//! streamkeeper, the operator: turns `StatefulStreamJob` resources into StatefulSets of workers,
//! changelog topics and checkpoint settings, and keeps their state exact through failures.

pub mod api;
pub mod controller;
pub mod crd;
pub mod retention;
