//! The scheduler's configuration file (upstream's
//! `KubeSchedulerConfiguration`, `kubescheduler.config.k8s.io/v1`, YAML or
//! JSON): decoded strictly, defaulted and validated as upstream's v1 API
//! does, so a bad file fails at start naming its field.
//!
//! Each profile's plugins are upstream's defaults (one `multiPoint` list)
//! merged with the profile's own sets as upstream's `mergePlugins` does: a
//! default named in an extension point's `enabled` is replaced in place
//! (its weight too), `disabled` drops defaults (`*` all of them) and the
//! other enabled plugins are appended. Expanding `multiPoint` into the
//! extension points each plugin serves is the
//! [profile](crate::profile::Profile)'s work, which knows the plugins.

pub mod args;

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

pub use args::PluginArgs;

/// The only API version read.
pub const API_VERSION: &str = "kubescheduler.config.k8s.io/v1";
pub const KIND: &str = "KubeSchedulerConfiguration";

/// A configuration that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("decoding the scheduler configuration: {0}")]
    Decode(String),
    /// Validation's field errors, joined as upstream's aggregate.
    #[error("invalid scheduler configuration: {0}")]
    Invalid(String),
    #[error("creating profile for scheduler name {profile}: {message}")]
    Profile { profile: String, message: String },
}

/// One field's error, worded as upstream's `field.Error`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError(pub String);

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FieldError {
    pub fn invalid(path: String, value: impl serde::Serialize, detail: &str) -> Self {
        let value = serde_json::to_string(&value).unwrap_or_default();
        FieldError(format!("{path}: Invalid value: {value}: {detail}"))
    }

    pub fn required(path: String, detail: &str) -> Self {
        if detail.is_empty() {
            FieldError(format!("{path}: Required value"))
        } else {
            FieldError(format!("{path}: Required value: {detail}"))
        }
    }

    pub fn duplicate(path: String, value: &str) -> Self {
        FieldError(format!("{path}: Duplicate value: {value:?}"))
    }

    pub fn not_supported(path: String, value: &str, supported: &[&str]) -> Self {
        let supported: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
        FieldError(format!(
            "{path}: Unsupported value: {value:?}: supported values: {}",
            supported.join(", ")
        ))
    }

    pub fn forbidden(path: String, detail: &str) -> Self {
        FieldError(format!("{path}: Forbidden: {detail}"))
    }
}

/// The extension points a profile configures, as upstream names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Point {
    PreEnqueue,
    QueueSort,
    PreFilter,
    Filter,
    PostFilter,
    PreScore,
    Score,
    Reserve,
    Permit,
    PreBind,
    Bind,
    PostBind,
}

impl Point {
    pub const ALL: [Point; 12] = [
        Point::PreEnqueue,
        Point::QueueSort,
        Point::PreFilter,
        Point::Filter,
        Point::PostFilter,
        Point::PreScore,
        Point::Score,
        Point::Reserve,
        Point::Permit,
        Point::PreBind,
        Point::Bind,
        Point::PostBind,
    ];

    /// The field in `plugins`.
    pub fn field(self) -> &'static str {
        match self {
            Point::PreEnqueue => "preEnqueue",
            Point::QueueSort => "queueSort",
            Point::PreFilter => "preFilter",
            Point::Filter => "filter",
            Point::PostFilter => "postFilter",
            Point::PreScore => "preScore",
            Point::Score => "score",
            Point::Reserve => "reserve",
            Point::Permit => "permit",
            Point::PreBind => "preBind",
            Point::Bind => "bind",
            Point::PostBind => "postBind",
        }
    }

    /// The interface's name in upstream's errors (`FilterPlugin`).
    pub fn interface(self) -> String {
        let field = self.field();
        format!("{}{}Plugin", field[..1].to_uppercase(), &field[1..])
    }
}

/// A plugin named in a set, with its Score weight (0: unset).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginRef {
    pub name: String,
    #[serde(default)]
    pub weight: i32,
}

impl PluginRef {
    pub fn new(name: &str, weight: i32) -> Self {
        PluginRef {
            name: name.into(),
            weight,
        }
    }
}

/// An extension point's `enabled` and `disabled` plugins.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginSet {
    #[serde(default)]
    pub enabled: Vec<PluginRef>,
    #[serde(default)]
    pub disabled: Vec<PluginRef>,
}

impl PluginSet {
    pub fn disables(&self, name: &str) -> bool {
        self.disabled
            .iter()
            .any(|p| p.name == name || p.name == "*")
    }

    pub fn disables_all(&self) -> bool {
        self.disabled.iter().any(|p| p.name == "*")
    }
}

/// A profile's plugins: `multiPoint` and each extension point's set.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plugins {
    pub multi_point: PluginSet,
    pub points: BTreeMap<Point, PluginSet>,
}

impl Plugins {
    pub fn point(&self, point: Point) -> &PluginSet {
        static EMPTY: PluginSet = PluginSet {
            enabled: Vec::new(),
            disabled: Vec::new(),
        };
        self.points.get(&point).unwrap_or(&EMPTY)
    }
}

/// Upstream's default plugins (1.33's `getDefaultPlugins`), all in
/// `multiPoint`, with their Score weights. A profile builds those rudder
/// has ([`crate::profile::is_known`]).
pub const DEFAULT_PLUGINS: [(&str, i32); 18] = [
    ("SchedulingGates", 0),
    ("PrioritySort", 0),
    ("NodeUnschedulable", 0),
    ("NodeName", 0),
    ("TaintToleration", 3),
    ("NodeAffinity", 2),
    ("NodePorts", 0),
    ("NodeResourcesFit", 1),
    ("VolumeRestrictions", 0),
    ("NodeVolumeLimits", 0),
    ("VolumeBinding", 0),
    ("VolumeZone", 0),
    ("PodTopologySpread", 2),
    ("InterPodAffinity", 2),
    ("DefaultPreemption", 0),
    ("NodeResourcesBalancedAllocation", 1),
    ("ImageLocality", 1),
    ("DefaultBinder", 0),
];

/// The defaults as a `Plugins`, keeping those `known` says exist.
pub fn default_plugins(known: impl Fn(&str) -> bool) -> Plugins {
    Plugins {
        multi_point: PluginSet {
            enabled: DEFAULT_PLUGINS
                .iter()
                .filter(|(name, _)| known(name))
                .map(|(name, weight)| PluginRef::new(name, *weight))
                .collect(),
            disabled: Vec::new(),
        },
        points: BTreeMap::new(),
    }
}

/// Upstream's `mergePluginSet`: defaults minus the disabled (all with
/// `*`), a default re-enabled by name replaced in place, then the other
/// enabled plugins in their order.
pub fn merge_set(defaults: &PluginSet, custom: &PluginSet) -> PluginSet {
    let mut replaced = vec![false; custom.enabled.len()];
    let mut enabled = Vec::new();
    if !custom.disables_all() {
        for default in &defaults.enabled {
            if custom.disables(&default.name) {
                continue;
            }
            match custom.enabled.iter().position(|c| c.name == default.name) {
                Some(i) => {
                    replaced[i] = true;
                    enabled.push(custom.enabled[i].clone());
                }
                None => enabled.push(default.clone()),
            }
        }
    }
    for (i, plugin) in custom.enabled.iter().enumerate() {
        if !replaced[i] {
            enabled.push(plugin.clone());
        }
    }
    PluginSet {
        enabled,
        disabled: custom.disabled.clone(),
    }
}

/// Upstream's `mergePlugins`: each set merged with its default.
pub fn merge_plugins(defaults: &Plugins, custom: &Plugins) -> Plugins {
    let mut merged = Plugins {
        multi_point: merge_set(&defaults.multi_point, &custom.multi_point),
        points: BTreeMap::new(),
    };
    for point in Point::ALL {
        let set = merge_set(defaults.point(point), custom.point(point));
        if set != PluginSet::default() {
            merged.points.insert(point, set);
        }
    }
    merged
}

/// One profile, defaulted.
#[derive(Debug, Clone, PartialEq)]
pub struct ProfileConfig {
    pub scheduler_name: String,
    /// The profile's own `percentageOfNodesToScore`, if set.
    pub percentage_of_nodes_to_score: Option<u32>,
    pub plugins: Plugins,
    /// The arguments of plugins that take any: configured, else defaults.
    pub plugin_config: BTreeMap<String, PluginArgs>,
}

/// The whole configuration, defaulted and validated.
#[derive(Debug, Clone, PartialEq)]
pub struct Configuration {
    /// `None`: upstream's adaptive percentage.
    pub percentage_of_nodes_to_score: Option<u32>,
    pub pod_initial_backoff: Duration,
    pub pod_max_backoff: Duration,
    pub profiles: Vec<ProfileConfig>,
}

impl Default for Configuration {
    /// What an empty file means: one `default-scheduler` profile of the
    /// default plugins, backoff 1 s to 10 s.
    fn default() -> Self {
        Configuration::decode(serde_json::json!({"apiVersion": API_VERSION, "kind": KIND}))
            .unwrap_or_else(|_| unreachable!("an empty configuration is valid"))
    }
}

// The file as written: every field upstream's v1 type has, unknown ones
// refused (upstream decodes strictly).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawConfiguration {
    api_version: Option<String>,
    kind: Option<String>,
    parallelism: Option<i32>,
    // Accepted as upstream's type has them; rudder has no use for them
    // (leader election is `rudder server`'s own).
    #[allow(dead_code)]
    leader_election: Option<Value>,
    #[allow(dead_code)]
    client_connection: Option<Value>,
    #[allow(dead_code)]
    enable_profiling: Option<bool>,
    #[allow(dead_code)]
    enable_contention_profiling: Option<bool>,
    percentage_of_nodes_to_score: Option<i32>,
    pod_initial_backoff_seconds: Option<i64>,
    pod_max_backoff_seconds: Option<i64>,
    profiles: Option<Vec<RawProfile>>,
    extenders: Option<Vec<Value>>,
    #[allow(dead_code)]
    delay_cache_until_active: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawProfile {
    scheduler_name: Option<String>,
    percentage_of_nodes_to_score: Option<i32>,
    plugins: Option<RawPlugins>,
    #[serde(default)]
    plugin_config: Vec<RawPluginConfig>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawPlugins {
    multi_point: Option<PluginSet>,
    pre_enqueue: Option<PluginSet>,
    queue_sort: Option<PluginSet>,
    pre_filter: Option<PluginSet>,
    filter: Option<PluginSet>,
    post_filter: Option<PluginSet>,
    pre_score: Option<PluginSet>,
    score: Option<PluginSet>,
    reserve: Option<PluginSet>,
    permit: Option<PluginSet>,
    pre_bind: Option<PluginSet>,
    bind: Option<PluginSet>,
    post_bind: Option<PluginSet>,
}

impl RawPlugins {
    fn into_plugins(self) -> Plugins {
        let sets = [
            (Point::PreEnqueue, self.pre_enqueue),
            (Point::QueueSort, self.queue_sort),
            (Point::PreFilter, self.pre_filter),
            (Point::Filter, self.filter),
            (Point::PostFilter, self.post_filter),
            (Point::PreScore, self.pre_score),
            (Point::Score, self.score),
            (Point::Reserve, self.reserve),
            (Point::Permit, self.permit),
            (Point::PreBind, self.pre_bind),
            (Point::Bind, self.bind),
            (Point::PostBind, self.post_bind),
        ];
        Plugins {
            multi_point: self.multi_point.unwrap_or_default(),
            points: sets
                .into_iter()
                .filter_map(|(point, set)| Some((point, set?)))
                .collect(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPluginConfig {
    name: String,
    #[serde(default)]
    args: Value,
}

fn percentage(value: i32, path: String, errs: &mut Vec<FieldError>) -> Option<u32> {
    if !(0..=100).contains(&value) {
        errs.push(FieldError::invalid(
            path,
            value,
            "not in valid range [0-100]",
        ));
    }
    u32::try_from(value).ok().filter(|p| *p > 0)
}

impl Configuration {
    /// Reads a file's text, YAML or JSON.
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        let value: Value =
            serde_yaml_ng::from_str(text).map_err(|e| ConfigError::Decode(e.to_string()))?;
        Configuration::decode(value)
    }

    /// Decodes, defaults and validates a configuration object.
    pub fn decode(value: Value) -> Result<Self, ConfigError> {
        let value = if value.is_null() {
            serde_json::json!({})
        } else {
            value
        };
        let raw: RawConfiguration =
            serde_json::from_value(value).map_err(|e| ConfigError::Decode(e.to_string()))?;
        match (raw.api_version.as_deref(), raw.kind.as_deref()) {
            (Some(API_VERSION), Some(KIND)) => {}
            (Some(API_VERSION), kind) => {
                return Err(ConfigError::Decode(format!(
                    "no kind {:?} is registered for version {API_VERSION:?}",
                    kind.unwrap_or_default()
                )));
            }
            (version, _) => {
                return Err(ConfigError::Decode(format!(
                    "no kind {KIND:?} is registered for version {:?} (only {API_VERSION} is read)",
                    version.unwrap_or_default()
                )));
            }
        }
        let mut errs: Vec<FieldError> = Vec::new();
        if raw.parallelism.is_some_and(|p| p <= 0) {
            errs.push(FieldError::invalid(
                "parallelism".into(),
                raw.parallelism,
                "should be an integer value greater than zero",
            ));
        }
        let global = percentage(
            raw.percentage_of_nodes_to_score.unwrap_or(0),
            "percentageOfNodesToScore".into(),
            &mut errs,
        );
        let initial = raw.pod_initial_backoff_seconds.unwrap_or(1);
        let max = raw.pod_max_backoff_seconds.unwrap_or(10);
        if initial <= 0 {
            errs.push(FieldError::invalid(
                "podInitialBackoffSeconds".into(),
                initial,
                "must be greater than 0",
            ));
        }
        if max < initial {
            errs.push(FieldError::invalid(
                "podMaxBackoffSeconds".into(),
                max,
                "must be greater than or equal to PodInitialBackoffSeconds",
            ));
        }
        if raw.extenders.as_ref().is_some_and(|e| !e.is_empty()) {
            errs.push(FieldError::forbidden(
                "extenders".into(),
                "scheduler extenders are not supported by rudder",
            ));
        }
        let mut raw_profiles = raw.profiles.unwrap_or_default();
        if raw_profiles.is_empty() {
            raw_profiles.push(RawProfile::default());
        }
        // Only a lone profile is named for the user.
        if raw_profiles.len() == 1 && raw_profiles[0].scheduler_name.is_none() {
            raw_profiles[0].scheduler_name = Some(crate::profile::DEFAULT_SCHEDULER_NAME.into());
        }
        let defaults = default_plugins(crate::profile::is_known);
        let mut profiles = Vec::new();
        let mut names: BTreeMap<String, usize> = BTreeMap::new();
        let mut queue_sorts: Vec<PluginSet> = Vec::new();
        for (i, raw) in raw_profiles.into_iter().enumerate() {
            let path = format!("profiles[{i}]");
            let name = raw.scheduler_name.unwrap_or_default();
            if name.is_empty() {
                errs.push(FieldError::required(format!("{path}.schedulerName"), ""));
            } else if let Some(first) = names.insert(name.clone(), i) {
                errs.push(FieldError::duplicate(
                    format!("{path}.schedulerName"),
                    &format!("profiles[{first}].schedulerName"),
                ));
            }
            let own = raw.percentage_of_nodes_to_score.map(|p| {
                percentage(p, format!("{path}.percentageOfNodesToScore"), &mut errs).unwrap_or(0)
            });
            let custom = raw.plugins.map(RawPlugins::into_plugins);
            queue_sorts.push(
                custom
                    .as_ref()
                    .map(|c| c.point(Point::QueueSort).clone())
                    .unwrap_or_default(),
            );
            let plugins = match &custom {
                Some(custom) => merge_plugins(&defaults, custom),
                None => defaults.clone(),
            };
            let mut plugin_config = BTreeMap::new();
            for (j, c) in raw.plugin_config.into_iter().enumerate() {
                let at = format!("{path}.pluginConfig[{j}]");
                if plugin_config.contains_key(&c.name) {
                    errs.push(FieldError::duplicate(at.clone(), &c.name));
                    continue;
                }
                match PluginArgs::decode(&c.name, c.args) {
                    None => {}
                    Some(Err(e)) => errs.push(FieldError(format!(
                        "{at}.args: Invalid value: decoding {}Args: {e}",
                        c.name
                    ))),
                    Some(Ok(args)) => {
                        errs.extend(args.validate(&format!("{at}.args")));
                        plugin_config.insert(c.name, args);
                    }
                }
            }
            profiles.push(ProfileConfig {
                scheduler_name: name,
                percentage_of_nodes_to_score: own,
                plugins,
                plugin_config,
            });
        }
        // Every profile sorts the one queue the same way.
        for (i, set) in queue_sorts.iter().enumerate().skip(1) {
            if *set != queue_sorts[0] {
                errs.push(FieldError::invalid(
                    format!("profiles[{i}].plugins.queueSort"),
                    format!("{set:?}"),
                    "has to match for all profiles",
                ));
            }
        }
        if !errs.is_empty() {
            let messages: Vec<String> = errs.iter().map(|e| e.0.clone()).collect();
            return Err(ConfigError::Invalid(if messages.len() == 1 {
                messages[0].clone()
            } else {
                format!("[{}]", messages.join(", "))
            }));
        }
        Ok(Configuration {
            percentage_of_nodes_to_score: global,
            pod_initial_backoff: Duration::from_secs(initial as u64),
            pod_max_backoff: Duration::from_secs(max as u64),
            profiles,
        })
    }
}

impl ProfileConfig {
    /// The arguments of `plugin`, if it takes any: configured or defaults.
    pub fn args(&self, plugin: &str) -> Option<PluginArgs> {
        if let Some(args) = self.plugin_config.get(plugin) {
            return Some(args.clone());
        }
        PluginArgs::decode(plugin, Value::Null).and_then(Result::ok)
    }

    /// The nodes to score: the profile's percentage, else the global one.
    pub fn percentage(&self, global: Option<u32>) -> Option<u32> {
        match self.percentage_of_nodes_to_score {
            Some(0) => None,
            Some(p) => Some(p),
            None => global,
        }
    }
}

#[cfg(test)]
mod tests;
