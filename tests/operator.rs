//! The operator's reconcile against the real kube-apiserver (with the StatefulSet controller),
//! the real Kafka broker and the real S3 server: every object a job becomes, updated and left
//! alone by a no-op reconcile, and Kafka credentials from Secrets. Each test has its own
//! namespace, topics and S3 prefix. Reconciles run in-process through the same `reconcile` the
//! binary's Controller runs; `operator_process.rs` runs the binary itself. Refusals are in
//! `operator_refusals.rs`, suspend, restores and deletion in `operator_lifecycle.rs`.
//!
//! There is no kubelet: pods the StatefulSet controller creates never run, so these tests check
//! objects, topics, S3 and status, not running workers.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

mod operator_support;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, ListParams, PostParams};
use kube::{Client, Resource, ResourceExt};
use operator_support::support::wait_until;
use operator_support::{support, *};
use std::sync::Arc;
use streamkeeper::api::{JobPhase, StatefulStreamJob};
use streamkeeper::controller::{Facts, build, validate};
use streamkeeper_contract::Versioned;

async fn resource_versions(client: &Client, namespace: &str, job: &str) -> Vec<(String, String)> {
    async fn one<K>(client: &Client, namespace: &str, name: &str) -> (String, String)
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
    {
        let api: Api<K> = Api::namespaced(client.clone(), namespace);
        let object = api
            .get(name)
            .await
            .unwrap_or_else(|e| panic!("{} {name}: {e}", K::kind(&())));
        (
            format!("{}/{name}", K::kind(&())),
            object.meta().resource_version.clone().unwrap(),
        )
    }
    vec![
        one::<StatefulStreamJob>(client, namespace, job).await,
        one::<ConfigMap>(client, namespace, &format!("{job}-worker-config")).await,
        one::<StatefulSet>(client, namespace, job).await,
        one::<Service>(client, namespace, job).await,
        one::<PodDisruptionBudget>(client, namespace, job).await,
        one::<Secret>(client, namespace, &format!("{job}-worker-token")).await,
    ]
}

/// The token in a worker token Secret, as the worker would read it.
fn worker_token_of(secret: &Secret) -> streamkeeper_contract::WorkerToken {
    let bytes = &secret.data.as_ref().expect("data")["token"].0;
    streamkeeper_contract::WorkerToken::parse(std::str::from_utf8(bytes).unwrap()).unwrap()
}

#[tokio::test]
async fn apply_creates_every_object_updates_them_and_a_no_op_writes_nothing() {
    let s = setup("op-apply", &[("retention.ms", "604800000")]).await;
    let ctx = context(&s.client);
    let name = "counts";
    s.jobs
        .create(&PostParams::default(), &job(name, &s.input, &s.prefix))
        .await
        .unwrap();
    reconcile_once(&ctx, &s.jobs, name).await.unwrap();

    // Every object exists with the fields the pure builders produce.
    let stored = s.jobs.get(name).await.unwrap();
    let desired = build(
        &validate(&stored, None).unwrap(),
        &Facts {
            tasks: 3,
            pods_kept: None,
        },
    );
    let config_maps: Api<ConfigMap> = Api::namespaced(s.client.clone(), &s.namespace);
    let config_map = config_maps
        .get(&format!("{name}-worker-config"))
        .await
        .unwrap();
    assert_eq!(config_map.data, desired.config_map.data);
    assert_eq!(
        config_map.owner_references(),
        desired.config_map.owner_references()
    );
    let sets: Api<StatefulSet> = Api::namespaced(s.client.clone(), &s.namespace);
    let set = sets.get(name).await.unwrap();
    let spec = set.spec.clone().unwrap();
    let want = desired.stateful_set.spec.clone().unwrap();
    assert_eq!(spec.replicas, Some(2));
    assert_eq!(spec.update_strategy, want.update_strategy);
    assert_eq!(spec.selector, want.selector);
    assert_eq!(spec.service_name, want.service_name);
    assert_eq!(
        spec.template.metadata.clone().unwrap().annotations,
        want.template.metadata.clone().unwrap().annotations
    );
    let container = &spec.template.spec.clone().unwrap().containers[0];
    let want_container = &want.template.spec.clone().unwrap().containers[0];
    assert_eq!(container.image, want_container.image);
    assert_eq!(container.args, want_container.args);
    assert_eq!(container.security_context, want_container.security_context);
    // The apiserver defaults `fieldRef.apiVersion`; names and values must be the builders'.
    let env_names = |c: &k8s_openapi::api::core::v1::Container| {
        c.env
            .clone()
            .unwrap_or_default()
            .into_iter()
            .map(|e| (e.name, e.value))
            .collect::<Vec<_>>()
    };
    assert_eq!(env_names(container), env_names(want_container));
    let services: Api<Service> = Api::namespaced(s.client.clone(), &s.namespace);
    let service = services.get(name).await.unwrap();
    assert_eq!(service.spec.unwrap().cluster_ip.as_deref(), Some("None"));
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(s.client.clone(), &s.namespace);
    assert_eq!(
        pdbs.get(name).await.unwrap().spec.unwrap().max_unavailable,
        desired
            .pod_disruption_budget
            .spec
            .clone()
            .unwrap()
            .max_unavailable
    );
    // Least privilege: the workers use no Kubernetes API, so they get no ServiceAccount, Role or
    // RoleBinding of their own, and their pods (as the apiserver stored them) no API token. This
    // apiserver runs without the ServiceAccount admission plugin, so what keeps a cluster's from
    // injecting a token volume is `automountServiceAccountToken: false`; operator_workers.rs
    // checks that the local node agent, honouring it as a kubelet does, gives the pods none.
    let roles: Api<Role> = Api::namespaced(s.client.clone(), &s.namespace);
    assert!(
        roles
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    let bindings: Api<RoleBinding> = Api::namespaced(s.client.clone(), &s.namespace);
    assert!(
        bindings
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    let accounts: Api<ServiceAccount> = Api::namespaced(s.client.clone(), &s.namespace);
    assert!(
        accounts
            .get_opt(&format!("{name}-worker"))
            .await
            .unwrap()
            .is_none()
    );
    let pods: Api<Pod> = Api::namespaced(s.client.clone(), &s.namespace);
    let admitted = wait_until("the StatefulSet's pods", TIMEOUT, async || {
        let list = pods.list(&ListParams::default()).await.ok()?;
        (list.items.len() == 2).then_some(list.items)
    })
    .await;
    for pod in &admitted {
        let spec = pod.spec.clone().unwrap();
        assert_eq!(spec.automount_service_account_token, Some(false));
        assert_eq!(spec.service_account_name, None);
        let volumes = spec.volumes.unwrap_or_default();
        assert!(
            !volumes
                .iter()
                .any(|v| v.name.starts_with("kube-api-access")),
            "{} has a service-account token volume: {volumes:?}",
            pod.name_any()
        );
        let token_volume = volumes.iter().find(|v| v.name == "worker-token").unwrap();
        assert_eq!(
            token_volume.secret.as_ref().unwrap().secret_name.as_deref(),
            Some(format!("{name}-worker-token").as_str())
        );
        let mounts = spec.containers[0].volume_mounts.clone().unwrap_or_default();
        assert!(
            !mounts
                .iter()
                .any(|m| m.mount_path.starts_with("/var/run/secrets/kubernetes.io")),
            "{mounts:?}"
        );
    }
    // The worker token: in a Secret the job owns, usable, and where the worker config points.
    let secrets: Api<Secret> = Api::namespaced(s.client.clone(), &s.namespace);
    let secret = secrets.get(&format!("{name}-worker-token")).await.unwrap();
    assert_eq!(
        secret.owner_references(),
        desired.worker_token.owner_references()
    );
    let token = worker_token_of(&secret);
    let config: streamkeeper_contract::WorkerConfig =
        streamkeeper_contract::WorkerConfig::from_yaml(
            &config_map.data.clone().unwrap()["worker.yaml"],
        )
        .unwrap();
    assert_eq!(
        config.http.token_file.as_deref(),
        Some(std::path::Path::new("/etc/streamkeeper/http/token"))
    );

    // The changelog exists, compacted, one partition per input partition; the DLQ too.
    let changelog = format!("{}.{name}.changelog", s.namespace);
    let (partitions, config) = describe_topic(&changelog).await.expect("changelog created");
    assert_eq!(partitions, 3);
    assert_eq!(
        config.get("cleanup.policy").map(String::as_str),
        Some("compact")
    );
    assert_eq!(
        config.get("delete.retention.ms").map(String::as_str),
        Some("86400000")
    );
    let (dlq_partitions, _) = describe_topic(&format!("{}.{name}.dlq", s.namespace))
        .await
        .expect("dead-letter topic created");
    assert_eq!(dlq_partitions, 3);

    // Status: conditions with reasons, retention figures, observedGeneration.
    let job = s.jobs.get(name).await.unwrap();
    let status = job.status.clone().unwrap();
    assert_eq!(status.observed_generation, job.metadata.generation);
    assert_eq!(
        status.phase,
        Some(JobPhase::Pending),
        "no kubelet: pods never get ready"
    );
    assert_eq!(condition(&job, "ChangelogReady").status, "True");
    assert_eq!(condition(&job, "Invalid").status, "False");
    let retention_safe = condition(&job, "RetentionSafe");
    assert_eq!(retention_safe.status, "True");
    assert!(
        retention_safe.message.contains("168h"),
        "{}",
        retention_safe.message
    );
    assert_eq!(condition(&job, "CheckpointStale").reason, "NoCheckpointYet");
    let retention = status.retention.unwrap();
    assert_eq!(retention.input_retention_ms, Some(604_800_000));
    assert_eq!(retention.max_safe_checkpoint_age_seconds, Some(302_400));
    assert_eq!(retention.changelog_delete_retention_ms, Some(86_400_000));
    assert_eq!(status.tasks.len(), 3);

    // A second reconcile with nothing changed writes nothing: every resourceVersion stays.
    let before = resource_versions(&s.client, &s.namespace, name).await;
    // The StatefulSet controller writes the StatefulSet's status on its own: wait until it has
    // seen this generation and created every pod, so its writes do not count as ours.
    let sets: Api<StatefulSet> = Api::namespaced(s.client.clone(), &s.namespace);
    wait_until(
        "the StatefulSet controller to settle",
        TIMEOUT,
        async || {
            let set = sets.get(name).await.ok()?;
            let status = set.status.as_ref()?;
            let wanted = set.spec.as_ref()?.replicas?;
            (status.observed_generation == set.metadata.generation && status.replicas == wanted)
                .then_some(())
        },
    )
    .await;
    reconcile_once(&ctx, &s.jobs, name).await.unwrap();
    let settled = resource_versions(&s.client, &s.namespace, name).await;
    reconcile_once(&ctx, &s.jobs, name).await.unwrap();
    reconcile_once(&ctx, &s.jobs, name).await.unwrap();
    let after = resource_versions(&s.client, &s.namespace, name).await;
    assert_eq!(
        after, settled,
        "a no-op reconcile changed something (first pass: {before:?})"
    );
    let secret = secrets.get(&format!("{name}-worker-token")).await.unwrap();
    assert_eq!(
        worker_token_of(&secret),
        token,
        "the token is never rotated"
    );
    let job_after = s.jobs.get(name).await.unwrap();
    assert_eq!(
        condition(&job_after, "ChangelogReady").last_transition_time,
        condition(&job, "ChangelogReady").last_transition_time
    );

    // Replicas and image changes reach the StatefulSet.
    patch_spec(
        &s.jobs,
        name,
        serde_json::json!({"replicas": 3, "image": "streamkeeper/worker:test-2"}),
    )
    .await;
    reconcile_once(&ctx, &s.jobs, name).await.unwrap();
    let set = sets.get(name).await.unwrap();
    let spec = set.spec.unwrap();
    assert_eq!(spec.replicas, Some(3));
    assert_eq!(
        spec.template.spec.unwrap().containers[0].image.as_deref(),
        Some("streamkeeper/worker:test-2")
    );
    let job = s.jobs.get(name).await.unwrap();
    assert_eq!(
        job.status.unwrap().observed_generation,
        job.metadata.generation
    );

    delete_namespace(&s.client, &s.namespace).await;
}

/// The operator's own Kafka client over the broker's SASL_SSL and mutual-TLS listeners, with
/// the CA, client certificate, key and SASL credentials read from Secrets in the job's namespace.
#[tokio::test]
async fn kafka_tls_and_sasl_credentials_come_from_secrets() {
    use streamkeeper::api::{KafkaSaslSpec, KafkaTlsSpec, SaslMechanism, SecretKeyRef};
    let s = setup("op-secure", &[]).await;
    let ctx = context(&s.client);
    let env = |name: &str| support::required_env(name, "tests/services/kafka.sh");
    let file = |name: &str| std::fs::read_to_string(env(name)).unwrap();
    let secret = |name: &str, password: &str| -> k8s_openapi::api::core::v1::Secret {
        serde_json::from_value(serde_json::json!({
            "metadata": { "name": name },
            "stringData": {
                "ca.crt": file("SK_KAFKA_CA_PEM"),
                "tls.crt": file("SK_KAFKA_CLIENT_CERT_PEM"),
                "tls.key": file("SK_KAFKA_CLIENT_KEY_PEM"),
                "username": env("SK_KAFKA_SASL_USERNAME"),
                "password": password,
            }
        }))
        .unwrap()
    };
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(s.client.clone(), &s.namespace);
    for (name, password) in [
        ("kafka-client", env("SK_KAFKA_SASL_PASSWORD")),
        ("kafka-wrong", "not-the-password".to_string()),
    ] {
        secrets
            .create(&PostParams::default(), &secret(name, &password))
            .await
            .unwrap();
    }
    let key = |secret: &str, key: &str| SecretKeyRef {
        name: secret.into(),
        key: key.into(),
    };
    let sasl = |secret: &str| KafkaSaslSpec {
        mechanism: SaslMechanism::ScramSha512,
        secret_name: secret.into(),
        username_key: "username".into(),
        password_key: "password".into(),
    };
    let secured =
        |name: &str, bootstrap: String, tls: KafkaTlsSpec, sasl: Option<KafkaSaslSpec>| {
            let mut job = job(name, &s.input, &s.prefix);
            job.spec.kafka.bootstrap_servers = bootstrap;
            job.spec.kafka.tls = Some(tls);
            job.spec.kafka.sasl = sasl;
            job
        };
    let ca_only = KafkaTlsSpec {
        ca: Some(key("kafka-client", "ca.crt")),
        certificate: None,
        private_key: None,
    };
    let mutual = KafkaTlsSpec {
        ca: Some(key("kafka-client", "ca.crt")),
        certificate: Some(key("kafka-client", "tls.crt")),
        private_key: Some(key("kafka-client", "tls.key")),
    };
    let jobs = [
        secured(
            "scram",
            env("SK_KAFKA_SASL_SSL_BOOTSTRAP"),
            ca_only.clone(),
            Some(sasl("kafka-client")),
        ),
        secured("mtls", env("SK_KAFKA_MTLS_BOOTSTRAP"), mutual, None),
        secured(
            "wrong",
            env("SK_KAFKA_SASL_SSL_BOOTSTRAP"),
            ca_only.clone(),
            Some(sasl("kafka-wrong")),
        ),
        secured(
            "missing",
            env("SK_KAFKA_SASL_SSL_BOOTSTRAP"),
            ca_only,
            Some(sasl("no-such-secret")),
        ),
    ];
    for job in &jobs {
        s.jobs.create(&PostParams::default(), job).await.unwrap();
    }

    // Good credentials: the changelog is created through the secured listener.
    for name in ["scram", "mtls"] {
        reconcile_once(&ctx, &s.jobs, name)
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let job = s.jobs.get(name).await.unwrap();
        let ready = condition(&job, "ChangelogReady");
        assert_eq!(ready.status, "True", "{name}: {}", ready.message);
        let changelog = ready.message.split(':').next().unwrap().to_string();
        let (partitions, config) = describe_topic(&changelog).await.expect("changelog exists");
        assert_eq!(partitions, 3);
        assert_eq!(config["cleanup.policy"], "compact");
    }

    // A refused password: a condition that says the broker refused the credentials.
    let error = reconcile_once(&ctx, &s.jobs, "wrong").await.unwrap_err();
    let job = s.jobs.get("wrong").await.unwrap();
    let ready = condition(&job, "ChangelogReady");
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("Unknown", "KafkaUnavailable")
    );
    assert!(
        ready.message.to_lowercase().contains("authentication"),
        "{}; error: {error}",
        ready.message
    );

    // A Secret that is not there: named in the condition.
    reconcile_once(&ctx, &s.jobs, "missing").await.unwrap_err();
    let job = s.jobs.get("missing").await.unwrap();
    let ready = condition(&job, "ChangelogReady");
    assert_eq!(ready.reason, "KafkaCredentialsUnavailable");
    assert!(
        ready.message.contains("no-such-secret") && ready.message.contains("does not exist"),
        "{}",
        ready.message
    );

    delete_namespace(&s.client, &s.namespace).await;
}

#[tokio::test]
async fn a_cluster_name_is_part_of_every_id_and_default_topic_the_job_gets() {
    let s = setup("op-cluster", &[("retention.ms", "604800000")]).await;
    let ctx = context_in_cluster(&s.client, Some("east"));
    let name = "counts";
    s.jobs
        .create(&PostParams::default(), &job(name, &s.input, &s.prefix))
        .await
        .unwrap();
    reconcile_once(&ctx, &s.jobs, name).await.unwrap();

    let config_maps: Api<ConfigMap> = Api::namespaced(s.client.clone(), &s.namespace);
    let config_map = config_maps
        .get(&format!("{name}-worker-config"))
        .await
        .unwrap();
    let text = &config_map.data.unwrap()[streamkeeper::k8s::names::WORKER_CONFIG_KEY];
    let config = streamkeeper_contract::WorkerConfig::from_yaml(text).unwrap();
    let stem = format!("east.{}.{name}", s.namespace);
    assert_eq!(config.job.cluster.as_deref(), Some("east"));
    assert_eq!(config.job.transactional_id(0), format!("{stem}.task-0"));
    assert_eq!(config.job.group_id(), stem);
    assert_eq!(config.kafka.changelog_topic, format!("{stem}.changelog"));
    assert_eq!(config.kafka.dead_letter_topic, format!("{stem}.dlq"));
    // The operator created the changelog under that name, in the real broker.
    let stored = s.jobs.get(name).await.unwrap();
    let created = stored.status.unwrap().created_topics;
    assert!(
        created.contains_key(&format!("{stem}.changelog")),
        "{created:?}"
    );
    let (partitions, config) = describe_topic(&format!("{stem}.changelog"))
        .await
        .expect("the changelog exists in the broker");
    assert_eq!(partitions, 3, "one changelog partition per input partition");
    assert_eq!(config["cleanup.policy"], "compact");
}

/// A new leader runs the failover loop of every job its status shows the last leader ran, from
/// that status, before the job's reconcile: here the reconcile cannot even reach the job's
/// broker, and the loop runs all the same. (Before the loops were resumed, only a reconcile
/// that got past Kafka started a loop.)
#[tokio::test]
async fn a_new_leader_resumes_the_loops_the_status_records_before_any_reconcile() {
    let s = setup("op-resume", &[]).await;
    let name = "counts";
    let mut spec = job(name, &s.input, &s.prefix);
    // Nothing answers there: every reconcile of the job stops at reading its Kafka facts.
    spec.spec.kafka.bootstrap_servers = "127.0.0.1:9".into();
    let created = s.jobs.create(&PostParams::default(), &spec).await.unwrap();
    // The status as the last leader left it: this generation, assigned, three tasks.
    let status = serde_json::json!({"status": {
        "phase": "Running",
        "observedGeneration": created.metadata.generation,
        "assignmentGeneration": 4,
        "tasks": [{"task": 0}, {"task": 1}, {"task": 2}],
    }});
    s.jobs
        .patch_status(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&status),
        )
        .await
        .unwrap();

    let ctx = context(&s.client);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let controller = tokio::spawn(streamkeeper::controller::run::run(
        Arc::clone(&ctx),
        Some(s.namespace.clone()),
        4,
        async move {
            let _ = stopped.await;
        },
    ));
    wait_until("the job's failover loop runs", TIMEOUT, async || {
        ctx.metrics
            .encode()
            .lines()
            .any(|line| line == "streamkeeper_operator_failover_loops 1")
            .then_some(())
    })
    .await;
    let _ = stop.send(());
    controller.abort();
    delete_namespace(&s.client, &s.namespace).await;
}
