//! The checkpoint manifest: written last, with a conditional PUT, as the commit point of a
//! checkpoint. Objects it names are content-addressed, so two owners of one task can never
//! overwrite each other's files.

use crate::version::{FormatError, Versioned};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CheckpointManifest {
    pub version: u32,
    pub task: u32,
    /// Per-task sequence number; names the manifest object. Not used to pick the newest on
    /// restore (two owners can race): `changelog_offset` is.
    pub sequence: u64,
    /// Pod that wrote the checkpoint and the assignment generation it owned the task under.
    pub owner: String,
    pub assignment_generation: u64,
    pub created_at_ms: u64,
    /// Next input offset to process after restoring this checkpoint.
    pub input_offset: i64,
    /// Next changelog offset to replay after restoring this checkpoint.
    pub changelog_offset: i64,
    /// Timestamp of the newest changelog record contained, to judge tombstone retention.
    pub newest_record_ms: u64,
    pub processor_kind: String,
    /// Version of the state value encoding inside RocksDB.
    pub state_format_version: u32,
    pub files: Vec<CheckpointFile>,
    /// Which incarnation of the changelog topic the offsets above belong to: absent for the
    /// topic as first created, an id after a lost changelog was rebuilt. A restore uses only
    /// checkpoints of the changelog's current incarnation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changelog_incarnation: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CheckpointFile {
    /// File name inside the RocksDB checkpoint directory.
    pub name: String,
    /// S3 key, derived from the content hash.
    pub object_key: String,
    pub size: u64,
    /// Lower-case hex SHA-256 of the content.
    pub sha256: String,
}

/// The largest manifest anyone reads: a manifest lists a checkpoint's files at about 200 bytes
/// each, so this is some 80,000 files, far above any task's state. A larger object under a
/// manifest's name is not a manifest, and reading it whole could run the reader (the operator,
/// which reads every job's manifests) out of memory.
pub const MAX_MANIFEST_BYTES: usize = 16 << 20;

/// Adds `chunk` to the manifest being read into `bytes`; `false`, adding nothing, when that
/// would pass [`MAX_MANIFEST_BYTES`] (stop reading: it is not a manifest).
pub fn append_bounded(bytes: &mut Vec<u8>, chunk: &[u8]) -> bool {
    if bytes.len() + chunk.len() > MAX_MANIFEST_BYTES {
        return false;
    }
    bytes.extend_from_slice(chunk);
    true
}

impl CheckpointManifest {
    pub fn total_bytes(&self) -> u64 {
        self.files.iter().map(|f| f.size).sum()
    }
}

impl Versioned for CheckpointManifest {
    const FORMAT: &'static str = "checkpoint manifest";
    const VERSION: u32 = 1;

    fn version(&self) -> u32 {
        self.version
    }

    fn check(&self) -> Result<(), FormatError> {
        let invalid = |field: String, reason: &str| FormatError::InvalidField {
            format: Self::FORMAT,
            field,
            reason: reason.into(),
        };
        if self.input_offset < 0 || self.changelog_offset < 0 {
            return Err(invalid("offsets".into(), "must not be negative"));
        }
        let mut names = BTreeSet::new();
        for (index, file) in self.files.iter().enumerate() {
            if file.name.is_empty() || file.name.contains('/') || !names.insert(&file.name) {
                return Err(invalid(
                    format!("files[{index}].name"),
                    "must be a plain file name, unique in the manifest",
                ));
            }
            let hex = file.sha256.len() == 64
                && file
                    .sha256
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
            if !hex {
                return Err(invalid(
                    format!("files[{index}].sha256"),
                    "must be 64 lower-case hex digits",
                ));
            }
            if file.object_key.is_empty() {
                return Err(invalid(
                    format!("files[{index}].objectKey"),
                    "must not be empty",
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_manifest_is_read_up_to_the_bound_and_no_further() {
        let mut bytes = vec![0; MAX_MANIFEST_BYTES - 1];
        assert!(append_bounded(&mut bytes, b"}"));
        assert_eq!(bytes.len(), MAX_MANIFEST_BYTES);
        assert!(!append_bounded(&mut bytes, b" "));
        assert_eq!(
            bytes.len(),
            MAX_MANIFEST_BYTES,
            "nothing past the bound is kept"
        );
    }
    use super::*;

    fn sample() -> CheckpointManifest {
        CheckpointManifest {
            version: 1,
            task: 2,
            sequence: 14,
            owner: "card-counts-1".into(),
            assignment_generation: 5,
            created_at_ms: 1_764_000_000_000,
            input_offset: 50_123,
            changelog_offset: 40_001,
            newest_record_ms: 1_763_999_999_000,
            processor_kind: "count".into(),
            state_format_version: 1,
            files: vec![CheckpointFile {
                name: "000012.sst".into(),
                object_key: format!("objects/{}", "ab".repeat(32)),
                size: 1024,
                sha256: "ab".repeat(32),
            }],
            changelog_incarnation: None,
        }
    }

    #[test]
    fn round_trips() {
        let manifest = sample();
        assert_eq!(
            CheckpointManifest::from_json(&manifest.to_json()).unwrap(),
            manifest
        );
        assert_eq!(manifest.total_bytes(), 1024);
        let text = String::from_utf8(manifest.to_json()).unwrap();
        assert!(!text.contains("changelogIncarnation"), "absent, not null");
        let rebuilt = CheckpointManifest {
            changelog_incarnation: Some("5f3a".into()),
            ..manifest
        };
        assert_eq!(
            CheckpointManifest::from_json(&rebuilt.to_json()).unwrap(),
            rebuilt
        );
    }

    #[test]
    fn refuses_bad_checksums_and_duplicate_files() {
        let mut manifest = sample();
        manifest.files[0].sha256 = "XYZ".into();
        let error = CheckpointManifest::from_json(&manifest.to_json()).unwrap_err();
        assert!(error.to_string().contains("files[0].sha256"), "{error}");

        let mut manifest = sample();
        manifest.files.push(manifest.files[0].clone());
        let error = CheckpointManifest::from_json(&manifest.to_json()).unwrap_err();
        assert!(error.to_string().contains("files[1].name"), "{error}");
    }

    #[test]
    fn refuses_a_manifest_without_version() {
        let text = String::from_utf8(sample().to_json())
            .unwrap()
            .replace("\"version\": 1,", "");
        let error = CheckpointManifest::from_json(text.as_bytes()).unwrap_err();
        assert!(error.to_string().contains("version"), "{error}");
    }
}
