use super::*;
use crate::controller::test_support::{self, json, yaml};
use k8s_openapi::api::core::v1::{
    NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, Toleration,
};
use streamkeeper_contract::restore_request::RestoreReplaySource;

fn pod_spec(job: &ValidatedJob) -> serde_json::Value {
    json(&template(job, "0123456789abcdef").spec)
}

fn worker(job: &ValidatedJob) -> serde_json::Value {
    pod_spec(job)["containers"][0].clone()
}

#[test]
fn runs_the_worker_with_the_mounted_config() {
    let container = worker(&test_support::validated());
    assert_eq!(container["name"], "worker");
    assert_eq!(container["image"], "streamkeeper/worker:0.1.0");
    assert_eq!(
        container["args"],
        yaml(
            "[run, --config, /etc/streamkeeper/config/worker.yaml, --http-listen, '$(POD_IP):8080']"
        )
    );
    assert_eq!(
        container["env"],
        yaml(
            r#"
- name: STREAMKEEPER_LOG_FORMAT
  value: json
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: POD_IP
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
"#
        )
    );
    assert_eq!(
        container["ports"],
        yaml("- {name: http, containerPort: 8080, protocol: TCP}")
    );
    assert_eq!(
        container["resources"],
        yaml("requests: {cpu: 500m, memory: 1Gi}\nlimits: {memory: 2Gi}")
    );
    assert!(container.get("imagePullPolicy").is_none());
}

#[test]
fn probes_ask_readyz_and_healthz_on_the_http_port() {
    let container = worker(&test_support::validated());
    assert_eq!(
        container["readinessProbe"],
        yaml(
            "httpGet: {path: /readyz, port: http}\nperiodSeconds: 5\ntimeoutSeconds: 2\nfailureThreshold: 3"
        )
    );
    assert_eq!(
        container["livenessProbe"],
        yaml(
            "httpGet: {path: /healthz, port: http}\nperiodSeconds: 10\ntimeoutSeconds: 2\nfailureThreshold: 6"
        )
    );
}

#[test]
fn security_context_is_locked_down() {
    let spec = pod_spec(&test_support::validated());
    assert_eq!(
        spec["containers"][0]["securityContext"],
        yaml(
            r#"
runAsNonRoot: true
readOnlyRootFilesystem: true
allowPrivilegeEscalation: false
capabilities:
  drop: [ALL]
seccompProfile:
  type: RuntimeDefault
"#
        )
    );
    assert_eq!(
        spec["securityContext"],
        yaml(
            r#"
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
fsGroupChangePolicy: OnRootMismatch
seccompProfile:
  type: RuntimeDefault
"#
        )
    );
    assert_eq!(spec["terminationGracePeriodSeconds"], 60);
}

#[test]
fn the_pods_get_no_service_account_token_and_only_the_users_account() {
    let spec = pod_spec(&test_support::validated());
    assert_eq!(spec["automountServiceAccountToken"], false);
    assert!(spec.get("serviceAccountName").is_none(), "{spec}");
    let named = pod_spec(&test_support::validated_with(|job| {
        job.spec.pod.service_account_name = Some("payments-workers".into());
    }));
    assert_eq!(named["serviceAccountName"], "payments-workers");
    assert_eq!(named["automountServiceAccountToken"], false);
}

#[test]
fn mounts_config_state_tmp_the_worker_token_and_s3_credentials() {
    let spec = pod_spec(&test_support::validated());
    assert_eq!(
        spec["containers"][0]["volumeMounts"],
        yaml(
            r#"
- {name: config, mountPath: /etc/streamkeeper/config, readOnly: true}
- {name: state, mountPath: /var/lib/streamkeeper}
- {name: tmp, mountPath: /tmp}
- {name: worker-token, mountPath: /etc/streamkeeper/http, readOnly: true}
- {name: s3-credentials, mountPath: /etc/streamkeeper/s3, readOnly: true}
"#
        )
    );
    assert_eq!(
        spec["volumes"],
        yaml(
            r#"
- name: config
  configMap: {name: card-count-worker-config}
- name: tmp
  emptyDir: {}
- name: worker-token
  secret:
    secretName: card-count-worker-token
    defaultMode: 288
    items:
      - {key: token, path: token}
- name: s3-credentials
  secret:
    secretName: streamkeeper-s3
    defaultMode: 288
    items:
      - {key: AWS_ACCESS_KEY_ID, path: accessKeyId}
      - {key: AWS_SECRET_ACCESS_KEY, path: secretAccessKey}
"#
        )
    );
}

#[test]
fn kafka_secrets_become_files_where_the_config_points() {
    let spec = pod_spec(&test_support::validated_with(
        test_support::with_kafka_security,
    ));
    let volumes = spec["volumes"].as_array().unwrap();
    assert!(volumes.contains(&yaml(
        r#"
name: kafka-tls
projected:
  defaultMode: 288
  sources:
    - secret: {name: kafka-ca, items: [{key: ca.pem, path: ca.crt}]}
    - secret: {name: kafka-client, items: [{key: cert.pem, path: tls.crt}]}
    - secret: {name: kafka-client, items: [{key: key.pem, path: tls.key}]}
"#
    )));
    assert!(volumes.contains(&yaml(
        r#"
name: kafka-sasl
secret:
  secretName: kafka-user
  defaultMode: 288
  items:
    - {key: user, path: username}
    - {key: pass, path: password}
"#
    )));
    let mounts = spec["containers"][0]["volumeMounts"].as_array().unwrap();
    assert!(mounts.contains(&yaml(
        "{name: kafka-tls, mountPath: /etc/streamkeeper/kafka/tls, readOnly: true}"
    )));
    assert!(mounts.contains(&yaml(
        "{name: kafka-sasl, mountPath: /etc/streamkeeper/kafka/sasl, readOnly: true}"
    )));

    let without = pod_spec(&test_support::validated_with(|job| {
        job.spec.checkpoint.s3.credentials_secret = None;
    }));
    let names: Vec<_> = without["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, ["config", "tmp", "worker-token"]);

    // TLS with system roots and no client certificate mounts nothing.
    let system_roots = pod_spec(&test_support::validated_with(|job| {
        job.spec.kafka.tls = Some(crate::api::KafkaTlsSpec {
            ca: None,
            certificate: None,
            private_key: None,
        });
    }));
    assert!(!system_roots.to_string().contains("kafka-tls"));
}

#[test]
fn template_changes_with_the_config_hash_and_the_restart_nonce() {
    let job = test_support::validated();
    let base = template(&job, "aaaaaaaaaaaaaaaa");
    let annotations = base.metadata.as_ref().unwrap().annotations.clone().unwrap();
    assert_eq!(
        annotations
            .get("streamkeeper.dev/config-hash")
            .map(String::as_str),
        Some("aaaaaaaaaaaaaaaa")
    );
    assert!(!annotations.contains_key("streamkeeper.dev/restart-nonce"));
    assert_ne!(template(&job, "bbbbbbbbbbbbbbbb"), base);

    let nonce = |value: &str| {
        let value = value.to_string();
        template(
            &test_support::validated_with(|job| job.spec.restart_nonce = Some(value)),
            "aaaaaaaaaaaaaaaa",
        )
    };
    let first = nonce("2024-05-01T10:00");
    assert_eq!(
        first
            .metadata
            .as_ref()
            .unwrap()
            .annotations
            .as_ref()
            .unwrap()["streamkeeper.dev/restart-nonce"],
        "2024-05-01T10:00"
    );
    assert_ne!(first, base);
    assert_ne!(nonce("2024-05-02T10:00"), first);
    assert_eq!(nonce("2024-05-01T10:00"), first);
}

#[test]
fn pod_overrides_are_applied_and_anti_affinity_is_merged_in() {
    let user_node_affinity = NodeAffinity {
        required_during_scheduling_ignored_during_execution: Some(NodeSelector {
            node_selector_terms: vec![NodeSelectorTerm {
                match_expressions: Some(vec![NodeSelectorRequirement {
                    key: "disk".into(),
                    operator: "In".into(),
                    values: Some(vec!["ssd".into()]),
                }]),
                ..NodeSelectorTerm::default()
            }],
        }),
        ..NodeAffinity::default()
    };
    let job = test_support::validated_with(|job| {
        let pod = &mut job.spec.pod;
        pod.node_selector.insert("pool".into(), "streaming".into());
        pod.tolerations.push(Toleration {
            key: Some("dedicated".into()),
            operator: Some("Equal".into()),
            value: Some("streaming".into()),
            effect: Some("NoSchedule".into()),
            ..Toleration::default()
        });
        pod.affinity = Some(Affinity {
            node_affinity: Some(user_node_affinity.clone()),
            ..Affinity::default()
        });
        pod.labels.insert("team".into(), "payments".into());
        pod.annotations
            .insert("prometheus.io/scrape".into(), "true".into());
    });
    let built = template(&job, "0123456789abcdef");
    let meta = built.metadata.unwrap();
    assert_eq!(
        json(&meta.labels),
        yaml(
            r#"
app.kubernetes.io/instance: card-count
app.kubernetes.io/managed-by: streamkeeper
app.kubernetes.io/name: streamkeeper-worker
streamkeeper.dev/job: card-count
team: payments
"#
        )
    );
    assert_eq!(
        json(&meta.annotations),
        yaml(
            r#"
kubectl.kubernetes.io/default-container: worker
prometheus.io/scrape: "true"
streamkeeper.dev/config-hash: 0123456789abcdef
"#
        )
    );
    let spec = json(&built.spec);
    assert_eq!(spec["nodeSelector"], yaml("pool: streaming"));
    assert_eq!(
        spec["tolerations"],
        yaml("- {key: dedicated, operator: Equal, value: streaming, effect: NoSchedule}")
    );
    assert_eq!(spec["affinity"]["nodeAffinity"], json(&user_node_affinity));
    assert_eq!(
        spec["affinity"]["podAntiAffinity"],
        yaml(
            r#"
preferredDuringSchedulingIgnoredDuringExecution:
  - weight: 100
    podAffinityTerm:
      topologyKey: kubernetes.io/hostname
      labelSelector:
        matchLabels:
          app.kubernetes.io/instance: card-count
          app.kubernetes.io/name: streamkeeper-worker
"#
        )
    );
}

#[test]
fn the_jobs_pods_are_spread_over_zones_without_ever_blocking_a_replica() {
    let built = template(&test_support::validated(), "0123456789abcdef");
    let spread = built.spec.unwrap().topology_spread_constraints.unwrap();
    assert_eq!(
        json(&spread),
        yaml(
            r#"
- maxSkew: 1
  topologyKey: topology.kubernetes.io/zone
  whenUnsatisfiable: ScheduleAnyway
  labelSelector:
    matchLabels:
      app.kubernetes.io/instance: card-count
      app.kubernetes.io/name: streamkeeper-worker
"#
        )
    );
}

#[test]
fn anti_affinity_is_not_added_twice() {
    let job = test_support::validated();
    let once = affinity(&job);
    let again = affinity(&test_support::validated_with(|raw| {
        raw.spec.pod.affinity = Some(once.clone());
    }));
    assert_eq!(again, once);
}

#[test]
fn empty_overrides_leave_fields_unset_and_pull_policy_is_passed_on() {
    let spec = pod_spec(&test_support::validated_with(|job| {
        job.spec.image_pull_policy = Some(crate::api::PullPolicy::IfNotPresent);
    }));
    assert!(spec.get("nodeSelector").is_none());
    assert!(spec.get("tolerations").is_none());
    assert_eq!(spec["containers"][0]["imagePullPolicy"], "IfNotPresent");
}

#[test]
fn a_restore_request_reaches_the_worker_through_annotation_and_env() {
    let job = test_support::validated_with(|job| {
        job.spec.restore = Some(crate::api::RestoreSpec {
            id: "incident-17".into(),
            checkpoint: "42".into(),
            source: crate::api::RestoreSource::Input,
            adopt_input: false,
        });
    });
    let built = template(&job, "aaaaaaaaaaaaaaaa");
    let annotation = built
        .metadata
        .as_ref()
        .unwrap()
        .annotations
        .as_ref()
        .unwrap()["streamkeeper.dev/restore"]
        .clone();
    let document = RestoreRequestDocument::from_json(annotation.as_bytes()).unwrap();
    assert_eq!(document.id, "incident-17");
    assert_eq!(document.checkpoint, RestoreCheckpoint::Sequence(42));
    assert_eq!(document.source, RestoreReplaySource::Input);
    assert!(!document.adopt_input);
    let adopting = test_support::validated_with(|job| {
        job.spec.restore = Some(crate::api::RestoreSpec {
            id: "move-to-v2".into(),
            checkpoint: "latest".into(),
            source: crate::api::RestoreSource::Changelog,
            adopt_input: true,
        });
    });
    let adopting = restore_request(&adopting).unwrap();
    assert!(
        RestoreRequestDocument::from_json(adopting.as_bytes())
            .unwrap()
            .adopt_input,
        "{adopting}"
    );
    let env = &json(&built.spec)["containers"][0]["env"];
    assert_eq!(
        env[3],
        yaml(
            r#"
name: STREAMKEEPER_RESTORE_REQUEST
valueFrom:
  fieldRef:
    fieldPath: metadata.annotations['streamkeeper.dev/restore']
"#
        )
    );
    let without = template(&test_support::validated(), "aaaaaaaaaaaaaaaa");
    assert!(
        !without
            .metadata
            .unwrap()
            .annotations
            .unwrap()
            .contains_key("streamkeeper.dev/restore")
    );
    assert_ne!(built.spec, without.spec);
}

/// A wasm job with `module`, and its pod's volume `volume`: the job, the volume, and whether
/// the worker mounts it read-only at `path`.
fn wasm_module_volume(
    module: serde_json::Value,
    volume: &str,
    path: &str,
) -> (ValidatedJob, serde_json::Value, bool) {
    let job = test_support::validated_with(|job| {
        job.spec.processor = serde_json::from_value(serde_json::json!({
            "type": "wasm",
            "keyField": "card",
            "wasm": {"module": module},
        }))
        .unwrap();
    });
    let found = pod_spec(&job)["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == volume)
        .unwrap()
        .clone();
    let mount = serde_json::json!({"name": volume, "mountPath": path, "readOnly": true});
    let mounted = worker(&job)["volumeMounts"]
        .as_array()
        .unwrap()
        .contains(&mount);
    (job, found, mounted)
}

fn wasm_module_of(job: &ValidatedJob) -> &streamkeeper_contract::worker_config::WasmModuleSource {
    let streamkeeper_contract::worker_config::ProcessorKind::Wasm { module, .. } =
        &job.processor.kind
    else {
        panic!("a wasm processor");
    };
    module
}

#[test]
fn a_module_from_a_config_map_is_mounted_where_the_worker_config_names_it() {
    let (job, volume, mounted) = wasm_module_volume(
        serde_json::json!({
            "configMap": {"name": "guests", "key": "velocity.wasm"},
            "sha256": "a".repeat(64),
        }),
        "wasm-module",
        names::WASM_MODULE_DIR,
    );
    assert_eq!(
        volume["configMap"],
        yaml("{name: guests, items: [{key: velocity.wasm, path: module.wasm}]}")
    );
    assert!(mounted);
    let module = wasm_module_of(&job);
    assert_eq!(module.file.as_deref(), Some(names::WASM_MODULE_FILE));
    assert!(module.key.is_empty());
}

#[test]
fn a_modules_own_access_keys_are_mounted_where_the_worker_config_names_them() {
    let (job, volume, mounted) = wasm_module_volume(
        serde_json::json!({
            "key": "guests/velocity.wasm",
            "credentialsSecret": {"name": "guest-reader", "accessKeyIdKey": "id", "secretAccessKeyKey": "secret"},
            "sha256": "a".repeat(64),
        }),
        "wasm-module-s3",
        names::WASM_MODULE_S3_DIR,
    );
    assert_eq!(volume["secret"]["secretName"], "guest-reader");
    assert_eq!(
        volume["secret"]["items"],
        yaml("[{key: id, path: accessKeyId}, {key: secret, path: secretAccessKey}]")
    );
    assert!(mounted);
    assert_eq!(
        wasm_module_of(&job).credentials_dir.as_deref(),
        Some(names::WASM_MODULE_S3_DIR)
    );
}
