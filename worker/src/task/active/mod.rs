//! The active role of a task: the one owner that consumes the task's input partition and writes
//! its output, dead letters, changelog and input offsets, exactly once.
//!
//! The role's steps, which the supervisor ([`crate::task`]) runs: claim the task (fencing every
//! older owner), restore its state (`task::restore`), check which processor built that state
//! (`identity`), resume the input from the state's own position (`input_position`), then run the
//! exactly-once loop (`processing_loop`) until the role ends. A promotion times these steps.
//!
//! The files, lowest first (each uses only files before it):
//! - `record_size`: what the producer can send, decided before anything is sent;
//! - `dead_letter`: the record of an input record the task will not process;
//! - `claim`: a transactional producer that has fenced every older owner of the task;
//! - `fence`: telling a real fence from a transaction the coordinator aborted for its timeout;
//! - `commit_mark`: the assignment generation each input commit carries;
//! - `sources`: the partitions a task reads (the input, a join's right topic, a re-keyed
//!   side's partitions), and where each one's position and identity live in the state;
//! - `input_position`: where the input resumes, and what happens when Kafka and the state
//!   disagree;
//! - `promotion`: the steps of a promotion, timed;
//! - `merge`: the order in which a join's task takes the records of its topics, and the
//!   record the loop polled;
//! - `cadence`: when the loop looks at its sources;
//! - `processing_loop`: the exactly-once loop ([`ActiveLoop`]);
//! - `rekey`: writing a re-keyed side's records to its repartition topic, and purging what the
//!   join has consumed of it;
//! - `watch`: each source's lag, whether the consumer stalled on one, and whether a join's
//!   topics kept their partition count;
//! - `resume`: resuming the input where the state says, by `input_position`'s rule;
//! - `identity`: which processor built the state (a check the loop commits).

mod apply;
mod cadence;
mod claim;
mod commit_mark;
pub(super) mod dead_letter;
mod fence;
pub(super) mod identity;
mod input_identity;
pub(super) mod input_position;
mod merge;
mod processing_loop;
pub(super) mod promotion;
mod record_size;
mod rekey;
mod resume;
pub(super) mod sources;
mod watch;

pub use apply::apply_record;
pub use commit_mark::last_commit_generations;
pub use processing_loop::ActiveLoop;
