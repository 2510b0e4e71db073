//! Sets of field paths, in upstream's `FieldsV1` form.
//!
//! A path is a sequence of elements spelled as `FieldsV1` spells them:
//! `f:<field>` (a struct field or map key), `k:{"name":"main"}` (the item of
//! an associative list with those key values), `v:<json>` (the item of a
//! set), `i:<index>`. In the JSON form each element is an object key, and
//! `"."` inside an element's object says the path itself is in the set (not
//! only paths below it).

use std::collections::BTreeMap;

use serde_json::{Map, Value};

/// A node of the set: whether its own path is a member, and its children.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSet {
    member: bool,
    children: BTreeMap<String, FieldSet>,
}

impl FieldSet {
    pub fn new() -> FieldSet {
        FieldSet::default()
    }

    /// Reads a `fieldsV1` object.
    pub fn from_fields_v1(value: &Value) -> Result<FieldSet, String> {
        let Value::Object(map) = value else {
            return Err(format!("fieldsV1 must be an object, not {value}"));
        };
        let mut set = FieldSet::new();
        for (key, child) in map {
            if key == "." {
                set.member = true;
                continue;
            }
            if !matches!(key.get(..2), Some("f:" | "k:" | "v:" | "i:")) {
                return Err(format!("unknown path element {key:?} in fieldsV1"));
            }
            let mut node = FieldSet::from_fields_v1(child)?;
            // `{}` is a member with nothing below it.
            if child.as_object().is_some_and(Map::is_empty) {
                node.member = true;
            }
            if node.member || !node.children.is_empty() {
                set.children.insert(key.clone(), node);
            }
        }
        Ok(set)
    }

    /// The `fieldsV1` object of this set.
    pub fn to_fields_v1(&self) -> Value {
        let mut out = Map::new();
        if self.member && !self.children.is_empty() {
            out.insert(".".into(), Value::Object(Map::new()));
        }
        for (key, child) in &self.children {
            out.insert(key.clone(), child.to_fields_v1());
        }
        Value::Object(out)
    }

    pub fn is_member(&self) -> bool {
        self.member
    }

    pub fn set_member(&mut self) {
        self.member = true;
    }

    /// True when no path is a member.
    pub fn is_empty(&self) -> bool {
        !self.member && self.children.values().all(FieldSet::is_empty)
    }

    /// True when this node holds nothing itself and has no children: in a
    /// set whose empty nodes are pruned (all sets built here), the cheap
    /// form of [`FieldSet::is_empty`].
    pub fn is_blank(&self) -> bool {
        !self.member && self.children.is_empty()
    }

    /// Puts `child` (not blank) under `element`, replacing what was there.
    pub fn insert_child(&mut self, element: String, child: FieldSet) {
        self.children.insert(element, child);
    }

    /// The child node of one path element, created if absent.
    pub fn child_mut(&mut self, element: String) -> &mut FieldSet {
        self.children.entry(element).or_default()
    }

    pub fn child(&self, element: &str) -> Option<&FieldSet> {
        self.children.get(element)
    }

    pub fn children(&self) -> impl Iterator<Item = (&String, &FieldSet)> {
        self.children.iter()
    }

    /// Adds a path.
    pub fn insert<S: AsRef<str>>(&mut self, path: &[S]) {
        let mut node = self;
        for element in path {
            node = node.child_mut(element.as_ref().to_string());
        }
        node.member = true;
    }

    /// The node at `path`, if the set has members at or below it.
    pub fn node<S: AsRef<str>>(&self, path: &[S]) -> Option<&FieldSet> {
        let mut node = self;
        for element in path {
            node = node.children.get(element.as_ref())?;
        }
        Some(node)
    }

    /// Removes `path` and everything below it, and the nodes above it
    /// left with nothing.
    pub fn remove_tree<S: AsRef<str>>(&mut self, path: &[S]) {
        let Some((first, rest)) = path.split_first() else {
            *self = FieldSet::new();
            return;
        };
        if rest.is_empty() {
            self.children.remove(first.as_ref());
            return;
        }
        if let Some(child) = self.children.get_mut(first.as_ref()) {
            child.remove_tree(rest);
            if child.is_blank() {
                self.children.remove(first.as_ref());
            }
        }
    }

    pub fn union(&mut self, other: &FieldSet) {
        self.member |= other.member;
        for (key, child) in &other.children {
            self.children.entry(key.clone()).or_default().union(child);
        }
    }

    /// The members of `self` that are not members of `other`.
    pub fn difference(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet {
            member: self.member && !other.member,
            children: BTreeMap::new(),
        };
        for (key, child) in &self.children {
            let child = match other.children.get(key) {
                Some(o) => child.difference(o),
                None => child.clone(),
            };
            if !child.is_empty() {
                out.children.insert(key.clone(), child);
            }
        }
        out
    }

    /// The members of both.
    pub fn intersection(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet {
            member: self.member && other.member,
            children: BTreeMap::new(),
        };
        for (key, child) in &self.children {
            if let Some(o) = other.children.get(key) {
                let both = child.intersection(o);
                if !both.is_empty() {
                    out.children.insert(key.clone(), both);
                }
            }
        }
        out
    }

    /// Every member path, in order.
    pub fn paths(&self) -> Vec<Vec<String>> {
        let mut out = Vec::new();
        let mut path = Vec::new();
        self.collect_paths(&mut path, &mut out);
        out
    }

    fn collect_paths(&self, path: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
        if self.member {
            out.push(path.clone());
        }
        for (key, child) in &self.children {
            path.push(key.clone());
            child.collect_paths(path, out);
            path.pop();
        }
    }
}

/// A path as upstream prints it in conflict messages:
/// `.spec.containers[name="main"].image`, `.metadata.finalizers[="x"]`.
pub fn path_string(path: &[String]) -> String {
    let mut out = String::new();
    for element in path {
        let (kind, rest) = element.split_at(element.len().min(2));
        match kind {
            "f:" => {
                out.push('.');
                out.push_str(rest);
            }
            "k:" => {
                let pairs: Vec<String> = match serde_json::from_str::<Value>(rest) {
                    Ok(Value::Object(keys)) => {
                        keys.iter().map(|(k, v)| format!("{k}={v}")).collect()
                    }
                    _ => vec![rest.to_string()],
                };
                out.push('[');
                out.push_str(&pairs.join(","));
                out.push(']');
            }
            "v:" => {
                out.push_str("[=");
                out.push_str(rest);
                out.push(']');
            }
            "i:" => {
                out.push('[');
                out.push_str(rest);
                out.push(']');
            }
            _ => out.push_str(element),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fields_v1_round_trips_with_dot_members() {
        let v = json!({
            "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
            "f:spec": {"f:containers": {"k:{\"name\":\"main\"}": {".": {}, "f:image": {}, "f:name": {}}}}
        });
        let set = FieldSet::from_fields_v1(&v).expect("parses");
        assert_eq!(set.to_fields_v1(), v);
        let paths: Vec<String> = set.paths().iter().map(|p| path_string(p)).collect();
        assert_eq!(
            paths,
            vec![
                ".metadata.labels",
                ".metadata.labels.app",
                ".spec.containers[name=\"main\"]",
                ".spec.containers[name=\"main\"].image",
                ".spec.containers[name=\"main\"].name",
            ]
        );
        assert!(FieldSet::from_fields_v1(&json!({"x:y": {}})).is_err());
        assert!(FieldSet::from_fields_v1(&json!([1])).is_err());
    }

    #[test]
    fn set_algebra() {
        let mut a = FieldSet::new();
        a.insert(&["f:data", "f:a"]);
        a.insert(&["f:data", "f:b"]);
        let mut b = FieldSet::new();
        b.insert(&["f:data", "f:b"]);
        b.insert(&["f:data", "f:c"]);
        assert_eq!(a.intersection(&b).paths(), vec![vec!["f:data", "f:b"]]);
        assert_eq!(a.difference(&b).paths(), vec![vec!["f:data", "f:a"]]);
        let mut u = a.clone();
        u.union(&b);
        assert_eq!(u.paths().len(), 3);
        u.remove_tree(&["f:data", "f:a"]);
        assert_eq!(u.paths().len(), 2);
        u.remove_tree(&["f:data"]);
        assert!(u.is_empty());
        assert_eq!(u.to_fields_v1(), json!({}));
        assert_eq!(
            path_string(&[
                "f:ports".to_string(),
                "k:{\"containerPort\":80,\"protocol\":\"TCP\"}".to_string()
            ]),
            ".ports[containerPort=80,protocol=\"TCP\"]"
        );
        assert_eq!(
            path_string(&["f:finalizers".to_string(), "v:\"x\"".to_string()]),
            ".finalizers[=\"x\"]"
        );
    }
}
