//! Support for the tests of the images built without a Docker engine (`tests/oci_images.rs`,
//! `tests/oci_stand_ins.rs`): a Dockerfile read as those tests compare with it, an OCI archive
//! unpacked and verified blob by blob, a layer's file listing, and the packages of a dpkg status.
//! It reads files and runs `tar`, `sh` and `sha256sum`; it builds nothing.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

pub const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// A Dockerfile's stages by name, each as its (INSTRUCTION, arguments) with continuation lines
/// joined, FROM first; the ARGs before the first FROM under the name "" (the same reading as
/// tests/images.rs). Unnamed stages are left out: no test compares them.
pub fn stages(dockerfile: &Path) -> BTreeMap<String, Vec<(String, String)>> {
    let text = std::fs::read_to_string(dockerfile).unwrap();
    let (mut stages, mut name, mut current) = (BTreeMap::new(), Some(String::new()), String::new());
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
        let instruction = instruction.to_ascii_uppercase();
        if instruction == "FROM" {
            name = rest.split_whitespace().nth(2).map(String::from);
        }
        if let Some(name) = &name {
            let entry: &mut Vec<(String, String)> = stages.entry(name.clone()).or_default();
            entry.push((instruction, rest.trim().to_string()));
        }
    }
    stages
}

pub fn values<'a>(instructions: &'a [(String, String)], instruction: &str) -> Vec<&'a str> {
    instructions
        .iter()
        .filter(|(i, _)| i == instruction)
        .map(|(_, v)| v.as_str())
        .collect()
}

/// The `NAME=default` ARGs of a stage (or of the lines before the first FROM), quotes dropped.
pub fn arg_defaults(instructions: &[(String, String)]) -> BTreeMap<String, String> {
    values(instructions, "ARG")
        .iter()
        .filter_map(|arg| arg.split_once('='))
        .map(|(name, value)| (name.to_string(), value.trim_matches('"').to_string()))
        .collect()
}

/// `${NAME}` replaced from `args`; a `$` left over fails the test (an ARG it does not know).
pub fn expand(value: &str, args: &BTreeMap<String, String>) -> String {
    let value = args.iter().fold(value.to_string(), |value, (name, arg)| {
        value.replace(&format!("${{{name}}}"), arg)
    });
    assert!(
        !value.contains('$'),
        "{value}: an ARG this test does not set"
    );
    value
}

/// The words of an instruction's arguments, double quotes grouping and dropped.
pub fn words(line: &str) -> Vec<String> {
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
    words
}

/// `KEY="value" KEY=value` words of a LABEL line, `${ARG}` replaced from `args`.
pub fn label_pairs(line: &str, args: &BTreeMap<String, String>) -> Vec<(String, Value)> {
    words(line)
        .iter()
        .map(|word| word.split_once('=').unwrap())
        .map(|(key, value)| (key.to_string(), Value::String(expand(value, args))))
        .collect()
}

/// ENTRYPOINT/CMD/VOLUME in their JSON form.
pub fn exec_form(value: &str) -> Value {
    serde_json::from_str(value).unwrap()
}

/// `sha256:<hex>` of what `shell` (run with the file as `$0`) prints.
pub fn sha256(shell: &str, file: &Path) -> String {
    let output = Command::new("sh")
        .args(["-c", &format!("{shell} | sha256sum")])
        .arg(file)
        .output()
        .unwrap();
    assert!(output.status.success(), "{shell} {}", file.display());
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    format!("sha256:{}", text.split_whitespace().next().unwrap())
}

pub fn blob(dir: &Path, digest: &Value) -> PathBuf {
    dir.join("blobs/sha256")
        .join(digest.as_str().unwrap().trim_start_matches("sha256:"))
}

pub fn read_json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// An OCI archive unpacked into `dir`, every blob checked against its digest and every layer
/// against its diff_id: (index, manifest, config).
pub fn oci_archive(archive: &Path, dir: &Path) -> (Value, Value, Value) {
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

/// A layer's entries that are not folders, as `mode uid/gid size path`.
pub fn layer_files(layer: &Path) -> Vec<String> {
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
            format!(
                "{} {} {} {}",
                words[0],
                words[1],
                words[2],
                words[5..].join(" ")
            )
        })
        .collect()
}

/// Extracts `paths` of a layer into `into`.
pub fn extract(layer: &Path, into: &Path, paths: &[&str]) {
    let status = Command::new("tar")
        .arg("-xzf")
        .arg(layer)
        .arg("-C")
        .arg(into)
        .args(paths)
        .status()
        .unwrap();
    assert!(status.success(), "{paths:?} are not in {}", layer.display());
}

pub type Packages = BTreeMap<String, BTreeMap<String, String>>;

/// The installed packages of a dpkg status file, each with its fields.
pub fn installed_packages(status: &str) -> Packages {
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
pub fn with_dependencies(packages: &Packages, roots: Vec<String>) -> BTreeSet<String> {
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

/// The installed packages that are neither Debian's minimal base (its Essential and required
/// packages, which debootstrap's minbase installs) nor `named` nor a dependency of either.
/// Fails when a named package is not installed.
pub fn packages_beyond(status: &str, named: &[String]) -> Vec<String> {
    let packages = installed_packages(status);
    for package in named {
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
    roots.extend(named.iter().cloned());
    let expected = with_dependencies(&packages, roots);
    packages
        .keys()
        .filter(|p| !expected.contains(*p))
        .cloned()
        .collect()
}
