//! Walks over objects with their structure, as upstream's
//! structured-merge-diff does: the set of fields an object sets, the
//! comparison of two objects, the merge of an applied configuration into a
//! live object, and the removal of a set of fields.

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value};

use super::fieldset::FieldSet;
use crate::structure::{List, ListType, Shape, Types};

/// What a value of some shape is, for walking.
enum Node<'a> {
    /// Compared and owned whole: scalars, atomic lists, maps and structs.
    Leaf,
    /// Keys are declared fields (`f:` elements); a field with no declared
    /// shape is untyped.
    Struct(usize),
    /// Keys are map keys, all with the same shape.
    Map(&'a Shape),
    /// Items identified by their key or value.
    List(&'a List),
}

static UNTYPED: Shape = Shape::Untyped;

pub struct Walker<'t> {
    pub types: &'t Types,
}

impl<'t> Walker<'t> {
    pub fn new(types: &'t Types) -> Self {
        Walker { types }
    }

    /// How `value` is walked as a `shape`: by its shape, where the value
    /// agrees with it, or as a leaf.
    fn node<'s>(&'s self, shape: &'s Shape, value: &Value) -> Node<'s> {
        match (shape, value) {
            (Shape::Struct(i), Value::Object(_)) => {
                if self.types.get(*i).atomic {
                    Node::Leaf
                } else {
                    Node::Struct(*i)
                }
            }
            (Shape::Map(m), Value::Object(_)) if !m.atomic => Node::Map(&m.values),
            (Shape::Untyped, Value::Object(_)) => Node::Map(&UNTYPED),
            (Shape::List(l), Value::Array(_)) if l.list_type != ListType::Atomic => Node::List(l),
            _ => Node::Leaf,
        }
    }

    /// The shape of a struct's or map's member `key`.
    fn member<'s>(&'s self, node: &Node<'s>, key: &str) -> &'s Shape {
        match node {
            Node::Struct(i) => self
                .types
                .get(*i)
                .fields
                .get(key)
                .map_or(&UNTYPED, |f| &f.shape),
            Node::Map(values) => values,
            _ => &UNTYPED,
        }
    }

    fn is_declared(&self, node: &Node<'_>, key: &str) -> bool {
        matches!(node, Node::Struct(i) if self.types.get(*i).fields.contains_key(key))
    }

    /// The path element of a list item: `k:{..}` of its key fields (a
    /// missing key field takes its default), or `v:<value>` of a set item.
    pub fn item_element(&self, list: &List, item: &Value) -> String {
        match &list.list_type {
            ListType::Map(keys) => {
                let fields = match &list.items {
                    Shape::Struct(i) => Some(&self.types.get(*i).fields),
                    _ => None,
                };
                let mut key = Map::new();
                for k in keys {
                    let value = item.get(k).filter(|v| !v.is_null()).cloned().or_else(|| {
                        fields
                            .and_then(|f| f.get(k))
                            .and_then(|f| f.default.clone())
                    });
                    if let Some(value) = value {
                        key.insert(k.clone(), value);
                    }
                }
                format!("k:{}", Value::Object(key))
            }
            _ => format!("v:{item}"),
        }
    }

    /// The set of fields `value` sets (upstream's `ToFieldSet`): leaves,
    /// list items, map keys, and struct fields that are null or empty.
    pub fn field_set(&self, shape: &Shape, value: &Value) -> FieldSet {
        let mut set = FieldSet::new();
        self.collect(shape, value, &mut set);
        set
    }

    /// Fills `out` (the node of `value`) with what `value` sets below it;
    /// true when `value` is a leaf, owned whole.
    fn collect(&self, shape: &Shape, value: &Value, out: &mut FieldSet) -> bool {
        let node = self.node(shape, value);
        match (&node, value) {
            (Node::Leaf, _) => true,
            (Node::List(list), Value::Array(items)) => {
                for item in items {
                    let child = out.child_mut(self.item_element(list, item));
                    self.collect(&list.items, item, child);
                    child.set_member();
                }
                false
            }
            (Node::Struct(_) | Node::Map(_), Value::Object(map)) => {
                for (key, v) in map {
                    let declared = self.is_declared(&node, key);
                    let child = out.child_mut(format!("f:{key}"));
                    let leaf = self.collect(self.member(&node, key), v, child);
                    let empty = v.as_object().is_some_and(Map::is_empty);
                    if leaf || v.is_null() || empty || !declared {
                        child.set_member();
                    }
                }
                false
            }
            _ => true,
        }
    }

    /// The items of a list by path element, in order.
    fn index<'v>(&self, list: &List, items: &'v [Value]) -> Vec<(String, &'v Value)> {
        items
            .iter()
            .map(|item| (self.item_element(list, item), item))
            .collect()
    }

    /// Compares `old` and `new`: what `new` added, changed and removed —
    /// leaves, and the list items and map keys that came or went. A
    /// declared struct field holding an object is not recorded itself
    /// (upstream compares with Go's zero objects, where such fields are
    /// always present), only what it holds.
    pub fn compare(&self, shape: &Shape, old: Option<&Value>, new: Option<&Value>) -> Comparison {
        self.compare_at(shape, old, new, false, true)
    }

    /// The comparison of the subtree at one path, built bottom-up: each
    /// set's node for this path.
    fn compare_at(
        &self,
        shape: &Shape,
        old: Option<&Value>,
        new: Option<&Value>,
        named_field: bool,
        root: bool,
    ) -> Comparison {
        let mut out = Comparison::default();
        let probe = new.or(old).unwrap_or(&Value::Null);
        let node = self.node(shape, probe);
        let same_kind = match (old, new) {
            (Some(a), Some(b)) => std::mem::discriminant(a) == std::mem::discriminant(b),
            _ => true,
        };
        match (&node, same_kind) {
            (Node::Struct(_) | Node::Map(_), true) => {
                let empty = Map::new();
                let o = old.and_then(Value::as_object).unwrap_or(&empty);
                let n = new.and_then(Value::as_object).unwrap_or(&empty);
                for key in o.keys().chain(n.keys().filter(|k| !o.contains_key(*k))) {
                    let (a, b) = (o.get(key), n.get(key));
                    if a.is_some() && a == b {
                        continue;
                    }
                    let child = self.compare_at(
                        self.member(&node, key),
                        a,
                        b,
                        self.is_declared(&node, key),
                        false,
                    );
                    out.adopt(format!("f:{key}"), child);
                }
            }
            (Node::List(list), true) => {
                let empty = Vec::new();
                let o = self.index(list, old.and_then(Value::as_array).unwrap_or(&empty));
                let n = self.index(list, new.and_then(Value::as_array).unwrap_or(&empty));
                let old_items: HashMap<&str, &Value> =
                    o.iter().map(|(k, v)| (k.as_str(), *v)).collect();
                let new_items: HashMap<&str, &Value> =
                    n.iter().map(|(k, v)| (k.as_str(), *v)).collect();
                let mut seen = HashSet::new();
                for (key, _) in o.iter().chain(n.iter()) {
                    if !seen.insert(key.as_str()) {
                        continue;
                    }
                    let (a, b) = (
                        old_items.get(key.as_str()).copied(),
                        new_items.get(key.as_str()).copied(),
                    );
                    if a.is_some() && a == b {
                        continue;
                    }
                    let child = self.compare_at(&list.items, a, b, false, false);
                    out.adopt(key.clone(), child);
                }
            }
            _ => {
                match (old, new) {
                    (None, Some(_)) => out.added.set_member(),
                    (Some(_), None) => out.removed.set_member(),
                    (Some(a), Some(b)) if a != b => out.modified.set_member(),
                    _ => {}
                }
                return out;
            }
        }
        let struct_field = named_field && matches!(node, Node::Struct(_));
        if !root && !struct_field {
            match (old, new) {
                (None, Some(_)) => out.added.set_member(),
                (Some(_), None) => out.removed.set_member(),
                _ => {}
            }
        }
        out
    }

    /// `config` merged into `live` (upstream's `Merge`): the configuration's
    /// values win, objects merge key by key, associative lists and sets
    /// merge by item, anything atomic is replaced.
    pub fn merge(&self, shape: &Shape, live: Option<&Value>, config: &Value) -> Value {
        let Some(live) = live else {
            return config.clone();
        };
        let node = self.node(shape, config);
        match (&node, live, config) {
            (Node::Struct(_) | Node::Map(_), Value::Object(l), Value::Object(c)) => {
                let mut out = l.clone();
                for (key, value) in c {
                    if value.is_null() {
                        out.remove(key);
                        continue;
                    }
                    let merged = self.merge(self.member(&node, key), l.get(key), value);
                    out.insert(key.clone(), merged);
                }
                Value::Object(out)
            }
            (Node::List(list), Value::Array(l), Value::Array(c)) => {
                Value::Array(self.merge_list(list, l, c))
            }
            _ => config.clone(),
        }
    }

    /// Merges list items by key: items only the live list has keep their
    /// place, shared items follow the configuration's order, new items go
    /// where the configuration puts them.
    fn merge_list(&self, list: &List, live: &[Value], config: &[Value]) -> Vec<Value> {
        let l = self.index(list, live);
        let c = self.index(list, config);
        let in_live: HashMap<&str, &Value> = l.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        let in_config: HashSet<&str> = c.iter().map(|(k, _)| k.as_str()).collect();
        let shared: Vec<&str> = c
            .iter()
            .map(|(k, _)| k.as_str())
            .filter(|k| in_live.contains_key(k))
            .collect();
        let mut next_shared = 0;
        let mut emitted: HashSet<&str> = HashSet::new();
        let mut out = Vec::with_capacity(live.len().max(config.len()));
        let (mut li, mut ci) = (0, 0);
        while li < l.len() || ci < c.len() {
            if li < l.len() && ci < c.len() {
                let key = l[li].0.as_str();
                if key == c[ci].0 {
                    out.push(self.merge(&list.items, Some(l[li].1), c[ci].1));
                    emitted.insert(key);
                    if shared.get(next_shared) == Some(&key) {
                        next_shared += 1;
                    }
                    li += 1;
                    ci += 1;
                    continue;
                }
                if in_config.contains(key)
                    && shared.get(next_shared).is_some_and(|next| *next != key)
                {
                    li += 1;
                    continue;
                }
            }
            if li < l.len() {
                let key = l[li].0.as_str();
                if !in_config.contains(key) {
                    out.push(l[li].1.clone());
                    li += 1;
                    continue;
                }
                if emitted.contains(key) {
                    li += 1;
                    continue;
                }
            }
            if ci < c.len() {
                let key = c[ci].0.as_str();
                out.push(self.merge(&list.items, in_live.get(key).copied(), c[ci].1));
                emitted.insert(key);
                if shared.get(next_shared) == Some(&key) {
                    next_shared += 1;
                }
                ci += 1;
            }
        }
        out
    }

    /// `value` without the members of `set` (each removed with everything
    /// below it).
    pub fn remove(&self, shape: &Shape, value: &Value, set: &FieldSet) -> Value {
        let node = self.node(shape, value);
        match (&node, value) {
            (Node::Struct(_) | Node::Map(_), Value::Object(map)) => {
                let mut out = Map::new();
                for (key, v) in map {
                    match set.child(&format!("f:{key}")) {
                        Some(child) if child.is_member() => {}
                        Some(child) => {
                            out.insert(key.clone(), self.remove(self.member(&node, key), v, child));
                        }
                        None => {
                            out.insert(key.clone(), v.clone());
                        }
                    }
                }
                Value::Object(out)
            }
            (Node::List(list), Value::Array(items)) => {
                let mut out = Vec::with_capacity(items.len());
                for item in items {
                    match set.child(&self.item_element(list, item)) {
                        Some(child) if child.is_member() => {}
                        Some(child) => out.push(self.remove(&list.items, item, child)),
                        None => out.push(item.clone()),
                    }
                }
                Value::Array(out)
            }
            _ => value.clone(),
        }
    }
}

/// What a change added, modified and removed, as field sets.
#[derive(Debug, Default)]
pub struct Comparison {
    pub added: FieldSet,
    pub modified: FieldSet,
    pub removed: FieldSet,
}

impl Comparison {
    /// Takes the comparison of a child path in under `element`.
    fn adopt(&mut self, element: String, child: Comparison) {
        for (set, part) in [
            (&mut self.added, child.added),
            (&mut self.modified, child.modified),
            (&mut self.removed, child.removed),
        ] {
            if !part.is_blank() {
                set.insert_child(element.clone(), part);
            }
        }
    }
}
