//! The CEL rules of the CRD that are written from the contract's rules
//! ([`streamkeeper_contract::rules`]): the same limits, so the apiserver refuses at
//! `kubectl apply` what the operator and the worker would refuse later. The operator still checks
//! every rule itself (a resource stored before its CRD carried a rule is not checked again), and
//! the layout arithmetic between window size and advance (a multiple, at most
//! [`MAX_WINDOWS_PER_RECORD`](streamkeeper_contract::rules::MAX_WINDOWS_PER_RECORD) windows per
//! record) is left to it: it reports those as the `Invalid` condition.
//!
//! Also here: the immutability rules that keep a job on the storage it was created with.

use kube::core::{Message, Rule};
use streamkeeper_contract::format_go_duration;
use streamkeeper_contract::rules::{MAX_JOB_NAME_LEN, MAX_WINDOW_GRACE, SASL_PLAIN};

/// `metadata.name` fits the labels of the StatefulSet's pods.
pub fn job_name() -> Rule {
    Rule::new(format!(
        "self.metadata.name.size() <= {MAX_JOB_NAME_LEN} && self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')"
    ))
    .message(Message::Message(format!(
        "metadata.name must be a DNS label (lowercase letters, digits, '-', starting with a letter) of at most \
         {MAX_JOB_NAME_LEN} characters: the StatefulSet's pods carry the label controller-revision-hash=<name>-<hash>, \
         at most 63 characters"
    )))
}

/// An event-time duration `field` (its name in messages) of at least 1ms; the CRD's
/// [`EVENT_DURATION_PATTERN`](crate::api::EVENT_DURATION_PATTERN) admits whole milliseconds only.
pub fn event_duration(field: &str) -> Rule {
    Rule::new("duration(self) >= duration('1ms')")
        .message(Message::Message(format!("{field} must be at least 1ms")))
}

/// The window grace: at most the contract's bound.
pub fn window_grace() -> Rule {
    let max = format_go_duration(MAX_WINDOW_GRACE);
    Rule::new(format!("duration(self) <= duration('{max}')")).message(Message::Message(format!(
        "window.grace must be at most {max}: every window of every key stays in state until its end plus the grace"
    )))
}

/// A job must not feed on its own output.
pub fn output_is_not_input() -> Rule {
    Rule::new("self.outputTopic != self.inputTopic")
        .message("spec.kafka.outputTopic must differ from spec.kafka.inputTopic: a job must not feed on its own output")
        .field_path(".outputTopic")
}

/// An explicit changelog topic has no other role.
pub fn changelog_has_one_role() -> Rule {
    Rule::new(
        "!has(self.changelogTopic) || (self.changelogTopic != self.inputTopic && self.changelogTopic != self.outputTopic)",
    )
    .message("spec.kafka.changelogTopic must differ from the input and output topics: every topic of a job has one role")
    .field_path(".changelogTopic")
}

/// An explicit dead-letter topic has no other role.
pub fn dead_letter_has_one_role() -> Rule {
    Rule::new(
        "!has(self.deadLetterTopic) || (self.deadLetterTopic != self.inputTopic && self.deadLetterTopic != self.outputTopic \
         && (!has(self.changelogTopic) || self.deadLetterTopic != self.changelogTopic))",
    )
    .message(
        "spec.kafka.deadLetterTopic must differ from the input, output and changelog topics: every topic of a job has one role",
    )
    .field_path(".deadLetterTopic")
}

/// SASL PLAIN sends the password itself: only inside TLS.
pub fn plain_needs_tls() -> Rule {
    Rule::new(format!(
        "!has(self.sasl) || self.sasl.mechanism != '{SASL_PLAIN}' || has(self.tls)"
    ))
    .message("spec.kafka.sasl.mechanism PLAIN sends the password as it is: it needs spec.kafka.tls, or use a SCRAM mechanism")
    .field_path(".sasl.mechanism")
}

/// An optional field of the object this rule sits on keeps the value (or the absence) it was
/// created with. `why` completes "`<path>` is immutable: ".
pub fn optional_immutable(field: &str, path: &str, why: &str) -> Rule {
    Rule::new(format!(
        "has(self.{field}) == has(oldSelf.{field}) && (!has(self.{field}) || self.{field} == oldSelf.{field})"
    ))
    .message(Message::Message(format!("{path} is immutable: {why}")))
    .field_path(format!(".{field}"))
}

/// `spec.processor` keeps the value it was created with, but for a WebAssembly processor's
/// module, limits and `readsStateOf`: a new build of the module is an upgrade the worker
/// judges against the state (it goes on only from a build the new one declares it reads).
pub fn processor_immutable() -> Rule {
    let same = |field: &str| {
        format!(
            "has(self.{field}) == has(oldSelf.{field}) && (!has(self.{field}) || self.{field} == oldSelf.{field})"
        )
    };
    Rule::new(format!(
        "self == oldSelf || (self.type == 'wasm' && oldSelf.type == 'wasm' && self.keyField == oldSelf.keyField && {} && {})",
        same("timeField"),
        same("wasm.config"),
    ))
    .message(
        "spec.processor is immutable but for a wasm processor's module, limits and readsStateOf: state built by one processor cannot be read by another; create a new job (or delete and recreate this one with deletionPolicy Delete)",
    )
}

/// The field this rule sits on keeps the value it was created with.
pub fn immutable(path: &str, why: &str) -> Rule {
    Rule::new("self == oldSelf").message(Message::Message(format!("{path} is immutable: {why}")))
}

pub const CHANGELOG_IMMUTABLE: &str = "the job's state is in the changelog it was created with; a new name would start from an \
     empty changelog (the worker stops rather than guess), and deletion would remove a topic the job did not create";
pub const DEAD_LETTER_IMMUTABLE: &str = "the operator creates the dead-letter topic and, with deletionPolicy Delete, \
     deletes it: a renamed one would leave the old behind or delete a topic it did not create";
pub const S3_IMMUTABLE: &str = "the checkpoints are where the job was created with; a new location has none, and \
     deletion would remove objects the job did not write";
pub const STORAGE_IMMUTABLE: &str =
    "a StatefulSet's volume claims cannot change; create a new job to move the state";
