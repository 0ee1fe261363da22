//! Pure: the status of a pod from what its local containers are doing.

use serde_json::{Value, json};

#[derive(Debug, Clone, PartialEq)]
pub enum ContainerState {
    Waiting {
        reason: String,
        message: String,
    },
    Running {
        started_at: String,
    },
    Terminated {
        exit_code: i32,
        reason: String,
        started_at: String,
        finished_at: String,
        /// The termination message (empty: none).
        message: String,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub struct ContainerView {
    pub name: String,
    pub image: String,
    pub state: ContainerState,
    pub last_termination: Option<ContainerState>,
    pub ready: bool,
    pub restart_count: u32,
    pub pid: Option<u32>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct PodView {
    pub pod_ip: String,
    pub start_time: String,
    pub restart_policy: String,
    pub containers: Vec<ContainerView>,
}

fn state_json(state: &ContainerState) -> Value {
    match state {
        ContainerState::Waiting { reason, message } => {
            json!({ "waiting": { "reason": reason, "message": message } })
        }
        ContainerState::Running { started_at } => json!({ "running": { "startedAt": started_at } }),
        ContainerState::Terminated {
            exit_code,
            reason,
            started_at,
            finished_at,
            message,
        } => {
            let mut terminated = json!({ "exitCode": exit_code, "reason": reason,
                                         "startedAt": started_at, "finishedAt": finished_at });
            if !message.is_empty() {
                terminated["message"] = json!(message);
            }
            json!({ "terminated": terminated })
        }
    }
}

/// What the kubelet keeps of a failed container's log as its termination message under
/// `FallbackToLogsOnError`: the last 80 lines, at most the last 2048 bytes of them.
pub fn log_tail(log: &[u8]) -> String {
    const MAX_BYTES: usize = 2048;
    const MAX_LINES: usize = 80;
    let text = String::from_utf8_lossy(&log[log.len().saturating_sub(MAX_BYTES)..]);
    let lines: Vec<&str> = text.trim_end_matches('\n').lines().collect();
    lines[lines.len().saturating_sub(MAX_LINES)..].join("\n")
}

/// Pod phase: Running while a container runs or will be restarted; Succeeded or Failed once
/// every container terminated for good.
pub fn phase(view: &PodView) -> &'static str {
    let terminated: Vec<i32> = view
        .containers
        .iter()
        .filter_map(|c| match c.state {
            ContainerState::Terminated { exit_code, .. } => Some(exit_code),
            _ => None,
        })
        .collect();
    let any_started = view.containers.iter().any(|c| {
        matches!(c.state, ContainerState::Running { .. })
            || c.restart_count > 0
            || c.last_termination.is_some()
    });
    if terminated.len() == view.containers.len() && !view.containers.is_empty() {
        let restarts = match view.restart_policy.as_str() {
            "Never" => false,
            "OnFailure" => terminated.iter().any(|code| *code != 0),
            _ => true,
        };
        if !restarts {
            return if terminated.iter().all(|code| *code == 0) {
                "Succeeded"
            } else {
                "Failed"
            };
        }
    }
    if any_started || !terminated.is_empty() {
        "Running"
    } else {
        "Pending"
    }
}

/// The `status` to merge-patch onto the pod.
pub fn pod_status(view: &PodView, transition_time: &str) -> Value {
    let ready = !view.containers.is_empty() && view.containers.iter().all(|c| c.ready);
    let condition = |type_: &str, status: bool| {
        json!({ "type": type_, "status": if status { "True" } else { "False" },
                "lastTransitionTime": transition_time, "lastProbeTime": null })
    };
    let containers: Vec<Value> = view
        .containers
        .iter()
        .map(|c| {
            let mut status = json!({
                "name": c.name, "image": c.image, "imageID": format!("local://{}", c.image),
                "ready": c.ready, "restartCount": c.restart_count,
                "started": matches!(c.state, ContainerState::Running { .. }),
                "state": state_json(&c.state),
                "lastState": c.last_termination.as_ref().map_or(json!({}), state_json),
            });
            if let Some(pid) = c.pid {
                status["containerID"] = json!(format!("local://{pid}"));
            }
            status
        })
        .collect();
    json!({
        "phase": phase(view),
        "hostIP": "127.0.0.1",
        "hostIPs": [{ "ip": "127.0.0.1" }],
        "podIP": view.pod_ip,
        "podIPs": [{ "ip": view.pod_ip }],
        "startTime": view.start_time,
        "conditions": [
            condition("PodScheduled", true),
            condition("Initialized", true),
            condition("ContainersReady", ready),
            condition("Ready", ready),
        ],
        "containerStatuses": containers,
    })
}

/// `status` without its conditions' transition times, which change on every pass: what a
/// comparison with the last reported status must ignore.
pub fn strip_times(status: &serde_json::Value) -> serde_json::Value {
    let mut status = status.clone();
    if let Some(conditions) = status["conditions"].as_array_mut() {
        for condition in conditions {
            condition["lastTransitionTime"] = serde_json::Value::Null;
        }
    }
    status
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(states: Vec<ContainerState>, policy: &str) -> PodView {
        PodView {
            pod_ip: "127.0.0.10".into(),
            start_time: "t".into(),
            restart_policy: policy.into(),
            containers: states
                .into_iter()
                .map(|state| ContainerView {
                    name: "c".into(),
                    image: "i".into(),
                    ready: matches!(state, ContainerState::Running { .. }),
                    state,
                    last_termination: None,
                    restart_count: 0,
                    pid: Some(7),
                })
                .collect(),
        }
    }

    fn terminated(code: i32) -> ContainerState {
        ContainerState::Terminated {
            exit_code: code,
            reason: "Completed".into(),
            started_at: "a".into(),
            finished_at: "b".into(),
            message: String::new(),
        }
    }

    #[test]
    fn a_log_tail_is_its_last_80_lines_within_2048_bytes() {
        assert_eq!(
            log_tail(b"first\nrefusing to start: bad\n"),
            "first\nrefusing to start: bad"
        );
        let many: String = (0..100).map(|i| format!("{i}\n")).collect();
        let tail = log_tail(many.as_bytes());
        assert_eq!(tail.lines().count(), 80);
        assert!(tail.starts_with("20\n") && tail.ends_with("99"), "{tail}");
        let long = format!("{}\nlast", "x".repeat(5000));
        assert!(log_tail(long.as_bytes()).len() <= 2048);
        assert!(log_tail(long.as_bytes()).ends_with("\nlast"));
        let message = state_json(&ContainerState::Terminated {
            exit_code: 78,
            reason: "Error".into(),
            started_at: "a".into(),
            finished_at: "b".into(),
            message: "refusing to start: bad".into(),
        });
        assert_eq!(message["terminated"]["message"], "refusing to start: bad");
        assert!(
            state_json(&terminated(1))["terminated"]
                .get("message")
                .is_none()
        );
    }

    #[test]
    fn phases_follow_the_restart_policy() {
        let running = ContainerState::Running {
            started_at: "t".into(),
        };
        assert_eq!(phase(&view(vec![running], "Always")), "Running");
        assert_eq!(phase(&view(vec![terminated(0)], "Never")), "Succeeded");
        assert_eq!(phase(&view(vec![terminated(1)], "Never")), "Failed");
        assert_eq!(phase(&view(vec![terminated(0)], "OnFailure")), "Succeeded");
        assert_eq!(phase(&view(vec![terminated(1)], "Always")), "Running");
        let waiting = ContainerState::Waiting {
            reason: "ContainerCreating".into(),
            message: String::new(),
        };
        assert_eq!(phase(&view(vec![waiting], "Always")), "Pending");
    }

    #[test]
    fn ready_only_when_every_container_is() {
        let running = ContainerState::Running {
            started_at: "t".into(),
        };
        let mut v = view(vec![running.clone(), running], "Always");
        let status = pod_status(&v, "now");
        assert_eq!(status["conditions"][3]["status"], "True");
        v.containers[1].ready = false;
        let status = pod_status(&v, "now");
        assert_eq!(status["conditions"][3]["type"], "Ready");
        assert_eq!(status["conditions"][3]["status"], "False");
        assert_eq!(status["podIP"], "127.0.0.10");
        assert_eq!(status["containerStatuses"][0]["containerID"], "local://7");
    }
}
