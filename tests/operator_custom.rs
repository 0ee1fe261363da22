//! A job running a processor of the user's own worker build (`examples/custom-processor`: a
//! per-card velocity check), through the whole system: the operator binary, the local node
//! agent running that build's binary as the job's image, the real apiserver, Kafka and S3.
//!
//! Exactly once: three pods with one standby per task; input flows while the owner of task 0
//! is killed with kill -9 (its standby takes over), and then the owner of task 1 is frozen, its
//! volume wiped and the process killed (it comes back with nothing on disk and rebuilds its
//! copies from the checkpoints and the changelog). Every transaction is answered exactly once,
//! and each answer is the one the card's transactions before it give: state lost or applied
//! twice would change the counts.
//!
//! A WebAssembly processor (`examples/wasm/python/app.py`, the same velocity check as a Python
//! guest; and `examples/wasm/c/velocity.c` from a ConfigMap, which starts only once the ConfigMap
//! is there) runs on the stock worker image from a component pinned by its digest: through
//! kill -9 with standbys, every transaction is answered exactly once, the same way (the Python
//! module read with access keys of its own). A digest
//! that does not match the object, or a module that is not there, is `Invalid` naming the
//! module, before anything is created.
//!
//! A config only the worker can judge: a job naming `velocity-check` on the stock worker image
//! shows `Invalid` (`ConfigRefused`) with the worker's reason, as does a config the processor
//! refuses; the fixed spec runs and its output is exact.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

mod operator_support;

use kube::api::Api;
use operator_support::cards::{Producing, committed_values, sibling_binary};
use operator_support::failover::*;
use operator_support::patch_spec;
use std::collections::BTreeMap;
use std::time::Duration;
use streamkeeper::api::StatefulStreamJob;

const IMAGE: &str = "streamkeeper/velocity-check:test";
const MAX_TRANSACTIONS: usize = 3;
const WINDOW_MS: i64 = 60_000;

fn velocity_spec(image: &str, max_transactions: usize) -> serde_json::Value {
    serde_json::json!({
        "image": image,
        "processor": {
            "type": "custom",
            "keyField": "card",
            "timeField": "ts",
            "custom": {
                "name": "velocity-check",
                "config": {"maxTransactions": max_transactions, "windowMinutes": WINDOW_MS / 60_000},
            },
        },
    })
}

/// The node agent runs the example's binary for [`IMAGE`].
fn image_args() -> Vec<String> {
    vec![
        "--image".into(),
        format!(
            "streamkeeper/velocity-check={}",
            sibling_binary("velocity-check").display()
        ),
    ]
}

async fn start(
    prefix: &str,
    address: u8,
    pods: (i32, i32),
    events: u32,
    spec: serde_json::Value,
) -> System {
    let args = image_args();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    System::start_with_node_args(prefix, address, &[None], pods, events, spec, &args).await
}

/// `Some` once the committed output answers each of the `events` transactions exactly once,
/// each answer the one the card's earlier transactions give (in the order the card's partition
/// holds them); `None` while answers are missing. An answer twice, or a wrong one, fails at once.
fn exact_velocity_output(output: &str, events: u32) -> Option<()> {
    let mut seen = vec![false; events as usize];
    let mut times: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for answer in committed_values(output, PARTITIONS) {
        let transaction = &answer["transaction"];
        let n = transaction["n"].as_u64().unwrap() as usize;
        assert!(!seen[n], "transaction {n} answered twice: {answer}");
        seen[n] = true;
        let at = transaction["ts"].as_i64().unwrap();
        let card = transaction["card"].as_str().unwrap().to_string();
        let kept = times.entry(card.clone()).or_default();
        let recent = kept
            .iter()
            .filter(|&&t| t > at - WINDOW_MS && t <= at)
            .count()
            + 1;
        assert_eq!(
            answer["recent"].as_u64(),
            Some(recent as u64),
            "{card}'s transaction {n}: {answer}"
        );
        assert_eq!(answer["flagged"].as_bool(), Some(recent > MAX_TRANSACTIONS));
        let place = kept.partition_point(|&t| t <= at);
        kept.insert(place, at);
        let excess = kept.len().saturating_sub(MAX_TRANSACTIONS);
        kept.drain(..excess);
    }
    seen.iter().all(|answered| *answered).then_some(())
}

/// The job's condition of `type_`, once its status has one.
fn found(
    job: &StatefulStreamJob,
    type_: &str,
) -> Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    let conditions = &job.status.as_ref()?.conditions;
    streamkeeper::controller::judge::conditions::find(conditions, type_).cloned()
}

/// Once the job has settled, produces in the background (the events numbered on from
/// `events`) and kills task 0's owner with kill -9: its standby must take over. The producer and
/// the killed pod.
async fn kill_owner_of_task_0_while_producing(system: &System, events: u32) -> (Producing, String) {
    system.settled(1).await;
    let producing = produce_in_background(&system.input, events, 30);
    tokio::time::sleep(Duration::from_millis(500)).await;
    // The assignment in force at the kill: a settled job may still hand a task off to even out
    // the pods (its pods start at different times), so the one read when it settled can be stale.
    let before = system.document().await.unwrap();
    let (victim, new_owner, took) = system.fail_owner_of(0, "KILL").await;
    eprintln!(
        "kill -9 of {victim}: task 0 committed on {new_owner} {:.3} s later",
        took.as_secs_f64()
    );
    assert_eq!(
        Some(&new_owner),
        before.tasks[0].standbys.first(),
        "the standby took over"
    );
    (producing, victim)
}

/// Empties `pod`'s state volume on the node (its files, not the directory).
fn wipe_volume(system: &System, pod: &str) {
    let volumes = system
        .dir
        .path()
        .join("node/volumes")
        .join(&system.namespace);
    let claim = std::fs::read_dir(&volumes)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .find(|path| path.file_name().unwrap().to_string_lossy().ends_with(pod))
        .unwrap_or_else(|| panic!("no claim of {pod} under {}", volumes.display()));
    let mut wiped = 0;
    for entry in std::fs::read_dir(&claim).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            std::fs::remove_dir_all(&path).unwrap();
        } else {
            std::fs::remove_file(&path).unwrap();
        }
        wiped += 1;
    }
    assert!(wiped > 0, "{} held the pod's state", claim.display());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_custom_processor_answers_every_transaction_exactly_once_through_kills_and_a_wiped_volume()
 {
    let events = 2_000;
    let system = start(
        "op-custom",
        10,
        (3, 1),
        events,
        velocity_spec(IMAGE, MAX_TRANSACTIONS),
    )
    .await;
    let (producing, victim) = kill_owner_of_task_0_while_producing(&system, events).await;

    // Frozen, so it writes nothing while its volume is wiped; then killed. It restarts with an
    // empty volume while its tasks run on their standbys.
    let (frozen, failed) = system.signal_owner_of(1, "STOP").await;
    wipe_volume(&system, &frozen);
    let pid = system.pid_of(&frozen).await.unwrap();
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    let (owner, took) = system.new_owner_of(1, &frozen, failed).await;
    eprintln!(
        "{frozen} frozen, wiped and killed: task 1 committed on {owner} {:.3} s later",
        took.as_secs_f64()
    );

    // The events produced in the background are numbered on from `events`.
    let total = producing.finish();
    system.settled(1).await;
    wait_until("every transaction answered exactly once", async || {
        exact_velocity_output(&system.output, total)
    })
    .await;
    for pod in [&victim, &frozen] {
        let reports = system.reports().await;
        assert!(
            reports
                .get(pod.as_str())
                .is_some_and(|tasks| !tasks.is_empty()),
            "{pod} holds copies again: {reports:?}"
        );
    }
    system.clean_up().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_config_only_the_worker_can_judge_is_invalid_with_its_reason_until_fixed() {
    // The stock image has no velocity-check.
    let events = 200;
    let system = start(
        "op-custom-refused",
        20,
        (1, 0),
        events,
        velocity_spec("streamkeeper/worker:test", MAX_TRANSACTIONS),
    )
    .await;
    let jobs: Api<StatefulStreamJob> = Api::namespaced(system.client.clone(), &system.namespace);
    let invalid_because = async |name: &str, words: &str| {
        wait_until(
            &format!("{name}: Invalid ConfigRefused naming {words:?}"),
            async || {
                let job = jobs.get(name).await.ok()?;
                let invalid = found(&job, "Invalid")?;
                (invalid.status == "True"
                    && invalid.reason == "ConfigRefused"
                    && invalid.message.contains(words))
                .then_some(invalid.message)
            },
        )
        .await
    };
    let message = invalid_because(system.name, "no processor `velocity-check`").await;
    assert!(message.contains("spec.image"), "{message}");
    let job = jobs.get(system.name).await.unwrap();
    assert_eq!(found(&job, "Ready").unwrap().status, "False");

    // The right image, a config the processor refuses (a processor is immutable in a job: this
    // is another job).
    let mut refused = job.clone();
    refused.metadata = kube::api::ObjectMeta {
        name: Some("cards-refused".into()),
        ..Default::default()
    };
    refused.status = None;
    refused.spec.image = IMAGE.into();
    if let Some(custom) = refused.spec.processor.custom.as_mut() {
        custom.config =
            serde_json::from_value(serde_json::json!({"maxTransactions": 0, "windowMinutes": 1}))
                .unwrap();
    }
    jobs.create(&Default::default(), &refused).await.unwrap();
    invalid_because("cards-refused", "maxTransactions is 0").await;

    // The first job fixed (its image is its own build): it runs, and the refusal is gone.
    patch_spec(&jobs, system.name, serde_json::json!({"image": IMAGE})).await;
    wait_until("every transaction answered exactly once", async || {
        exact_velocity_output(&system.output, events)
    })
    .await;
    wait_until("Invalid False again", async || {
        let job = jobs.get(system.name).await.ok()?;
        (found(&job, "Invalid")?.status == "False").then_some(())
    })
    .await;
    system.clean_up().await;
}

/// The example guest `name`, built by `examples/wasm/build.sh`: its bytes and SHA-256. The
/// guests go where the worker's tests keep theirs (and `tests/run.sh` builds them beside the
/// compile): the script rebuilds only a guest whose inputs changed.
fn built_guest(name: &str) -> (Vec<u8>, String) {
    let out = concat!(env!("CARGO_TARGET_TMPDIR"), "/wasm-guests");
    let built = std::process::Command::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/wasm/build.sh"
    ))
    .arg(out)
    .status()
    .unwrap();
    assert!(built.success(), "examples/wasm/build.sh failed");
    let bytes = std::fs::read(format!("{out}/{name}.wasm")).unwrap();
    let sha256 = streamkeeper_contract::module_digest::ModuleDigest::of(&bytes);
    (bytes, sha256)
}

/// The Python guest uploaded to the test bucket: its key and SHA-256.
async fn upload_python_guest(prefix: &str) -> (String, String) {
    let (bytes, sha256) = built_guest("python-velocity");
    let key = format!("{prefix}/guests/python-velocity.wasm");
    operator_support::s3_client()
        .put_object()
        .bucket(support_bucket())
        .key(&key)
        .body(bytes.into())
        .send()
        .await
        .unwrap();
    (key, sha256)
}

fn support_bucket() -> String {
    streamkeeper_test_support::s3_settings().bucket
}

fn wasm_spec(key: &str, sha256: &str) -> serde_json::Value {
    serde_json::json!({
        "processor": {
            "type": "wasm",
            "keyField": "card",
            "timeField": "ts",
            "wasm": {
                "module": {"key": key, "sha256": sha256},
                "config": {"maxTransactions": MAX_TRANSACTIONS, "windowMinutes": WINDOW_MS / 60_000},
                "limits": {"fuelPerRecord": 500_000_000u64, "memoryBytes": 256u64 << 20},
            },
        },
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn a_python_wasm_processor_answers_every_transaction_exactly_once_through_kill_9() {
    let (key, sha256) =
        upload_python_guest(&streamkeeper_test_support::unique_name("op-wasm")).await;
    let events = 2_000;
    // The module is read with access keys of its own (a Secret with other key names than the
    // checkpoint's), created just after the job.
    let mut spec = wasm_spec(&key, &sha256);
    spec["processor"]["wasm"]["module"]["credentialsSecret"] = serde_json::json!({"name": "guest-reader", "accessKeyIdKey": "id", "secretAccessKeyKey": "secret"});
    let system = start("op-wasm", 30, (3, 1), events, spec).await;
    let s3 = streamkeeper_test_support::s3_settings();
    let reader: k8s_openapi::api::core::v1::Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "guest-reader"},
        "stringData": {"id": s3.access_key, "secret": s3.secret_key},
    }))
    .unwrap();
    Api::<k8s_openapi::api::core::v1::Secret>::namespaced(system.client.clone(), &system.namespace)
        .create(&Default::default(), &reader)
        .await
        .unwrap();
    let (producing, _) = kill_owner_of_task_0_while_producing(&system, events).await;
    let pods = system.pods().await;
    let mounted = pods.iter().all(|pod| {
        pod.spec
            .as_ref()
            .unwrap()
            .volumes
            .as_ref()
            .unwrap()
            .iter()
            .any(|volume| {
                volume
                    .secret
                    .as_ref()
                    .and_then(|s| s.secret_name.as_deref())
                    == Some("guest-reader")
            })
    });
    assert!(mounted, "every pod mounts the module's own access keys");
    let total = producing.finish();
    wait_until("every transaction answered exactly once", async || {
        exact_velocity_output(&system.output, total)
    })
    .await;

    // A job pinning a digest the object does not have, or naming a module that is not there,
    // is Invalid naming the module, and nothing is created for it.
    let jobs: Api<StatefulStreamJob> = Api::namespaced(system.client.clone(), &system.namespace);
    let template = jobs.get(system.name).await.unwrap();
    let refused = async |name: &str, change: &dyn Fn(&mut streamkeeper::api::WasmSpec), reason| {
        let mut job = template.clone();
        job.metadata = kube::api::ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        };
        job.status = None;
        change(job.spec.processor.wasm.as_mut().unwrap());
        jobs.create(&Default::default(), &job).await.unwrap();
        let message = wait_until(&format!("{name}: Invalid {reason}"), async || {
            let job = jobs.get(name).await.ok()?;
            let invalid = found(&job, "Invalid")?;
            (invalid.status == "True" && invalid.reason == reason).then_some(invalid.message)
        })
        .await;
        let sets: Api<k8s_openapi::api::apps::v1::StatefulSet> =
            Api::namespaced(system.client.clone(), &system.namespace);
        assert!(
            sets.get_opt(&streamkeeper::k8s::names::stateful_set(name))
                .await
                .unwrap()
                .is_none()
                && sets.list(&Default::default()).await.unwrap().items.len() == 1,
            "nothing is created for {name}"
        );
        message
    };
    let mismatched = refused(
        "cards-mismatched",
        &|wasm| wasm.module.sha256 = "0".repeat(64),
        "ModuleMismatch",
    )
    .await;
    assert!(
        mismatched.contains(&key)
            && mismatched.contains(&sha256)
            && mismatched.contains(&"0".repeat(64)),
        "{mismatched}"
    );
    let missing = refused(
        "cards-missing",
        &|wasm| wasm.module.key = Some(format!("{key}.missing")),
        "ModuleMissing",
    )
    .await;
    assert!(missing.contains(&format!("{key}.missing")), "{missing}");
    system.clean_up().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_c_wasm_processor_from_a_config_map_starts_once_its_module_is_there_and_answers_exactly()
{
    let (bytes, sha256) = built_guest("c-velocity");
    let mut spec = wasm_spec("unused", &sha256);
    spec["processor"]["wasm"]["module"] = serde_json::json!({
        "configMap": {"name": "velocity-guest", "key": "velocity.wasm"},
        "sha256": sha256,
    });
    let events = 2_000;
    let system = start("op-wasm-cm", 50, (3, 1), events, spec).await;

    // The ConfigMap is not there yet: Invalid, naming it, and nothing created.
    let jobs: Api<StatefulStreamJob> = Api::namespaced(system.client.clone(), &system.namespace);
    let message = wait_until("Invalid ModuleMissing", async || {
        let job = jobs.get(system.name).await.ok()?;
        let invalid = found(&job, "Invalid")?;
        (invalid.status == "True" && invalid.reason == "ModuleMissing").then_some(invalid.message)
    })
    .await;
    let named = format!(
        "configmap {}/velocity-guest key velocity.wasm",
        system.namespace
    );
    assert!(message.contains(&named), "{message}");
    let sets: Api<k8s_openapi::api::apps::v1::StatefulSet> =
        Api::namespaced(system.client.clone(), &system.namespace);
    assert!(
        sets.list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );

    // Once it is, the job starts (looked at again within 10 s) and runs exactly through kill -9.
    let map: k8s_openapi::api::core::v1::ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "velocity-guest"},
        "binaryData": {"velocity.wasm": k8s_openapi::ByteString(bytes)},
    }))
    .unwrap();
    Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(
        system.client.clone(),
        &system.namespace,
    )
    .create(&Default::default(), &map)
    .await
    .unwrap();
    let (producing, _) = kill_owner_of_task_0_while_producing(&system, events).await;
    let total = producing.finish();
    wait_until("every transaction answered exactly once", async || {
        exact_velocity_output(&system.output, total)
    })
    .await;
    system.clean_up().await;
}
