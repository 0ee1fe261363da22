//! Where checkpoints live in S3. The worker writes these keys and the operator reads them (for
//! checkpoint ages, recovery gaps and `spec.restore`), so both take them from here.
//!
//! ```text
//! <prefix>/<namespace>/<job>/task-<i>/checkpoints/<sequence, 20 digits>.json   manifest
//! <prefix>/<namespace>/<job>/task-<i>/objects/<sha256 hex>                       file content
//! ```
//!
//! Sequence numbers are zero-padded so a lexical S3 listing is also numeric order. Objects are
//! per task and named by their content hash: two owners of one task writing the same bytes write
//! the same key, and never overwrite different bytes.

/// The S3 key prefix of one task, without a trailing `/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskPrefix(String);

const MANIFEST_SUFFIX: &str = ".json";

impl TaskPrefix {
    pub fn new(prefix: &str, namespace: &str, job: &str, task: u32) -> Self {
        let prefix = prefix.trim_matches('/');
        let head = if prefix.is_empty() {
            String::new()
        } else {
            format!("{prefix}/")
        };
        Self(format!("{head}{namespace}/{job}/task-{task}"))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Prefix to list every manifest of the task.
    pub fn manifests(&self) -> String {
        format!("{}/checkpoints/", self.0)
    }

    /// Prefix to list every content object of the task.
    pub fn objects(&self) -> String {
        format!("{}/objects/", self.0)
    }

    pub fn manifest_key(&self, sequence: u64) -> String {
        format!("{}{sequence:020}{MANIFEST_SUFFIX}", self.manifests())
    }

    pub fn object_key(&self, sha256_hex: &str) -> String {
        format!("{}{sha256_hex}", self.objects())
    }

    /// The sequence number a manifest key names, or `None` for any other key.
    pub fn sequence_of(&self, key: &str) -> Option<u64> {
        let name = key.strip_prefix(&self.manifests())?;
        let digits = name.strip_suffix(MANIFEST_SUFFIX)?;
        if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        digits.parse().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_follow_the_documented_layout() {
        let task = TaskPrefix::new("streamkeeper", "payments", "card-count", 3);
        assert_eq!(task.as_str(), "streamkeeper/payments/card-count/task-3");
        assert_eq!(
            task.manifest_key(42),
            "streamkeeper/payments/card-count/task-3/checkpoints/00000000000000000042.json"
        );
        assert_eq!(
            task.object_key(&"ab".repeat(32)),
            format!(
                "streamkeeper/payments/card-count/task-3/objects/{}",
                "ab".repeat(32)
            )
        );
    }

    #[test]
    fn an_empty_prefix_adds_no_leading_slash() {
        let task = TaskPrefix::new("", "ns", "job", 0);
        assert_eq!(task.manifests(), "ns/job/task-0/checkpoints/");
    }

    #[test]
    fn sequence_round_trips_and_other_keys_are_ignored() {
        let task = TaskPrefix::new("p", "ns", "job", 1);
        for sequence in [0, 7, u64::MAX] {
            assert_eq!(
                task.sequence_of(&task.manifest_key(sequence)),
                Some(sequence)
            );
        }
        assert_eq!(task.sequence_of("p/ns/job/task-1/checkpoints/7.json"), None);
        assert_eq!(
            task.sequence_of("p/ns/job/task-10/checkpoints/00000000000000000007.json"),
            None
        );
        assert_eq!(task.sequence_of(&task.object_key("00")), None);
    }

    #[test]
    fn lexical_order_is_numeric_order() {
        let task = TaskPrefix::new("p", "ns", "job", 0);
        assert!(task.manifest_key(9) < task.manifest_key(10));
        assert!(task.manifest_key(99) < task.manifest_key(100_000));
    }
}
