//! The data-driven cases in `crates/api/testdata/strategic-merge/*.yaml`:
//! each names the type it patches (a built-in definition, or `Item`, the
//! test type of `item-schema.yaml` with one field per merge strategy), the
//! original, the patch, and the result or the error code.

use std::path::PathBuf;

use serde::Deserialize;
use serde_json::{Map, Value};

use super::apply;
use crate::structure::Types;

#[derive(Debug, Deserialize)]
struct Case {
    name: String,
    #[serde(rename = "type")]
    type_name: String,
    #[serde(default)]
    original: Value,
    patch: Value,
    result: Option<Value>,
    error: Option<u16>,
}

fn testdata() -> PathBuf {
    // The directory `cargo test` runs this from: a test binary built in
    // another checkout sharing the target directory (whose artifacts cargo
    // reuses, paths being workspace-relative) has that checkout's path
    // compiled in.
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from)
        .join("testdata/strategic-merge")
}

fn yaml(path: &std::path::Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn item_types() -> Types {
    let Value::Object(schema) = yaml(&testdata().join("item-schema.yaml")) else {
        panic!("item-schema.yaml is a map of definitions")
    };
    Types::from_definitions(&schema)
}

#[test]
fn testdata_cases() {
    let items = item_types();
    let builtin = Types::builtin();
    let mut files: Vec<PathBuf> = std::fs::read_dir(testdata())
        .expect("testdata")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.file_name().is_some_and(|n| n != "item-schema.yaml"))
        .collect();
    files.sort();
    let (mut passed, mut failures) = (0, Vec::new());
    for file in &files {
        let cases: Vec<Case> = serde_json::from_value(yaml(file))
            .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        for case in cases {
            let types = if case.type_name == "Item" {
                &items
            } else {
                builtin.as_ref()
            };
            let root = types.root(&case.type_name);
            assert!(
                !matches!(root, crate::structure::Shape::Untyped),
                "{}: unknown type {}",
                case.name,
                case.type_name
            );
            let original = if case.original.is_null() {
                Value::Object(Map::new())
            } else {
                case.original.clone()
            };
            let got = apply(types, &root, &original, &case.patch);
            let file = file.file_name().unwrap_or_default().to_string_lossy();
            match (&got, &case.result, case.error) {
                (Ok(got), Some(want), None) if got == want => passed += 1,
                (Err(status), None, Some(code)) if status.code == code => passed += 1,
                _ => failures.push(format!(
                    "{file}: {}\n  got:  {}\n  want: {}",
                    case.name,
                    match &got {
                        Ok(v) => v.to_string(),
                        Err(s) => format!("error {} {}", s.code, s.message),
                    },
                    match (&case.result, case.error) {
                        (Some(v), _) => v.to_string(),
                        (None, Some(code)) => format!("error {code}"),
                        (None, None) => "nothing: the case names no result or error".into(),
                    }
                )),
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        passed + failures.len(),
        failures.join("\n")
    );
    assert!(passed >= 200, "only {passed} cases ran");
}
