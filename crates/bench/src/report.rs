//! Benchmark results: the JSON line every scenario prints, and the section of
//! docs/benchmarks.md a full run rewrites (and only a full run: not a
//! `--quick` one, nor one a development switch cut short).

use std::path::Path;

use anyhow::Context;
use serde::Serialize;

/// One measured figure, with the peer's figure when the peer ran too.
#[derive(Debug, Clone, Serialize)]
pub struct Metric {
    pub name: String,
    pub unit: String,
    pub value: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peer: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peer_value: Option<f64>,
    /// What the issue asks of this figure, for the doc.
    #[serde(skip)]
    pub target: Option<String>,
}

impl Metric {
    pub fn new(name: &str, unit: &str, value: f64) -> Self {
        Metric {
            name: name.into(),
            unit: unit.into(),
            value,
            peer: None,
            peer_value: None,
            target: None,
        }
    }

    pub fn peer(mut self, peer: &str, value: f64) -> Self {
        self.peer = Some(peer.into());
        self.peer_value = Some(value);
        self
    }

    pub fn target(mut self, target: &str) -> Self {
        self.target = Some(target.into());
        self
    }
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub scenario: String,
    pub quick: bool,
    /// Why only part of the scenario ran (a development switch such as
    /// `RUDDER_BENCH_ONLY`), if it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partial: Option<String>,
    pub metrics: Vec<Metric>,
    /// How the figures were taken, for the doc.
    #[serde(skip)]
    pub conditions: Vec<String>,
}

impl Report {
    pub fn json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }

    fn section(&self) -> String {
        let mut out = format!("## {}\n\n", self.scenario);
        out.push_str(&format!(
            "Measured {} on {}.\n\n",
            chrono_like_now(),
            machine_description()
        ));
        for condition in &self.conditions {
            out.push_str(&format!("- {condition}\n"));
        }
        out.push_str("\n| metric | rudder | peer | peer value | rudder / peer | target |\n|---|---|---|---|---|---|\n");
        for m in &self.metrics {
            let ratio = m
                .peer_value
                .filter(|p| *p > 0.0)
                .map(|p| format!("{:.2}×", m.value / p));
            out.push_str(&format!(
                "| `{}` | {} {} | {} | {} | {} | {} |\n",
                m.name,
                format_value(m.value),
                m.unit,
                m.peer.as_deref().unwrap_or("–"),
                m.peer_value
                    .map(|p| format!("{} {}", format_value(p), m.unit))
                    .unwrap_or_else(|| "–".into()),
                ratio.unwrap_or_else(|| "–".into()),
                m.target.as_deref().unwrap_or("–"),
            ));
        }
        out
    }

    /// Why this report may not stand in the doc: only a full run's figures
    /// replace the section (a quick run's are less settled; a partial
    /// run's table would drop the figures it did not take).
    pub fn not_for_doc(&self) -> Option<String> {
        match (&self.partial, self.quick) {
            (Some(why), _) => Some(format!("a partial run ({why})")),
            (None, true) => Some("a --quick run".into()),
            (None, false) => None,
        }
    }

    /// Replaces this scenario's section of the doc (between its markers),
    /// appending it when the doc has none yet. Refuses a quick or partial
    /// run's report.
    pub fn update_doc(&self, path: &Path) -> anyhow::Result<()> {
        if let Some(why) = self.not_for_doc() {
            anyhow::bail!("{why} does not update {}", path.display());
        }
        let start = format!("<!-- bench:{}:start -->", self.scenario);
        let end = format!("<!-- bench:{}:end -->", self.scenario);
        let doc = std::fs::read_to_string(path).unwrap_or_else(|_| "# Benchmarks\n".into());
        let block = format!("{start}\n{}{end}", self.section());
        let updated = match (doc.find(&start), doc.find(&end)) {
            (Some(s), Some(e)) if e > s => format!("{}{block}{}", &doc[..s], &doc[e + end.len()..]),
            _ => format!("{}\n\n{block}\n", doc.trim_end()),
        };
        std::fs::write(path, updated).with_context(|| format!("write {}", path.display()))
    }
}

fn format_value(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

fn chrono_like_now() -> String {
    std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M UTC"])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "(date unknown)".into())
}

/// Cores, memory and CPU model of this machine.
pub fn machine_description() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .map(|r| r.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem_gib = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|r| r.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map(|kb| kb / 1024.0 / 1024.0)
        .unwrap_or(0.0);
    format!("{cores} cores ({model}), {mem_gib:.0} GiB")
}

/// The nearest-rank `percent`-th percentile of `values` (in any order).
pub fn nearest_rank(values: &[f64], percent: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = ((sorted.len() as f64) * percent / 100.0).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}
