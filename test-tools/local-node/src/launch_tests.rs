use super::*;
use serde_json::json;

fn pod() -> Pod {
    serde_json::from_value(json!({
        "metadata": { "name": "job-0", "namespace": "ns", "uid": "u1",
                      "annotations": { "a": "b" } },
        "spec": {
            "containers": [{
                "name": "worker",
                "image": "example.invalid/streamkeeper-worker:0.1.0",
                "args": ["run", "--config", "/etc/sk/worker.yaml", "--http-listen", "$(POD_IP):8080"],
                "env": [
                    { "name": "POD_IP", "valueFrom": { "fieldRef": { "fieldPath": "status.podIP" } } },
                    { "name": "POD_NAME", "valueFrom": { "fieldRef": { "fieldPath": "metadata.name" } } },
                    { "name": "NOTE", "valueFrom": { "fieldRef": { "fieldPath": "metadata.annotations['a']" } } },
                    { "name": "KEY", "valueFrom": { "secretKeyRef": { "name": "s3", "key": "id" } } },
                    { "name": "GREETING", "value": "hi $(POD_NAME) $$(POD_NAME) $(MISSING)" },
                ],
                "ports": [{ "name": "http", "containerPort": 8080 }],
                "readinessProbe": { "httpGet": { "path": "/readyz", "port": "http" }, "periodSeconds": 5 },
                "volumeMounts": [
                    { "name": "config", "mountPath": "/etc/sk", "readOnly": true },
                    { "name": "state", "mountPath": "/var/lib/sk" },
                ],
            }],
            "volumes": [
                { "name": "config", "configMap": { "name": "job-config" } },
                { "name": "state", "persistentVolumeClaim": { "claimName": "state-job-0" } },
            ],
        },
    }))
    .unwrap()
}

fn sources() -> Sources {
    let mut sources = Sources::default();
    sources.config_maps.insert(
        "job-config".into(),
        [(
            "worker.yaml".to_string(),
            b"state:\n  dir: /var/lib/sk/state\n".to_vec(),
        )]
        .into(),
    );
    sources
        .secrets
        .insert("s3".into(), [("id".to_string(), b"AKID".to_vec())].into());
    sources
}

fn place<'a>(images: &'a [(String, PathBuf)]) -> PodPlace<'a> {
    PodPlace {
        pod_ip: "127.0.0.11",
        node_name: "n",
        pod_dir: Path::new("/r/pods/ns_job-0_u1"),
        root: Path::new("/r"),
        images,
    }
}

#[test]
fn a_worker_pod_becomes_a_local_process() {
    let images = [(
        "example.invalid/streamkeeper-worker".to_string(),
        PathBuf::from("/bin/worker"),
    )];
    let plan = plan(&pod(), &place(&images), &sources()).unwrap();
    let c = &plan.containers[0];
    assert_eq!(c.program, PathBuf::from("/bin/worker"));
    assert_eq!(
        c.args,
        [
            "run",
            "--config",
            "/r/pods/ns_job-0_u1/volumes/config/worker.yaml",
            "--http-listen",
            "127.0.0.11:8080"
        ]
    );
    let env: BTreeMap<_, _> = c.env.iter().cloned().collect();
    assert_eq!(env["POD_NAME"], "job-0");
    assert_eq!(env["NOTE"], "b");
    assert_eq!(env["KEY"], "AKID");
    assert_eq!(env["GREETING"], "hi job-0 $(POD_NAME) $(MISSING)");
    assert_eq!(c.readiness.as_ref().unwrap().timing.port, 8080);
    assert_eq!(
        c.readiness.as_ref().unwrap().timing.period,
        Duration::from_secs(5)
    );
    let state = plan.volumes.iter().find(|v| v.name == "state").unwrap();
    assert_eq!(state.dir, PathBuf::from("/r/volumes/ns/state-job-0"));
    let config = plan.volumes.iter().find(|v| v.name == "config").unwrap();
    assert_eq!(
        String::from_utf8(config.files[0].1.clone()).unwrap(),
        "state:\n  dir: /r/volumes/ns/state-job-0/state\n",
        "a projected config file names the local state directory"
    );
}

#[test]
fn an_unmapped_image_without_command_is_refused() {
    let error = plan(&pod(), &place(&[]), &sources()).unwrap_err();
    assert!(matches!(error, LaunchError::UnknownImage { .. }), "{error}");
}

#[test]
fn a_missing_secret_key_is_refused_naming_the_variable() {
    let images = [("example.invalid".to_string(), PathBuf::from("/bin/worker"))];
    let mut sources = sources();
    sources.secrets.clear();
    let error = plan(&pod(), &place(&images), &sources).unwrap_err();
    assert!(error.to_string().contains("KEY"), "{error}");
}

#[test]
fn rewriting_touches_whole_path_components_only() {
    let mounts = vec![
        ("/var/lib/sk".to_string(), "/local/state".to_string()),
        ("/tmp".to_string(), "/local/tmp".to_string()),
    ];
    assert_eq!(rewrite_paths("/var/lib/sk", &mounts), "/local/state");
    assert_eq!(
        rewrite_paths("--dir=/var/lib/sk/x", &mounts),
        "--dir=/local/state/x"
    );
    assert_eq!(rewrite_paths("/var/lib/skx", &mounts), "/var/lib/skx");
    assert_eq!(rewrite_paths("/opt/tmp", &mounts), "/opt/tmp");
    assert_eq!(rewrite_paths("a /tmp b", &mounts), "a /local/tmp b");
}

#[test]
fn expansion_follows_kubernetes_rules() {
    let env = vec![("A".to_string(), "1".to_string())];
    assert_eq!(expand("$(A)-$$(A)-$(B)-$", &env), "1-$(A)-$(B)-$");
}
