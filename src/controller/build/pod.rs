//! The worker pod template: one `worker` container running the config from the ConfigMap, with
//! the state volume, secrets as read-only files (the job's worker token among them), no
//! service-account token, a locked-down security context, and the user's
//! scheduling overrides merged with an anti-affinity that spreads the job's pods over nodes,
//! and a spread of them over zones.

use crate::api::{PullPolicy, S3CredentialsSecret};
use crate::controller::valid_job::{RestorePoint, ValidatedJob};
use crate::k8s::labels;
use crate::k8s::names;
use k8s_openapi::api::core::v1::{
    Affinity, Capabilities, ConfigMapVolumeSource, Container, ContainerPort, EmptyDirVolumeSource,
    EnvVar, EnvVarSource, HTTPGetAction, KeyToPath, ObjectFieldSelector, PodAffinityTerm,
    PodAntiAffinity, PodSecurityContext, PodSpec, PodTemplateSpec, Probe, ProjectedVolumeSource,
    SeccompProfile, SecretProjection, SecretVolumeSource, SecurityContext,
    TopologySpreadConstraint, Volume, VolumeMount, VolumeProjection, WeightedPodAffinityTerm,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use std::collections::BTreeMap;
use streamkeeper_contract::Versioned;
use streamkeeper_contract::restore_request::{
    RESTORE_REQUEST_ENV, RestoreCheckpoint, RestoreRequestDocument,
};

/// Seconds a worker gets after SIGTERM: enough to finish the open transaction and hand off.
pub const TERMINATION_GRACE_SECONDS: i64 = 60;
/// Mode of the files mounted from Secrets: readable by the owner and the pod's fsGroup only.
const SECRET_FILE_MODE: i32 = 0o440;
const CONFIG_VOLUME: &str = "config";
const TMP_VOLUME: &str = "tmp";
const S3_VOLUME: &str = "s3-credentials";
const WASM_MODULE_VOLUME: &str = "wasm-module";
const WASM_MODULE_S3_VOLUME: &str = "wasm-module-s3";
const KAFKA_TLS_VOLUME: &str = "kafka-tls";
const KAFKA_SASL_VOLUME: &str = "kafka-sasl";
const WORKER_TOKEN_VOLUME: &str = "worker-token";

/// The pod template of the worker StatefulSet. `config_hash` is the worker config's hash; it and
/// `spec.restartNonce` are annotations, so changing either changes the template.
pub fn template(job: &ValidatedJob, config_hash: &str) -> PodTemplateSpec {
    let workers = &job.workers;
    PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(labels::pod(&job.name, &workers.pod.labels)),
            annotations: Some(annotations(job, config_hash)),
            ..ObjectMeta::default()
        }),
        spec: Some(PodSpec {
            // The user's account, or the namespace's `default`: the worker uses no Kubernetes
            // API, so the pods get no API token whatever the account's own setting says.
            service_account_name: workers.service_account.clone(),
            automount_service_account_token: Some(false),
            // Service links inject variables for every Service in the namespace; the worker
            // reads none of them.
            enable_service_links: Some(false),
            termination_grace_period_seconds: Some(TERMINATION_GRACE_SECONDS),
            security_context: Some(PodSecurityContext {
                run_as_non_root: Some(true),
                run_as_user: Some(names::WORKER_UID),
                run_as_group: Some(names::WORKER_UID),
                fs_group: Some(names::WORKER_UID),
                // A large state volume is chowned once, not on every restart.
                fs_group_change_policy: Some("OnRootMismatch".into()),
                seccomp_profile: Some(runtime_default_seccomp()),
                ..PodSecurityContext::default()
            }),
            containers: vec![container(job)],
            volumes: Some(volumes(job)),
            node_selector: Some(workers.pod.node_selector.clone()).filter(|m| !m.is_empty()),
            tolerations: Some(workers.pod.tolerations.clone()).filter(|t| !t.is_empty()),
            affinity: Some(affinity(job)),
            topology_spread_constraints: Some(vec![zone_spread(job)]),
            ..PodSpec::default()
        }),
    }
}

fn annotations(job: &ValidatedJob, config_hash: &str) -> BTreeMap<String, String> {
    let mut annotations = job.workers.pod.annotations.clone();
    annotations.insert(
        labels::CONFIG_HASH_ANNOTATION.into(),
        config_hash.to_string(),
    );
    annotations.insert(
        labels::DEFAULT_CONTAINER_ANNOTATION.into(),
        names::WORKER_CONTAINER.into(),
    );
    if let Some(nonce) = &job.workers.restart_nonce {
        annotations.insert(labels::RESTART_NONCE_ANNOTATION.into(), nonce.clone());
    }
    if let Some(request) = restore_request(job) {
        annotations.insert(labels::RESTORE_ANNOTATION.into(), request);
    }
    annotations
}

/// The restore request as the worker reads it (see the contract's `restore_request` module), or
/// `None` without `spec.restore`.
pub fn restore_request(job: &ValidatedJob) -> Option<String> {
    let restore = job.restore.as_ref()?;
    let document = RestoreRequestDocument {
        version: RestoreRequestDocument::VERSION,
        id: restore.id.clone(),
        checkpoint: match restore.checkpoint {
            RestorePoint::Latest => RestoreCheckpoint::Latest,
            RestorePoint::Sequence(sequence) => RestoreCheckpoint::Sequence(sequence),
        },
        source: restore.source.into(),
        adopt_input: restore.adopt_input,
    };
    // Plain strings and numbers: serializing cannot fail.
    serde_json::to_string(&document).ok()
}

fn field_env(name: &str, field_path: String) -> EnvVar {
    EnvVar {
        name: name.into(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path,
                ..ObjectFieldSelector::default()
            }),
            ..EnvVarSource::default()
        }),
        ..EnvVar::default()
    }
}

fn env(job: &ValidatedJob) -> Vec<EnvVar> {
    let mut env = vec![
        EnvVar {
            name: "STREAMKEEPER_LOG_FORMAT".into(),
            value: Some("json".into()),
            ..EnvVar::default()
        },
        field_env("POD_NAME", "metadata.name".into()),
        // The HTTP port binds the pod's own address (`--http-listen $(POD_IP):8080`), which is
        // what probes and the operator use; it also lets the local node agent run several
        // worker pods on one host, each on its own loopback address. The worker serves
        // 127.0.0.1 as well when the pod IP is not loopback, for `kubectl port-forward`.
        field_env("POD_IP", "status.podIP".into()),
        // No replica count: a pod runs only what the operator's assignment document gives it
        // (nothing before the first one), so scaling changes no pod's template and restarts
        // none, and a new pod never claims a task another pod owns.
    ];
    if job.restore.is_some() {
        env.push(field_env(
            RESTORE_REQUEST_ENV,
            format!("metadata.annotations['{}']", labels::RESTORE_ANNOTATION),
        ));
    }
    env
}

fn container(job: &ValidatedJob) -> Container {
    Container {
        name: names::WORKER_CONTAINER.into(),
        image: Some(job.workers.image.clone()),
        image_pull_policy: job.workers.image_pull_policy.map(|p| pull_policy(p).into()),
        args: Some(vec![
            "run".into(),
            "--config".into(),
            names::CONFIG_FILE.into(),
            "--http-listen".into(),
            format!("$(POD_IP):{}", names::HTTP_PORT),
        ]),
        env: Some(env(job)),
        ports: Some(vec![ContainerPort {
            name: Some(names::HTTP_PORT_NAME.into()),
            container_port: names::HTTP_PORT,
            protocol: Some("TCP".into()),
            ..ContainerPort::default()
        }]),
        // Ready only when every assigned active task runs (so not while restoring).
        readiness_probe: Some(http_probe("/readyz", 5, 3)),
        // Alive while the process serves HTTP; a long restore is not a reason to restart.
        liveness_probe: Some(http_probe("/healthz", 10, 6)),
        // Before it serves HTTP, a worker may fetch and compile a WebAssembly processor (tens of
        // seconds for a Python guest when pods start together): up to 5 minutes to start.
        startup_probe: Some(http_probe("/healthz", 5, 60)),
        resources: job.workers.resources.clone(),
        security_context: Some(SecurityContext {
            run_as_non_root: Some(true),
            read_only_root_filesystem: Some(true),
            allow_privilege_escalation: Some(false),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".into()]),
                ..Capabilities::default()
            }),
            seccomp_profile: Some(runtime_default_seccomp()),
            ..SecurityContext::default()
        }),
        volume_mounts: Some(volume_mounts(job)),
        // A worker that refuses its config (a processor its image does not offer, settings the
        // processor refuses) exits with EX_CONFIG and the reason as its last line: kept as the
        // termination message, which the operator shows in `Invalid` (`judge::worker_refusal`).
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        ..Container::default()
    }
}

fn http_probe(path: &str, period_seconds: i32, failure_threshold: i32) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.into()),
            port: IntOrString::String(names::HTTP_PORT_NAME.into()),
            ..HTTPGetAction::default()
        }),
        period_seconds: Some(period_seconds),
        timeout_seconds: Some(2),
        failure_threshold: Some(failure_threshold),
        ..Probe::default()
    }
}

fn runtime_default_seccomp() -> SeccompProfile {
    SeccompProfile {
        type_: "RuntimeDefault".into(),
        ..SeccompProfile::default()
    }
}

fn pull_policy(policy: PullPolicy) -> &'static str {
    match policy {
        PullPolicy::Always => "Always",
        PullPolicy::IfNotPresent => "IfNotPresent",
        PullPolicy::Never => "Never",
    }
}

fn mount(name: &str, path: &str, read_only: bool) -> VolumeMount {
    VolumeMount {
        name: name.into(),
        mount_path: path.into(),
        read_only: Some(read_only).filter(|ro| *ro),
        ..VolumeMount::default()
    }
}

fn volume_mounts(job: &ValidatedJob) -> Vec<VolumeMount> {
    let mut mounts = vec![
        mount(CONFIG_VOLUME, names::CONFIG_DIR, true),
        mount(names::STATE_VOLUME, names::STATE_MOUNT, false),
        // The root filesystem is read-only; librdkafka and custom processors may need scratch.
        mount(TMP_VOLUME, "/tmp", false),
        mount(WORKER_TOKEN_VOLUME, names::WORKER_TOKEN_DIR, true),
    ];
    if job.module_config_map.is_some() {
        mounts.push(mount(WASM_MODULE_VOLUME, names::WASM_MODULE_DIR, true));
    }
    if job.module_credentials.is_some() {
        mounts.push(mount(
            WASM_MODULE_S3_VOLUME,
            names::WASM_MODULE_S3_DIR,
            true,
        ));
    }
    if job.checkpoint.credentials.is_some() {
        mounts.push(mount(S3_VOLUME, names::S3_CREDENTIALS_DIR, true));
    }
    if !kafka_tls_sources(job).is_empty() {
        mounts.push(mount(KAFKA_TLS_VOLUME, names::KAFKA_TLS_DIR, true));
    }
    if job.kafka.sasl.is_some() {
        mounts.push(mount(KAFKA_SASL_VOLUME, names::KAFKA_SASL_DIR, true));
    }
    mounts
}

/// S3 access keys from `secret`, as the files the worker reads them from.
fn s3_keys_volume(name: &str, secret: &S3CredentialsSecret) -> Volume {
    secret_volume(
        name,
        &secret.name,
        vec![
            key_to_path(&secret.access_key_id_key, names::S3_ACCESS_KEY_ID_FILE),
            key_to_path(
                &secret.secret_access_key_key,
                names::S3_SECRET_ACCESS_KEY_FILE,
            ),
        ],
    )
}

fn key_to_path(key: &str, path: &str) -> KeyToPath {
    KeyToPath {
        key: key.into(),
        path: path.into(),
        ..KeyToPath::default()
    }
}

fn secret_volume(name: &str, secret: &str, items: Vec<KeyToPath>) -> Volume {
    Volume {
        name: name.into(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(secret.into()),
            items: Some(items),
            default_mode: Some(SECRET_FILE_MODE),
            ..SecretVolumeSource::default()
        }),
        ..Volume::default()
    }
}

fn volumes(job: &ValidatedJob) -> Vec<Volume> {
    let mut volumes = vec![
        Volume {
            name: CONFIG_VOLUME.into(),
            config_map: Some(ConfigMapVolumeSource {
                name: names::worker_config_map(&job.name),
                ..ConfigMapVolumeSource::default()
            }),
            ..Volume::default()
        },
        Volume {
            name: TMP_VOLUME.into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Volume::default()
        },
        // A file rather than an environment variable: it is not inherited by child processes
        // nor shown with the process environment, and the kubelet updates it when the Secret
        // changes (the worker reads it on each request), as for the other mounted Secrets.
        secret_volume(
            WORKER_TOKEN_VOLUME,
            &names::worker_token_secret(&job.name),
            vec![key_to_path(
                names::WORKER_TOKEN_KEY,
                names::WORKER_TOKEN_KEY,
            )],
        ),
    ];
    if let Some(module) = &job.module_config_map {
        volumes.push(Volume {
            name: WASM_MODULE_VOLUME.into(),
            config_map: Some(ConfigMapVolumeSource {
                name: module.name.clone(),
                items: Some(vec![key_to_path(&module.key, names::WASM_MODULE_FILE_NAME)]),
                ..ConfigMapVolumeSource::default()
            }),
            ..Volume::default()
        });
    }
    if let Some(secret) = &job.module_credentials {
        volumes.push(s3_keys_volume(WASM_MODULE_S3_VOLUME, secret));
    }
    if let Some(secret) = &job.checkpoint.credentials {
        volumes.push(s3_keys_volume(S3_VOLUME, secret));
    }
    let tls_sources = kafka_tls_sources(job);
    if !tls_sources.is_empty() {
        volumes.push(Volume {
            name: KAFKA_TLS_VOLUME.into(),
            projected: Some(ProjectedVolumeSource {
                sources: Some(tls_sources),
                default_mode: Some(SECRET_FILE_MODE),
            }),
            ..Volume::default()
        });
    }
    if let Some(sasl) = &job.kafka.sasl {
        volumes.push(secret_volume(
            KAFKA_SASL_VOLUME,
            &sasl.secret_name,
            vec![
                key_to_path(&sasl.username_key, names::KAFKA_SASL_USERNAME_FILE),
                key_to_path(&sasl.password_key, names::KAFKA_SASL_PASSWORD_FILE),
            ],
        ));
    }
    volumes
}

/// The CA, certificate and key may come from different Secrets, so they are projected into one
/// volume. TLS with none of them (system roots, no client auth) mounts nothing.
fn kafka_tls_sources(job: &ValidatedJob) -> Vec<VolumeProjection> {
    let Some(tls) = &job.kafka.tls else {
        return Vec::new();
    };
    [
        (&tls.ca, names::KAFKA_TLS_CA_FILE),
        (&tls.certificate, names::KAFKA_TLS_CERT_FILE),
        (&tls.private_key, names::KAFKA_TLS_KEY_FILE),
    ]
    .into_iter()
    .filter_map(|(reference, file)| {
        reference.as_ref().map(|reference| VolumeProjection {
            secret: Some(SecretProjection {
                name: reference.name.clone(),
                items: Some(vec![key_to_path(&reference.key, file)]),
                ..SecretProjection::default()
            }),
            ..VolumeProjection::default()
        })
    })
    .collect()
}

/// The user's affinity plus a preferred anti-affinity between the job's pods by hostname, so a
/// task's active and standbys tend to be on different nodes (preferred, not required: a small
/// cluster must still be able to run every replica).
fn affinity(job: &ValidatedJob) -> Affinity {
    let mut affinity = job.workers.pod.affinity.clone().unwrap_or_default();
    let spread = WeightedPodAffinityTerm {
        weight: 100,
        pod_affinity_term: PodAffinityTerm {
            label_selector: Some(LabelSelector {
                match_labels: Some(labels::selector(&job.name)),
                ..LabelSelector::default()
            }),
            topology_key: "kubernetes.io/hostname".into(),
            ..PodAffinityTerm::default()
        },
    };
    let preferred = affinity
        .pod_anti_affinity
        .get_or_insert_with(PodAntiAffinity::default)
        .preferred_during_scheduling_ignored_during_execution
        .get_or_insert_with(Vec::new);
    if !preferred.contains(&spread) {
        preferred.push(spread);
    }
    affinity
}

/// The job's pods spread evenly over zones (`topology.kubernetes.io/zone`), so the assignment
/// can put a task's standby in another zone than its active: a lost zone then costs a
/// promotion, not a restore. `ScheduleAnyway`: a cluster without zones, or with fewer nodes than
/// pods in a zone, still runs every replica.
fn zone_spread(job: &ValidatedJob) -> TopologySpreadConstraint {
    TopologySpreadConstraint {
        max_skew: 1,
        topology_key: crate::failover::zones::ZONE_LABEL.into(),
        when_unsatisfiable: "ScheduleAnyway".into(),
        label_selector: Some(LabelSelector {
            match_labels: Some(labels::selector(&job.name)),
            ..LabelSelector::default()
        }),
        ..TopologySpreadConstraint::default()
    }
}

#[cfg(test)]
#[path = "pod_tests.rs"]
mod tests;
