//! Leadership against the real apiserver, Kafka and S3, with the operator binary: a leader
//! frozen (SIGSTOP) past the lease duration with a reconcile in flight writes nothing once it
//! wakes up after another process took over, and a leader cut off from the apiserver stops within
//! the renew deadline instead of hanging in a renewal.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

mod operator_support;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, Patch, PatchParams, PostParams};
use operator_support::process::{Operator, holder};
use operator_support::support::wait_until;
use operator_support::{support, *};
use std::path::{Path, PathBuf};
use std::time::Duration;
use streamkeeper::api::StatefulStreamJob;
use streamkeeper::controller::judge::conditions;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A stand-in for a worker's HTTP port on a loopback address of its own: the first
/// `POST /v1/checkpoints` is held unanswered until the test releases it; every other request is
/// answered `200` at once.
struct HeldWorker {
    ip: String,
    held: tokio::sync::oneshot::Receiver<tokio::net::TcpStream>,
}

const ANSWER_200: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";

async fn read_head(stream: &mut tokio::net::TcpStream) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).await.unwrap_or(0) == 1 {
        head.push(byte[0]);
    }
    String::from_utf8_lossy(&head).to_string()
}

impl HeldWorker {
    async fn start() -> Self {
        let port = u16::try_from(streamkeeper::k8s::names::HTTP_PORT).unwrap();
        let mut listener = None;
        for x in 2..250u8 {
            if let Ok(bound) = tokio::net::TcpListener::bind(format!("127.0.3.{x}:{port}")).await {
                listener = Some((format!("127.0.3.{x}"), bound));
                break;
            }
        }
        let (ip, listener) = listener.expect("a free loopback address");
        let (sender, held) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let mut sender = Some(sender);
            while let Ok((mut stream, _)) = listener.accept().await {
                let head = read_head(&mut stream).await;
                if head.starts_with("POST /v1/checkpoints")
                    && let Some(sender) = sender.take()
                {
                    let _ = sender.send(stream);
                    continue;
                }
                let _ = stream.write_all(ANSWER_200).await;
                let _ = stream.shutdown().await;
            }
        });
        Self { ip, held }
    }
}

/// Resource versions of the Events `identity` reported in `namespace`.
async fn events_of(
    client: &kube::Client,
    namespace: &str,
    identity: &str,
) -> Vec<(String, String)> {
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(client.clone(), namespace);
    let mut found: Vec<(String, String)> = events
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|event| event.reporting_instance.as_deref() == Some(identity))
        .map(|event| {
            (
                event.metadata.name.unwrap_or_default(),
                event.metadata.resource_version.unwrap_or_default(),
            )
        })
        .collect();
    found.sort();
    found
}

async fn replicas(sets: &Api<StatefulSet>, name: &str) -> Option<i32> {
    sets.get_opt(name)
        .await
        .unwrap()
        .and_then(|set| set.spec)
        .and_then(|spec| spec.replicas)
}

#[tokio::test]
async fn a_frozen_leader_writes_nothing_after_the_new_leader_started() {
    let client = client().await;
    let namespace = namespace(&client, "op-frozen").await;
    let input = support::unique_name("op-frozen-in");
    create_topic(&input, 1, &[]).await;
    let jobs: Api<StatefulStreamJob> = Api::namespaced(client.clone(), &namespace);
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), &namespace);
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), &namespace);
    let leases: Api<Lease> = Api::namespaced(client.clone(), &namespace);
    let name = "counts";
    let mut spec = job(name, &input, &support::unique_name("op-frozen"));
    spec.spec.replicas = 1;
    jobs.create(&PostParams::default(), &spec).await.unwrap();
    let mut worker = HeldWorker::start().await;
    let dir = tempfile::tempdir().unwrap();
    // A long final-checkpoint timeout: the held request must still be waited for on waking.
    let slow = ["--final-checkpoint-timeout-seconds", "600"];
    let a = Operator::start_with(&namespace, "operator-a", dir.path(), &slow);
    wait_until("operator-a to lead", TIMEOUT, async || {
        (holder(&leases).await.as_deref() == Some("operator-a")).then_some(())
    })
    .await;
    let b = Operator::start_with(&namespace, "operator-b", dir.path(), &slow);

    // The worker pod gets the stand-in's address (no kubelet here gives it one).
    wait_until("the worker pod", CONTROLLER_TIMEOUT, async || {
        pods.get_opt("counts-0").await.unwrap()
    })
    .await;
    let address =
        serde_json::json!({"status": {"podIP": worker.ip, "podIPs": [{"ip": worker.ip}]}});
    pods.patch_status("counts-0", &PatchParams::default(), &Patch::Merge(address))
        .await
        .unwrap();

    // Suspend: A asks the worker for its final checkpoint, and is frozen while it waits.
    jobs.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"spec": {"suspend": true}})),
    )
    .await
    .unwrap();
    let held = tokio::time::timeout(TIMEOUT, &mut worker.held)
        .await
        .expect("operator-a asked for the final checkpoint")
        .unwrap();
    a.signal("-STOP");
    let frozen = tokio::time::Instant::now();

    // B takes over once A's record has not changed for the lease duration, and does the suspend
    // itself; then the job is resumed, so the StatefulSet is scaled up again by B.
    wait_until(
        "operator-b to take over",
        Duration::from_secs(60),
        async || (holder(&leases).await.as_deref() == Some("operator-b")).then_some(()),
    )
    .await;
    let takeover = frozen.elapsed();
    wait_until("operator-b's suspend", CONTROLLER_TIMEOUT, async || {
        (replicas(&sets, name).await == Some(0)).then_some(())
    })
    .await;
    jobs.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"spec": {"suspend": false}})),
    )
    .await
    .unwrap();
    wait_until("operator-b's resume", CONTROLLER_TIMEOUT, async || {
        (replicas(&sets, name).await == Some(1)).then_some(())
    })
    .await;
    // And the status write that ends b's resume reconcile has landed: a write of b still in
    // flight when b is frozen would land after the version below is read, and be taken for a's.
    wait_until(
        "operator-b's status of the resume",
        CONTROLLER_TIMEOUT,
        async || {
            let job = jobs.get(name).await.ok()?;
            let status = job.status.as_ref()?;
            let suspended = conditions::find(&status.conditions, "Suspended")?;
            (status.observed_generation == job.metadata.generation && suspended.status == "False")
                .then_some(())
        },
    )
    .await;

    // Freeze B as well: from here on, any write to the job's objects comes from A.
    b.signal("-STOP");
    let set_before = sets.get(name).await.unwrap().metadata.generation;
    let job_before = jobs.get(name).await.unwrap().metadata.resource_version;
    let events_before = events_of(&client, &namespace, "operator-a").await;

    // A's answer is waiting in its socket when it wakes up, with its suspend still in flight.
    let mut held = held;
    held.write_all(ANSWER_200).await.unwrap();
    held.shutdown().await.unwrap();
    a.signal("-CONT");
    let woke = tokio::time::Instant::now();
    let mut a = a;
    let status = wait_until("operator-a to exit", Duration::from_secs(90), async || {
        a.child.try_wait().unwrap()
    })
    .await;
    let exited = woke.elapsed();
    eprintln!(
        "frozen leader: operator-b took over {takeover:?} after SIGSTOP; operator-a exited {exited:?} after SIGCONT ({status:?})"
    );
    // What A would have written: the StatefulSet scaled to zero by its stale suspend, the job's
    // status and an Event.
    let set = sets.get(name).await.unwrap();
    assert_eq!(
        (set.metadata.generation, replicas(&sets, name).await),
        (set_before, Some(1)),
        "the frozen leader changed the StatefulSet after it woke up\n{}",
        a.log()
    );
    assert_eq!(
        jobs.get(name).await.unwrap().metadata.resource_version,
        job_before,
        "the frozen leader wrote the job after it woke up\n{}",
        a.log()
    );
    assert_eq!(
        events_of(&client, &namespace, "operator-a").await,
        events_before,
        "the frozen leader published an Event after it woke up"
    );
    assert!(!status.success(), "a lost Lease is a failure exit");
    assert!(a.log().contains("lost the leader Lease"), "{}", a.log());

    b.signal("-CONT");
    drop(b);
    // No operator is left to run the clean-up the finalizer waits for.
    jobs.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    delete_namespace(&client, &namespace).await;
}

/// A TCP relay to the apiserver that can be switched to swallow everything: connections stay
/// open, nothing arrives, nothing is answered (a network partition as a client sees it).
struct Blackhole {
    address: String,
    swallow: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Blackhole {
    async fn start(upstream: String) -> Self {
        use std::sync::atomic::Ordering;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let swallow = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let relay_swallow = swallow.clone();
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((client, _)) = listener.accept().await {
                if relay_swallow.load(Ordering::SeqCst) {
                    held.push(client);
                    continue;
                }
                let Ok(server) = tokio::net::TcpStream::connect(&upstream).await else {
                    continue;
                };
                let (client_read, client_write) = client.into_split();
                let (server_read, server_write) = server.into_split();
                for (mut from, mut to) in [(client_read, server_write), (server_read, client_write)]
                {
                    let swallow = relay_swallow.clone();
                    tokio::spawn(async move {
                        let mut buffer = vec![0u8; 16 * 1024];
                        while let Ok(n) = from.read(&mut buffer).await {
                            if n == 0 {
                                break;
                            }
                            if !swallow.load(Ordering::SeqCst)
                                && to.write_all(&buffer[..n]).await.is_err()
                            {
                                break;
                            }
                        }
                    });
                }
            }
        });
        Self { address, swallow }
    }

    fn swallow(&self) {
        self.swallow
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

fn test_kubeconfig() -> String {
    std::fs::read_to_string(std::env::var("KUBECONFIG").unwrap()).unwrap()
}

/// `host:port` of the test apiserver.
fn apiserver_address() -> String {
    test_kubeconfig()
        .lines()
        .find_map(|line| line.trim().strip_prefix("server: https://"))
        .expect("a server line")
        .to_string()
}

/// A copy of the test kubeconfig whose server is `address` (same certificate: 127.0.0.1).
fn kubeconfig_via(address: &str, dir: &Path) -> PathBuf {
    let path = dir.join("kubeconfig-via-relay");
    std::fs::write(
        &path,
        test_kubeconfig().replace(&apiserver_address(), address),
    )
    .unwrap();
    path
}

#[tokio::test]
async fn a_leader_cut_off_from_the_apiserver_stops_within_the_renew_deadline() {
    let client = client().await;
    let namespace = namespace(&client, "op-cutoff").await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), &namespace);
    let dir = tempfile::tempdir().unwrap();
    let relay = Blackhole::start(apiserver_address()).await;
    let kubeconfig = kubeconfig_via(&relay.address, dir.path());
    let mut operator = Operator::start_with_env(
        &namespace,
        "operator-cut-off",
        dir.path(),
        &[],
        &[("KUBECONFIG", kubeconfig.as_path())],
    );
    wait_until("the operator to lead", TIMEOUT, async || {
        (holder(&leases).await.as_deref() == Some("operator-cut-off")).then_some(())
    })
    .await;
    // Let it renew through the relay a few times, then cut it off mid-lease.
    let renewed = |lease: Option<Lease>| {
        lease
            .and_then(|lease| lease.spec)
            .and_then(|spec| spec.renew_time)
            .map(|time| time.0)
    };
    let first = renewed(leases.get_opt("streamkeeper-operator").await.unwrap());
    wait_until("a renewal through the relay", TIMEOUT, async || {
        let now = renewed(leases.get_opt("streamkeeper-operator").await.unwrap());
        (now != first).then_some(())
    })
    .await;
    relay.swallow();
    let cut = tokio::time::Instant::now();
    let status = wait_until(
        "the cut-off leader to exit",
        Duration::from_secs(30),
        async || operator.child.try_wait().unwrap(),
    )
    .await;
    let stopped = cut.elapsed();
    let output = operator.log();
    eprintln!("cut-off leader exited {stopped:?} after the cut ({status:?})");
    // The renew deadline, 4 s from the start of the last renewal (before the cut), plus the
    // polling of this test and a loaded machine.
    assert!(
        stopped <= Duration::from_secs(6),
        "exited only after {stopped:?}\n{output}"
    );
    assert!(!status.success());
    assert!(output.contains("lost the leader Lease"), "{output}");
    drop(operator);
    delete_namespace(&client, &namespace).await;
}

#[tokio::test]
async fn writes_are_refused_unsent_once_the_renew_deadline_passed_and_reads_go_on() {
    use k8s_openapi::api::core::v1::ConfigMap;
    use streamkeeper::leader::{Leadership, leader_only_client};
    let client = client().await;
    let namespace = namespace(&client, "op-guard").await;
    let leadership = Leadership::elected();
    leadership.renewed(std::time::Instant::now(), Duration::from_secs(2));
    let config = kube::Config::infer().await.unwrap();
    let guarded: Api<ConfigMap> =
        Api::namespaced(leader_only_client(config, &leadership).unwrap(), &namespace);
    let map = |name: &str| -> ConfigMap {
        serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).unwrap()
    };
    guarded
        .create(&PostParams::default(), &map("while-leading"))
        .await
        .expect("a write before the deadline is sent");
    wait_until("the renew deadline to pass", TIMEOUT, async || {
        leadership.check().is_err().then_some(())
    })
    .await;
    let refused = guarded
        .create(&PostParams::default(), &map("after-the-deadline"))
        .await
        .expect_err("a write after the deadline is refused");
    assert!(refused.to_string().contains("not leading"), "{refused}");
    let plain: Api<ConfigMap> = Api::namespaced(client.clone(), &namespace);
    assert!(
        plain.get_opt("after-the-deadline").await.unwrap().is_none(),
        "the refused write never reached the apiserver"
    );
    guarded
        .get("while-leading")
        .await
        .expect("reads are not refused");
    delete_namespace(&client, &namespace).await;
}
