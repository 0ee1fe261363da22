//! The ConfigMap `<job>-worker-config` holding the rendered worker config, and the hash of its
//! content that the pod template carries.

use crate::controller::build::owned_metadata;
use crate::controller::valid_job::ValidatedJob;
use crate::k8s::names;
use k8s_openapi::api::core::v1::ConfigMap;
use std::collections::BTreeMap;
use streamkeeper_contract::{Versioned, WorkerConfig};

/// The ConfigMap with `config` as YAML under `worker.yaml`.
pub fn build(job: &ValidatedJob, config: &WorkerConfig) -> ConfigMap {
    ConfigMap {
        metadata: owned_metadata(job, names::worker_config_map(&job.name)),
        data: Some(BTreeMap::from([(
            names::WORKER_CONFIG_KEY.to_string(),
            config.to_yaml(),
        )])),
        ..ConfigMap::default()
    }
}

/// A hash of the ConfigMap's data, 16 hex digits. FNV-1a rather than std's `DefaultHasher`
/// because the value lands in the pod template: it must not change when the operator is built
/// with another Rust release, or every upgrade of the operator would restart every worker. It
/// detects changes; it is not a security boundary.
pub fn config_hash(config_map: &ConfigMap) -> String {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut hash = OFFSET;
    let entries = config_map.data.iter().flatten();
    for byte in entries.flat_map(|(key, value)| {
        // A separator after each part keeps ("ab", "c") and ("a", "bc") apart.
        key.bytes().chain([0]).chain(value.bytes()).chain([0])
    }) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(PRIME);
    }
    format!("{hash:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::build::worker_config;
    use crate::controller::test_support;

    #[test]
    fn holds_the_rendered_config_under_worker_yaml() {
        let job = test_support::validated();
        let config = worker_config::render(&job);
        let config_map = build(&job, &config);
        assert_eq!(
            config_map.metadata.name.as_deref(),
            Some("card-count-worker-config")
        );
        let data = config_map.data.unwrap();
        assert_eq!(data.keys().collect::<Vec<_>>(), ["worker.yaml"]);
        let text = &data["worker.yaml"];
        assert!(text.starts_with("version: 1\n"), "{text}");
        assert!(
            text.contains("  dir: /var/lib/streamkeeper/state\n"),
            "{text}"
        );
        assert!(text.contains("  listen: 0.0.0.0:8080\n"), "{text}");
        assert!(text.contains("  interval: 30s\n"), "{text}");
        assert_eq!(WorkerConfig::from_yaml(text).unwrap(), config);
    }

    #[test]
    fn hash_is_stable_and_follows_the_content() {
        let job = test_support::validated();
        let config_map = build(&job, &worker_config::render(&job));
        let hash = config_hash(&config_map);
        assert_eq!(hash.len(), 16);
        assert_eq!(config_hash(&config_map), hash);

        let other = test_support::validated_with(|job| job.spec.checkpoint.interval = "1m".into());
        let other_map = build(&other, &worker_config::render(&other));
        assert_ne!(config_hash(&other_map), hash);

        // Known value: the hash must never change for the same content across builds.
        let fixed = ConfigMap {
            data: Some(BTreeMap::from([("a".to_string(), "b".to_string())])),
            ..ConfigMap::default()
        };
        assert_eq!(config_hash(&fixed), "ab40d7820d408076");
    }
}
