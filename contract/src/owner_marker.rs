//! The owner marker of a job's S3 prefix, `<job prefix>/streamkeeper-job.json` (its key is
//! `checkpoint_layout`'s `JobPrefix::owner_marker_key`), and the rules that read it. The operator
//! writes it before any worker of the job writes a checkpoint there, and reads it before it writes
//! or deletes anything under the prefix.
//!
//! A job's prefix derives from its bucket, `prefix`, cluster name, namespace and name. Two
//! clusters sharing one bucket with the same names and no cluster name (the default), or an
//! operator pointed at another cluster's data, would write into one prefix and, under
//! `deletionPolicy: Delete`, delete each other's checkpoints. The marker names the cluster (its
//! name, and its id when the operator may read it: the `kube-system` namespace's uid) and the
//! job (namespace, name, uid), so another cluster's claim is refused and a deletion happens only
//! under a marker that names the job being deleted.
//!
//! The changelog carries the same marker as an owner record: partition 0's first record, written
//! by the operator when the topic is new and read before anything is applied, so two clusters
//! sharing one Kafka (but not one bucket) cannot both write one changelog either. Its key lies in
//! the store's reserved range (it starts with 0x00): the worker never takes it into the state, a
//! rewrite of the changelog never deletes it, and compaction keeps one per writer.

use crate::{FormatError, Versioned};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OwnerMarker {
    pub version: u32,
    /// The operator's `--cluster-name`, if set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    /// The uid of the cluster's `kube-system` namespace, if the operator may read it: an id no
    /// other cluster has, whatever the names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_id: Option<String>,
    pub namespace: String,
    pub name: String,
    /// The uid of the StatefulStreamJob that wrote it last. A job re-created under the same name
    /// (`deletionPolicy: Retain`) writes its own.
    pub uid: String,
}

impl Versioned for OwnerMarker {
    const FORMAT: &'static str = "owner marker";
    const VERSION: u32 = 1;

    fn version(&self) -> u32 {
        self.version
    }

    fn check(&self) -> Result<(), FormatError> {
        for (field, value) in [
            ("namespace", &self.namespace),
            ("name", &self.name),
            ("uid", &self.uid),
        ] {
            if value.is_empty() {
                return Err(FormatError::InvalidField {
                    format: Self::FORMAT,
                    field: field.into(),
                    reason: "must not be empty".into(),
                });
            }
        }
        Ok(())
    }
}

// The rules (pure; the operator's `controller::apply::owner_marker` carries them out): which
// marker a job may claim or take over, and under which it may delete.
//
// - Before anything is applied: no marker, the job claims the prefix (the marker is written);
//   a marker of this job, or of a job of the same name re-created in this cluster (another
//   uid, `deletionPolicy: Retain`), is kept or taken over; any other marker (another cluster's
//   id or name, another job, or one that does not parse) refuses the job, naming the holder.
// - Before a deletion (`deletionPolicy: Delete`): the job's checkpoints are deleted only under
//   a marker that names exactly this job (its uid included); otherwise they are left alone.
//
// A marker without a cluster id (written by an operator that may not read the `kube-system`
// namespace) matches any cluster of the same cluster name.

/// What the reconcile does with the marker it found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrefixClaim {
    /// The marker names this job already.
    Held,
    /// Write this job's marker: there is none, or it names this job's predecessor of the same
    /// name in this cluster.
    Write,
}

/// `found`: the marker read (`None`: no object; `Some(Err)`: one that does not parse). `Err`
/// says who holds the prefix, in words.
pub fn prefix_claim(
    found: Option<&Result<OwnerMarker, String>>,
    ours: &OwnerMarker,
) -> Result<PrefixClaim, String> {
    let marker = match found {
        None => return Ok(PrefixClaim::Write),
        Some(Err(error)) => return Err(format!("an owner marker that does not parse: {error}")),
        Some(Ok(marker)) => marker,
    };
    if !same_job_of_same_cluster(marker, ours) {
        return Err(holder(marker));
    }
    Ok(if marker == ours {
        PrefixClaim::Held
    } else {
        PrefixClaim::Write
    })
}

/// `Ok` when `found` names exactly this job, so deleting under its prefix deletes only its data.
pub fn may_delete_under(
    found: Option<&Result<OwnerMarker, String>>,
    ours: &OwnerMarker,
) -> Result<(), String> {
    match found {
        Some(Ok(marker)) if marker == ours => Ok(()),
        Some(Ok(marker)) => Err(holder(marker)),
        Some(Err(error)) => Err(format!("an owner marker that does not parse: {error}")),
        None => Err("no owner marker: nothing says this job wrote there".into()),
    }
}

/// The key of every owner record in a changelog starts with this.
pub const CHANGELOG_OWNER_KEY_PREFIX: &[u8] = b"\x00streamkeeper.owner/";

/// How many records from the start of changelog partition 0 the operator reads for the owner
/// record: it is written first, so only a race between two writers puts another record before it.
pub const CHANGELOG_OWNER_SEARCH_RECORDS: usize = 64;

/// The key of `marker`'s owner record: one per writing cluster and job, so compaction never
/// drops the first writer's record for a later one's.
pub fn changelog_owner_key(marker: &OwnerMarker) -> Vec<u8> {
    let cluster = marker
        .cluster_id
        .as_deref()
        .or(marker.cluster.as_deref())
        .unwrap_or("-");
    let mut key = CHANGELOG_OWNER_KEY_PREFIX.to_vec();
    key.extend_from_slice(format!("{cluster}/{}/{}", marker.namespace, marker.name).as_bytes());
    key
}

/// True for the key of a changelog owner record, which is never state.
pub fn is_changelog_owner_key(key: &[u8]) -> bool {
    key.starts_with(CHANGELOG_OWNER_KEY_PREFIX)
}

/// What the reconcile does with an existing changelog's owner record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangelogClaim {
    /// The first owner record names this cluster's job of this namespace and name (its uid
    /// aside: a job re-created under the same name keeps its changelog, as `Retain` promises).
    Held,
    /// Partition 0 is empty: write this job's owner record, then read again which came first.
    Write,
    /// Records but no owner record: a changelog from before owner records, or created by hand.
    /// Used as it is; nothing is written into it.
    Unclaimed,
}

/// `first_owner`: the first owner record among the first records of partition 0 (`Some(Err)`:
/// one that does not parse); `partition_empty`: partition 0 holds no record. `Err` says who
/// holds the changelog, in words.
pub fn changelog_claim(
    first_owner: Option<&Result<OwnerMarker, String>>,
    partition_empty: bool,
    ours: &OwnerMarker,
) -> Result<ChangelogClaim, String> {
    match first_owner {
        None if partition_empty => Ok(ChangelogClaim::Write),
        None => Ok(ChangelogClaim::Unclaimed),
        Some(Err(error)) => Err(format!("an owner record that does not parse: {error}")),
        Some(Ok(marker)) if same_job_of_same_cluster(marker, ours) => Ok(ChangelogClaim::Held),
        Some(Ok(marker)) => Err(holder(marker)),
    }
}

/// Same namespace and name, same cluster name, and no two different cluster ids.
fn same_job_of_same_cluster(marker: &OwnerMarker, ours: &OwnerMarker) -> bool {
    let other_cluster_id = matches!(
        (&marker.cluster_id, &ours.cluster_id),
        (Some(theirs), Some(ours)) if theirs != ours
    );
    (&marker.namespace, &marker.name) == (&ours.namespace, &ours.name)
        && marker.cluster == ours.cluster
        && !other_cluster_id
}

fn holder(marker: &OwnerMarker) -> String {
    let cluster = match (&marker.cluster, &marker.cluster_id) {
        (Some(name), Some(id)) => format!("cluster {name} (kube-system uid {id})"),
        (Some(name), None) => format!("cluster {name}"),
        (None, Some(id)) => format!("the cluster whose kube-system uid is {id}"),
        (None, None) => "a cluster without a name".into(),
    };
    format!(
        "held by job {}/{} (uid {}) of {cluster}",
        marker.namespace, marker.name, marker.uid
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_a_marker_naming_no_job() {
        let marker = OwnerMarker {
            version: OwnerMarker::VERSION,
            cluster: Some("east".into()),
            cluster_id: Some("7d9c1c1e-0000-4000-8000-000000000001".into()),
            namespace: "payments".into(),
            name: "card-count".into(),
            uid: "1b4e28ba-2fa1-11d2-883f-0016d3cca427".into(),
        };
        assert_eq!(OwnerMarker::from_json(&marker.to_json()).unwrap(), marker);
        let unnamed = OwnerMarker {
            cluster: None,
            cluster_id: None,
            ..marker.clone()
        };
        let text = String::from_utf8(unnamed.to_json()).unwrap();
        assert!(!text.contains("cluster"), "{text}");
        assert_eq!(OwnerMarker::from_json(text.as_bytes()).unwrap(), unnamed);
        let empty = OwnerMarker {
            uid: String::new(),
            ..marker
        };
        assert!(OwnerMarker::from_json(&empty.to_json()).is_err());
        let newer = br#"{"version":2,"namespace":"a","name":"b","uid":"c"}"#;
        assert!(OwnerMarker::from_json(newer).is_err());
    }

    fn marker(cluster_id: Option<&str>, name: &str, uid: &str) -> OwnerMarker {
        OwnerMarker {
            version: OwnerMarker::VERSION,
            cluster: None,
            cluster_id: cluster_id.map(str::to_string),
            namespace: "payments".into(),
            name: name.into(),
            uid: uid.into(),
        }
    }

    #[test]
    fn a_prefix_is_claimed_kept_taken_over_by_a_successor_or_refused() {
        let ours = marker(Some("here"), "card-count", "uid-2");
        assert_eq!(prefix_claim(None, &ours), Ok(PrefixClaim::Write));
        assert_eq!(
            prefix_claim(Some(&Ok(ours.clone())), &ours),
            Ok(PrefixClaim::Held)
        );
        // The same name re-created in this cluster (Retain) takes its predecessor's prefix over,
        // as does a marker written without a cluster id.
        let predecessor = marker(Some("here"), "card-count", "uid-1");
        assert_eq!(
            prefix_claim(Some(&Ok(predecessor)), &ours),
            Ok(PrefixClaim::Write)
        );
        let no_id = marker(None, "card-count", "uid-1");
        assert_eq!(
            prefix_claim(Some(&Ok(no_id)), &ours),
            Ok(PrefixClaim::Write)
        );
        // Another cluster's job of the same namespace and name.
        let elsewhere = marker(Some("there"), "card-count", "uid-9");
        let held = prefix_claim(Some(&Ok(elsewhere)), &ours).unwrap_err();
        assert!(
            held.contains("kube-system uid is there") && held.contains("uid-9"),
            "{held}"
        );
        let named = OwnerMarker {
            cluster: Some("east".into()),
            ..marker(Some("here"), "card-count", "uid-2")
        };
        assert!(prefix_claim(Some(&Ok(named)), &ours).is_err());
        let other_job = marker(Some("here"), "other", "uid-3");
        assert!(prefix_claim(Some(&Ok(other_job)), &ours).is_err());
        let unreadable = Err("k: not JSON".to_string());
        assert!(prefix_claim(Some(&unreadable), &ours).is_err());
    }

    #[test]
    fn a_changelog_is_claimed_when_empty_kept_by_its_job_or_refused() {
        let ours = marker(Some("here"), "card-count", "uid-2");
        assert_eq!(
            changelog_claim(None, true, &ours),
            Ok(ChangelogClaim::Write)
        );
        assert_eq!(
            changelog_claim(None, false, &ours),
            Ok(ChangelogClaim::Unclaimed)
        );
        assert_eq!(
            changelog_claim(Some(&Ok(ours.clone())), false, &ours),
            Ok(ChangelogClaim::Held)
        );
        // A job re-created under the same name keeps the changelog its predecessor claimed.
        let predecessor = marker(Some("here"), "card-count", "uid-1");
        assert_eq!(
            changelog_claim(Some(&Ok(predecessor)), false, &ours),
            Ok(ChangelogClaim::Held)
        );
        let elsewhere = marker(Some("there"), "card-count", "uid-9");
        let held = changelog_claim(Some(&Ok(elsewhere)), false, &ours).unwrap_err();
        assert!(held.contains("kube-system uid is there"), "{held}");
        let other_job = marker(Some("here"), "other", "uid-3");
        assert!(changelog_claim(Some(&Ok(other_job)), false, &ours).is_err());
        let unreadable = Err("not JSON".to_string());
        assert!(changelog_claim(Some(&unreadable), false, &ours).is_err());
    }

    #[test]
    fn owner_record_keys_are_reserved_and_one_per_writer() {
        let ours = marker(Some("here"), "card-count", "uid-2");
        let key = changelog_owner_key(&ours);
        assert_eq!(key, b"\x00streamkeeper.owner/here/payments/card-count");
        assert!(is_changelog_owner_key(&key));
        assert!(key.as_slice() < b"\x01".as_slice(), "below every state key");
        let elsewhere = marker(Some("there"), "card-count", "uid-2");
        assert_ne!(changelog_owner_key(&elsewhere), key);
        assert!(!is_changelog_owner_key(b"ccard-1"));
        let unnamed = marker(None, "card-count", "uid-2");
        assert_eq!(
            changelog_owner_key(&unnamed),
            b"\x00streamkeeper.owner/-/payments/card-count"
        );
    }

    #[test]
    fn only_a_marker_naming_exactly_this_job_allows_a_deletion() {
        let ours = marker(Some("here"), "card-count", "uid-2");
        assert_eq!(may_delete_under(Some(&Ok(ours.clone())), &ours), Ok(()));
        let successor = marker(Some("here"), "card-count", "uid-3");
        assert!(may_delete_under(Some(&Ok(successor)), &ours).is_err());
        let elsewhere = marker(Some("there"), "card-count", "uid-2");
        assert!(may_delete_under(Some(&Ok(elsewhere)), &ours).is_err());
        assert!(may_delete_under(None, &ours).is_err());
        assert!(may_delete_under(Some(&Err("bad".into())), &ours).is_err());
    }
}
