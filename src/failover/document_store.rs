//! Where the assignment document is kept: a ConfigMap `<job>-assignment`, owned by the job.
//! It is written before any worker hears of a new generation, so a new operator leader reads
//! back exactly what the workers act on and goes on from it, never shuffling tasks.
//!
//! Beside it, in the same write, is the record of the last decision that moved tasks
//! (`moves.json`), marked reported once its Events are out: a leader that dies between storing
//! a promotion and reporting it leaves the next leader what it needs to finish (the Event, the
//! move in the status, the time to the new owner's first commit).

use super::moves::DecidedMove;
use crate::k8s::apply::{ApiError, server_side_apply};
use crate::k8s::names;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::Client;
use kube::api::Api;
use std::collections::BTreeMap;
use streamkeeper_contract::{AssignmentDocument, FormatError, Versioned};

const KEY: &str = "assignment.json";
const MOVES_KEY: &str = "moves.json";

/// The moves of the last decision that moved tasks, and whether they were reported.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MovesRecord {
    pub version: u32,
    /// The generation that made the moves.
    pub generation: u64,
    pub moves: Vec<DecidedMove>,
    /// Its Events are published and the moves recorded for the status.
    pub reported: bool,
}

impl MovesRecord {
    pub fn new(generation: u64, moves: Vec<DecidedMove>) -> Self {
        Self {
            version: Self::VERSION,
            generation,
            moves,
            reported: false,
        }
    }
}

impl Versioned for MovesRecord {
    const FORMAT: &'static str = "moves record";
    const VERSION: u32 = 1;

    fn version(&self) -> u32 {
        self.version
    }

    fn check(&self) -> Result<(), FormatError> {
        Ok(())
    }
}

/// What the ConfigMap holds.
#[derive(Debug, Default)]
pub struct Stored {
    pub document: Option<AssignmentDocument>,
    pub moves: Option<MovesRecord>,
}

/// The stored document (`None` when there is none yet or it cannot be read: then the next
/// decision starts from the workers' reports alone, and the generation starts over above any
/// the workers recorded, see [`crate::failover`]) and the moves record beside it.
pub async fn read(client: &Client, namespace: &str, job: &str) -> Result<Stored, ApiError> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let name = names::assignment_config_map(job);
    let found = api.get_opt(&name).await.map_err(|source| ApiError {
        action: "read",
        kind: "ConfigMap".into(),
        namespace: namespace.to_string(),
        name: name.clone(),
        source,
    })?;
    let mut data = found.and_then(|map| map.data).unwrap_or_default();
    let document = data.remove(KEY).and_then(|text| {
        AssignmentDocument::from_json(text.as_bytes())
            .inspect_err(|error| tracing::warn!(%namespace, %job, %error, "the stored assignment does not parse; deciding afresh"))
            .ok()
    });
    // Without its record a new leader still goes on from the document; only the report of
    // an unfinished move is lost.
    let moves = data.remove(MOVES_KEY).and_then(|text| {
        MovesRecord::from_json(text.as_bytes())
            .inspect_err(|error| tracing::warn!(%namespace, %job, %error, "the stored moves record does not parse; ignored"))
            .ok()
    });
    Ok(Stored { document, moves })
}

/// Stores `document` for the job, with the record of the last moves.
pub async fn write(
    client: &Client,
    namespace: &str,
    job: &str,
    owner: &OwnerReference,
    (document, moves): (&AssignmentDocument, Option<&MovesRecord>),
) -> Result<(), ApiError> {
    let mut data = BTreeMap::from([(
        KEY.to_string(),
        String::from_utf8_lossy(&document.to_json()).into_owned(),
    )]);
    if let Some(moves) = moves {
        data.insert(
            MOVES_KEY.to_string(),
            String::from_utf8_lossy(&moves.to_json()).into_owned(),
        );
    }
    let map = ConfigMap {
        metadata: ObjectMeta {
            name: Some(names::assignment_config_map(job)),
            namespace: Some(namespace.to_string()),
            owner_references: Some(vec![owner.clone()]),
            labels: Some(crate::k8s::labels::selector(job)),
            ..ObjectMeta::default()
        },
        data: Some(data),
        ..ConfigMap::default()
    };
    server_side_apply(client, namespace, &map).await.map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::TaskMove;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    #[test]
    fn a_moves_record_round_trips_and_refuses_an_unknown_version() {
        let record = MovesRecord::new(
            7,
            vec![DecidedMove {
                task: 2,
                promoted: true,
                note: "task 2: job-1 took over from job-0".into(),
                moved: TaskMove {
                    reason: "Promoted".into(),
                    from: "job-0".into(),
                    to: "job-1".into(),
                    time: Some(Time("2026-12-01T10:00:00Z".parse().unwrap())),
                    generation: 7,
                    lag_at_promotion: Some(3),
                    detection_seconds: Some(0.25),
                    running_seconds: None,
                    first_commit_seconds: None,
                },
            }],
        );
        let back = MovesRecord::from_json(&record.to_json()).unwrap();
        assert_eq!(back, record);
        let mut future = serde_json::to_value(&record).unwrap();
        future["version"] = serde_json::json!(2);
        let refused = MovesRecord::from_json(future.to_string().as_bytes());
        assert!(refused.is_err(), "{refused:?}");
    }
}
