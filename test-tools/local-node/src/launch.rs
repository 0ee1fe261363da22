//! Pure translation of a Pod into what to run locally: per volume a directory (and the files a
//! ConfigMap or Secret projects into it), per container an executable, args, environment and
//! probes.
//!
//! There is no mount namespace, so the one liberty taken is path rewriting: a volume's mount
//! path appearing in the command, args, environment values or a projected text file is replaced
//! by the volume's local directory. Everything else follows the pod spec.

use k8s_openapi::api::core::v1::{Container, EnvVar, Pod, Probe, Volume};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Data of the ConfigMaps and Secrets of the pod's namespace, by name then key.
#[derive(Debug, Default, Clone)]
pub struct Sources {
    pub config_maps: BTreeMap<String, BTreeMap<String, Vec<u8>>>,
    pub secrets: BTreeMap<String, BTreeMap<String, Vec<u8>>>,
}

/// Facts about the pod that are not in its spec.
#[derive(Debug, Clone)]
pub struct PodPlace<'a> {
    pub pod_ip: &'a str,
    pub node_name: &'a str,
    /// `<root>/pods/<namespace>_<name>_<uid>`: emptyDir and projected volumes, logs.
    pub pod_dir: &'a Path,
    /// `<root>`: claims live in `<root>/volumes/<namespace>/<claim>`.
    pub root: &'a Path,
    pub images: &'a [(String, PathBuf)],
}

#[derive(Debug, Clone, PartialEq)]
pub struct VolumePlan {
    pub name: String,
    pub dir: PathBuf,
    /// Files to write (relative path, content); empty for claims and emptyDirs.
    pub files: Vec<(PathBuf, Vec<u8>)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbePlan {
    pub port: u16,
    pub initial_delay: Duration,
    pub period: Duration,
    pub timeout: Duration,
    pub failure_threshold: u32,
}

#[derive(Debug, Clone, PartialEq)]
pub struct HttpProbe {
    pub timing: ProbePlan,
    pub path: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ContainerPlan {
    pub name: String,
    pub image: String,
    pub program: PathBuf,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub working_dir: Option<PathBuf>,
    pub readiness: Option<HttpProbe>,
    pub liveness: Option<HttpProbe>,
    /// Until it succeeds, the readiness and liveness probes wait.
    pub startup: Option<HttpProbe>,
    /// `terminationMessagePolicy: FallbackToLogsOnError`: a failed run's termination message
    /// is the tail of its log.
    pub message_from_log: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct PodPlan {
    pub volumes: Vec<VolumePlan>,
    pub containers: Vec<ContainerPlan>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LaunchError {
    #[error(
        "container {container}: image {image:?} has no local executable (map it with --image) and no command"
    )]
    UnknownImage { container: String, image: String },
    #[error("container {container}: env {variable}: {why}")]
    Env {
        container: String,
        variable: String,
        why: String,
    },
    #[error("volume {volume}: {why}")]
    Volume { volume: String, why: String },
    #[error("container {container}: mount of unknown volume {volume}")]
    UnknownMount { container: String, volume: String },
    #[error("container {container}: probe: {why}")]
    Probe { container: String, why: String },
}

pub fn plan(pod: &Pod, place: &PodPlace<'_>, sources: &Sources) -> Result<PodPlan, LaunchError> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let spec = pod.spec.clone().unwrap_or_default();
    let volumes = spec
        .volumes
        .iter()
        .flatten()
        .filter_map(|volume| volume_plan(volume, namespace, place, sources).transpose())
        .collect::<Result<Vec<_>, _>>()?;
    let dirs: BTreeMap<&str, &Path> = volumes
        .iter()
        .map(|v| (v.name.as_str(), v.dir.as_path()))
        .collect();
    let containers = spec
        .containers
        .iter()
        .map(|container| container_plan(container, pod, place, sources, &dirs))
        .collect::<Result<Vec<_>, _>>()?;
    // Text files a ConfigMap projects may name mount paths too (a config file naming its state
    // directory): rewrite them with the first container's mounts, which is what they are for.
    let mounts = spec
        .containers
        .first()
        .map(|c| mount_table(c, &dirs))
        .transpose()?
        .unwrap_or_default();
    let volumes = volumes
        .into_iter()
        .map(|mut volume| {
            for (_, content) in &mut volume.files {
                if let Ok(text) = std::str::from_utf8(content) {
                    *content = rewrite_paths(text, &mounts).into_bytes();
                }
            }
            volume
        })
        .collect();
    Ok(PodPlan {
        volumes,
        containers,
    })
}

fn volume_plan(
    volume: &Volume,
    namespace: &str,
    place: &PodPlace<'_>,
    sources: &Sources,
) -> Result<Option<VolumePlan>, LaunchError> {
    let own_dir = place.pod_dir.join("volumes").join(&volume.name);
    let error = |why: String| LaunchError::Volume {
        volume: volume.name.clone(),
        why,
    };
    let projected = |data: Option<&BTreeMap<String, Vec<u8>>>,
                     items: Option<&Vec<k8s_openapi::api::core::v1::KeyToPath>>,
                     what: &str,
                     optional: bool|
     -> Result<Vec<(PathBuf, Vec<u8>)>, LaunchError> {
        let Some(data) = data else {
            return if optional {
                Ok(Vec::new())
            } else {
                Err(error(format!("{what} not found")))
            };
        };
        match items {
            None => Ok(data
                .iter()
                .map(|(k, v)| (PathBuf::from(k), v.clone()))
                .collect()),
            Some(items) => items
                .iter()
                .map(|item| {
                    data.get(&item.key)
                        .map(|v| (PathBuf::from(&item.path), v.clone()))
                        .ok_or_else(|| error(format!("{what} has no key {}", item.key)))
                })
                .collect(),
        }
    };
    if let Some(claim) = &volume.persistent_volume_claim {
        return Ok(Some(VolumePlan {
            name: volume.name.clone(),
            dir: crate::provisioner::claim_dir(place.root, namespace, &claim.claim_name),
            files: Vec::new(),
        }));
    }
    if volume.empty_dir.is_some() {
        return Ok(Some(VolumePlan {
            name: volume.name.clone(),
            dir: own_dir,
            files: Vec::new(),
        }));
    }
    if let Some(source) = &volume.config_map {
        let files = projected(
            sources.config_maps.get(&source.name),
            source.items.as_ref(),
            &format!("configmap {}", source.name),
            source.optional.unwrap_or(false),
        )?;
        return Ok(Some(VolumePlan {
            name: volume.name.clone(),
            dir: own_dir,
            files,
        }));
    }
    if let Some(source) = &volume.secret {
        let name = source.secret_name.clone().unwrap_or_default();
        let files = projected(
            sources.secrets.get(&name),
            source.items.as_ref(),
            &format!("secret {name}"),
            source.optional.unwrap_or(false),
        )?;
        return Ok(Some(VolumePlan {
            name: volume.name.clone(),
            dir: own_dir,
            files,
        }));
    }
    // The service-account token volume the apiserver adds, and other kinds: an empty directory,
    // so a mount of it still resolves.
    tracing::debug!(volume = %volume.name, "volume kind not projected locally; empty directory");
    Ok(Some(VolumePlan {
        name: volume.name.clone(),
        dir: own_dir,
        files: Vec::new(),
    }))
}

/// (mount path, local directory), longest mount path first.
fn mount_table(
    container: &Container,
    dirs: &BTreeMap<&str, &Path>,
) -> Result<Vec<(String, String)>, LaunchError> {
    let mut table = container
        .volume_mounts
        .iter()
        .flatten()
        .map(|mount| {
            let dir = dirs
                .get(mount.name.as_str())
                .ok_or_else(|| LaunchError::UnknownMount {
                    container: container.name.clone(),
                    volume: mount.name.clone(),
                })?;
            let dir = match mount.sub_path.as_deref().filter(|s| !s.is_empty()) {
                Some(sub) => dir.join(sub),
                None => dir.to_path_buf(),
            };
            Ok((
                mount.mount_path.trim_end_matches('/').to_string(),
                dir.display().to_string(),
            ))
        })
        .collect::<Result<Vec<_>, _>>()?;
    table.retain(|(path, _)| !path.is_empty());
    table.sort_by_key(|(path, _)| std::cmp::Reverse(path.len()));
    Ok(table)
}

/// Replaces each mount path that starts a path in `text` (followed by `/`, the end, or a
/// character that cannot continue a file name) with its local directory.
pub fn rewrite_paths(text: &str, mounts: &[(String, String)]) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    'scan: while !rest.is_empty() {
        let at_path_start = out
            .chars()
            .last()
            .is_none_or(|c| !(c.is_alphanumeric() || c == '_' || c == '-' || c == '.' || c == '/'));
        if at_path_start {
            for (mount, dir) in mounts {
                if let Some(after) = rest.strip_prefix(mount.as_str()) {
                    let ends = after
                        .chars()
                        .next()
                        .is_none_or(|c| !(c.is_alphanumeric() || c == '_' || c == '-' || c == '.'));
                    if ends {
                        out.push_str(dir);
                        rest = after;
                        continue 'scan;
                    }
                }
            }
        }
        let mut chars = rest.chars();
        if let Some(c) = chars.next() {
            out.push(c);
        }
        rest = chars.as_str();
    }
    out
}

/// Kubernetes' `$(VAR)` expansion: defined variables are replaced, `$$` escapes, anything else
/// stays as written.
pub fn expand(text: &str, env: &[(String, String)]) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(index) = rest.find('$') {
        out.push_str(&rest[..index]);
        let tail = &rest[index..];
        if let Some(after) = tail.strip_prefix("$$") {
            out.push('$');
            rest = after;
        } else if let Some((name, after)) = tail
            .strip_prefix("$(")
            .and_then(|t| t.split_once(')'))
            .filter(|(name, _)| !name.is_empty())
            && let Some((_, value)) = env.iter().rev().find(|(n, _)| n == name)
        {
            out.push_str(value);
            rest = after;
        } else {
            out.push('$');
            rest = &tail[1..];
        }
    }
    out.push_str(rest);
    out
}

fn field_value(pod: &Pod, place: &PodPlace<'_>, path: &str) -> Option<String> {
    let meta = &pod.metadata;
    let spec = pod.spec.as_ref();
    match path {
        "metadata.name" => meta.name.clone(),
        "metadata.namespace" => meta.namespace.clone(),
        "metadata.uid" => meta.uid.clone(),
        "spec.nodeName" => Some(place.node_name.to_string()),
        "spec.serviceAccountName" => spec.and_then(|s| s.service_account_name.clone()),
        "status.podIP" | "status.podIPs" => Some(place.pod_ip.to_string()),
        "status.hostIP" | "status.hostIPs" => Some("127.0.0.1".to_string()),
        other => {
            let (map, key) = other
                .strip_prefix("metadata.labels['")
                .map(|k| (&meta.labels, k))
                .or_else(|| {
                    other
                        .strip_prefix("metadata.annotations['")
                        .map(|k| (&meta.annotations, k))
                })?;
            let key = key.strip_suffix("']")?;
            Some(map.as_ref()?.get(key).cloned().unwrap_or_default())
        }
    }
}

fn env_value(
    var: &EnvVar,
    pod: &Pod,
    place: &PodPlace<'_>,
    sources: &Sources,
    resolved: &[(String, String)],
    container: &str,
) -> Result<Option<String>, LaunchError> {
    let error = |why: String| LaunchError::Env {
        container: container.to_string(),
        variable: var.name.clone(),
        why,
    };
    if let Some(value) = &var.value {
        return Ok(Some(expand(value, resolved)));
    }
    let Some(from) = &var.value_from else {
        return Ok(Some(String::new()));
    };
    if let Some(field) = &from.field_ref {
        return field_value(pod, place, &field.field_path)
            .map(Some)
            .ok_or_else(|| error(format!("unsupported field {}", field.field_path)));
    }
    let lookup = |maps: &BTreeMap<String, BTreeMap<String, Vec<u8>>>,
                  name: &str,
                  key: &str,
                  optional: bool,
                  what: &str| {
        match maps.get(name).and_then(|m| m.get(key)) {
            Some(bytes) => Ok(Some(String::from_utf8_lossy(bytes).into_owned())),
            None if optional => Ok(None),
            None => Err(error(format!("{what} {name} has no key {key}"))),
        }
    };
    if let Some(r) = &from.config_map_key_ref {
        return lookup(
            &sources.config_maps,
            &r.name,
            &r.key,
            r.optional.unwrap_or(false),
            "configmap",
        );
    }
    if let Some(r) = &from.secret_key_ref {
        return lookup(
            &sources.secrets,
            &r.name,
            &r.key,
            r.optional.unwrap_or(false),
            "secret",
        );
    }
    Err(error(
        "only value, fieldRef, configMapKeyRef and secretKeyRef are supported".into(),
    ))
}

fn probe_plan(
    probe: Option<&Probe>,
    container: &Container,
) -> Result<Option<HttpProbe>, LaunchError> {
    let Some(probe) = probe else {
        return Ok(None);
    };
    let error = |why: &str| LaunchError::Probe {
        container: container.name.clone(),
        why: why.into(),
    };
    let http = probe
        .http_get
        .as_ref()
        .ok_or_else(|| error("only httpGet probes run locally"))?;
    let port = match &http.port {
        IntOrString::Int(port) => *port,
        IntOrString::String(name) => container
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref() == Some(name.as_str()))
            .map(|p| p.container_port)
            .ok_or_else(|| error("named port not declared by the container"))?,
    };
    let seconds =
        |v: Option<i32>, default: u64| Duration::from_secs(v.map_or(default, |s| s.max(0) as u64));
    Ok(Some(HttpProbe {
        timing: ProbePlan {
            port: u16::try_from(port).map_err(|_| error("port out of range"))?,
            initial_delay: seconds(probe.initial_delay_seconds, 0),
            period: seconds(probe.period_seconds, 10).max(Duration::from_secs(1)),
            timeout: seconds(probe.timeout_seconds, 1).max(Duration::from_secs(1)),
            failure_threshold: probe.failure_threshold.map_or(3, |t| t.max(1) as u32),
        },
        path: http.path.clone().unwrap_or_else(|| "/".into()),
    }))
}

fn container_plan(
    container: &Container,
    pod: &Pod,
    place: &PodPlace<'_>,
    sources: &Sources,
    dirs: &BTreeMap<&str, &Path>,
) -> Result<ContainerPlan, LaunchError> {
    let mounts = mount_table(container, dirs)?;
    let image = container.image.clone().unwrap_or_default();
    let mut env: Vec<(String, String)> = Vec::new();
    for source in container.env_from.iter().flatten() {
        let prefix = source.prefix.clone().unwrap_or_default();
        let data = match (&source.config_map_ref, &source.secret_ref) {
            (Some(r), _) => sources.config_maps.get(&r.name),
            (_, Some(r)) => sources.secrets.get(&r.name),
            _ => None,
        };
        for (key, value) in data.into_iter().flatten() {
            env.push((
                format!("{prefix}{key}"),
                String::from_utf8_lossy(value).into_owned(),
            ));
        }
    }
    for var in container.env.iter().flatten() {
        if let Some(value) = env_value(var, pod, place, sources, &env, &container.name)? {
            env.push((var.name.clone(), rewrite_paths(&value, &mounts)));
        }
    }
    let expand_all = |items: &[String]| -> Vec<String> {
        items
            .iter()
            .map(|item| rewrite_paths(&expand(item, &env), &mounts))
            .collect()
    };
    let command = expand_all(container.command.as_deref().unwrap_or_default());
    let args = expand_all(container.args.as_deref().unwrap_or_default());
    let (program, args) = match command.split_first() {
        Some((program, rest)) => (PathBuf::from(program), [rest, args.as_slice()].concat()),
        None => {
            let executable = place
                .images
                .iter()
                .filter(|(prefix, _)| image.starts_with(prefix.as_str()))
                .max_by_key(|(prefix, _)| prefix.len())
                .map(|(_, executable)| executable.clone())
                .ok_or_else(|| LaunchError::UnknownImage {
                    container: container.name.clone(),
                    image: image.clone(),
                })?;
            (executable, args)
        }
    };
    Ok(ContainerPlan {
        name: container.name.clone(),
        image,
        program,
        args,
        working_dir: container
            .working_dir
            .as_deref()
            .map(|dir| PathBuf::from(rewrite_paths(dir, &mounts))),
        env,
        readiness: probe_plan(container.readiness_probe.as_ref(), container)?,
        liveness: probe_plan(container.liveness_probe.as_ref(), container)?,
        startup: probe_plan(container.startup_probe.as_ref(), container)?,
        message_from_log: container.termination_message_policy.as_deref()
            == Some("FallbackToLogsOnError"),
    })
}

#[cfg(test)]
#[path = "launch_tests.rs"]
mod tests;
