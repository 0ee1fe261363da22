//! The RocksDB engine of the store: one instance per task, in `<state dir>/task-<i>/db`.
//!
//! - `open`: a task's paths, the task-directory lock, the engine options derived from the
//!   tuning, the mapping of engine errors, and the inspection that decides whether the local
//!   state found on open can be trusted.
//! - `store`: [`RocksStore`], the [`StateStore`](super::StateStore) on it: opening, reads,
//!   wipes and checkpoints.
//! - `writes`: the writes a crash must never tear (commit, restore batches, the end of a
//!   restore), and why their options make them safe.

mod open;
mod store;
mod writes;

pub use open::BlockCache;
pub use store::{Opened, RocksStore, db_path};
