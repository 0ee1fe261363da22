//! The stand-in images `tests/e2e/images.sh` builds without a Docker engine for the upstream
//! ones the e2e manifests name, against `tests/e2e/images/stand-ins` and their Dockerfiles: each
//! archive is a valid OCI layout named by its local reference, with the version the table gives
//! (the Dockerfile's default agrees); its config (User, Entrypoint, Cmd, Env, ExposedPorts,
//! Volumes, WorkingDir, Labels) is the Dockerfile's; its first layer has the packages the
//! Dockerfile installs and nothing beyond Debian's minimal base; and each COPY is one layer
//! holding exactly the files it names (from the repository, or for `--from` a build-only stage,
//! from our cache that stands for the stage's /cache), with their modes and the --chown owner.
//! Also: every image the manifests name has a stand-in, and the rewrite replaces them all.
//! Whether the images run as the upstream ones do is `tests/e2e/images.sh check`'s (root).
//! Needs root and Debian's mirror on a cold cache (debootstrap, the JRE), seconds after.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

mod oci_support;

use oci_support::{
    ROOT, arg_defaults, blob, exec_form, expand, extract, label_pairs, layer_files, oci_archive,
    packages_beyond, stages, values, words,
};
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

const CREATED: &str = "2001-02-03T04:05:06Z";
const DEFAULT_PATH: &str = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

struct StandIn {
    upstream: String,
    local: String,
    dockerfile: PathBuf,
    target: String,
}

fn stand_ins() -> Vec<StandIn> {
    let text = std::fs::read_to_string(Path::new(ROOT).join("tests/e2e/images/stand-ins")).unwrap();
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(
            |line| match line.split_whitespace().collect::<Vec<_>>()[..] {
                [upstream, local, dockerfile, target] => StandIn {
                    upstream: upstream.to_string(),
                    local: local.to_string(),
                    dockerfile: Path::new(ROOT).join(dockerfile),
                    target: target.to_string(),
                },
                _ => panic!("{line}: expected upstream, local, Dockerfile and target"),
            },
        )
        .collect()
}

/// Our cache folder by tests/services/lib.sh's rule: what a build-only stage's /cache stands for.
fn cache_dir() -> PathBuf {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    match (var("STREAMKEEPER_CACHE"), var("XDG_CACHE_HOME")) {
        (Some(cache), _) => PathBuf::from(cache),
        (None, Some(xdg)) => Path::new(&xdg).join("streamkeeper"),
        (None, None) => Path::new(&var("HOME").unwrap()).join(".cache/streamkeeper"),
    }
}

/// `-rwxr-xr-x` for a regular file's mode, as tar lists it.
fn mode_string(mode: u32) -> String {
    assert_eq!(
        mode & 0o7000,
        0,
        "a set-id or sticky bit the test does not spell"
    );
    let bits = "rwxrwxrwx".chars().enumerate();
    let spelled: String = bits
        .map(|(i, c)| if mode & (0o400 >> i) != 0 { c } else { '-' })
        .collect();
    format!("-{spelled}")
}

/// Every regular file under `dir`, as paths relative to it, sorted.
fn files_below(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = PathBuf::from(path.file_name().unwrap());
        if path.is_dir() {
            found.extend(files_below(&path).into_iter().map(|p| name.join(p)));
        } else {
            assert!(
                path.is_file(),
                "{}: only regular files are expected",
                path.display()
            );
            found.push(name);
        }
    }
    found.sort();
    found
}

/// A `user:group` of the image as uid/gid, from its passwd and group files in `etc`.
fn numeric_owner(etc: &Path, owner: &str) -> String {
    let lookup = |file: &str, name: &str| -> String {
        let text = std::fs::read_to_string(etc.join(file)).unwrap();
        let line = text.lines().find(|l| l.split(':').next() == Some(name));
        let line = line.unwrap_or_else(|| panic!("no {name} in the image's {file}"));
        line.split(':').nth(2).unwrap().to_string()
    };
    let (user, group) = owner.split_once(':').unwrap_or((owner, owner));
    format!("{}/{}", lookup("passwd", user), lookup("group", group))
}

/// The files one COPY line puts into the image, as `layer_files` lists them.
fn copied_files(line: &str, args: &BTreeMap<String, String>, etc: &Path) -> Vec<String> {
    let words = words(line);
    let flag = |name: &str| words.iter().find_map(|w| w.strip_prefix(name));
    let owner = flag("--chown=").map_or("0/0".to_string(), |o| numeric_owner(etc, o));
    let paths: Vec<String> = words
        .iter()
        .filter(|w| !w.starts_with("--"))
        .map(|w| expand(w, args))
        .collect();
    let (dest, sources) = paths.split_last().unwrap();
    let mut files = Vec::new();
    for source in sources {
        let host = match flag("--from=") {
            Some(_) => cache_dir().join(source.strip_prefix("/cache/").expect("a stage's /cache")),
            None => Path::new(ROOT).join(source),
        };
        let copied: Vec<(PathBuf, String)> = if host.is_dir() {
            let files = files_below(&host).into_iter();
            files
                .map(|p| {
                    (
                        host.join(&p),
                        format!("{}/{}", dest.trim_end_matches('/'), p.display()),
                    )
                })
                .collect()
        } else if dest.ends_with('/') {
            let name = host.file_name().unwrap().to_string_lossy().into_owned();
            vec![(host.clone(), format!("{dest}{name}"))]
        } else {
            vec![(host.clone(), dest.clone())]
        };
        for (host, image) in copied {
            let metadata = std::fs::metadata(&host).unwrap();
            let mode = mode_string(metadata.permissions().mode() & 0o7777);
            let path = image.trim_start_matches('/');
            files.push(format!("{mode} {owner} {} {path}", metadata.len()));
        }
    }
    files.sort_by_key(|line| path_of(line));
    files
}

/// The path of a `layer_files` line (its last word: no copied path has a space).
fn path_of(line: &str) -> String {
    line.rsplit(' ').next().unwrap().to_string()
}

fn last<'a>(instructions: &'a [(String, String)], instruction: &str) -> Option<&'a str> {
    values(instructions, instruction).last().copied()
}

#[test]
fn the_stand_in_images_built_without_docker_have_their_dockerfiles_config_copies_and_packages() {
    let out = tempfile::tempdir().unwrap();
    let status = Command::new(Path::new(ROOT).join("tests/e2e/images.sh"))
        .arg("build")
        .arg("--out-dir")
        .arg(out.path())
        .env("CREATED", CREATED)
        .status()
        .unwrap();
    assert!(status.success(), "tests/e2e/images.sh build failed (above)");

    for stand_in in stand_ins() {
        let StandIn {
            upstream,
            local,
            dockerfile,
            target,
        } = &stand_in;
        let stages = stages(dockerfile);
        let stage = &stages[target];
        assert_eq!(
            values(stage, "FROM"),
            [format!("debian:${{DEBIAN_RELEASE}}-slim AS {target}")],
            "{target}: one stage on Debian slim, as this test reads it"
        );
        // The table's tag is the version: the Dockerfile's own default must be the same one.
        let (_, tag) = upstream.rsplit_once(':').unwrap();
        let global = arg_defaults(&stages[""]);
        let versions: Vec<(&String, &String)> = global
            .iter()
            .filter(|(name, _)| name.ends_with("_VERSION"))
            .collect();
        assert_eq!(
            versions.len(),
            1,
            "{target}: one <NAME>_VERSION ARG: {versions:?}"
        );
        assert_eq!(
            versions[0].1, tag,
            "{target}: the Dockerfile's default version"
        );
        let args = global
            .clone()
            .into_iter()
            .chain(arg_defaults(stage))
            .collect();

        let dir = tempfile::tempdir().unwrap();
        let archive = out.path().join(format!("{target}-{tag}.oci.tar"));
        let (index, manifest, config) = oci_archive(&archive, dir.path());
        let annotations = &index["manifests"][0]["annotations"];
        assert_eq!(annotations["org.opencontainers.image.ref.name"], **local);
        // A local reference names its registry (streamkeeper.test): containerd keeps it as is.
        assert_eq!(annotations["io.containerd.image.name"], **local);
        assert_eq!(config["created"], CREATED);

        let config = &config["config"];
        let exec = |i: &str| last(stage, i).map_or(Value::Null, exec_form);
        let or_null = |key: &str| config.get(key).cloned().unwrap_or(Value::Null);
        assert_eq!(
            or_null("User"),
            last(stage, "USER").map_or(Value::Null, |u| json!(u))
        );
        assert_eq!(or_null("Entrypoint"), exec("ENTRYPOINT"), "{target}");
        assert_eq!(or_null("Cmd"), exec("CMD"), "{target}");
        assert_eq!(
            or_null("WorkingDir"),
            last(stage, "WORKDIR").map_or(Value::Null, |w| json!(w))
        );
        assert!(
            values(stage, "ENV").is_empty(),
            "{target}: an ENV, which this test does not compare"
        );
        assert_eq!(config["Env"], json!([DEFAULT_PATH]), "{target}");
        let ports: Map<String, Value> = values(stage, "EXPOSE")
            .iter()
            .flat_map(|ports| ports.split_whitespace())
            .map(|port| (format!("{port}/tcp"), json!({})))
            .collect();
        assert_eq!(config["ExposedPorts"], Value::Object(ports), "{target}");
        let volumes: Map<String, Value> = values(stage, "VOLUME")
            .iter()
            .flat_map(|v| match v.starts_with('[') {
                true => exec_form(v).as_array().unwrap().clone(),
                false => v.split_whitespace().map(|p| json!(p)).collect(),
            })
            .map(|path| (path.as_str().unwrap().to_string(), json!({})))
            .collect();
        assert_eq!(config["Volumes"], Value::Object(volumes), "{target}");
        let labels: Map<String, Value> = values(stage, "LABEL")
            .iter()
            .flat_map(|line| label_pairs(line, &args))
            .collect();
        assert_eq!(config["Labels"], Value::Object(labels), "{target}");

        // The base (debootstrap and the stage's RUN), then one layer per COPY, in order.
        let layers = manifest["layers"].as_array().unwrap();
        let copies = values(stage, "COPY");
        assert_eq!(
            layers.len(),
            1 + copies.len(),
            "{target}: base and one layer per COPY"
        );
        let base = blob(dir.path(), &layers[0]["digest"]);
        let files = ["etc/passwd", "etc/group", "var/lib/dpkg/status"];
        extract(&base, dir.path(), &files);
        for (copy, layer) in copies.iter().zip(&layers[1..]) {
            let mut found = layer_files(&blob(dir.path(), &layer["digest"]));
            found.sort_by_key(|line| path_of(line));
            let expected = copied_files(copy, &args, &dir.path().join("etc"));
            assert!(!expected.is_empty(), "COPY {copy} copies nothing");
            assert_eq!(found, expected, "{target}: the layer of COPY {copy}");
        }
        let status = std::fs::read_to_string(dir.path().join("var/lib/dpkg/status")).unwrap();
        let named: Vec<String> = arg_defaults(stage)
            .get("RUNTIME_PACKAGES")
            .map(|p| p.split_whitespace().map(String::from).collect())
            .unwrap_or_default();
        let extra = packages_beyond(&status, &named);
        assert!(
            extra.is_empty(),
            "{target}: installed beyond Debian's base and {named:?}: {extra:?}"
        );
    }
}

fn image_lines(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|line| line.trim().trim_start_matches("- ").strip_prefix("image:"))
        .map(|image| image.trim().trim_matches('"').to_string())
        .collect()
}

#[test]
fn every_image_the_e2e_manifests_name_has_a_stand_in_and_the_rewrite_replaces_them_all() {
    let manifests: Vec<PathBuf> = std::fs::read_dir(Path::new(ROOT).join("tests/e2e/manifests"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "yaml"))
        .collect();
    let original: String = manifests
        .iter()
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect();
    let stand_ins = stand_ins();
    let upstream: BTreeMap<&str, &str> = stand_ins
        .iter()
        .map(|s| (s.upstream.as_str(), s.local.as_str()))
        .collect();
    let named = image_lines(&original);
    for image in &named {
        assert!(
            upstream.contains_key(image.as_str()),
            "{image} has no stand-in"
        );
    }
    for stand_in in upstream.keys() {
        assert!(
            named.iter().any(|n| n == stand_in),
            "no manifest names {stand_in}"
        );
    }

    let output = Command::new(Path::new(ROOT).join("tests/e2e/images.sh"))
        .arg("rewrite")
        .args(&manifests)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let rewritten = String::from_utf8(output.stdout).unwrap();
    let expected: Vec<String> = named
        .iter()
        .map(|n| upstream[n.as_str()].to_string())
        .collect();
    assert_eq!(image_lines(&rewritten), expected);
    let unchanged = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|l| !l.contains("image:"))
            .map(String::from)
            .collect()
    };
    assert_eq!(
        unchanged(&rewritten),
        unchanged(&original),
        "only the image lines change"
    );
}
