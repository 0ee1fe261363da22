//! The images `scripts/oci-image.sh` builds without a Docker engine (OCI archives for
//! containerd) against `Dockerfile`: the operator, the worker and the example worker build with a
//! processor of its own (`examples/custom-processor`, target `velocity-check`). Each archive is a
//! valid OCI layout (every blob matches its digest, every layer its diff_id), named as
//! `scripts/images.sh names` says, and its config (User, Entrypoint, Cmd, ExposedPorts, Volumes,
//! Labels with the build's ARGs) is the one the Dockerfile's runtime and target stages give; its
//! runtime layer has the runtime stage's packages and nothing else beyond Debian's minimal base;
//! its last layer holds only the binary. The builder reads the Dockerfile itself, so this fails
//! when the builder misreads it. Needs root and Debian's mirror on a cold cache (debootstrap;
//! about 1.5 min), seconds after.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

mod oci_support;

use oci_support::{
    ROOT, arg_defaults, blob, exec_form, extract, label_pairs, layer_files, oci_archive,
    packages_beyond, stages, values,
};
use serde_json::{Map, Value, json};
use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

/// The image targets and the binary each one's stage copies and starts.
const TARGETS: [(&str, &str); 3] = [
    ("operator", "streamkeeper-operator"),
    ("worker", "streamkeeper-worker"),
    ("velocity-check", "velocity-check"),
];

fn publish_names() -> Vec<String> {
    let output = Command::new(Path::new(ROOT).join("scripts/images.sh"))
        .arg("names")
        .args(TARGETS.map(|(target, _)| target))
        .output()
        .unwrap();
    assert!(output.status.success());
    let names = String::from_utf8_lossy(&output.stdout).into_owned();
    names.lines().map(String::from).collect()
}

#[test]
fn the_images_built_without_docker_have_the_dockerfiles_config_and_runtime_packages() {
    let stages = stages(&Path::new(ROOT).join("Dockerfile"));
    let runtime = &stages["runtime"];
    let out = tempfile::tempdir().unwrap();
    let (revision, created) = ("test-revision", "2001-02-03T04:05:06Z");
    // The other packages' binaries are siblings of the operator (cargo builds the workspace's
    // binaries first).
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_streamkeeper-operator"))
        .parent()
        .unwrap();
    for (_, binary) in TARGETS {
        assert!(
            bin_dir.join(binary).exists(),
            "{binary} is missing: run `cargo build --workspace` first"
        );
    }
    // Named: the example is not one of the default targets (the end-to-end scenario loads every
    // default archive into its node).
    let status = Command::new(Path::new(ROOT).join("scripts/oci-image.sh"))
        .arg("build")
        .arg("--bin-dir")
        .arg(bin_dir)
        .arg("--out-dir")
        .arg(out.path())
        .args(TARGETS.map(|(target, _)| target))
        .env("REVISION", revision)
        .env("CREATED", created)
        .status()
        .unwrap();
    assert!(
        status.success(),
        "scripts/oci-image.sh build failed (above)"
    );

    let version = env!("CARGO_PKG_VERSION");
    let mut args = arg_defaults(runtime);
    for (name, value) in [
        ("VERSION", version),
        ("REVISION", revision),
        ("CREATED", created),
    ] {
        args.insert(name.to_string(), value.to_string());
    }
    let mut runtime_layers = BTreeSet::new();
    let names = publish_names();
    assert_eq!(names.len(), TARGETS.len(), "{names:?}");
    for ((target, binary), name) in TARGETS.into_iter().zip(names) {
        let dir = tempfile::tempdir().unwrap();
        let archive = out.path().join(format!("{target}-{version}.oci.tar"));
        let (index, manifest, config) = oci_archive(&archive, dir.path());
        let annotations = &index["manifests"][0]["annotations"];
        assert_eq!(annotations["org.opencontainers.image.ref.name"], *name);
        assert_eq!(
            annotations["io.containerd.image.name"],
            format!("docker.io/{name}")
        );
        assert_eq!(config["created"], created);

        let image = &stages[target];
        let both = |instruction: &str| -> Vec<&str> {
            let mut found = values(runtime, instruction);
            found.extend(values(image, instruction));
            found
        };
        let config = &config["config"];
        let last = |instruction: &str| *values(image, instruction).last().unwrap();
        assert_eq!(config["User"], *both("USER").last().unwrap(), "{target}");
        assert_eq!(
            config["Entrypoint"],
            exec_form(last("ENTRYPOINT")),
            "{target}"
        );
        assert_eq!(config["Cmd"], exec_form(last("CMD")), "{target}");
        let ports: Map<String, Value> = both("EXPOSE")
            .iter()
            .flat_map(|ports| ports.split_whitespace())
            .map(|port| match port.contains('/') {
                true => (port.to_string(), json!({})),
                false => (format!("{port}/tcp"), json!({})),
            })
            .collect();
        assert_eq!(config["ExposedPorts"], Value::Object(ports), "{target}");
        let labels: Map<String, Value> = both("LABEL")
            .iter()
            .flat_map(|line| label_pairs(line, &args))
            .collect();
        assert_eq!(config["Labels"], Value::Object(labels), "{target}");
        let volumes: Map<String, Value> = values(image, "VOLUME")
            .iter()
            .flat_map(|v| exec_form(v).as_array().unwrap().clone())
            .map(|path| (path.as_str().unwrap().to_string(), json!({})))
            .collect();
        let found = config.get("Volumes").cloned().unwrap_or(json!({}));
        assert_eq!(found, Value::Object(volumes), "{target}");

        // The runtime layer comes first (the same in all), the binary alone last.
        let layers = manifest["layers"].as_array().unwrap();
        runtime_layers.insert(layers[0]["digest"].to_string());
        let files = layer_files(&blob(dir.path(), &layers[layers.len() - 1]["digest"]));
        let size = std::fs::metadata(bin_dir.join(binary)).unwrap().len();
        let copied = format!("-rwxr-xr-x 0/0 {size} usr/local/bin/{binary}");
        assert_eq!(files, [copied], "{target}'s last layer");
        let runtime_layer = blob(dir.path(), &layers[0]["digest"]);
        extract(&runtime_layer, out.path(), &["var/lib/dpkg/status"]);
    }
    assert_eq!(runtime_layers.len(), 1, "{runtime_layers:?}");

    // Installed: Debian's minimal base (its Essential and required packages, which debootstrap's
    // minbase installs), the runtime stage's packages and their dependencies, and nothing else.
    let status = std::fs::read_to_string(out.path().join("var/lib/dpkg/status")).unwrap();
    let named: Vec<String> = arg_defaults(runtime)
        .get("RUNTIME_PACKAGES")
        .expect("ARG RUNTIME_PACKAGES in the runtime stage")
        .split_whitespace()
        .map(String::from)
        .collect();
    let extra = packages_beyond(&status, &named);
    assert!(
        extra.is_empty(),
        "installed, but neither Debian's base, named by the runtime stage nor a dependency: {extra:?}"
    );
}
