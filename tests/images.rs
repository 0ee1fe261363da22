//! What can be checked of `Dockerfile` without a Docker engine: the binaries it builds and copies
//! are the workspace's, the dependency layer stubs every target cargo would look for, the
//! entrypoints are the copied binaries, user, state path and config path are the ones the
//! operator's pods use, and every shared library the built binaries load (`ldd`) comes from a
//! Debian package the runtime stage installs.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use streamkeeper::k8s::names;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// One `FROM ... AS name` stage: its instructions with continuation lines joined.
#[derive(Debug)]
struct Stage {
    name: String,
    base: String,
    instructions: Vec<(String, String)>,
}

fn dockerfile() -> Vec<Stage> {
    let text = std::fs::read_to_string(Path::new(ROOT).join("Dockerfile")).unwrap();
    let mut logical = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('#') || (trimmed.is_empty() && current.is_empty()) {
            continue;
        }
        match trimmed.strip_suffix('\\') {
            Some(head) => {
                current.push_str(head);
                current.push(' ');
            }
            None => {
                current.push_str(trimmed);
                logical.push(std::mem::take(&mut current));
            }
        }
    }
    let mut stages: Vec<Stage> = Vec::new();
    for line in logical.into_iter().filter(|l| !l.is_empty()) {
        let (instruction, rest) = line.split_once(' ').unwrap_or((&line, ""));
        let instruction = instruction.to_ascii_uppercase();
        if instruction == "FROM" {
            let words: Vec<&str> = rest.split_whitespace().collect();
            stages.push(Stage {
                base: words[0].to_string(),
                name: words.get(2).unwrap_or(&"").to_string(),
                instructions: Vec::new(),
            });
        } else if let Some(stage) = stages.last_mut() {
            stage
                .instructions
                .push((instruction, rest.trim().to_string()));
        }
    }
    stages
}

fn stage<'a>(stages: &'a [Stage], name: &str) -> &'a Stage {
    stages
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no stage {name}"))
}

fn values<'a>(stage: &'a Stage, instruction: &str) -> Vec<&'a str> {
    stage
        .instructions
        .iter()
        .filter(|(i, _)| i == instruction)
        .map(|(_, v)| v.as_str())
        .collect()
}

/// The JSON-array form of ENTRYPOINT/CMD/VOLUME.
fn exec_form(value: &str) -> Vec<String> {
    serde_json::from_str(value).unwrap_or_else(|e| panic!("{value} is not the exec form: {e}"))
}

/// `cargo metadata` of the workspace: bin target names and every target's source path.
fn workspace_targets() -> (BTreeSet<String>, BTreeSet<String>) {
    let output = Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--no-deps",
            "--format-version",
            "1",
            "--offline",
        ])
        .current_dir(ROOT)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let metadata: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let mut bins = BTreeSet::new();
    let mut paths = BTreeSet::new();
    for package in metadata["packages"].as_array().unwrap() {
        for target in package["targets"].as_array().unwrap() {
            let kinds: Vec<&str> = target["kind"]
                .as_array()
                .unwrap()
                .iter()
                .map(|k| k.as_str().unwrap())
                .collect();
            if kinds.contains(&"bin") {
                bins.insert(target["name"].as_str().unwrap().to_string());
            }
            // Integration tests, examples and benches are found by cargo only when present,
            // except benches a manifest declares by name: those must exist.
            let declared = kinds.iter().any(|k| ["lib", "bin", "bench"].contains(k));
            if declared {
                let path = Path::new(target["src_path"].as_str().unwrap());
                let relative = path.strip_prefix(ROOT).unwrap();
                paths.insert(relative.to_string_lossy().into_owned());
            }
        }
    }
    (bins, paths)
}

/// `--bin X` names in a command line.
fn bin_flags(command: &str) -> BTreeSet<String> {
    let words: Vec<&str> = command.split_whitespace().collect();
    words
        .windows(2)
        .filter(|pair| pair[0] == "--bin")
        .map(|pair| pair[1].to_string())
        .collect()
}

#[test]
fn the_images_copy_the_binaries_the_build_produces_and_start_them() {
    let stages = dockerfile();
    let (bins, target_paths) = workspace_targets();
    let builder = stage(&stages, "builder");
    let runs = values(builder, "RUN");
    let build = runs
        .iter()
        .rfind(|run| run.contains("cargo build --release"))
        .expect("the builder runs cargo build --release");
    let built = bin_flags(build);
    assert!(
        built.is_subset(&bins),
        "{built:?} are not all workspace binaries {bins:?}"
    );
    for bin in &built {
        assert!(
            build.contains(&format!("target/release/{bin}")),
            "{bin} is built but not kept in /out"
        );
    }
    // The dependency layer builds the same binaries from stubs of every declared target.
    let stub_build = runs
        .iter()
        .find(|run| run.contains("cargo build --release"))
        .unwrap();
    assert_eq!(
        bin_flags(stub_build),
        built,
        "the dependency layer builds other binaries"
    );
    let stub_run = runs
        .iter()
        .find(|run| run.contains("stub"))
        .expect("the stub step");
    for path in &target_paths {
        assert!(
            stub_run.contains(path.as_str()),
            "no stub for {path}: cargo would refuse the manifests"
        );
    }

    for (target, binary) in [
        ("operator", "streamkeeper-operator"),
        ("worker", "streamkeeper-worker"),
    ] {
        let image = stage(&stages, target);
        assert!(built.contains(binary), "{binary} is not built");
        let copies = values(image, "COPY");
        let destination = format!("/usr/local/bin/{binary}");
        assert!(
            copies.contains(&format!("--from=builder /out/{binary} {destination}").as_str()),
            "{target} does not copy {binary}: {copies:?}"
        );
        let entrypoint = exec_form(values(image, "ENTRYPOINT")[0]);
        assert_eq!(entrypoint, [destination], "{target}'s entrypoint");
        assert_eq!(image.base, "runtime");
    }
    let worker = stage(&stages, "worker");
    let cmd = exec_form(values(worker, "CMD")[0]);
    assert_eq!(cmd, ["run", "--config", names::CONFIG_FILE]);
    assert_eq!(exec_form(values(worker, "VOLUME")[0]), [names::STATE_MOUNT]);
    let runtime = stage(&stages, "runtime");
    let uid = names::WORKER_UID;
    assert_eq!(values(runtime, "USER"), [format!("{uid}:{uid}").as_str()]);
    assert_eq!(
        values(worker, "USER").last(),
        Some(&format!("{uid}:{uid}").as_str()),
        "the worker ends as {uid}"
    );
    for (target, binary) in [
        ("operator", "streamkeeper-operator"),
        ("worker", "streamkeeper-worker"),
    ] {
        let labels = values(stage(&stages, target), "LABEL").join(" ");
        assert!(
            labels.contains(&format!("org.opencontainers.image.title=\"{binary}\"")),
            "{labels}"
        );
    }
    let labels = values(runtime, "LABEL").join(" ");
    for key in ["version", "revision", "created", "licenses", "source"] {
        assert!(
            labels.contains(&format!("org.opencontainers.image.{key}=")),
            "{key}: {labels}"
        );
    }
}

/// The Debian package that holds `library` on this (bookworm) machine, the builder's release.
fn owning_package(library: &Path) -> String {
    let mut candidates = vec![library.to_path_buf()];
    if let Ok(rest) = library.strip_prefix("/lib") {
        candidates.push(Path::new("/usr/lib").join(rest));
    }
    if let Ok(real) = library.canonicalize() {
        candidates.push(real);
    }
    for candidate in &candidates {
        let output = Command::new("dpkg")
            .arg("-S")
            .arg(candidate)
            .output()
            .unwrap();
        if output.status.success() {
            let line = String::from_utf8_lossy(&output.stdout).into_owned();
            let package = line.split(':').next().unwrap_or_default();
            return package.trim().to_string();
        }
    }
    panic!("no Debian package holds {}", library.display());
}

fn runtime_packages() -> BTreeSet<String> {
    let stages = dockerfile();
    let runtime = stage(&stages, "runtime");
    let arg = values(runtime, "ARG")
        .into_iter()
        .find_map(|arg| arg.strip_prefix("RUNTIME_PACKAGES="))
        .expect("ARG RUNTIME_PACKAGES in the runtime stage");
    arg.trim_matches('"')
        .split_whitespace()
        .map(String::from)
        .collect()
}

fn built_binary(name: &str) -> PathBuf {
    // The worker is a sibling of the operator in the same target dir (cargo builds the whole
    // workspace's binaries before its integration tests).
    let operator = Path::new(env!("CARGO_BIN_EXE_streamkeeper-operator"));
    let path = operator.with_file_name(name);
    assert!(
        path.exists(),
        "{} is missing: run `cargo build --workspace`",
        path.display()
    );
    path
}

#[test]
fn the_runtime_stage_installs_every_library_the_binaries_load() {
    let packages = runtime_packages();
    let mut needed: BTreeMap<String, String> = BTreeMap::new();
    for binary in ["streamkeeper-operator", "streamkeeper-worker"] {
        let output = Command::new("ldd")
            .arg(built_binary(binary))
            .output()
            .unwrap();
        assert!(output.status.success(), "ldd {binary} failed");
        let listing = String::from_utf8_lossy(&output.stdout).into_owned();
        for line in listing.lines() {
            // `libcurl.so.4 => /lib/x86_64-linux-gnu/libcurl.so.4 (0x...)`; the vDSO and the
            // loader (an absolute path with no `=>`) belong to the kernel and libc6.
            let Some((name, rest)) = line.trim().split_once(" => ") else {
                continue;
            };
            let path = rest.split_whitespace().next().unwrap();
            assert!(path.starts_with('/'), "{binary}: {name} not found ({line})");
            needed.insert(name.to_string(), owning_package(Path::new(path)));
        }
    }
    assert!(
        needed.contains_key("libstdc++.so.6"),
        "RocksDB is C++: {needed:?}"
    );
    for (library, package) in &needed {
        // libc6 is Essential: every Debian image has it.
        if package == "libc6" {
            continue;
        }
        assert!(
            packages.contains(package),
            "{library} comes from {package}, which the runtime stage does not install ({packages:?})"
        );
    }
}

#[test]
fn the_default_image_names_are_the_ones_the_publish_script_builds() {
    let output = Command::new(Path::new(ROOT).join("scripts/images.sh"))
        .arg("names")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let names: Vec<String> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(String::from)
        .collect();
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(
        names,
        [
            format!("streamkeeper/operator:{version}"),
            format!("streamkeeper/worker:{version}")
        ]
    );
    let values =
        std::fs::read_to_string(Path::new(ROOT).join("charts/streamkeeper/values.yaml")).unwrap();
    assert!(
        values.contains("repository: streamkeeper/operator"),
        "the chart's default image"
    );
    let chart =
        std::fs::read_to_string(Path::new(ROOT).join("charts/streamkeeper/Chart.yaml")).unwrap();
    assert!(
        chart.contains(&format!("appVersion: \"{version}\"")),
        "the chart's appVersion is the crate version"
    );
    let example =
        std::fs::read_to_string(Path::new(ROOT).join("examples/card-count.yaml")).unwrap();
    assert!(
        example.contains(&format!("image: streamkeeper/worker:{version}")),
        "the example's worker image"
    );
}
