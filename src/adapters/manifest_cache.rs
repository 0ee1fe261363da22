//! The checkpoint manifests the operator has read, kept between a job's reconciles so that a
//! refresh reads from S3 only the manifests it has not seen.
//!
//! Every refresh still lists each task's manifests (one `ListObjectsV2`): the workers' retention
//! deletes old ones, and a kept manifest that is no longer listed must not be judged. Listing
//! from the last key seen (`start-after`) would miss exactly those deletions. What the listing
//! saves is the `GetObject` of each retained manifest: a manifest is written once under its
//! sequence number, so a key listed with the ETag it was read with holds the same bytes. A key
//! listed with another ETag (two owners racing for one sequence) or without one is read again.
//!
//! What is held is bounded: per job, per task, the manifests its last listing named (at most
//! `checkpoint.retain` plus the ones written since). A manifest is kept whole: the status shows
//! its size, the sum of its file list. A deleted job's entry is dropped
//! ([`ManifestCache::forget`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use streamkeeper_contract::CheckpointManifest;

/// One object of a task's manifest listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    pub key: String,
    /// The object's ETag as listed; `None` when the server gave none (such a key is read every
    /// time: nothing tells whether it changed).
    pub etag: Option<String>,
}

/// A manifest as read: `None` when the object did not parse (skipped, as restore skips it).
/// Kept too, so that a bad object under a manifest's name is not fetched at every refresh.
#[derive(Debug, Clone, PartialEq)]
struct Read {
    etag: String,
    manifest: Option<Arc<CheckpointManifest>>,
}

/// One task's manifests by key.
type TaskManifests = BTreeMap<String, Read>;

/// What one job's tasks' listings last named, under the S3 location they were listed at.
#[derive(Default)]
struct JobManifests {
    /// Endpoint, bucket and prefix: a job moved to another location starts afresh.
    location: String,
    tasks: BTreeMap<u32, TaskManifests>,
}

/// The manifests kept for every job this process reconciles, by job (`namespace/name`).
#[derive(Default)]
pub struct ManifestCache {
    jobs: Mutex<HashMap<String, JobManifests>>,
}

/// The manifest `kept` holds for `object`, if it was read with the ETag it is listed with now.
fn still_valid<'a>(kept: &'a TaskManifests, object: &Listed) -> Option<&'a Read> {
    kept.get(&object.key)
        .filter(|read| object.etag.as_deref() == Some(read.etag.as_str()))
}

impl ManifestCache {
    fn jobs(&self) -> MutexGuard<'_, HashMap<String, JobManifests>> {
        self.jobs.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Of `task`'s fresh listing `listed` (job `namespace/name`, at `location`), the keys that
    /// must be read: those not read before with the ETag they are listed with now.
    pub fn to_read(
        &self,
        (job, location, task): (&str, &str, u32),
        listed: &[Listed],
    ) -> Vec<Listed> {
        let jobs = self.jobs();
        let kept = jobs
            .get(job)
            .filter(|kept| kept.location == location)
            .and_then(|kept| kept.tasks.get(&task));
        listed
            .iter()
            .filter(|object| kept.and_then(|kept| still_valid(kept, object)).is_none())
            .cloned()
            .collect()
    }

    /// Records `task`'s listing after the reads: `listed` is the whole listing, `read` the keys
    /// just read with what they held. Keys read without an ETag are not kept. Returns the
    /// task's manifests.
    pub fn record(
        &self,
        (job, location, task): (&str, &str, u32),
        listed: &[Listed],
        read: Vec<(Listed, Option<CheckpointManifest>)>,
    ) -> Vec<CheckpointManifest> {
        let mut jobs = self.jobs();
        let entry = jobs.entry(job.to_string()).or_default();
        if entry.location != location {
            *entry = JobManifests {
                location: location.to_string(),
                tasks: BTreeMap::new(),
            };
        }
        let old = entry.tasks.remove(&task).unwrap_or_default();
        let mut fresh: TaskManifests = BTreeMap::new();
        let mut manifests = Vec::new();
        for (object, manifest) in read {
            let manifest = manifest.map(Arc::new);
            manifests.extend(manifest.as_deref().cloned());
            if let Some(etag) = object.etag {
                fresh.insert(object.key, Read { etag, manifest });
            }
        }
        for object in listed {
            if fresh.contains_key(&object.key) {
                continue;
            }
            if let Some(read) = still_valid(&old, object) {
                manifests.extend(read.manifest.as_deref().cloned());
                fresh.insert(object.key.clone(), read.clone());
            }
        }
        entry.tasks.insert(task, fresh);
        manifests
    }

    /// Drops what was kept for `job` (`namespace/name`), once it is deleted.
    pub fn forget(&self, job: &str) {
        self.jobs().remove(job);
    }

    /// How many manifests are kept, over every job: the gauge of what this cache holds.
    pub fn len(&self) -> usize {
        self.jobs()
            .values()
            .flat_map(|job| job.tasks.values())
            .map(BTreeMap::len)
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(sequence: u64) -> CheckpointManifest {
        CheckpointManifest {
            version: 1,
            task: 0,
            sequence,
            owner: "w-0".into(),
            assignment_generation: 1,
            created_at_ms: 1_000 + sequence,
            input_offset: 10,
            changelog_offset: 20,
            newest_record_ms: 0,
            processor_kind: "count".into(),
            state_format_version: 1,
            files: vec![streamkeeper_contract::CheckpointFile {
                name: "000001.sst".into(),
                object_key: "p/objects/00".into(),
                size: 1,
                sha256: "00".into(),
            }],
            changelog_incarnation: None,
        }
    }

    fn listed(key: &str, etag: Option<&str>) -> Listed {
        Listed {
            key: key.into(),
            etag: etag.map(str::to_string),
        }
    }

    const JOB: &str = "shop/card-count";
    const AT: &str = "http://s3|bucket|p/shop/card-count/";

    /// Lists `listing`, reads what the plan says with `bytes`, records it; returns the keys read
    /// and the manifests' sequences.
    fn refresh(
        cache: &ManifestCache,
        listing: &[Listed],
        bytes: impl Fn(&str) -> Option<CheckpointManifest>,
    ) -> (Vec<String>, Vec<u64>) {
        let to_read = cache.to_read((JOB, AT, 0), listing);
        let read_keys: Vec<String> = to_read.iter().map(|o| o.key.clone()).collect();
        let read = to_read
            .into_iter()
            .map(|object| {
                let manifest = bytes(&object.key);
                (object, manifest)
            })
            .collect();
        let mut sequences: Vec<u64> = cache
            .record((JOB, AT, 0), listing, read)
            .iter()
            .map(|m| m.sequence)
            .collect();
        sequences.sort();
        (read_keys, sequences)
    }

    fn by_key(key: &str) -> Option<CheckpointManifest> {
        key.parse().ok().map(manifest)
    }

    #[test]
    fn a_manifest_listed_again_with_its_etag_is_not_read_again() {
        let cache = ManifestCache::default();
        let first = [listed("1", Some("a")), listed("2", Some("b"))];
        assert_eq!(
            refresh(&cache, &first, by_key),
            (vec!["1".into(), "2".into()], vec![1, 2])
        );
        let second = [
            listed("1", Some("a")),
            listed("2", Some("b")),
            listed("3", Some("c")),
        ];
        assert_eq!(
            refresh(&cache, &second, by_key),
            (vec!["3".into()], vec![1, 2, 3])
        );
        assert_eq!(refresh(&cache, &second, by_key), (vec![], vec![1, 2, 3]));
    }

    #[test]
    fn a_manifest_no_longer_listed_is_dropped() {
        let cache = ManifestCache::default();
        refresh(
            &cache,
            &[listed("1", Some("a")), listed("2", Some("b"))],
            by_key,
        );
        // Retention deleted 1: it is neither judged nor kept.
        assert_eq!(
            refresh(&cache, &[listed("2", Some("b"))], by_key),
            (vec![], vec![2])
        );
        assert_eq!(cache.len(), 1);
    }

    #[test]
    fn another_etag_or_none_is_read_again() {
        let cache = ManifestCache::default();
        refresh(&cache, &[listed("1", Some("a")), listed("2", None)], by_key);
        // Another owner wrote sequence 1 again; key 2's server gave no ETag.
        let (read, _) = refresh(&cache, &[listed("1", Some("z")), listed("2", None)], |_| {
            Some(manifest(7))
        });
        assert_eq!(read, vec!["1".to_string(), "2".to_string()]);
        let (read, sequences) = refresh(&cache, &[listed("1", Some("z"))], by_key);
        assert_eq!((read, sequences), (vec![], vec![7]));
    }

    #[test]
    fn an_object_that_does_not_parse_is_kept_as_such_and_not_fetched_again() {
        let cache = ManifestCache::default();
        let listing = [listed("1", Some("a")), listed("junk", Some("j"))];
        assert_eq!(
            refresh(&cache, &listing, by_key),
            (vec!["1".into(), "junk".into()], vec![1])
        );
        assert_eq!(refresh(&cache, &listing, by_key), (vec![], vec![1]));
    }

    #[test]
    fn a_kept_manifest_is_whole_and_a_new_location_or_a_forget_starts_afresh() {
        let cache = ManifestCache::default();
        let listing = [listed("1", Some("a"))];
        refresh(&cache, &listing, by_key);
        assert!(cache.to_read((JOB, AT, 0), &listing).is_empty());
        let kept = cache.record((JOB, AT, 0), &listing, Vec::new());
        assert!(
            kept.len() == 1 && kept[0].total_bytes() == 1,
            "kept whole: {kept:?}"
        );
        assert_eq!(cache.to_read((JOB, "elsewhere", 0), &listing).len(), 1);
        cache.forget(JOB);
        assert!(cache.is_empty());
        assert_eq!(cache.to_read((JOB, AT, 0), &listing).len(), 1);
    }

    #[test]
    fn the_count_follows_every_job_task_move_and_forget() {
        let cache = ManifestCache::default();
        let two = [listed("1", Some("a")), listed("2", Some("b"))];
        let read = |listing: &[Listed]| -> Vec<(Listed, Option<CheckpointManifest>)> {
            listing
                .iter()
                .map(|o| (o.clone(), by_key(&o.key)))
                .collect()
        };
        cache.record((JOB, AT, 0), &two, read(&two));
        cache.record((JOB, AT, 1), &two, read(&two));
        cache.record(("shop/other", AT, 0), &two[..1], read(&two[..1]));
        assert_eq!(cache.len(), 5);
        // A task's listing shrinks: its dropped manifest leaves the count.
        cache.record((JOB, AT, 1), &two[..1], Vec::new());
        assert_eq!(cache.len(), 4);
        // The job moved: its kept manifests are gone, the new location's counted.
        cache.record((JOB, "elsewhere", 0), &two[..1], read(&two[..1]));
        assert_eq!(cache.len(), 2);
        cache.forget(JOB);
        assert_eq!(cache.len(), 1);
        cache.forget("shop/never-seen");
        cache.forget("shop/other");
        assert!(cache.is_empty());
    }
}
