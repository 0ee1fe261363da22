//! The zone of each node the job's pods run on, for the assignment rule's "standbys away from
//! their active's zone". A pod does not carry its zone; its Node does, in the well-known label
//! `topology.kubernetes.io/zone`. Each node is read once by the whole operator (a node's zone
//! does not change while it exists; every job's loop shares what was read), by name, so the
//! operator never lists the cluster's nodes: a takeover of 1,000 jobs of 4 pods reads each node
//! once, not 4,000 times.
//!
//! A node that cannot be read (gone, or RBAC without `get` on nodes) has no known zone: the rule
//! then spreads by node only, as it does on a cluster without zone labels.

use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
use kube::{Client, ResourceExt};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// The well-known label a cloud provider sets on every node.
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

/// The zone of a node, from its labels.
pub fn zone_of(node: &Node) -> Option<String> {
    node.labels().get(ZONE_LABEL).cloned()
}

/// The zones of the nodes seen so far; cheap to clone, and every clone shares them.
#[derive(Debug, Default, Clone)]
pub struct NodeZones {
    known: Arc<Mutex<BTreeMap<String, Option<String>>>>,
}

impl NodeZones {
    fn known(&self) -> MutexGuard<'_, BTreeMap<String, Option<String>>> {
        self.known.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Reads the nodes among `nodes` not read before. Two loops may read the same new node at
    /// once; both find the same zone.
    pub async fn learn<'n>(&self, client: &Client, nodes: impl Iterator<Item = &'n str>) {
        let api: Api<Node> = Api::all(client.clone());
        let mut unknown: Vec<&str> = {
            let known = self.known();
            nodes.filter(|n| !known.contains_key(*n)).collect()
        };
        unknown.sort_unstable();
        unknown.dedup();
        for name in unknown {
            let zone = match api.get_opt(name).await {
                Ok(node) => node.as_ref().and_then(zone_of),
                Err(error) => {
                    tracing::warn!(node = name, %error, "cannot read the node's zone; spreading standbys by node only");
                    None
                }
            };
            tracing::info!(
                node = name,
                zone = zone.as_deref().unwrap_or("-"),
                "node zone"
            );
            self.known().insert(name.to_string(), zone);
        }
    }

    /// The zone of `node`, if known.
    pub fn zone(&self, node: &str) -> Option<String> {
        self.known().get(node).cloned().flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::ObjectMeta;

    #[test]
    fn the_zone_is_the_well_known_label() {
        let node = |labels: &[(&str, &str)]| Node {
            metadata: ObjectMeta {
                labels: Some(
                    labels
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                ..ObjectMeta::default()
            },
            ..Node::default()
        };
        assert_eq!(
            zone_of(&node(&[
                (ZONE_LABEL, "eu-1a"),
                ("kubernetes.io/hostname", "n")
            ])),
            Some("eu-1a".into())
        );
        assert_eq!(
            zone_of(&node(&[("failure-domain.beta.kubernetes.io/zone", "old")])),
            None
        );
        let zones = NodeZones::default();
        assert_eq!(zones.zone("n"), None, "an unread node has no zone");
    }
}
