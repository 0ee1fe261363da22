//! Scheduling and metadata overrides for worker pods.

use k8s_openapi::api::core::v1::{Affinity, Toleration};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Scheduling and metadata overrides for the worker pods.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodOverrides {
    /// Node labels the worker pods must run on.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,

    /// Tolerations of the worker pods.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,

    /// Affinity of the worker pods (the operator adds its own anti-affinity between workers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,

    /// Extra annotations on the worker pods.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,

    /// Extra labels on the worker pods.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,

    /// Service account of the worker pods (omitted: the namespace's `default`). The workers use no
    /// Kubernetes API: their pods mount no API token, and the operator creates no account or Role for them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,
}
