//! `streamkeeper-worker check-config` applies the contract's rules, the same the operator checks a
//! spec with: a config the operator would never render is refused here with the field named, and
//! never reaches a task that would loop on it.
//!
//! A custom processor is found by name among the binary's own and checks its config itself: the
//! stock worker has no `velocity-check`, the example's binary (`examples/custom-processor`) has,
//! and refuses settings it cannot run. `run` refuses the same before any task, with the exit
//! status the operator reads as `Invalid` and the reason as its last line.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::process::Command;

const EXAMPLE: &str = include_str!("../../examples/worker-standalone.yaml");

/// Runs `check-config` on `config`: the exit status and what it printed on stderr.
fn check_config(config: &str) -> (bool, String) {
    let (status, stderr) = worker(STOCK, "check-config", config);
    (status == Some(0), stderr)
}

const STOCK: &str = env!("CARGO_BIN_EXE_streamkeeper-worker");

/// The example's worker binary, which cargo builds next to the stock one.
fn velocity_check() -> std::path::PathBuf {
    let path = std::path::Path::new(STOCK).with_file_name("velocity-check");
    assert!(
        path.exists(),
        "{} is missing: build it with `cargo build --workspace --all-targets` (tests/run.sh does)",
        path.display()
    );
    path
}

/// Runs `binary`'s `command` (`check-config` or `run`) on `config`: the exit code and stderr.
fn worker(
    binary: impl AsRef<std::ffi::OsStr>,
    command: &str,
    config: &str,
) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("worker.yaml");
    std::fs::write(&path, config).unwrap();
    let output = Command::new(binary)
        .arg(command)
        .arg("--config")
        .arg(&path)
        .env_remove("STREAMKEEPER_CONFIG")
        .env("STREAMKEEPER_STATE_DIR", dir.path().join("state"))
        .output()
        .unwrap();
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn velocity(config: &str) -> String {
    with_processor(&format!(
        "processor:\n  keyField: card\n  timeField: ts\n  kind: custom\n  name: velocity-check\n  config: {config}\n"
    ))
}

#[test]
fn a_custom_processor_is_found_in_its_own_binary_and_checks_its_config() {
    let good = velocity("{maxTransactions: 3, windowMinutes: 10}");
    let (ok, stderr) = check_config(&good);
    assert!(!ok, "the stock worker has no velocity-check");
    assert!(
        stderr.contains("no processor `velocity-check`") && stderr.contains("spec.image"),
        "{stderr}"
    );
    let (status, stderr) = worker(velocity_check(), "check-config", &good);
    assert_eq!(status, Some(0), "{stderr}");
    let (status, stdout_or_err) = worker(velocity_check(), "check-config", EXAMPLE);
    assert_eq!(
        status,
        Some(0),
        "the built-in processors stay: {stdout_or_err}"
    );

    let bad = velocity("{maxTransactions: 0, windowMinutes: 10}");
    let (status, stderr) = worker(velocity_check(), "check-config", &bad);
    assert_eq!(status, Some(1));
    assert!(
        stderr.contains(
            "processor `velocity-check` (version 1) refused its config: maxTransactions is 0"
        ),
        "{stderr}"
    );
    // `run` refuses it before any task (no broker is reachable here, none is needed), with
    // EX_CONFIG and the reason as its last line: what the pod's termination message keeps.
    let (status, stderr) = worker(velocity_check(), "run", &bad);
    assert_eq!(
        status,
        Some(streamkeeper_contract::worker_config::CONFIG_REFUSED_EXIT_CODE)
    );
    let last = stderr.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("refusing to start:") && last.contains("maxTransactions is 0"),
        "{stderr}"
    );
}

fn with_processor(processor: &str) -> String {
    let example_processor = "processor:\n  keyField: card\n  kind: count\n";
    assert!(EXAMPLE.contains(example_processor), "the example changed");
    EXAMPLE.replace(example_processor, processor)
}

#[test]
fn check_config_refuses_what_the_operator_refuses_naming_the_field() {
    let (ok, stderr) = check_config(EXAMPLE);
    assert!(ok, "the example is valid: {stderr}");
    let hopping = |advance: &str| {
        with_processor(&format!(
            "processor:\n  keyField: card\n  timeField: ts\n  kind: aggregate\n  valueField: amount\n  \
             window:\n    size: 1h\n    advance: {advance}\n"
        ))
    };
    assert!(
        check_config(&hopping("3600ms")).0,
        "1000 windows per record"
    );
    for (config, field, why) in [
        (hopping("500us"), "processor.window.advance", "at least 1ms"),
        (hopping("1800ms"), "processor.window.advance", "2000 windows"),
        (
            EXAMPLE.replace("commitMaxRecords: 10000", "commitMaxRecords: 10000\n  security:\n    sasl:\n      mechanism: PLAIN\n      usernameFile: /u\n      passwordFile: /p"),
            "kafka.security.sasl.mechanism",
            "TLS",
        ),
    ] {
        let (ok, stderr) = check_config(&config);
        assert!(!ok, "{field} must be refused:\n{config}");
        assert!(stderr.contains(field) && stderr.contains(why), "{stderr}");
    }
}

#[test]
fn a_wasm_processor_is_checked_by_its_settings_without_fetching_its_module() {
    let wasm = |sha256: &str| {
        with_processor(&format!(
            "processor:\n  keyField: card\n  timeField: ts\n  kind: wasm\n  module:\n    key: guests/velocity.wasm\n    sha256: {sha256}\n  \
             config: {{maxTransactions: 3, windowMinutes: 10}}\n  limits:\n    fuelPerRecord: 1000000\n    memoryBytes: 67108864\n"
        ))
    };
    let (ok, stderr) = check_config(&wasm(&"ab".repeat(32)));
    assert!(
        ok,
        "no S3 is reachable here, and check-config needs none: {stderr}"
    );
    let (ok, stderr) = check_config(&wasm("not-a-digest"));
    assert!(!ok);
    assert!(stderr.contains("processor.module.sha256"), "{stderr}");
}
