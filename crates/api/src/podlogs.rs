//! Pod logs: what the API server's `pods/log` and the node agent's
//! `/containerLogs` agree on — upstream's `PodLogOptions` (its query
//! parameters and `ValidatePodLogOptions`), which container a request
//! means (`validateContainer` in the pod registry) and which instance of
//! it is read (the kubelet's `validateContainerLogStatus`).

use k8s_openapi::api::core::v1::{Pod, PodStatus};
use k8s_openapi::jiff::Timestamp;
use serde_json::json;

use crate::status::{Cause, Status, Target};

/// `v1.PodLogOptions` as a request's query carries it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogOptions {
    pub container: Option<String>,
    pub follow: bool,
    pub previous: bool,
    pub timestamps: bool,
    pub since_seconds: Option<i64>,
    pub since_time: Option<Timestamp>,
    pub tail_lines: Option<i64>,
    pub limit_bytes: Option<i64>,
    pub insecure_skip_tls_verify_backend: bool,
}

/// A boolean as Go's `strconv.ParseBool` reads it (empty is false).
fn boolean(key: &str, value: Option<&str>) -> Result<bool, Status> {
    match value.unwrap_or_default() {
        "" | "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(false),
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
        other => Err(Status::bad_request(format!(
            "{key}: strconv.ParseBool: parsing {other:?}: invalid syntax"
        ))),
    }
}

fn integer(key: &str, value: Option<&str>) -> Result<Option<i64>, Status> {
    match value.unwrap_or_default() {
        "" => Ok(None),
        text => text.parse().map(Some).map_err(|_| {
            Status::bad_request(format!(
                "{key}: strconv.ParseInt: parsing {text:?}: invalid syntax"
            ))
        }),
    }
}

impl LogOptions {
    /// The options of a request whose query parameter `key` is `get(key)`.
    pub fn from_query<'a>(get: impl Fn(&str) -> Option<&'a str>) -> Result<Self, Status> {
        let since_time = match get("sinceTime").unwrap_or_default() {
            "" => None,
            text => Some(text.parse::<Timestamp>().map_err(|_| {
                Status::bad_request(format!(
                    "sinceTime: parsing time {text:?} as \"2006-01-02T15:04:05Z07:00\": cannot parse"
                ))
            })?),
        };
        Ok(LogOptions {
            container: get("container")
                .filter(|c| !c.is_empty())
                .map(str::to_string),
            follow: boolean("follow", get("follow"))?,
            previous: boolean("previous", get("previous"))?,
            timestamps: boolean("timestamps", get("timestamps"))?,
            since_seconds: integer("sinceSeconds", get("sinceSeconds"))?,
            since_time,
            tail_lines: integer("tailLines", get("tailLines"))?,
            limit_bytes: integer("limitBytes", get("limitBytes"))?,
            insecure_skip_tls_verify_backend: boolean(
                "insecureSkipTLSVerifyBackend",
                get("insecureSkipTLSVerifyBackend"),
            )?,
        })
    }

    /// Upstream's `ValidatePodLogOptions`: a 422 naming `PodLogOptions`
    /// and the pod.
    pub fn validate(&self, pod: &str) -> Result<(), Status> {
        let mut causes = Vec::new();
        if let Some(tail) = self.tail_lines.filter(|t| *t < 0) {
            causes.push(Cause::invalid(
                "tailLines",
                &json!(tail),
                "must be greater than or equal to 0",
            ));
        }
        if let Some(limit) = self.limit_bytes.filter(|l| *l < 1) {
            causes.push(Cause::invalid(
                "limitBytes",
                &json!(limit),
                "must be greater than 0",
            ));
        }
        let forbidden = self.since_seconds.is_some() && self.since_time.is_some();
        if forbidden {
            causes.push(Cause::forbidden(
                "",
                "at most one of `sinceTime` or `sinceSeconds` may be specified",
            ));
        } else if let Some(since) = self.since_seconds.filter(|s| *s < 1) {
            causes.push(Cause::invalid(
                "sinceSeconds",
                &json!(since),
                "must be greater than 0",
            ));
        }
        if causes.is_empty() {
            return Ok(());
        }
        let target = Target {
            group: "",
            resource: "podlogoptions",
            kind: "PodLogOptions",
        };
        let mut status = Status::invalid(target, pod, causes);
        // Go prints a cause with an empty field as ": <detail>".
        if forbidden && status.causes.len() == 1 {
            status.message = format!(
                "PodLogOptions {pod:?} is invalid: : {}",
                status.causes[0].message
            );
        }
        Err(status)
    }

    /// The query the API server passes on to the node agent (upstream's
    /// `LogLocation`), without the container (it is in the path).
    pub fn agent_query(&self) -> String {
        let mut params = Vec::new();
        if self.follow {
            params.push("follow=true".to_string());
        }
        if let Some(limit) = self.limit_bytes {
            params.push(format!("limitBytes={limit}"));
        }
        if self.previous {
            params.push("previous=true".to_string());
        }
        if let Some(since) = self.since_seconds {
            params.push(format!("sinceSeconds={since}"));
        }
        if let Some(since) = self.since_time {
            params.push(format!(
                "sinceTime={}",
                since.strftime("%Y-%m-%dT%H:%M:%SZ")
            ));
        }
        if let Some(tail) = self.tail_lines {
            params.push(format!("tailLines={tail}"));
        }
        if self.timestamps {
            params.push("timestamps=true".to_string());
        }
        params.join("&")
    }
}

/// Every container name of the pod in upstream's order: init
/// containers, containers, ephemeral containers.
pub fn container_names(pod: &Pod) -> Vec<String> {
    let Some(spec) = pod.spec.as_ref() else {
        return Vec::new();
    };
    let init = spec
        .init_containers
        .iter()
        .flatten()
        .map(|c| c.name.clone());
    let main = spec.containers.iter().map(|c| c.name.clone());
    let ephemeral = spec
        .ephemeral_containers
        .iter()
        .flatten()
        .map(|c| c.name.clone());
    init.chain(main).chain(ephemeral).collect()
}

/// The container a request for `requested` means: the pod's only
/// container when none is named (upstream's API server does not read
/// the `kubectl.kubernetes.io/default-container` annotation — kubectl
/// does, before it asks), or 400 with upstream's message.
pub fn container_for(pod: &Pod, requested: Option<&str>) -> Result<String, Status> {
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let names = container_names(pod);
    match requested {
        Some(container) if names.iter().any(|n| n == container) => Ok(container.to_string()),
        Some(container) => Err(Status::bad_request(format!(
            "container {container} is not valid for pod {name}"
        ))),
        None => {
            let containers = pod.spec.as_ref().map_or(&[][..], |s| &s.containers[..]);
            match containers {
                [only] => Ok(only.name.clone()),
                [] => Err(Status::bad_request(format!(
                    "a container name must be specified for pod {name}"
                ))),
                _ => Err(Status::bad_request(format!(
                    "a container name must be specified for pod {name}, choose one of: [{}]",
                    names.join(" ")
                ))),
            }
        }
    }
}

/// The id (`containerd://…`) of the instance of `container` whose log a
/// request reads — the running one, the last terminated one, or with
/// `previous` the one before — or why there is none, in the kubelet's
/// words (its `/containerLogs` answers them with 400).
pub fn log_container_id(
    pod: &str,
    status: &PodStatus,
    container: &str,
    previous: bool,
) -> Result<String, String> {
    let found = [
        status.container_statuses.as_ref(),
        status.init_container_statuses.as_ref(),
        status.ephemeral_container_statuses.as_ref(),
    ]
    .into_iter()
    .flatten()
    .flatten()
    .find(|s| s.name == container);
    let Some(found) = found else {
        return Err(format!(
            "container {container:?} in pod {pod:?} is not available"
        ));
    };
    let last = found
        .last_state
        .as_ref()
        .and_then(|s| s.terminated.as_ref());
    let last_id = last
        .and_then(|t| t.container_id.as_deref())
        .filter(|id| !id.is_empty());
    let state = found.state.clone().unwrap_or_default();
    let terminated_here = || format!("container {container:?} in pod {pod:?} is terminated");
    if previous {
        return last_id.map(str::to_string).ok_or_else(|| {
            format!("previous terminated container {container:?} in pod {pod:?} not found")
        });
    }
    if state.running.is_some() {
        return Ok(found.container_id.clone().unwrap_or_default());
    }
    if let Some(terminated) = &state.terminated {
        return match terminated
            .container_id
            .as_deref()
            .filter(|id| !id.is_empty())
        {
            Some(id) => Ok(id.to_string()),
            None => last_id.map(str::to_string).ok_or_else(terminated_here),
        };
    }
    if last.is_some() {
        return last_id.map(str::to_string).ok_or_else(terminated_here);
    }
    match state
        .waiting
        .as_ref()
        .map(|w| w.reason.as_deref().unwrap_or_default())
    {
        Some("ErrImagePull") => Err(format!(
            "container {container:?} in pod {pod:?} is waiting to start: image can't be pulled"
        )),
        Some("ImagePullBackOff") => Err(format!(
            "container {container:?} in pod {pod:?} is waiting to start: trying and failing to pull image"
        )),
        Some(reason) => Err(format!(
            "container {container:?} in pod {pod:?} is waiting to start: {reason}"
        )),
        None => Err(format!(
            "container {container:?} in pod {pod:?} is waiting to start - no logs yet"
        )),
    }
}

/// A runtime's container id without its `<runtime>://` scheme.
pub fn runtime_id(id: &str) -> &str {
    id.split_once("://").map_or(id, |(_, id)| id)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(query: &[(&str, &str)]) -> Result<LogOptions, Status> {
        LogOptions::from_query(|k| query.iter().rev().find(|(q, _)| *q == k).map(|(_, v)| *v))
    }

    fn pod(value: serde_json::Value) -> Pod {
        serde_json::from_value(value).expect("a pod")
    }

    #[test]
    fn options_are_read_and_validated_as_upstream() {
        let o = options(&[
            ("follow", "true"),
            ("tailLines", "5"),
            ("timestamps", "1"),
            ("limitBytes", "10"),
            ("container", "c"),
        ])
        .expect("valid");
        assert!(o.follow && o.timestamps && !o.previous);
        assert_eq!((o.tail_lines, o.limit_bytes), (Some(5), Some(10)));
        assert_eq!(o.container.as_deref(), Some("c"));
        assert_eq!(o.validate("p"), Ok(()));
        assert_eq!(
            o.agent_query(),
            "follow=true&limitBytes=10&tailLines=5&timestamps=true"
        );
        assert_eq!(options(&[("follow", "yes")]).expect_err("bad").code, 400);
        assert_eq!(options(&[("tailLines", "x")]).expect_err("bad").code, 400);

        let invalid = |q: &[(&str, &str)]| {
            let status = options(q)
                .expect("parsed")
                .validate("p")
                .expect_err("invalid");
            assert_eq!((status.code, status.reason), (422, "Invalid"));
            status.message
        };
        assert_eq!(
            invalid(&[("tailLines", "-1")]),
            "PodLogOptions \"p\" is invalid: tailLines: Invalid value: -1: must be greater than or equal to 0"
        );
        assert_eq!(
            invalid(&[("limitBytes", "0")]),
            "PodLogOptions \"p\" is invalid: limitBytes: Invalid value: 0: must be greater than 0"
        );
        assert_eq!(
            invalid(&[("sinceSeconds", "0")]),
            "PodLogOptions \"p\" is invalid: sinceSeconds: Invalid value: 0: must be greater than 0"
        );
        assert_eq!(
            invalid(&[("sinceSeconds", "5"), ("sinceTime", "2026-01-01T00:00:00Z")]),
            "PodLogOptions \"p\" is invalid: : Forbidden: at most one of `sinceTime` or `sinceSeconds` may be specified"
        );
        let since = options(&[("sinceTime", "2026-01-01T01:00:00+01:00")]).expect("valid");
        assert_eq!(since.agent_query(), "sinceTime=2026-01-01T00:00:00Z");
    }

    #[test]
    fn the_container_is_the_only_one_or_must_be_named() {
        let two = pod(json!({"metadata": {"name": "p"}, "spec": {
            "initContainers": [{"name": "init"}],
            "containers": [{"name": "a"}, {"name": "b"}],
            "ephemeralContainers": [{"name": "debug"}]}}));
        assert_eq!(
            container_for(&two, None).expect_err("ambiguous").message,
            "a container name must be specified for pod p, choose one of: [init a b debug]"
        );
        assert_eq!(container_for(&two, Some("init")), Ok("init".into()));
        assert_eq!(container_for(&two, Some("debug")), Ok("debug".into()));
        let unknown = container_for(&two, Some("x")).expect_err("unknown");
        assert_eq!(
            (unknown.code, unknown.message.as_str()),
            (400, "container x is not valid for pod p")
        );
        let one = pod(json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "a"}]}}));
        assert_eq!(container_for(&one, None), Ok("a".into()));
    }

    #[test]
    fn the_instance_read_is_the_kubelets() {
        let status =
            |s: serde_json::Value| -> PodStatus { serde_json::from_value(s).expect("status") };
        let running = status(
            json!({"containerStatuses": [{"name": "c", "image": "i", "imageID": "", "ready": true, "restartCount": 1,
            "containerID": "containerd://new",
            "state": {"running": {}},
            "lastState": {"terminated": {"exitCode": 1, "containerID": "containerd://old"}}}]}),
        );
        assert_eq!(
            log_container_id("p", &running, "c", false),
            Ok("containerd://new".into())
        );
        assert_eq!(
            log_container_id("p", &running, "c", true),
            Ok("containerd://old".into())
        );
        assert_eq!(
            log_container_id("p", &running, "x", false),
            Err("container \"x\" in pod \"p\" is not available".into())
        );
        let waiting = status(
            json!({"containerStatuses": [{"name": "c", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"waiting": {"reason": "ContainerCreating"}}}]}),
        );
        assert_eq!(
            log_container_id("p", &waiting, "c", false),
            Err("container \"c\" in pod \"p\" is waiting to start: ContainerCreating".into())
        );
        assert_eq!(
            log_container_id("p", &waiting, "c", true),
            Err("previous terminated container \"c\" in pod \"p\" not found".into())
        );
        let pulling = status(
            json!({"containerStatuses": [{"name": "c", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"waiting": {"reason": "ImagePullBackOff"}}}]}),
        );
        assert_eq!(
            log_container_id("p", &pulling, "c", false),
            Err("container \"c\" in pod \"p\" is waiting to start: trying and failing to pull image".into())
        );
        let crashing = status(
            json!({"containerStatuses": [{"name": "c", "image": "i", "imageID": "", "ready": false, "restartCount": 3,
            "state": {"waiting": {"reason": "CrashLoopBackOff"}},
            "lastState": {"terminated": {"exitCode": 3, "containerID": "containerd://last"}}}]}),
        );
        assert_eq!(
            log_container_id("p", &crashing, "c", false),
            Ok("containerd://last".into())
        );
        assert_eq!(runtime_id("containerd://abc"), "abc");
    }
}
