use super::*;
use crate::plugins::node_resources_fit::{Fit, Strategy};
use crate::profile::Profile;

fn parse(text: &str) -> Result<Configuration, ConfigError> {
    Configuration::parse(text)
}

fn error(text: &str) -> String {
    parse(text).expect_err("invalid").to_string()
}

const HEADER: &str =
    "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n";

fn names(set: &PluginSet) -> Vec<(&str, i32)> {
    set.enabled
        .iter()
        .map(|p| (p.name.as_str(), p.weight))
        .collect()
}

#[test]
fn an_empty_configuration_is_upstreams_defaults() {
    let config = parse(HEADER).expect("config");
    assert_eq!(config.profiles.len(), 1);
    let profile = &config.profiles[0];
    assert_eq!(profile.scheduler_name, "default-scheduler");
    assert_eq!(config.pod_initial_backoff, Duration::from_secs(1));
    assert_eq!(config.pod_max_backoff, Duration::from_secs(10));
    assert_eq!(config.percentage_of_nodes_to_score, None);
    let multi = names(&profile.plugins.multi_point);
    assert_eq!(multi[0], ("SchedulingGates", 0));
    assert!(multi.contains(&("TaintToleration", 3)));
    assert!(multi.contains(&("VolumeBinding", 0)));
    // JSON reads the same.
    let json = parse(
        r#"{"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration"}"#,
    )
    .expect("json");
    assert_eq!(json, config);
}

#[test]
fn merging_replaces_defaults_in_place_disables_and_appends() {
    let defaults = PluginSet {
        enabled: vec![
            PluginRef::new("A", 1),
            PluginRef::new("B", 2),
            PluginRef::new("C", 0),
        ],
        disabled: Vec::new(),
    };
    let custom = PluginSet {
        enabled: vec![PluginRef::new("D", 4), PluginRef::new("B", 7)],
        disabled: vec![PluginRef::new("C", 0)],
    };
    let merged = merge_set(&defaults, &custom);
    assert_eq!(names(&merged), [("A", 1), ("B", 7), ("D", 4)]);
    let all_off = PluginSet {
        enabled: vec![PluginRef::new("B", 0)],
        disabled: vec![PluginRef::new("*", 0)],
    };
    assert_eq!(names(&merge_set(&defaults, &all_off)), [("B", 0)]);
    assert!(merge_set(&defaults, &all_off).disables_all());
}

const TWO_PROFILES: &str = r#"
percentageOfNodesToScore: 40
podInitialBackoffSeconds: 2
podMaxBackoffSeconds: 30
profiles:
- schedulerName: default-scheduler
- schedulerName: packer
  percentageOfNodesToScore: 100
  plugins:
    filter:
      disabled:
      - name: NodePorts
    score:
      disabled:
      - name: "*"
      enabled:
      - name: NodeResourcesFit
        weight: 5
      - name: ImageLocality
  pluginConfig:
  - name: NodeResourcesFit
    args:
      scoringStrategy:
        type: MostAllocated
        resources:
        - name: cpu
          weight: 2
"#;

#[test]
fn two_profiles_build_with_their_plugins_and_weights() {
    let config = parse(&format!("{HEADER}{TWO_PROFILES}")).expect("config");
    assert_eq!(config.pod_initial_backoff, Duration::from_secs(2));
    assert_eq!(config.pod_max_backoff, Duration::from_secs(30));
    let profiles = Profile::all_from_config(&config, None).expect("profiles");
    assert_eq!(profiles[0].percentage_of_nodes_to_score, Some(40));
    assert_eq!(profiles[1].percentage_of_nodes_to_score, Some(100));
    let packer = &profiles[1];
    assert_eq!(packer.scheduler_name, "packer");
    let filters: Vec<&str> = packer.filter.iter().map(|f| f.name()).collect();
    assert!(!filters.contains(&"NodePorts"), "{filters:?}");
    assert!(filters.contains(&"NodeResourcesFit"));
    let scores: Vec<(&str, i64)> = packer.score.iter().map(|(s, w)| (s.name(), *w)).collect();
    // Only the score set's plugins, in its order; a weight of 0 is 1.
    assert_eq!(scores, [("NodeResourcesFit", 5), ("ImageLocality", 1)]);
    // PreScore still has the multi-point plugins serving it.
    assert!(
        packer
            .pre_score
            .iter()
            .any(|p| p.name() == "TaintToleration")
    );
    let fit = Fit::from_args(&match config.profiles[1].args("NodeResourcesFit") {
        Some(PluginArgs::NodeResourcesFit(a)) => a,
        other => panic!("{other:?}"),
    });
    assert_eq!(fit.strategy, Strategy::MostAllocated);
    assert_eq!(fit.resources.len(), 1);
    assert_eq!(fit.resources[0].weight, 2);
    // The default profile keeps LeastAllocated.
    assert!(matches!(
        config.profiles[0].args("NodeResourcesFit"),
        Some(PluginArgs::NodeResourcesFit(a)) if Fit::from_args(&a).strategy == Strategy::LeastAllocated
    ));
}

#[test]
fn an_explicit_point_overrides_multi_point_order() {
    let config = parse(&format!(
        "{HEADER}profiles:\n- plugins:\n    filter:\n      enabled:\n      - name: NodePorts\n"
    ))
    .expect("config");
    let profile = Profile::all_from_config(&config, None).expect("profile");
    let filters: Vec<&str> = profile[0].filter.iter().map(|f| f.name()).collect();
    // Re-enabled in place by the merge: upstream keeps the default order.
    assert_eq!(filters.iter().filter(|f| **f == "NodePorts").count(), 1);
    let multi_only = parse(&format!(
        "{HEADER}profiles:\n- plugins:\n    multiPoint:\n      disabled:\n      - name: '*'\n      enabled:\n      - name: NodeName\n      - name: DefaultBinder\n    filter:\n      enabled:\n      - name: NodeUnschedulable\n"
    ))
    .expect("config");
    let profile = Profile::all_from_config(&multi_only, None).expect("profile");
    let filters: Vec<&str> = profile[0].filter.iter().map(|f| f.name()).collect();
    // Multi-point plugins first, then the point's own.
    assert_eq!(filters, ["NodeName", "NodeUnschedulable"]);
    assert!(profile[0].score.is_empty());
}

#[test]
fn invalid_fields_are_named_as_upstream_words_them() {
    assert_eq!(
        error(&format!("{HEADER}percentageOfNodesToScore: 200\n")),
        "invalid scheduler configuration: percentageOfNodesToScore: Invalid value: 200: not in valid range [0-100]"
    );
    assert!(
        error(&format!(
            "{HEADER}podInitialBackoffSeconds: 5\npodMaxBackoffSeconds: 2\n"
        ))
        .contains("podMaxBackoffSeconds: Invalid value: 2: must be greater than or equal to PodInitialBackoffSeconds")
    );
    assert!(
        error(&format!("{HEADER}podInitialBackoffSeconds: 0\n"))
            .contains("podInitialBackoffSeconds: Invalid value: 0: must be greater than 0")
    );
    let twins = error(&format!(
        "{HEADER}profiles:\n- schedulerName: a\n- schedulerName: a\n- {{}}\n"
    ));
    assert!(
        twins.contains("profiles[1].schedulerName: Duplicate value: \"profiles[0].schedulerName\""),
        "{twins}"
    );
    assert!(
        twins.contains("profiles[2].schedulerName: Required value"),
        "{twins}"
    );
    assert!(
        error(&format!(
            "{HEADER}profiles:\n- percentageOfNodesToScore: -1\n"
        ))
        .contains("profiles[0].percentageOfNodesToScore: Invalid value: -1")
    );
    let args = error(&format!(
        "{HEADER}profiles:\n- pluginConfig:\n  - name: InterPodAffinity\n    args:\n      hardPodAffinityWeight: 101\n"
    ));
    assert!(
        args.contains("profiles[0].pluginConfig[0].args.hardPodAffinityWeight: Invalid value: 101: not in valid range [0, 100]"),
        "{args}"
    );
    let spread = error(&format!(
        "{HEADER}profiles:\n- pluginConfig:\n  - name: PodTopologySpread\n    args:\n      defaultingType: Sometimes\n"
    ));
    assert!(
        spread.contains("Unsupported value: \"Sometimes\""),
        "{spread}"
    );
    assert!(error(&format!("{HEADER}bogus: 1\n")).contains("unknown field `bogus`"));
    assert!(
        error(
            "apiVersion: kubescheduler.config.k8s.io/v1beta3\nkind: KubeSchedulerConfiguration\n"
        )
        .contains("v1beta3")
    );
}

#[test]
fn plugins_must_exist_and_serve_their_extension_point() {
    let build = |set: &str| {
        let config = parse(&format!(
            "{HEADER}profiles:\n- schedulerName: p\n  plugins:\n    filter:\n      enabled:\n      - name: {set}\n"
        ))
        .expect("config");
        Profile::all_from_config(&config, None)
            .expect_err("invalid")
            .to_string()
    };
    assert_eq!(
        build("Foo"),
        "creating profile for scheduler name p: FilterPlugin \"Foo\" does not exist"
    );
    assert_eq!(
        build("ImageLocality"),
        "creating profile for scheduler name p: plugin \"ImageLocality\" does not extend FilterPlugin plugin"
    );
}

#[test]
fn plugin_args_reach_the_plugins() {
    let config = parse(&format!(
        "{HEADER}profiles:\n- pluginConfig:\n  - name: PodTopologySpread\n    args:\n      defaultingType: List\n      defaultConstraints:\n      - maxSkew: 1\n        topologyKey: zone\n        whenUnsatisfiable: DoNotSchedule\n  - name: InterPodAffinity\n    args:\n      hardPodAffinityWeight: 7\n"
    ))
    .expect("config");
    let profile = &config.profiles[0];
    let enabled = crate::profile::Enabled {
        name: "PodTopologySpread".into(),
        weight: 2,
        args: profile.args("PodTopologySpread"),
    };
    let spread = enabled.pod_topology_spread_args();
    assert_eq!(spread.constraints().len(), 1);
    assert_eq!(spread.constraints()[0].topology_key, "zone");
    let affinity = crate::profile::Enabled {
        args: profile.args("InterPodAffinity"),
        ..Default::default()
    };
    assert_eq!(
        affinity.inter_pod_affinity_args().hard_pod_affinity_weight,
        7
    );
    // Unconfigured: upstream's defaults (System spreading, weight 1).
    let none = crate::profile::Enabled::default();
    assert_eq!(none.pod_topology_spread_args().constraints().len(), 2);
    assert_eq!(none.inter_pod_affinity_args().hard_pod_affinity_weight, 1);
    assert_eq!(none.volume_binding_args().bind_timeout_seconds, 600);
}
