//! The `apply` scenario: what strategic merge patch and server-side apply
//! cost the server per object (the functions the handlers call, timed in
//! process), the same requests end to end over HTTPS, and `kubectl apply`
//! of a 1,000-object file against the release `rudder server`.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::Context;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::discovery::ApiResource;
use rudder_api::managed::{self, Ignore, Scope};
use rudder_api::patch::strategic;
use rudder_api::structure::Types;
use serde_json::{Value, json};

use crate::Options;
use crate::api::{Server, free_port, rudder_binary};
use crate::report::{Metric, Report};
use crate::store::percentile;

const KUBECTL: &str = "/usr/local/lib/rudder/clients/kubectl.1.35";

/// A typical Deployment: three containers with ports, env, resources,
/// probes and mounts, volumes, a rolling-update strategy.
fn deployment(image_tag: &str, replicas: u32) -> Value {
    let container = |name: &str, port: u32| {
        json!({
            "name": name,
            "image": format!("registry.local/{name}:{image_tag}"),
            "ports": [{"name": "http", "containerPort": port}, {"name": "metrics", "containerPort": port + 1000}],
            "env": [{"name": "MODE", "value": "production"}, {"name": "LOG_LEVEL", "value": "info"}, {"name": "NAME", "value": name}],
            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"cpu": "500m", "memory": "256Mi"}},
            "readinessProbe": {"httpGet": {"path": "/healthz", "port": port}, "periodSeconds": 5},
            "volumeMounts": [{"name": "config", "mountPath": format!("/etc/{name}")}]
        })
    };
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web", "tier": "front"}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "web"}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "template": {
                "metadata": {"labels": {"app": "web", "tier": "front"}},
                "spec": {
                    "containers": [container("web", 8080), container("sidecar", 8081), container("agent", 8082)],
                    "volumes": [{"name": "config", "configMap": {"name": "web-config"}}]
                }
            }
        }
    })
}

/// The patch `kubectl apply` sends when one container's image changes:
/// the changed field with `$setElementOrder` for the lists around it.
fn kubectl_style_patch(tag: &str) -> Value {
    json!({
        "spec": {"template": {"spec": {
            "$setElementOrder/containers": [{"name": "web"}, {"name": "sidecar"}, {"name": "agent"}],
            "containers": [{"name": "web", "image": format!("registry.local/web:{tag}"),
                            "$setElementOrder/env": [{"name": "MODE"}, {"name": "LOG_LEVEL"}, {"name": "NAME"}],
                            "env": [{"name": "LOG_LEVEL", "value": "debug"}]}]
        }}}
    })
}

/// Mean microseconds per call of `f` over `n` calls; every call must
/// succeed (a fast failure is no speed-up).
fn time_us<F: FnMut(usize) -> anyhow::Result<()>>(n: usize, mut f: F) -> anyhow::Result<f64> {
    for i in 0..n.min(100) {
        f(i)?;
    }
    let start = Instant::now();
    for i in 0..n {
        f(i)?;
    }
    Ok(start.elapsed().as_secs_f64() * 1e6 / n as f64)
}

fn in_process(iterations: usize) -> anyhow::Result<(f64, f64)> {
    let types = Types::builtin();
    let root = types.root("io.k8s.api.apps.v1.Deployment");
    let original = deployment("1", 3);
    let patches: Vec<Value> = (0..8)
        .map(|i| kubectl_style_patch(&i.to_string()))
        .collect();
    // What each patch must produce, checked before timing: its image and
    // env change made, nothing else touched.
    let mut expected_smp = Vec::new();
    for (i, patch) in patches.iter().enumerate() {
        let out = strategic::apply(types, &root, &original, patch)
            .map_err(|e| anyhow::anyhow!("patch {i} failed: {}", e.message))?;
        let web = &out["spec"]["template"]["spec"]["containers"][0];
        anyhow::ensure!(
            web["image"] == json!(format!("registry.local/web:{i}"))
                && web["env"][1] == json!({"name": "LOG_LEVEL", "value": "debug"})
                && web["env"].as_array().map(Vec::len) == Some(3)
                && out["spec"]["template"]["spec"]["containers"][1]
                    == original["spec"]["template"]["spec"]["containers"][1],
            "patch {i} made the wrong object"
        );
        expected_smp.push(out);
    }
    // Timed: each call must succeed; what it made is checked after.
    let mut made = Vec::with_capacity(iterations + 100);
    let smp_us = time_us(iterations, |i| {
        let k = i % patches.len();
        let out = strategic::apply(types, &root, &original, &patches[k])
            .map_err(|e| anyhow::anyhow!("patch failed: {}", e.message))?;
        made.push(out);
        Ok(())
    })?;
    for (i, out) in made.iter().enumerate() {
        let k = (if i < iterations.min(100) {
            i
        } else {
            i - iterations.min(100)
        }) % patches.len();
        anyhow::ensure!(*out == expected_smp[k], "patch {k} made another object");
    }

    let scope = Scope {
        types,
        root: root.clone(),
        api_version: "apps/v1",
        subresource: "",
        ignore: Ignore::Status,
        now: "2026-11-30T00:00:00Z",
    };
    // Steady state: the live object was applied before by the same manager
    // and touched by a controller (replicas via an update).
    let first = managed::apply(&scope, None, &deployment("1", 3), "kubectl", false)
        .map_err(|c| anyhow::anyhow!("first apply conflicts: {}", c.len()))?;
    let mut live = first.clone();
    live["spec"]["replicas"] = json!(3);
    live["status"] = json!({"replicas": 3, "readyReplicas": 3});
    managed::update(&scope, Some(&first), &mut live, "kube-controller-manager");
    let configs: Vec<Value> = (0..8).map(|i| deployment(&i.to_string(), 3)).collect();
    let mut expected_ssa = Vec::new();
    for (i, config) in configs.iter().enumerate() {
        let out = managed::apply(&scope, Some(&live), config, "kubectl", false)
            .map_err(|c| anyhow::anyhow!("apply {i} conflicts: {}", c.len()))?;
        let managers: Vec<&str> = out["metadata"]["managedFields"]
            .as_array()
            .map(|m| m.iter().filter_map(|e| e["manager"].as_str()).collect())
            .unwrap_or_default();
        anyhow::ensure!(
            out["spec"]["template"]["spec"]["containers"][0]["image"]
                == json!(format!("registry.local/web:{i}"))
                && out["status"] == live["status"],
            "apply {i} made the wrong object"
        );
        anyhow::ensure!(
            managers.contains(&"kubectl"),
            "apply {i} did not record its manager: {managers:?}"
        );
        expected_ssa.push(out);
    }
    let mut made = Vec::with_capacity(iterations + 100);
    let ssa_us = time_us(iterations, |i| {
        let k = i % configs.len();
        let out = managed::apply(&scope, Some(&live), &configs[k], "kubectl", false)
            .map_err(|c| anyhow::anyhow!("apply conflicts: {}", c.len()))?;
        made.push(out);
        Ok(())
    })?;
    for (i, out) in made.iter().enumerate() {
        let k = (if i < iterations.min(100) {
            i
        } else {
            i - iterations.min(100)
        }) % configs.len();
        anyhow::ensure!(*out == expected_ssa[k], "apply {k} made another object");
    }
    Ok((smp_us, ssa_us))
}

/// Median latency of `n` PATCHes made by `patch(i)`, ms.
async fn patch_p50<F>(n: usize, mut patch: F) -> anyhow::Result<f64>
where
    F: AsyncFnMut(usize) -> anyhow::Result<()>,
{
    let mut samples = Vec::with_capacity(n);
    for i in 0..n {
        let start = Instant::now();
        patch(i).await?;
        samples.push(start.elapsed());
    }
    samples.sort();
    Ok(percentile(&samples, 0.5).as_secs_f64() * 1000.0)
}

/// A manifest of `count` objects: ConfigMaps, Services and Deployments.
fn manifest(count: usize, tag: &str) -> String {
    let mut out = String::new();
    for i in 0..count {
        let doc = match i % 3 {
            0 => json!({"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": format!("cm-{i}"), "labels": {"app": format!("a{i}")}},
                        "data": {"config.yaml": format!("mode: {tag}\nreplicas: 3\n"), "index": i.to_string()}}),
            1 => json!({"apiVersion": "v1", "kind": "Service",
                        "metadata": {"name": format!("svc-{i}"), "labels": {"app": format!("a{i}")}, "annotations": {"revision": tag}},
                        "spec": {"selector": {"app": format!("a{i}")}, "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}}),
            _ => {
                let mut d = deployment(tag, 2);
                d["metadata"] =
                    json!({"name": format!("deploy-{i}"), "labels": {"app": format!("a{i}")}});
                d
            }
        };
        out.push_str("---\n");
        out.push_str(&doc.to_string());
        out.push('\n');
    }
    out
}

fn kubectl_apply(
    kubeconfig: &Path,
    cache: &Path,
    file: &Path,
) -> anyhow::Result<(Duration, String)> {
    let start = Instant::now();
    let output = Command::new(KUBECTL)
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .arg(format!("--cache-dir={}", cache.display()))
        .args(["-n", "default", "apply", "-f"])
        .arg(file)
        .output()
        .context("run kubectl")?;
    let elapsed = start.elapsed();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    anyhow::ensure!(
        output.status.success(),
        "kubectl apply failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    Ok((elapsed, stdout))
}

pub async fn run(options: &Options) -> anyhow::Result<Report> {
    let iterations = if options.quick { 2_000 } else { 20_000 };
    let (smp_us, ssa_us) = in_process(iterations)?;
    eprintln!("in process: strategic merge patch {smp_us:.1} µs, server-side apply {ssa_us:.1} µs");

    let binary = rudder_binary()?;
    std::fs::create_dir_all(&options.work_dir)?;
    let dir = tempfile::tempdir_in(&options.work_dir)?;
    let server = Server::start(&binary, dir.path(), free_port()?)?;
    let (client, _) = server.ready(Instant::now()).await?;

    // The same work over HTTPS, one request at a time.
    let requests = if options.quick { 200 } else { 1_000 };
    let resource = ApiResource::erase::<k8s_openapi::api::apps::v1::Deployment>(&());
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &resource);
    let object: DynamicObject = serde_json::from_value(deployment("1", 3))?;
    api.create(&PostParams::default(), &object).await?;
    let smp_p50 = patch_p50(requests, async |i| {
        api.patch(
            "web",
            &PatchParams::default(),
            &Patch::Strategic(kubectl_style_patch(&i.to_string())),
        )
        .await?;
        Ok(())
    })
    .await?;
    let ssa_p50 = patch_p50(requests, async |i| {
        api.patch(
            "web",
            &PatchParams::apply("bench").force(),
            &Patch::Apply(deployment(&format!("ssa{i}"), 3)),
        )
        .await?;
        Ok(())
    })
    .await?;
    eprintln!(
        "over HTTPS: strategic merge patch p50 {smp_p50:.2} ms, server-side apply p50 {ssa_p50:.2} ms"
    );

    // kubectl apply of 1,000 objects: created, then a change to all.
    let count = 1_000;
    let cache = tempfile::tempdir()?;
    let file = dir.path().join("manifest.yaml");
    std::fs::write(&file, manifest(count, "1"))?;
    let (created, out) = kubectl_apply(&server.kubeconfig, cache.path(), &file)?;
    anyhow::ensure!(
        out.lines().filter(|l| l.ends_with(" created")).count() == count,
        "not every object was created"
    );
    std::fs::write(&file, manifest(count, "2"))?;
    let (configured, out) = kubectl_apply(&server.kubeconfig, cache.path(), &file)?;
    anyhow::ensure!(
        out.lines().filter(|l| l.ends_with(" configured")).count() == count,
        "not every object was configured"
    );
    eprintln!(
        "kubectl apply of {count} objects: {:.1} s created, {:.1} s configured",
        created.as_secs_f64(),
        configured.as_secs_f64()
    );

    Ok(Report {
        scenario: "apply".into(),
        quick: options.quick,
        partial: None,
        metrics: vec![
            Metric::new("smp_us", "µs", smp_us).target("< 200 µs"),
            Metric::new("ssa_us", "µs", ssa_us).target("< 500 µs"),
            Metric::new("kubectl_apply_1000_s", "s", created.as_secs_f64()),
            Metric::new("kubectl_apply_1000_configured_s", "s", configured.as_secs_f64()),
            Metric::new("smp_patch_p50_ms", "ms", smp_p50),
            Metric::new("ssa_patch_p50_ms", "ms", ssa_p50),
        ],
        conditions: vec![
            format!("`smp_us`: `rudder_api::patch::strategic::apply` (what the PATCH handler runs) of the patch `kubectl apply` sends for an image and env change — `$setElementOrder` on containers and env — to a 3-container Deployment (ports, env, resources, probes, mounts, volumes), mean over {iterations} calls in process, every call's result checked Ok in the timed loop and equal to the expected object (verified before timing) after it"),
            format!("`ssa_us`: `rudder_api::managed::apply` of that Deployment's full configuration (a changed image) onto the live object applied before by the same manager and updated by a controller: merge, field sets, pruning, conflict check and managedFields, mean over {iterations} calls in process, every result checked as for `smp_us`"),
            "`kubectl_apply_1000_s`: kubectl 1.33 `apply -f` of 1,000 objects (ConfigMaps, Services, 3-container Deployments, a third each) into an empty namespace of `rudder server` (release build, embedded store, HTTPS), process start to exit; `kubectl_apply_1000_configured_s`: the same file applied again with every object changed (three-way strategic merge patches)".into(),
            format!("`smp_patch_p50_ms`, `ssa_patch_p50_ms`: median latency of {requests} sequential PATCH requests of each kind from kube-rs over HTTPS, same server"),
        ],
    })
}
