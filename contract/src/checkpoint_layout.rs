//! Where checkpoints live in S3. The worker writes these keys and the operator reads them (for
//! checkpoint ages, recovery gaps and `spec.restore`), so both take them from here.
//!
//! ```text
//! <prefix>/[<cluster>/]<namespace>/<job>/task-<i>/checkpoints/<sequence, 20 digits>.json   manifest
//! <prefix>/[<cluster>/]<namespace>/<job>/task-<i>/objects/<sha256 hex>                       file content
//! ```
//!
//! `<cluster>` is the operator's cluster name, when it has one ([`JobIdentity::cluster`]).
//!
//! Sequence numbers are zero-padded so a lexical S3 listing is also numeric order. Objects are
//! per task and named by their content hash: two owners of one task writing the same bytes write
//! the same key, and never overwrite different bytes.

use crate::worker_config::JobIdentity;

/// The S3 key prefix of one job, with its trailing `/`: `<prefix>/<namespace>/<job>/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobPrefix(String);

impl JobPrefix {
    /// The prefix of the job `job` under the spec's `prefix`, its cluster's segment included.
    pub fn of(prefix: &str, job: &JobIdentity) -> Self {
        match &job.cluster {
            Some(cluster) => {
                let prefix = prefix.trim_matches('/');
                let scoped = if prefix.is_empty() {
                    cluster.clone()
                } else {
                    format!("{prefix}/{cluster}")
                };
                Self::new(&scoped, &job.namespace, &job.name)
            }
            None => Self::new(prefix, &job.namespace, &job.name),
        }
    }

    /// `<prefix>/<namespace>/<job>/`; [`JobPrefix::of`] adds the cluster's segment.
    pub fn new(prefix: &str, namespace: &str, job: &str) -> Self {
        let prefix = prefix.trim_matches('/');
        let head = if prefix.is_empty() {
            String::new()
        } else {
            format!("{prefix}/")
        };
        Self(format!("{head}{namespace}/{job}/"))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The key of the job's owner marker ([`crate::OwnerMarker`]). Not a key [`JobPrefix::owns`]
    /// (a task's), so deleting the tasks' keys leaves it until the very end.
    pub fn owner_marker_key(&self) -> String {
        format!("{}streamkeeper-job.json", self.0)
    }

    pub fn task(&self, task: u32) -> TaskPrefix {
        TaskPrefix(format!("{}task-{task}", self.0))
    }

    /// Whether `key` is one this job's tasks write: `task-<i>/checkpoints/<20 digits>.json` or
    /// `task-<i>/objects/<64 hex digits>` right below the job's prefix, three segments. The
    /// `prefix` of a job is free, so another job's folder can lie inside this one (job `b/c`
    /// under prefix `a` and job `c/d` under prefix `a/b` share `a/b/c/`), but its keys are at
    /// least five segments below this prefix (`<namespace>/<job>/task-<i>/<kind>/<name>`), so
    /// deleting the keys this job owns never deletes another job's.
    pub fn owns(&self, key: &str) -> bool {
        let Some(rest) = key.strip_prefix(&self.0) else {
            return false;
        };
        let Some((task, rest)) = rest.split_once('/') else {
            return false;
        };
        let Some(index) = task.strip_prefix("task-") else {
            return false;
        };
        if index.is_empty() || !index.bytes().all(|b| b.is_ascii_digit()) {
            return false;
        }
        if let Some(name) = rest.strip_prefix("checkpoints/") {
            let digits = name.strip_suffix(MANIFEST_SUFFIX).unwrap_or_default();
            return digits.len() == 20 && digits.bytes().all(|b| b.is_ascii_digit());
        }
        rest.strip_prefix("objects/")
            .is_some_and(|hash| hash.len() == 64 && hash.bytes().all(|b| b.is_ascii_hexdigit()))
    }
}

/// The S3 key prefix of one task, without a trailing `/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskPrefix(String);

const MANIFEST_SUFFIX: &str = ".json";

impl TaskPrefix {
    pub fn new(prefix: &str, namespace: &str, job: &str, task: u32) -> Self {
        JobPrefix::new(prefix, namespace, job).task(task)
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
    fn a_job_owns_only_its_tasks_keys_not_a_job_nested_below_it() {
        let job = JobPrefix::new("a", "b", "c");
        let task = job.task(3);
        assert!(job.owns(&task.manifest_key(42)));
        assert!(job.owns(&task.object_key(&"0f".repeat(32))));
        // Job c/d under prefix a/b: its folder a/b/c/d/ lies inside a/b/c/.
        let nested = JobPrefix::new("a/b", "c", "d").task(0);
        assert!(nested.manifest_key(1).starts_with(job.as_str()));
        assert!(!job.owns(&nested.manifest_key(1)));
        assert!(!job.owns(&nested.object_key(&"0f".repeat(32))));
        // A job named like a task folder: c/task-1 under prefix a/b.
        let named_like_a_task = JobPrefix::new("a/b", "c", "task-1").task(0);
        assert!(!job.owns(&named_like_a_task.manifest_key(1)));
        assert_eq!(job.owner_marker_key(), "a/b/c/streamkeeper-job.json");
        assert!(!job.owns(&job.owner_marker_key()));
        for other in [
            "a/b/c/marker.json",
            "a/b/c/task-/checkpoints/00000000000000000001.json",
            "a/b/c/task-1/checkpoints/1.json",
            "a/b/c/task-1/objects/zz",
            "a/b/cc/task-1/checkpoints/00000000000000000001.json",
        ] {
            assert!(!job.owns(other), "{other}");
        }
    }

    #[test]
    fn a_cluster_name_is_a_segment_of_its_own_and_no_name_keeps_the_layout() {
        let identity = |cluster: Option<&str>| JobIdentity {
            cluster: cluster.map(str::to_string),
            namespace: "payments".into(),
            name: "card-count".into(),
        };
        assert_eq!(
            JobPrefix::of("sk", &identity(None)).as_str(),
            "sk/payments/card-count/"
        );
        assert_eq!(
            JobPrefix::of("/sk/", &identity(Some("east"))).as_str(),
            "sk/east/payments/card-count/"
        );
        assert_eq!(
            JobPrefix::of("", &identity(Some("east"))).as_str(),
            "east/payments/card-count/"
        );
    }

    #[test]
    fn lexical_order_is_numeric_order() {
        let task = TaskPrefix::new("p", "ns", "job", 0);
        assert!(task.manifest_key(9) < task.manifest_key(10));
        assert!(task.manifest_key(99) < task.manifest_key(100_000));
    }
}
