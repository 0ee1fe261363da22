//! The layering of the source tree, checked over the `use` paths of every crate.
//!
//! Two rules, each failing with the file and the path that break it:
//!
//! 1. **Nothing points upwards.** A crate's `lib.rs` declares its top-level modules lowest layer
//!    first, one layer per group of declarations (groups are separated by a blank line, which
//!    rustfmt keeps). A module may use a module of a lower layer, or of its own layer; never one
//!    of a higher layer. Between crates: the contract depends on neither the operator nor the
//!    worker, and the worker does not depend on the operator.
//! 2. **No import circle.** At every level of the tree, the sibling modules of one parent, with
//!    an edge from `a` to `b` when code under `a` names `b` (`crate::…::b` or `super::b`), form
//!    no cycle.
//!
//! Why a test of our own rather than a tool: the rules are a few lines of path resolution over
//! `crate::` and `super::` paths, which our code uses for every cross-module reference (it has
//! no glob imports across modules and no `#[path]` outside test modules), and a test runs
//! wherever `cargo test` runs, with nothing to install. Unit-test code (`#[cfg(test)]` items
//! at the end of a file, and the files holding only tests or fixtures) is left out: a test may
//! use anything it needs.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

mod layering_support;

use layering_support::{path_tokens, production_code, read_path};
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// A crate of the workspace: its name as other crates use it and its source root.
struct Crate {
    name: &'static str,
    src: &'static str,
}

const CRATES: [Crate; 4] = [
    Crate {
        name: "streamkeeper",
        src: "src",
    },
    Crate {
        name: "streamkeeper_worker",
        src: "worker/src",
    },
    Crate {
        name: "streamkeeper_contract",
        src: "contract/src",
    },
    Crate {
        name: "streamkeeper_local_node",
        src: "test-tools/local-node/src",
    },
];

/// Which workspace crates each crate may depend on (its `[dependencies]`; test-only crates come
/// in as dev-dependencies, which are not checked).
const ALLOWED_CRATE_DEPENDENCIES: [(&str, &[&str]); 7] = [
    (
        "Cargo.toml",
        &["streamkeeper-contract", "streamkeeper-failpoint"],
    ),
    (
        "worker/Cargo.toml",
        &[
            "streamkeeper-contract",
            "streamkeeper-failpoint",
            "streamkeeper-kafka-topic-id",
        ],
    ),
    ("contract/Cargo.toml", &[]),
    ("kafka-topic-id/Cargo.toml", &[]),
    ("failpoint/Cargo.toml", &[]),
    (
        "test-tools/local-node/Cargo.toml",
        &["streamkeeper-contract"],
    ),
    ("test-tools/test-support/Cargo.toml", &[]),
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// One source file as a module path (`["controller", "judge"]` for `controller/judge/mod.rs`).
struct SourceFile {
    path: PathBuf,
    module: Vec<String>,
    code: String,
}

fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let relative = file.strip_prefix(src).unwrap_or(file);
    let mut parts: Vec<String> = relative
        .iter()
        .map(|part| part.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// Files that hold only unit tests or test fixtures.
fn test_only(file: &Path) -> bool {
    let name = file.file_name().map(|n| n.to_string_lossy().to_string());
    let name = name.unwrap_or_default();
    name == "tests.rs"
        || name.ends_with("_tests.rs")
        || name == "fixtures.rs"
        || name == "test_support.rs"
}

fn source_files(krate: &Crate) -> Vec<SourceFile> {
    let src = root().join(krate.src);
    let mut files = Vec::new();
    let mut dirs = vec![src.clone()];
    while let Some(dir) = dirs.pop() {
        let entries = fs::read_dir(&dir).unwrap_or_else(|e| panic!("read {}: {e}", dir.display()));
        for entry in entries {
            let path = entry.expect("directory entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") && !test_only(&path) {
                let text = fs::read_to_string(&path).expect("source file");
                files.push(SourceFile {
                    module: module_of(&src, &path),
                    code: production_code(&text),
                    path,
                });
            }
        }
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    files
}

/// Every absolute module path a file names: `crate::a::b…` as written, `super::…` resolved
/// against the file's module, and each member of a `{…}` group.
fn named_paths(file: &SourceFile) -> Vec<Vec<String>> {
    let tokens = path_tokens(&file.code);
    let mut paths = Vec::new();
    for path in tokens {
        let mut segments: Vec<&str> = path.split("::").collect();
        let mut base: Vec<String> = match segments.first() {
            Some(&"crate") => {
                segments.remove(0);
                Vec::new()
            }
            Some(&"super") => {
                let mut base = file.module.clone();
                while segments.first() == Some(&"super") {
                    segments.remove(0);
                    base.pop();
                }
                base
            }
            _ => continue,
        };
        for segment in segments {
            if segment.is_empty() || segment == "self" {
                break;
            }
            base.push(segment.to_string());
        }
        paths.push(base);
    }
    paths
}

/// The layers a crate's `lib.rs` declares: each top-level module's layer, lowest 0.
fn layers(krate: &Crate) -> BTreeMap<String, usize> {
    let lib = root().join(krate.src).join("lib.rs");
    let Ok(text) = fs::read_to_string(&lib) else {
        return BTreeMap::new();
    };
    let mut layers = BTreeMap::new();
    let mut layer = 0;
    let mut in_group = false;
    for line in text.lines() {
        let line = line.trim();
        let declared = line
            .strip_prefix("pub mod ")
            .or_else(|| line.strip_prefix("mod "))
            .and_then(|rest| rest.strip_suffix(';'));
        match declared {
            Some(module) => {
                layers.insert(module.to_string(), layer);
                in_group = true;
            }
            None if line.is_empty() && in_group => {
                layer += 1;
                in_group = false;
            }
            None => {}
        }
    }
    layers
}

/// Module `a` (a top-level module of the crate) names module `b` in `file`.
struct Edge {
    from: Vec<String>,
    to: Vec<String>,
    file: PathBuf,
    path: String,
}

fn edges(krate: &Crate) -> Vec<Edge> {
    let files = source_files(krate);
    let reexports = reexports(&files);
    let mut edges = Vec::new();
    for file in &files {
        for path in named_paths(file) {
            let to = through_reexports(path, &reexports);
            edges.push(Edge {
                from: file.module.clone(),
                path: format!("crate::{}", to.join("::")),
                to,
                file: file.path.clone(),
            });
        }
    }
    edges
}

/// `pub use …::Name;` in a module: `(module, Name)` → the absolute path of what it names
/// (`child::…::Name` below the module, or a `crate::`/`super::` path), so that a name used
/// through a re-export counts as a use of the module that defines it.
fn reexports(files: &[SourceFile]) -> BTreeMap<(Vec<String>, String), Vec<String>> {
    let modules: BTreeSet<&Vec<String>> = files.iter().map(|file| &file.module).collect();
    let mut map = BTreeMap::new();
    for file in files {
        for statement in file.code.split(';') {
            let Some(used) = statement.trim().strip_prefix("pub use ") else {
                continue;
            };
            let used = used.trim();
            let absolute = used.starts_with("crate::") || used.starts_with("super::");
            let written = if absolute {
                used.to_string()
            } else {
                format!("self::{used}")
            };
            let chars: Vec<char> = written.chars().collect();
            for path in read_path(&chars, 0).0 {
                let defined = if absolute {
                    let probe = SourceFile {
                        path: file.path.clone(),
                        module: file.module.clone(),
                        code: path.clone(),
                    };
                    named_paths(&probe).into_iter().next().unwrap_or_default()
                } else {
                    let mut defined = file.module.clone();
                    defined.extend(path.split("::").skip(1).map(str::to_string));
                    // A path into another crate (`pub use rdkafka::…`) names no module here.
                    if !modules.contains(&defined[..=file.module.len()].to_vec()) {
                        continue;
                    }
                    defined
                };
                let Some(name) = defined.last().cloned() else {
                    continue;
                };
                if defined.len() > file.module.len() + 1 || absolute {
                    map.insert((file.module.clone(), name), defined);
                }
            }
        }
    }
    map
}

/// `path` with a re-exported name replaced by the absolute path of what it names.
fn through_reexports(
    path: Vec<String>,
    reexports: &BTreeMap<(Vec<String>, String), Vec<String>>,
) -> Vec<String> {
    let mut resolved: Vec<String> = Vec::new();
    for segment in path {
        match reexports.get(&(resolved.clone(), segment.clone())) {
            Some(defined) => resolved = defined.clone(),
            None => resolved.push(segment),
        }
    }
    resolved
}

fn relative(path: &Path) -> String {
    path.strip_prefix(root())
        .unwrap_or(path)
        .display()
        .to_string()
}

#[test]
fn no_module_uses_a_module_of_a_higher_layer() {
    let mut violations = Vec::new();
    for krate in &CRATES {
        let layers = layers(krate);
        for edge in edges(krate) {
            let (Some(from), Some(to)) = (edge.from.first(), edge.to.first()) else {
                continue;
            };
            if from == to {
                continue;
            }
            if let (Some(from_layer), Some(to_layer)) = (layers.get(from), layers.get(to))
                && to_layer > from_layer
            {
                violations.push(format!(
                    "{}: `{from}` (layer {from_layer}) names `{}` of layer {to_layer}",
                    relative(&edge.file),
                    edge.path
                ));
            }
        }
    }
    assert!(
        violations.is_empty(),
        "modules point upwards (see each crate's lib.rs for its layers):\n{}",
        violations.join("\n")
    );
}

#[test]
fn sibling_modules_form_no_import_circle() {
    let mut circles = Vec::new();
    for krate in &CRATES {
        // parent module → sibling → siblings it names (with one file and path as evidence)
        let mut graph: BTreeMap<Vec<String>, BTreeMap<String, BTreeMap<String, String>>> =
            BTreeMap::new();
        for edge in edges(krate) {
            let common = edge
                .from
                .iter()
                .zip(&edge.to)
                .take_while(|(a, b)| a == b)
                .count();
            let (Some(from), Some(to)) = (edge.from.get(common), edge.to.get(common)) else {
                continue;
            };
            let evidence = format!("{} names {}", relative(&edge.file), edge.path);
            graph
                .entry(edge.from[..common].to_vec())
                .or_default()
                .entry(from.clone())
                .or_default()
                .entry(to.clone())
                .or_insert(evidence);
        }
        for (parent, siblings) in &graph {
            if let Some(cycle) = find_cycle(siblings) {
                let at = if parent.is_empty() {
                    krate.name.to_string()
                } else {
                    format!("{}::{}", krate.name, parent.join("::"))
                };
                let steps: Vec<String> = cycle
                    .windows(2)
                    .map(|pair| {
                        format!(
                            "  {} → {}: {}",
                            pair[0], pair[1], siblings[&pair[0]][&pair[1]]
                        )
                    })
                    .collect();
                circles.push(format!("in {at}:\n{}", steps.join("\n")));
            }
        }
    }
    assert!(
        circles.is_empty(),
        "import circles:\n{}",
        circles.join("\n")
    );
}

/// A cycle in `graph` as its nodes, the first repeated at the end; `None` when there is none.
fn find_cycle(graph: &BTreeMap<String, BTreeMap<String, String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeMap<String, String>>,
        stack: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = stack.iter().position(|n| n == node) {
            let mut cycle = stack[at..].to_vec();
            cycle.push(node.to_string());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        stack.push(node.to_string());
        for next in graph
            .get(node)
            .into_iter()
            .flat_map(|targets| targets.keys())
        {
            if let Some(cycle) = visit(next, graph, stack, done) {
                return Some(cycle);
            }
        }
        stack.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    for node in graph.keys() {
        if let Some(cycle) = visit(node, graph, &mut Vec::new(), &mut done) {
            return Some(cycle);
        }
    }
    None
}

#[test]
fn crates_depend_only_downwards() {
    let workspace_crates = [
        "streamkeeper",
        "streamkeeper-contract",
        "streamkeeper-failpoint",
        "streamkeeper-kafka-topic-id",
        "streamkeeper-worker",
        "streamkeeper-local-node",
        "streamkeeper-test-support",
    ];
    let mut violations = Vec::new();
    for (manifest, allowed) in ALLOWED_CRATE_DEPENDENCIES {
        let text = fs::read_to_string(root().join(manifest)).expect("manifest");
        let mut section = String::new();
        for line in text.lines() {
            let line = line.trim();
            if line.starts_with('[') {
                section = line.to_string();
                continue;
            }
            if section != "[dependencies]" {
                continue;
            }
            let name = line.split(['=', '.', ' ']).next().unwrap_or_default();
            if workspace_crates.contains(&name) && !allowed.contains(&name) {
                violations.push(format!("{manifest} depends on {name}"));
            }
        }
    }
    assert!(violations.is_empty(), "{}", violations.join("\n"));
}

#[test]
fn the_checks_see_a_circle_and_an_upward_path() {
    // The checks above must be able to fail: a made-up tree with a circle and an upward use.
    let mut graph: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    graph
        .entry("a".into())
        .or_default()
        .insert("b".into(), String::new());
    graph
        .entry("b".into())
        .or_default()
        .insert("a".into(), String::new());
    assert_eq!(
        find_cycle(&graph),
        Some(vec!["a".to_string(), "b".to_string(), "a".to_string()])
    );
    let file = SourceFile {
        path: PathBuf::from("x/y.rs"),
        module: vec!["controller".into(), "judge".into()],
        code: production_code(
            "use crate::k8s::{names, apply::{ApiError, x}};\nuse super::super::failover::Y;\n// crate::comment\nlet s = \"crate::string\";\n#[cfg(test)]\nuse crate::tests_only;",
        ),
    };
    let named: Vec<String> = named_paths(&file).iter().map(|p| p.join("::")).collect();
    assert_eq!(
        named,
        [
            "k8s::names",
            "k8s::apply::ApiError",
            "k8s::apply::x",
            "failover::Y"
        ]
    );
}
