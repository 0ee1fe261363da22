//! A restore on request, as the operator hands it to the workers.
//!
//! The operator puts this document (JSON) in the pod template annotation
//! `streamkeeper.dev/restore`, and the pod template passes that annotation to the worker as the
//! environment variable [`RESTORE_REQUEST_ENV`] (downward API). Changing it changes the template,
//! so the operator replaces every pod, and each worker starts with the request in hand.
//!
//! What the worker is expected to do: before restoring a task from local state, if the request's
//! `id` differs from the restore id it last applied to that task (kept next to its local state),
//! discard the local state and restore the task from the named checkpoint (`latest`: the valid
//! manifest with the highest changelog offset; a sequence: the manifest with that sequence), then
//! replay from `source` (`changelog`: exact; `input`: reprocess the input from the checkpoint's
//! input offset), then record the id so a later restart does a normal restore again. With
//! `adoptInput`, the restored state also forgets which input it was built from and its position
//! in it, so the task reads the job's current input topic from its first record.

use crate::{FormatError, Versioned};
use serde::{Deserialize, Serialize};

/// Environment variable of the worker container holding the JSON document (absent: no request).
pub const RESTORE_REQUEST_ENV: &str = "STREAMKEEPER_RESTORE_REQUEST";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RestoreRequestDocument {
    pub version: u32,
    /// `spec.restore.id`: a restore runs once per distinct id.
    pub id: String,
    /// Which checkpoint each task starts from.
    pub checkpoint: RestoreCheckpoint,
    /// Where the state after the checkpoint comes from.
    pub source: RestoreReplaySource,
    /// Keep the state for the job's current input topic (`spec.restore.adoptInput`). Absent in
    /// a request without it, so such requests read as they did before the field existed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub adopt_input: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum RestoreCheckpoint {
    Latest,
    Sequence(u64),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum RestoreReplaySource {
    Changelog,
    Input,
}

/// Why `adopt_input` cannot go with `source`, if it cannot: the rule of the operator's
/// validation and of the worker's reading of the request.
pub fn adoption_refused(adopt_input: bool, source: RestoreReplaySource) -> Option<&'static str> {
    (adopt_input && source == RestoreReplaySource::Input).then_some(
        "needs `source: changelog`: a replay from the input reads the old topic's offsets, \
         which adopting the input discards",
    )
}

impl Versioned for RestoreRequestDocument {
    const FORMAT: &'static str = "restore request";
    const VERSION: u32 = 1;

    fn version(&self) -> u32 {
        self.version
    }

    fn check(&self) -> Result<(), FormatError> {
        if self.id.is_empty() {
            return Err(FormatError::InvalidField {
                format: Self::FORMAT,
                field: "id".into(),
                reason: "must not be empty".into(),
            });
        }
        if let Some(reason) = adoption_refused(self.adopt_input, self.source) {
            return Err(FormatError::InvalidField {
                format: Self::FORMAT,
                field: "adoptInput".into(),
                reason: reason.into(),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_has_a_stable_shape() {
        for checkpoint in [RestoreCheckpoint::Latest, RestoreCheckpoint::Sequence(42)] {
            let document = RestoreRequestDocument {
                version: 1,
                id: "incident-17".into(),
                checkpoint,
                source: RestoreReplaySource::Input,
                adopt_input: false,
            };
            let back = RestoreRequestDocument::from_json(&document.to_json()).unwrap();
            assert_eq!(back, document);
        }
        let text = br#"{"version":1,"id":"r1","checkpoint":{"sequence":7},"source":"changelog"}"#;
        let parsed = RestoreRequestDocument::from_json(text).unwrap();
        assert_eq!(parsed.checkpoint, RestoreCheckpoint::Sequence(7));
        let latest = br#"{"version":1,"id":"r1","checkpoint":"latest","source":"input"}"#;
        assert_eq!(
            RestoreRequestDocument::from_json(latest)
                .unwrap()
                .checkpoint,
            RestoreCheckpoint::Latest
        );
    }

    #[test]
    fn an_adopted_input_is_written_only_when_asked_and_needs_the_changelog() {
        let mut document = RestoreRequestDocument {
            version: 1,
            id: "move".into(),
            checkpoint: RestoreCheckpoint::Latest,
            source: RestoreReplaySource::Changelog,
            adopt_input: false,
        };
        let field = |document: &RestoreRequestDocument| {
            let value: serde_json::Value = serde_json::from_slice(&document.to_json()).unwrap();
            value.get("adoptInput").cloned()
        };
        assert_eq!(field(&document), None, "absent unless asked");
        document.adopt_input = true;
        assert_eq!(field(&document), Some(serde_json::Value::Bool(true)));
        let text = document.to_json();
        assert_eq!(RestoreRequestDocument::from_json(&text).unwrap(), document);
        document.source = RestoreReplaySource::Input;
        let error = RestoreRequestDocument::from_json(&document.to_json()).unwrap_err();
        assert!(error.to_string().contains("adoptInput"), "{error}");
    }

    #[test]
    fn refuses_an_empty_id_and_an_unknown_version() {
        let empty = br#"{"version":1,"id":"","checkpoint":"latest","source":"input"}"#;
        assert!(RestoreRequestDocument::from_json(empty).is_err());
        let newer = br#"{"version":2,"id":"a","checkpoint":"latest","source":"input"}"#;
        let error = RestoreRequestDocument::from_json(newer).unwrap_err();
        assert!(error.to_string().contains("version 2"), "{error}");
    }
}
