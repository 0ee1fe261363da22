//! Which worker pod runs each task, and which pods keep its standby copies.
//!
//! - [`document`]: the assignment document, the format the operator stores and sends and the
//!   workers act on;
//! - [`rule`]: the pure, deterministic rule by which the operator decides the next document.

pub mod document;
pub mod rule;

pub use document::{AssignmentDocument, TaskAssignment};
pub use rule::{AssignmentInputs, CopyLag, GenerationsExhausted, PodPlace, next_assignment};
