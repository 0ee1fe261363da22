//! Checkpoint retention as a pure plan: keep the `retain` newest manifests (by sequence),
//! delete the older ones, and delete the objects no retained manifest references — but only
//! once an object has been seen unreferenced for a grace period.
//!
//! Why the grace period: a restore elsewhere (a new owner, a standby) may have picked a
//! manifest just before it was deleted and still be downloading its objects; and another
//! owner of the task may have uploaded objects whose manifest it has not written yet. Both
//! finish well within the grace period, so an object that stayed unreferenced for that long
//! is read by nobody. "Seen unreferenced" is kept in memory: after a restart every object
//! starts a new grace period, which only delays deletion. The plan never deletes anything
//! while a retained manifest is unreadable (its references are unknown).

use super::s3::ListedObject;
use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

/// A manifest found in S3, with the object keys it references (`None`: unreadable).
#[derive(Debug, Clone)]
pub struct ListedManifest {
    pub key: String,
    pub sequence: u64,
    pub references: Option<BTreeSet<String>>,
}

/// What one garbage collection run deletes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GcPlan {
    pub manifests: Vec<String>,
    pub objects: Vec<String>,
}

/// When each currently unreferenced object was first seen unreferenced.
#[derive(Debug, Default)]
pub struct UnreferencedSince {
    since: HashMap<String, Instant>,
}

/// Plans one run. `manifests` and `objects` are the task's current listing.
pub fn plan(
    manifests: &[ListedManifest],
    objects: &[ListedObject],
    retain: usize,
    seen: &mut UnreferencedSince,
    now: Instant,
    grace: Duration,
) -> GcPlan {
    let mut by_sequence: Vec<&ListedManifest> = manifests.iter().collect();
    by_sequence.sort_by_key(|m| std::cmp::Reverse(m.sequence));
    let (kept, dropped) = by_sequence.split_at(retain.min(by_sequence.len()));
    let mut plan = GcPlan {
        manifests: dropped.iter().map(|m| m.key.clone()).collect(),
        objects: Vec::new(),
    };
    let mut referenced = BTreeSet::new();
    for manifest in kept {
        match &manifest.references {
            Some(keys) => referenced.extend(keys.iter().cloned()),
            None => {
                seen.since.clear();
                return plan;
            }
        }
    }
    let listed: BTreeSet<&str> = objects.iter().map(|o| o.key.as_str()).collect();
    seen.since
        .retain(|key, _| listed.contains(key.as_str()) && !referenced.contains(key));
    for object in objects {
        if referenced.contains(&object.key) {
            continue;
        }
        let first_seen = *seen.since.entry(object.key.clone()).or_insert(now);
        if now.saturating_duration_since(first_seen) >= grace {
            plan.objects.push(object.key.clone());
        }
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(sequence: u64, refs: &[&str]) -> ListedManifest {
        ListedManifest {
            key: format!("m/{sequence}"),
            sequence,
            references: Some(refs.iter().map(|r| r.to_string()).collect()),
        }
    }

    fn objects(keys: &[&str]) -> Vec<ListedObject> {
        keys.iter()
            .map(|k| ListedObject {
                key: k.to_string(),
                size: 1,
            })
            .collect()
    }

    #[test]
    fn keeps_the_newest_and_deletes_what_only_older_ones_reference() {
        let manifests = [
            manifest(1, &["a", "b"]),
            manifest(2, &["b", "c"]),
            manifest(3, &["c", "d"]),
        ];
        let mut seen = UnreferencedSince::default();
        let now = Instant::now();
        let plan = plan(
            &manifests,
            &objects(&["a", "b", "c", "d", "stray"]),
            2,
            &mut seen,
            now,
            Duration::ZERO,
        );
        assert_eq!(plan.manifests, vec!["m/1".to_string()]);
        assert_eq!(plan.objects, vec!["a".to_string(), "stray".to_string()]);
    }

    #[test]
    fn an_unreferenced_object_waits_out_the_grace_period() {
        let manifests = [manifest(5, &["kept"])];
        let listing = objects(&["kept", "new-upload"]);
        let mut seen = UnreferencedSince::default();
        let start = Instant::now();
        let grace = Duration::from_secs(600);
        let first = plan(&manifests, &listing, 1, &mut seen, start, grace);
        assert!(first.objects.is_empty());
        let early = plan(&manifests, &listing, 1, &mut seen, start + grace / 2, grace);
        assert!(early.objects.is_empty());
        let late = plan(&manifests, &listing, 1, &mut seen, start + grace, grace);
        assert_eq!(late.objects, vec!["new-upload".to_string()]);
    }

    #[test]
    fn an_object_referenced_again_restarts_its_grace_period() {
        let listing = objects(&["x"]);
        let mut seen = UnreferencedSince::default();
        let start = Instant::now();
        let grace = Duration::from_secs(10);
        plan(&[manifest(1, &[])], &listing, 1, &mut seen, start, grace);
        plan(
            &[manifest(2, &["x"])],
            &listing,
            1,
            &mut seen,
            start + grace,
            grace,
        );
        let again = plan(
            &[manifest(3, &[])],
            &listing,
            1,
            &mut seen,
            start + grace,
            grace,
        );
        assert!(again.objects.is_empty());
    }

    #[test]
    fn an_unreadable_retained_manifest_blocks_object_deletion() {
        let mut unreadable = manifest(2, &[]);
        unreadable.references = None;
        let manifests = [manifest(1, &["a"]), unreadable];
        let mut seen = UnreferencedSince::default();
        let plan = plan(
            &manifests,
            &objects(&["a", "b"]),
            1,
            &mut seen,
            Instant::now(),
            Duration::ZERO,
        );
        assert_eq!(plan.manifests, vec!["m/1".to_string()]);
        assert!(plan.objects.is_empty());
    }
}
