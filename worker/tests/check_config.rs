//! `streamkeeper-worker check-config` applies the contract's rules, the same the operator checks a
//! spec with: a config the operator would never render is refused here with the field named, and
//! never reaches a task that would loop on it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::process::Command;

const EXAMPLE: &str = include_str!("../../examples/worker-standalone.yaml");

/// Runs `check-config` on `config`: the exit status and what it printed on stderr.
fn check_config(config: &str) -> (bool, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("worker.yaml");
    std::fs::write(&path, config).unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_streamkeeper-worker"))
        .arg("check-config")
        .arg("--config")
        .arg(&path)
        .env_remove("STREAMKEEPER_CONFIG")
        .output()
        .unwrap();
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
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
