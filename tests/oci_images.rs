//! The images `scripts/oci-image.sh` builds without a Docker engine (OCI archives for
//! containerd) against `Dockerfile`: each archive is a valid OCI layout (every blob matches its
//! digest, every layer its diff_id), named as `scripts/images.sh names` says, and its config
//! (User, Entrypoint, Cmd, ExposedPorts, Volumes, Labels with the build's ARGs) is the one the
//! Dockerfile's runtime and target stages give; its runtime layer has the runtime stage's
//! packages and nothing else beyond Debian's minimal base; its last layer holds only the binary.
//! The builder reads the Dockerfile itself, so this fails when the builder misreads it.
//! Needs root and Debian's mirror on a cold cache (debootstrap; about 1.5 min), seconds after.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The Dockerfile's stages by name, each as its (INSTRUCTION, arguments) with continuation
/// lines joined (the same reading as tests/images.rs).
fn stages() -> BTreeMap<String, Vec<(String, String)>> {
    let text = std::fs::read_to_string(Path::new(ROOT).join("Dockerfile")).unwrap();
    let (mut stages, mut name, mut current) = (BTreeMap::new(), String::new(), String::new());
    for line in text.lines().map(str::trim) {
        if line.starts_with('#') || (line.is_empty() && current.is_empty()) {
            continue;
        }
        if let Some(head) = line.strip_suffix('\\') {
            current.push_str(head);
            current.push(' ');
            continue;
        }
        current.push_str(line);
        let logical = std::mem::take(&mut current);
        let (instruction, rest) = logical.split_once(' ').unwrap_or((&logical, ""));
        if instruction.eq_ignore_ascii_case("FROM") {
            name = rest
                .split_whitespace()
                .nth(2)
                .unwrap_or_default()
                .to_string();
        } else if !name.is_empty() {
            let entry: &mut Vec<(String, String)> = stages.entry(name.clone()).or_default();
            entry.push((instruction.to_ascii_uppercase(), rest.trim().to_string()));
        }
    }
    stages
}

fn values<'a>(instructions: &'a [(String, String)], instruction: &str) -> Vec<&'a str> {
    instructions
        .iter()
        .filter(|(i, _)| i == instruction)
        .map(|(_, v)| v.as_str())
        .collect()
}

/// `sha256:<hex>` of what `shell` (run with the file as `$0`) prints.
fn sha256(shell: &str, file: &Path) -> String {
    let output = Command::new("sh")
        .args(["-c", &format!("{shell} | sha256sum")])
        .arg(file)
        .output()
        .unwrap();
    assert!(output.status.success(), "{shell} {}", file.display());
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    format!("sha256:{}", text.split_whitespace().next().unwrap())
}

fn blob(dir: &Path, digest: &Value) -> PathBuf {
    dir.join("blobs/sha256")
        .join(digest.as_str().unwrap().trim_start_matches("sha256:"))
}

fn read_json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// An OCI archive unpacked into `dir`, every blob checked against its digest and every layer
/// against its diff_id: (index, manifest, config).
fn oci_archive(archive: &Path, dir: &Path) -> (Value, Value, Value) {
    let status = Command::new("tar")
        .arg("-xf")
        .arg(archive)
        .arg("-C")
        .arg(dir)
        .status()
        .unwrap();
    assert!(status.success(), "tar -xf {}", archive.display());
    for entry in std::fs::read_dir(dir.join("blobs/sha256")).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        assert_eq!(sha256("cat \"$0\"", &path), format!("sha256:{name}"));
    }
    assert_eq!(
        read_json(&dir.join("oci-layout"))["imageLayoutVersion"],
        "1.0.0"
    );
    let index = read_json(&dir.join("index.json"));
    let manifest = read_json(&blob(dir, &index["manifests"][0]["digest"]));
    let config = read_json(&blob(dir, &manifest["config"]["digest"]));
    let layers = manifest["layers"].as_array().unwrap();
    let diff_ids = config["rootfs"]["diff_ids"].as_array().unwrap();
    assert_eq!(layers.len(), diff_ids.len());
    for (layer, diff_id) in layers.iter().zip(diff_ids) {
        assert_eq!(
            layer["mediaType"],
            "application/vnd.oci.image.layer.v1.tar+gzip"
        );
        let uncompressed = sha256("gzip -dc \"$0\"", &blob(dir, &layer["digest"]));
        assert_eq!(uncompressed, diff_id.as_str().unwrap());
    }
    (index, manifest, config)
}

/// `KEY="value" KEY=value` words of a LABEL line, `${ARG}` replaced from `args`.
fn label_pairs(line: &str, args: &BTreeMap<String, String>) -> Vec<(String, Value)> {
    let (mut words, mut word, mut quoted) = (Vec::new(), String::new(), false);
    for c in line.chars().chain([' ']) {
        match c {
            '"' => quoted = !quoted,
            c if c.is_whitespace() && !quoted => {
                if !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                }
            }
            c => word.push(c),
        }
    }
    let expand = |value: &str| {
        let value = args.iter().fold(value.to_string(), |value, (name, arg)| {
            value.replace(&format!("${{{name}}}"), arg)
        });
        assert!(
            !value.contains('$'),
            "{value}: an ARG this test does not set"
        );
        Value::String(value)
    };
    words
        .iter()
        .map(|word| word.split_once('=').unwrap())
        .map(|(key, value)| (key.to_string(), expand(value)))
        .collect()
}

type Packages = BTreeMap<String, BTreeMap<String, String>>;

/// The installed packages of a dpkg status file, each with its fields.
fn installed_packages(status: &str) -> Packages {
    let mut packages = BTreeMap::new();
    for stanza in status.split("\n\n") {
        let fields: BTreeMap<String, String> = stanza
            .lines()
            .filter(|line| !line.starts_with(' '))
            .filter_map(|line| line.split_once(':'))
            .map(|(key, value)| (key.to_string(), value.trim().to_string()))
            .collect();
        if fields
            .get("Status")
            .is_some_and(|s| s == "install ok installed")
        {
            packages.insert(fields["Package"].clone(), fields);
        }
    }
    packages
}

/// `roots` and all they depend on (Depends, Pre-Depends; virtual packages through Provides).
fn with_dependencies(packages: &Packages, roots: Vec<String>) -> BTreeSet<String> {
    let names = |list: Option<&String>| -> Vec<String> {
        let list = list.map(String::as_str).unwrap_or_default();
        list.split([',', '|'])
            .filter_map(|dependency| dependency.split_whitespace().next())
            .map(|name| name.split(':').next().unwrap().to_string())
            .collect()
    };
    let mut providers: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (name, fields) in packages {
        for provided in names(fields.get("Provides")) {
            providers.entry(provided).or_default().push(name.clone());
        }
    }
    let (mut found, mut todo) = (BTreeSet::new(), roots);
    while let Some(name) = todo.pop() {
        let real = packages.contains_key(&name).then(|| vec![name.clone()]);
        let candidates = real.or_else(|| providers.get(&name).cloned());
        for package in candidates.unwrap_or_default() {
            if found.insert(package.clone()) {
                todo.extend(names(packages[&package].get("Depends")));
                todo.extend(names(packages[&package].get("Pre-Depends")));
            }
        }
    }
    found
}

/// The last layer's entries that are not folders, as `mode owner path`.
fn binary_layer_files(layer: &Path) -> Vec<String> {
    let listing = Command::new("tar")
        .arg("--numeric-owner")
        .arg("-tvzf")
        .arg(layer)
        .output()
        .unwrap();
    assert!(listing.status.success(), "tar -tvzf {}", layer.display());
    String::from_utf8_lossy(&listing.stdout)
        .lines()
        .filter(|line| !line.starts_with('d'))
        .map(|line| {
            let words: Vec<&str> = line.split_whitespace().collect();
            format!("{} {} {}", words[0], words[1], words[5..].join(" "))
        })
        .collect()
}

fn publish_names() -> Vec<String> {
    let output = Command::new(Path::new(ROOT).join("scripts/images.sh"))
        .arg("names")
        .output()
        .unwrap();
    assert!(output.status.success());
    let names = String::from_utf8_lossy(&output.stdout).into_owned();
    names.lines().map(String::from).collect()
}

#[test]
fn the_images_built_without_docker_have_the_dockerfiles_config_and_runtime_packages() {
    let stages = stages();
    let runtime = &stages["runtime"];
    let out = tempfile::tempdir().unwrap();
    let (revision, created) = ("test-revision", "2001-02-03T04:05:06Z");
    // The worker is a sibling of the operator (cargo builds the workspace's binaries first).
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_streamkeeper-operator"))
        .parent()
        .unwrap();
    assert!(
        bin_dir.join("streamkeeper-worker").exists(),
        "run `cargo build --workspace` first"
    );
    let status = Command::new(Path::new(ROOT).join("scripts/oci-image.sh"))
        .arg("build")
        .arg("--bin-dir")
        .arg(bin_dir)
        .arg("--out-dir")
        .arg(out.path())
        .env("REVISION", revision)
        .env("CREATED", created)
        .status()
        .unwrap();
    assert!(
        status.success(),
        "scripts/oci-image.sh build failed (above)"
    );

    let version = env!("CARGO_PKG_VERSION");
    let mut args: BTreeMap<String, String> = values(runtime, "ARG")
        .iter()
        .filter_map(|arg| arg.split_once('='))
        .map(|(name, value)| (name.to_string(), value.trim_matches('"').to_string()))
        .collect();
    for (name, value) in [
        ("VERSION", version),
        ("REVISION", revision),
        ("CREATED", created),
    ] {
        args.insert(name.to_string(), value.to_string());
    }
    let exec_form = |value: &str| -> Value { serde_json::from_str(value).unwrap() };
    let mut runtime_layers = BTreeSet::new();
    let targets = [
        ("operator", "streamkeeper-operator"),
        ("worker", "streamkeeper-worker"),
    ];
    for ((target, binary), name) in targets.into_iter().zip(publish_names()) {
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

        // The runtime layer comes first (the same in both), the binary alone last.
        let layers = manifest["layers"].as_array().unwrap();
        runtime_layers.insert(layers[0]["digest"].to_string());
        let files = binary_layer_files(&blob(dir.path(), &layers[layers.len() - 1]["digest"]));
        let copied = format!("-rwxr-xr-x 0/0 usr/local/bin/{binary}");
        assert_eq!(files, [copied], "{target}'s last layer");
        let status = Command::new("tar")
            .arg("-xzf")
            .arg(blob(dir.path(), &layers[0]["digest"]))
            .arg("-C")
            .arg(out.path())
            .arg("var/lib/dpkg/status")
            .status()
            .unwrap();
        assert!(status.success(), "the runtime layer has no dpkg status");
    }
    assert_eq!(runtime_layers.len(), 1, "{runtime_layers:?}");

    // Installed: Debian's minimal base (its Essential and required packages, which debootstrap's
    // minbase installs), the runtime stage's packages and their dependencies, and nothing else.
    let status = std::fs::read_to_string(out.path().join("var/lib/dpkg/status")).unwrap();
    let packages = installed_packages(&status);
    let named: Vec<String> = values(runtime, "ARG")
        .iter()
        .find_map(|arg| arg.strip_prefix("RUNTIME_PACKAGES="))
        .expect("ARG RUNTIME_PACKAGES in the runtime stage")
        .trim_matches('"')
        .split_whitespace()
        .map(String::from)
        .collect();
    for package in &named {
        assert!(packages.contains_key(package), "{package} is not installed");
    }
    let mut roots: Vec<String> = packages
        .iter()
        .filter(|(_, fields)| {
            fields.get("Essential").is_some_and(|e| e == "yes")
                || fields.get("Priority").is_some_and(|p| p == "required")
        })
        .map(|(name, _)| name.clone())
        .collect();
    roots.extend(named);
    let expected = with_dependencies(&packages, roots);
    let extra: Vec<&String> = packages.keys().filter(|p| !expected.contains(*p)).collect();
    assert!(
        extra.is_empty(),
        "installed, but neither Debian's base, named by the runtime stage nor a dependency: {extra:?}"
    );
}
