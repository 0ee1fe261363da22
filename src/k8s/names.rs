//! Names and paths of everything the operator derives from a job: object names, topic defaults,
//! and where the worker finds its files. One place, so the builders, the worker config and the
//! apply layer can never disagree about a name.

use crate::api::StatefulStreamJob;
use kube::ResourceExt;
use streamkeeper_contract::worker_config::JobIdentity;

/// The worker config's key inside the ConfigMap, and so the file name in the container.
pub const WORKER_CONFIG_KEY: &str = "worker.yaml";
/// Where the ConfigMap is mounted.
pub const CONFIG_DIR: &str = "/etc/streamkeeper/config";
/// The file the worker is started with: [`CONFIG_DIR`]/[`WORKER_CONFIG_KEY`].
pub const CONFIG_FILE: &str = "/etc/streamkeeper/config/worker.yaml";
/// Mount point of the state volume.
pub const STATE_MOUNT: &str = "/var/lib/streamkeeper";
/// RocksDB lives one level below the mount, so a filesystem's own entries at the volume root
/// (ext4's `lost+found`) never look like task directories.
pub const STATE_DIR: &str = "/var/lib/streamkeeper/state";
/// Where the S3 credentials Secret is mounted (files `accessKeyId`, `secretAccessKey`).
pub const S3_CREDENTIALS_DIR: &str = "/etc/streamkeeper/s3";
/// File names inside [`S3_CREDENTIALS_DIR`], as the contract's `S3Config::credentials_dir` says.
pub const S3_ACCESS_KEY_ID_FILE: &str = "accessKeyId";
pub const S3_SECRET_ACCESS_KEY_FILE: &str = "secretAccessKey";
/// Kafka TLS material: `ca.crt`, `tls.crt`, `tls.key` below this directory.
/// Where a WebAssembly processor's module from a ConfigMap is mounted, and its file there.
pub const WASM_MODULE_DIR: &str = "/etc/streamkeeper/module";
pub const WASM_MODULE_FILE_NAME: &str = "module.wasm";
pub const WASM_MODULE_FILE: &str = "/etc/streamkeeper/module/module.wasm";
/// Where a WebAssembly processor's module's own S3 access keys are mounted.
pub const WASM_MODULE_S3_DIR: &str = "/etc/streamkeeper/module-s3";

pub const KAFKA_TLS_DIR: &str = "/etc/streamkeeper/kafka/tls";
pub const KAFKA_TLS_CA_FILE: &str = "ca.crt";
pub const KAFKA_TLS_CERT_FILE: &str = "tls.crt";
pub const KAFKA_TLS_KEY_FILE: &str = "tls.key";
/// Kafka SASL credentials: `username`, `password` below this directory.
pub const KAFKA_SASL_DIR: &str = "/etc/streamkeeper/kafka/sasl";
pub const KAFKA_SASL_USERNAME_FILE: &str = "username";
pub const KAFKA_SASL_PASSWORD_FILE: &str = "password";
/// Where the worker token Secret is mounted; the Secret's key is the file name.
pub const WORKER_TOKEN_DIR: &str = "/etc/streamkeeper/http";
pub const WORKER_TOKEN_KEY: &str = "token";
/// [`WORKER_TOKEN_DIR`]/[`WORKER_TOKEN_KEY`], the worker config's `http.tokenFile`.
pub const WORKER_TOKEN_FILE: &str = "/etc/streamkeeper/http/token";

/// Address of the worker's one HTTP port.
pub const HTTP_LISTEN: &str = "0.0.0.0:8080";
pub const HTTP_PORT: i32 = 8080;
pub const HTTP_PORT_NAME: &str = "http";

/// Name of the worker container (also the `kubectl logs` default).
pub const WORKER_CONTAINER: &str = "worker";
/// Name of the volume claim template; PVCs are `state-<job>-<ordinal>`.
pub const STATE_VOLUME: &str = "state";

/// UID and GID the worker runs as: the distroless `nonroot` user. Set explicitly because
/// `runAsNonRoot` alone fails for images whose `USER` is a name rather than a number.
pub const WORKER_UID: i64 = 65532;

/// The StatefulSet, the headless Service and the PodDisruptionBudget are all named after the job.
pub fn stateful_set(job: &str) -> String {
    job.to_string()
}

pub fn service(job: &str) -> String {
    job.to_string()
}

pub fn pod_disruption_budget(job: &str) -> String {
    job.to_string()
}

pub fn worker_config_map(job: &str) -> String {
    format!("{job}-worker-config")
}

/// The Secret holding the job's worker token (see the contract's `worker_http`): created once by
/// the operator, owned by the job, mounted into the worker pods.
pub fn worker_token_secret(job: &str) -> String {
    format!("{job}-worker-token")
}

/// The ConfigMap holding the job's assignment document: written by the operator's failover loop
/// before any worker hears of a generation, read back by a new leader.
pub fn assignment_config_map(job: &str) -> String {
    format!("{job}-assignment")
}

/// Pod `ordinal` of the job's StatefulSet.
pub fn pod(job: &str, ordinal: u32) -> String {
    format!("{job}-{ordinal}")
}

/// Why `name` cannot be a cluster name, if it cannot: empty (no cluster name) or a DNS label, so
/// it is safe in a Kafka id, a topic name and an S3 key, and cannot run into the `.` that
/// separates the parts of a derived name.
pub fn check_cluster_name(name: &str) -> Result<(), String> {
    let label = name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-');
    if label {
        Ok(())
    } else {
        Err(format!(
            "`{name}` is not a DNS label (at most 63 of a-z, 0-9 and `-`, not at either end)"
        ))
    }
}

/// The identity of `job` under an operator whose cluster name is `cluster`: what its ids,
/// default topics and S3 prefix derive from (the contract's [`JobIdentity`]).
pub fn identity_of(job: &StatefulStreamJob, cluster: Option<&str>) -> JobIdentity {
    JobIdentity {
        cluster: cluster.map(str::to_string),
        namespace: job.namespace().unwrap_or_default(),
        name: job.name_any(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_file_is_the_mounted_key() {
        assert_eq!(CONFIG_FILE, format!("{CONFIG_DIR}/{WORKER_CONFIG_KEY}"));
        assert!(STATE_DIR.starts_with(STATE_MOUNT));
        assert!(HTTP_LISTEN.ends_with(&HTTP_PORT.to_string()));
        assert_eq!(
            WORKER_TOKEN_FILE,
            format!("{WORKER_TOKEN_DIR}/{WORKER_TOKEN_KEY}")
        );
    }

    #[test]
    fn names_derive_from_the_job() {
        assert_eq!(worker_config_map("card-count"), "card-count-worker-config");
        assert_eq!(worker_token_secret("card-count"), "card-count-worker-token");
        assert_eq!(pod("card-count", 2), "card-count-2");
    }

    #[test]
    fn a_cluster_name_is_empty_or_a_dns_label() {
        for good in ["", "east", "prod-eu-1", &"a".repeat(63)] {
            assert_eq!(check_cluster_name(good), Ok(()), "{good}");
        }
        for bad in ["East", "a.b", "-a", "a-", "a_b", "a/b", &"a".repeat(64)] {
            assert!(check_cluster_name(bad).is_err(), "{bad}");
        }
    }
}
