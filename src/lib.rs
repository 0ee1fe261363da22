//! streamkeeper, the operator: turns `StatefulStreamJob` resources into StatefulSets of workers,
//! changelog topics and checkpoint settings, and keeps their state exact through failures.

pub mod api;
pub mod bench;
pub mod checkpoint_reader;
pub mod controller;
pub mod crd;
pub mod failover;
pub mod http;
pub mod kafka_admin;
pub mod kafka_security;
pub mod leader;
pub mod leadership;
pub mod metrics;
pub mod retention;
pub mod vocabulary;
pub mod worker_client;
