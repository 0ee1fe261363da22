//! What the integration tests of the operator (`tests/`) and of the worker (`worker/tests/`)
//! share: where the real services are, names unique to a test run, plain HTTP on loopback, and
//! waiting on a condition (a test waits on a condition, never on a sleep).
//!
//! The services are started by the scripts in `tests/services/`; `tests/run.sh` starts them and
//! exports their variables. A missing variable fails the test with the command that fixes it: a
//! test against a real service is never silently skipped.
#![allow(clippy::panic, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// The value of `name`; panics naming the script that starts the service when it is unset.
pub fn required_env(name: &str, started_by: &str) -> String {
    match std::env::var(name) {
        Ok(value) if !value.is_empty() => value,
        _ => panic!(
            "{name} is not set: this test needs the real service started by `{started_by} start` \
             (or run every test through `tests/run.sh`, which starts and stops the services)"
        ),
    }
}

/// The real broker started by `tests/services/kafka.sh`.
pub fn kafka_bootstrap() -> String {
    required_env("SK_KAFKA_BOOTSTRAP", "tests/services/kafka.sh")
}

/// The real S3 server started by `tests/services/s3.sh`.
#[derive(Debug, Clone)]
pub struct S3Settings {
    pub endpoint: String,
    pub bucket: String,
    pub region: String,
    pub access_key: String,
    pub secret_key: String,
}

pub fn s3_settings() -> S3Settings {
    let script = "tests/services/s3.sh";
    S3Settings {
        endpoint: required_env("SK_S3_ENDPOINT", script),
        bucket: required_env("SK_S3_BUCKET", script),
        region: required_env("SK_S3_REGION", script),
        access_key: required_env("SK_S3_ACCESS_KEY", script),
        secret_key: required_env("SK_S3_SECRET_KEY", script),
    }
}

/// An S3 client for the test server, path-style, with the test credentials.
pub fn s3_client(settings: &S3Settings) -> aws_sdk_s3::Client {
    use aws_sdk_s3::config::{BehaviorVersion, Credentials, Region};
    let config = aws_sdk_s3::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .endpoint_url(&settings.endpoint)
        .region(Region::new(settings.region.clone()))
        .force_path_style(true)
        .credentials_provider(Credentials::new(
            &settings.access_key,
            &settings.secret_key,
            None,
            None,
            "streamkeeper-tests",
        ))
        .build();
    aws_sdk_s3::Client::from_conf(config)
}

/// The test apiserver's kubeconfig, written by `tests/services/kube.sh`.
pub fn kubeconfig() -> String {
    required_env("KUBECONFIG", "tests/services/kube.sh")
}

/// A name unique to this test run, for topics, namespaces, jobs and keys.
pub fn unique_name(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    format!("{prefix}-{}-{:x}", std::process::id(), nanos & 0xffff_ffff)
}

/// A loopback port that is free right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .expect("a free loopback port")
}

/// A plain HTTP request on loopback with exactly `headers` added and `body` (JSON, empty for
/// none): its status and body, or `None` when nothing answered within `limit`.
pub fn http_request(
    address: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
    limit: Duration,
) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect(address).ok()?;
    stream.set_read_timeout(Some(limit)).ok()?;
    let headers: String = headers
        .iter()
        .map(|(name, value)| format!("{name}: {value}\r\n"))
        .collect();
    // One write of the whole request: `write!` writes each formatted piece on its own, and a
    // server that reads once would see only the first.
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {address}\r\n{headers}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let status = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Some((status, body))
}

/// A plain HTTP GET on loopback: its status and body.
pub fn http_get(address: &str, path: &str) -> Option<(u16, String)> {
    http_request(address, "GET", path, &[], "", Duration::from_secs(5))
}

/// Waits until `condition` holds, checking every 20 ms: how long it took. Panics naming `what`
/// after `limit`.
pub fn wait_for(what: &str, limit: Duration, condition: impl FnMut() -> bool) -> Duration {
    wait_for_or(what, limit, condition, String::new)
}

/// [`wait_for`], adding `context()` (a process's log, say) to the panic when it gives up.
pub fn wait_for_or(
    what: &str,
    limit: Duration,
    mut condition: impl FnMut() -> bool,
    context: impl FnOnce() -> String,
) -> Duration {
    let started = Instant::now();
    while started.elapsed() < limit {
        if condition() {
            return started.elapsed();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("{what}: not within {limit:?}\n{}", context());
}

/// Asks `probe` every 100 ms until it gives a value, and returns it. Panics naming `what`
/// after `limit`.
pub async fn wait_until<T>(
    what: &str,
    limit: Duration,
    mut probe: impl AsyncFnMut() -> Option<T>,
) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        assert!(Instant::now() < deadline, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_reads_the_status_and_the_body_of_the_answer() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("listen");
        let address = listener.local_addr().expect("address").to_string();
        let server = std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().expect("accept");
            // TCP may deliver the request in pieces: read until its body has arrived.
            let mut request = Vec::new();
            let mut piece = [0u8; 1024];
            while !request.ends_with(b"\r\n\r\n[]") {
                let read = stream.read(&mut piece).expect("read");
                assert!(read > 0, "the request ended early: {request:?}");
                request.extend_from_slice(&piece[..read]);
            }
            let request = String::from_utf8_lossy(&request).to_string();
            stream
                .write_all(b"HTTP/1.1 409 Conflict\r\nContent-Length: 2\r\n\r\n{}")
                .expect("write");
            request
        });
        let answer = http_request(
            &address,
            "PUT",
            "/v1/x",
            &[("Authorization", "Bearer t")],
            "[]",
            Duration::from_secs(5),
        );
        assert_eq!(answer, Some((409, "{}".to_string())));
        let request = server.join().expect("server");
        assert!(request.starts_with("PUT /v1/x HTTP/1.1\r\n"));
        assert!(request.contains("Authorization: Bearer t\r\n"));
        assert!(request.ends_with("\r\n\r\n[]"));
    }

    #[test]
    fn a_wait_returns_once_its_condition_holds_and_fails_when_it_never_does() {
        let mut calls = 0;
        wait_for("the third call", Duration::from_secs(5), || {
            calls += 1;
            calls == 3
        });
        assert_eq!(calls, 3);
        let never = std::panic::catch_unwind(|| {
            wait_for("never", Duration::from_millis(50), || false);
        });
        assert!(never.is_err());
    }

    #[tokio::test]
    async fn an_async_wait_returns_the_probes_value() {
        let mut calls = 0;
        let value = wait_until("the second call", Duration::from_secs(5), async || {
            calls += 1;
            (calls == 2).then_some(calls)
        })
        .await;
        assert_eq!(value, 2);
    }

    #[test]
    fn names_are_unique_within_a_run() {
        let first = unique_name("job");
        std::thread::sleep(Duration::from_micros(10));
        assert_ne!(first, unique_name("job"));
        assert!(first.starts_with("job-"));
    }
}
