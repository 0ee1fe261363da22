//! Local state: the persistent volume and RocksDB tuning.

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::KubeSchema;
use serde::{Deserialize, Serialize};

/// Local state on a persistent volume per pod (same pod, same volume: a restart replays only
/// the changelog delta).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = crate::api::cel::optional_immutable("storageClassName", "spec.state.storageClassName", crate::api::cel::STORAGE_IMMUTABLE))]
pub struct StateSpec {
    /// Size of each pod's state volume. Immutable: a StatefulSet's volume claims cannot change.
    #[serde(default = "default_storage_size")]
    #[x_kube(validation = crate::api::cel::immutable("spec.state.storageSize", crate::api::cel::STORAGE_IMMUTABLE))]
    pub storage_size: Quantity,

    /// Storage class of the state volumes; the cluster default when omitted. Immutable, like its
    /// absence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_class_name: Option<String>,

    /// RocksDB tuning.
    #[serde(default)]
    pub rocksdb: RocksDbSpec,
}

impl Default for StateSpec {
    fn default() -> Self {
        Self {
            storage_size: default_storage_size(),
            storage_class_name: None,
            rocksdb: RocksDbSpec::default(),
        }
    }
}

fn default_storage_size() -> Quantity {
    Quantity("10Gi".into())
}

/// RocksDB tuning per task.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RocksDbSpec {
    /// Block cache size.
    #[serde(default = "default_block_cache")]
    pub block_cache_size: Quantity,
    /// Memtable size before a flush.
    #[serde(default = "default_write_buffer")]
    pub write_buffer_size: Quantity,
    /// SST compression.
    #[serde(default)]
    pub compression: Compression,
}

impl Default for RocksDbSpec {
    fn default() -> Self {
        Self {
            block_cache_size: default_block_cache(),
            write_buffer_size: default_write_buffer(),
            compression: Compression::default(),
        }
    }
}

fn default_block_cache() -> Quantity {
    Quantity("64Mi".into())
}

fn default_write_buffer() -> Quantity {
    Quantity("32Mi".into())
}

/// SST compression: none, lz4 (the default) or zstd.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, schemars::JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub enum Compression {
    None,
    #[default]
    Lz4,
    Zstd,
}
