//! Strategic merge patch (`application/strategic-merge-patch+json`), with
//! upstream's semantics (k8s.io/apimachinery `strategicpatch`, applied as the
//! API server applies it: parallel deletion lists merged, unmatched nulls
//! ignored).
//!
//! Objects merge key by key, `null` deletes. A list merges only where its
//! field's patch strategy says `merge`: objects by the field's merge key,
//! scalars as a set; any other list is replaced. Directives:
//! - `$patch: replace` (an object or list is replaced, not merged),
//!   `$patch: delete` (an object is emptied; a list item with that merge key
//!   is removed), `$patch: merge` (the default for objects);
//! - `$retainKeys: [..]`: keys of the original object not listed are cleared;
//! - `$setElementOrder/<field>: [..]`: the order of the merged list;
//! - `$deleteFromPrimitiveList/<field>: [..]`: scalars removed from a list.
//!
//! Merged lists keep the patch's order, with items only the server had
//! placed by their original order (upstream's `mergeSortedSlice`).

use serde_json::{Map, Value};

use crate::Status;
use crate::structure::{Member, Shape, Types};

const DIRECTIVE: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const SET_ORDER: &str = "$setElementOrder/";
const DELETE_FROM: &str = "$deleteFromPrimitiveList/";

/// Applies `patch` to `original`, whose type has the shape `root` in `types`.
pub fn apply(
    types: &Types,
    root: &Shape,
    original: &Value,
    patch: &Value,
) -> Result<Value, Status> {
    let Value::Object(patch) = patch else {
        return Err(Status::bad_request(
            "invalid JSON document: a strategic merge patch must be a JSON object",
        ));
    };
    let original = match original {
        Value::Object(map) => map.clone(),
        _ => Map::new(),
    };
    let merger = Merger { types };
    Ok(Value::Object(merger.map(original, patch.clone(), root)?))
}

fn bad(message: impl Into<String>) -> Status {
    Status::bad_request(message)
}

fn unprocessable(message: impl Into<String>) -> Status {
    Status::new(422, "Invalid", message)
}

fn no_merge_key(item: &Value, key: &str) -> Status {
    bad(format!(
        "map: {item} does not contain declared merge key: {key}"
    ))
}

/// The JSON type of a value, as Go's `reflect.TypeOf` tells them apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Null,
    Bool,
    Number,
    String,
    List,
    Map,
}

fn kind(v: &Value) -> Kind {
    match v {
        Value::Null => Kind::Null,
        Value::Bool(_) => Kind::Bool,
        Value::Number(_) => Kind::Number,
        Value::String(_) => Kind::String,
        Value::Array(_) => Kind::List,
        Value::Object(_) => Kind::Map,
    }
}

/// The one element type of the given lists; `None` when all are empty.
fn element_kind(lists: &[&[Value]]) -> Result<Option<Kind>, Status> {
    let mut found = None;
    for v in lists.iter().flat_map(|l| l.iter()) {
        let k = kind(v);
        if k == Kind::List {
            return Err(unprocessable("lists of lists are not supported"));
        }
        match found {
            None => found = Some(k),
            Some(f) if f != k => {
                return Err(bad(format!(
                    "list element types are not identical: {}",
                    Value::Array(lists.iter().flat_map(|l| l.iter().cloned()).collect())
                )));
            }
            Some(_) => {}
        }
    }
    Ok(found)
}

/// Removes `null` values from objects, recursively (a patch adding a field
/// the original lacks carries no deletions).
fn discard_nulls(v: &mut Value) {
    match v {
        Value::Object(map) => {
            map.retain(|_, v| !v.is_null());
            map.values_mut().for_each(discard_nulls);
        }
        Value::Array(items) => items.iter_mut().for_each(discard_nulls),
        _ => {}
    }
}

/// A patch value with its directives removed; `None` when the value itself
/// is a `$patch` directive object.
fn without_directives(v: Value) -> Option<Value> {
    match v {
        Value::Object(map) => {
            if map.contains_key(DIRECTIVE) {
                return None;
            }
            let mut out = Map::new();
            for (k, v) in map {
                if k == RETAIN_KEYS || k.starts_with(SET_ORDER) || k.starts_with(DELETE_FROM) {
                    continue;
                }
                if let Some(v) = without_directives(v) {
                    out.insert(k, v);
                }
            }
            Some(Value::Object(out))
        }
        Value::Array(items) => Some(Value::Array(
            items.into_iter().filter_map(without_directives).collect(),
        )),
        other => Some(other),
    }
}

/// The value a list item is identified by: its merge key's value, or itself.
fn identity<'a>(item: &'a Value, key: Option<&str>) -> Option<&'a Value> {
    match key {
        Some(key) => item.get(key),
        None => Some(item),
    }
}

fn position(list: &[Value], item: &Value, key: Option<&str>) -> Option<usize> {
    let id = identity(item, key)?;
    list.iter().position(|v| identity(v, key) == Some(id))
}

struct Merger<'t> {
    types: &'t Types,
}

impl Merger<'_> {
    fn map(
        &self,
        mut original: Map<String, Value>,
        mut patch: Map<String, Value>,
        shape: &Shape,
    ) -> Result<Map<String, Value>, Status> {
        if let Some(directive) = patch.remove(DIRECTIVE) {
            return match directive.as_str() {
                Some("replace") => Ok(match without_directives(Value::Object(patch)) {
                    Some(Value::Object(map)) => map,
                    _ => Map::new(),
                }),
                Some("delete") => Ok(Map::new()),
                _ => Err(bad(format!(
                    "Unknown patch type: {directive} in map: {}",
                    Value::Object(patch)
                ))),
            };
        }
        self.retain_keys(&mut original, &mut patch)?;
        self.set_element_orders(&mut original, &mut patch, shape)?;

        for (key, value) in patch {
            let (key, delete_list) = match key.strip_prefix(DELETE_FROM) {
                // Upstream reads `$deleteFromPrimitiveList/` as deleting
                // from a field that is never there.
                Some("") => continue,
                Some(field) => (field.to_string(), true),
                None => (key, false),
            };
            if value.is_null() {
                original.remove(&key);
                continue;
            }
            let member = self.types.member(shape, &key);
            let current = original.remove(&key);
            let merged = match current {
                Some(Value::Object(current)) if value.is_object() => {
                    let Value::Object(value) = value else {
                        unreachable!("checked above")
                    };
                    if member.patch_replace {
                        Some(Value::Object(value))
                    } else {
                        Some(Value::Object(self.map(current, value, member.shape)?))
                    }
                }
                Some(Value::Array(current)) if value.is_array() => {
                    let Value::Array(value) = value else {
                        unreachable!("checked above")
                    };
                    if member.patch_merge || delete_list {
                        Some(Value::Array(self.list(
                            current,
                            value,
                            &member,
                            delete_list,
                        )?))
                    } else {
                        Some(Value::Array(value))
                    }
                }
                // Absent, or of another type: the patch's value, unless
                // this is a deletion list (nothing to delete from).
                current if delete_list => current,
                _ => {
                    let mut value = value;
                    discard_nulls(&mut value);
                    without_directives(value)
                }
            };
            if let Some(merged) = merged {
                original.insert(key, merged);
            }
        }
        Ok(original)
    }

    /// `$retainKeys`: clears the original's keys not listed; every key the
    /// patch sets must be listed.
    fn retain_keys(
        &self,
        original: &mut Map<String, Value>,
        patch: &mut Map<String, Value>,
    ) -> Result<(), Status> {
        let Some(retain) = patch.remove(RETAIN_KEYS) else {
            return Ok(());
        };
        let malformed =
            || bad("invalid patch format of retainKeys: $retainKeys must be a list of field names");
        let Value::Array(retain) = retain else {
            return Err(malformed());
        };
        let keep: Vec<&str> = retain.iter().filter_map(Value::as_str).collect();
        for (k, v) in patch.iter() {
            if v.is_null() || k.starts_with(DELETE_FROM) || k.starts_with(SET_ORDER) {
                continue;
            }
            if !keep.contains(&k.as_str()) {
                return Err(bad(format!(
                    "invalid patch format of retainKeys: the patch sets {k:?}, which $retainKeys does not list"
                )));
            }
        }
        original.retain(|k, _| keep.contains(&k.as_str()));
        Ok(())
    }

    /// `$setElementOrder/<field>`: merges the field's list (if the patch has
    /// one) and orders the result.
    fn set_element_orders(
        &self,
        original: &mut Map<String, Value>,
        patch: &mut Map<String, Value>,
        shape: &Shape,
    ) -> Result<(), Status> {
        let keys: Vec<String> = patch
            .keys()
            .filter(|k| k.starts_with(SET_ORDER))
            .cloned()
            .collect();
        for directive in keys {
            let order = patch.remove(&directive).unwrap_or(Value::Null);
            let field = &directive[SET_ORDER.len()..];
            let malformed = || {
                bad(
                    "invalid patch format of setElementOrder list: $setElementOrder/<field> must be a list",
                )
            };
            if field.is_empty() {
                return Err(malformed());
            }
            let Value::Array(order) = order else {
                return Err(malformed());
            };
            let member = self.types.member(shape, field);
            let key = member.merge_key;
            let current = match original.get(field) {
                None => None,
                Some(Value::Array(l)) => Some(l.clone()),
                Some(other) => {
                    return Err(bad(format!("{other} of field {field} is not a list")));
                }
            };
            let patched = match patch.remove(field) {
                None => None,
                Some(Value::Array(l)) => Some(l),
                Some(other) => {
                    return Err(bad(format!("{other} of field {field} is not a list")));
                }
            };
            validate_order(patched.as_deref().unwrap_or_default(), &order, key)?;
            let kind = element_kind(&[
                current.as_deref().unwrap_or_default(),
                patched.as_deref().unwrap_or_default(),
            ])?;
            let merged = match (current.clone(), patched.clone()) {
                (Some(current), None) => current,
                (None, Some(patched)) => match without_directives(Value::Array(patched)) {
                    Some(Value::Array(l)) => l,
                    _ => Vec::new(),
                },
                (Some(current), Some(patched)) => {
                    if member.patch_merge {
                        self.list(current, patched, &member, false)?
                    } else {
                        patched
                    }
                }
                (None, None) => continue,
            };
            let Some(kind) = kind else {
                original.insert(field.to_string(), Value::Array(merged));
                continue;
            };
            let key = if kind == Kind::Map { key } else { None };
            if kind == Kind::Map && key.is_none() {
                return Err(bad(format!(
                    "cannot order the list {field}: it has no merge key"
                )));
            }
            let (in_order, server_only) = partition(merged, &order, key)?;
            let ordered = normalize_order(
                in_order,
                server_only,
                &order,
                current.as_deref().unwrap_or_default(),
                key,
            )?;
            original.insert(field.to_string(), Value::Array(ordered));
        }
        Ok(())
    }

    fn list(
        &self,
        original: Vec<Value>,
        patch: Vec<Value>,
        member: &Member<'_>,
        delete_list: bool,
    ) -> Result<Vec<Value>, Status> {
        if original.is_empty() && patch.is_empty() {
            return Ok(original);
        }
        let Some(kind) = element_kind(&[&original, &patch])? else {
            return Ok(original);
        };
        if kind != Kind::Map {
            if delete_list {
                return Ok(original
                    .into_iter()
                    .filter(|v| !patch.contains(v))
                    .collect());
            }
            let mut merged: Vec<Value> = Vec::with_capacity(original.len() + patch.len());
            for v in original.iter().chain(patch.iter()) {
                if !merged.contains(v) {
                    merged.push(v.clone());
                }
            }
            let (in_patch, server_only) = partition(merged, &patch, None)?;
            return normalize_order(in_patch, server_only, &patch, &original, None);
        }
        let Some(key) = member.merge_key else {
            return Err(bad(
                "cannot merge lists without merge key: the field's patch strategy names none",
            ));
        };
        let items = list_items(member.shape);

        // Items carrying a `$patch` directive act on the original first.
        let mut original = original;
        let mut plain = Vec::with_capacity(patch.len());
        let mut replace = false;
        for item in patch {
            match item.get(DIRECTIVE) {
                None => plain.push(item),
                Some(d) if d == "delete" => {
                    let id = item.get(key).ok_or_else(|| no_merge_key(&item, key))?;
                    original.retain(|v| v.get(key) != Some(id));
                }
                Some(d) if d == "replace" => replace = true,
                Some(d) if d == "merge" => {
                    return Err(bad("merging lists cannot yet be specified in the patch"));
                }
                Some(d) => {
                    return Err(bad(format!("Unknown patch type: {d} in map: {item}")));
                }
            }
        }
        let (original, plain) = if replace {
            (plain, Vec::new())
        } else {
            (original, plain)
        };

        let mut merged = original.clone();
        for item in &plain {
            let id = item.get(key).ok_or_else(|| no_merge_key(item, key))?;
            match merged.iter().position(|v| v.get(key) == Some(id)) {
                Some(i) => {
                    let (Value::Object(current), Value::Object(patch)) =
                        (std::mem::take(&mut merged[i]), item.clone())
                    else {
                        return Err(bad(format!("value for key {key} is not a map")));
                    };
                    merged[i] = Value::Object(self.map(current, patch, items)?);
                }
                None => {
                    let mut item = item.clone();
                    discard_nulls(&mut item);
                    if let Some(item) = without_directives(item) {
                        merged.push(item);
                    }
                }
            }
        }
        let (in_patch, server_only) = partition(merged, &plain, Some(key))?;
        normalize_order(in_patch, server_only, &plain, &original, Some(key))
    }
}

/// The shape of a list field's items.
fn list_items(shape: &Shape) -> &Shape {
    match shape {
        Shape::List(list) => &list.items,
        _ => &Shape::Untyped,
    }
}

/// Checks that the patch list's items appear in the `$setElementOrder` list
/// in the same relative order.
fn validate_order(patch: &[Value], order: &[Value], key: Option<&str>) -> Result<(), Status> {
    if patch.is_empty() || order.is_empty() {
        return Ok(());
    }
    let items: Vec<&Value> = patch
        .iter()
        .filter(|v| v.get(DIRECTIVE).is_none() || key.is_none())
        .collect();
    let (mut p, mut o) = (0, 0);
    while p < items.len() && o < order.len() {
        let equal = match key {
            Some(key) => {
                let left = items[p]
                    .get(key)
                    .ok_or_else(|| no_merge_key(items[p], key))?;
                let right = order[o]
                    .get(key)
                    .ok_or_else(|| no_merge_key(&order[o], key))?;
                left == right
            }
            None => items[p] == &order[o],
        };
        if equal {
            p += 1;
        }
        o += 1;
    }
    if p < items.len() {
        return Err(bad(format!(
            "invalid patch format of setElementOrder list: the order in the patch list {} doesn't match the $setElementOrder list {}",
            Value::Array(patch.to_vec()),
            Value::Array(order.to_vec())
        )));
    }
    Ok(())
}

/// Splits `merged` into the items present in `by` and the rest.
fn partition(
    merged: Vec<Value>,
    by: &[Value],
    key: Option<&str>,
) -> Result<(Vec<Value>, Vec<Value>), Status> {
    let mut present = Vec::new();
    let mut rest = Vec::new();
    for item in merged {
        if let Some(key) = key
            && item.get(key).is_none()
        {
            return Err(no_merge_key(&item, key));
        }
        if position(by, &item, key).is_some() {
            present.push(item);
        } else {
            rest.push(item);
        }
    }
    Ok((present, rest))
}

/// Orders `list` by `order` (stable; items not in `order` keep their
/// place after those that are), with `$patch: delete` items last.
fn sort_by_order(list: Vec<Value>, order: &[Value], key: Option<&str>) -> Vec<Value> {
    let (mut kept, deleted): (Vec<Value>, Vec<Value>) = list
        .into_iter()
        .partition(|v| key.is_none() || v.get(DIRECTIVE).is_none_or(|d| d != "delete"));
    kept.sort_by_key(|v| position(order, v, key).unwrap_or(usize::MAX));
    kept.extend(deleted);
    kept
}

/// The patch's items in the patch order, interleaved with the items only
/// the server had, which keep their relative server order.
fn normalize_order(
    patch_items: Vec<Value>,
    server_only: Vec<Value>,
    patch_order: &[Value],
    server_order: &[Value],
    key: Option<&str>,
) -> Result<Vec<Value>, Status> {
    if let Some(key) = key {
        for v in patch_items.iter().chain(patch_order) {
            if v.get(key).is_none() && v.get(DIRECTIVE).is_none() {
                return Err(no_merge_key(v, key));
            }
        }
    }
    let right = sort_by_order(patch_items, patch_order, key);
    let left = sort_by_order(server_only, server_order, key);
    let mut out = Vec::with_capacity(left.len() + right.len());
    let mut left = left.into_iter().peekable();
    let mut right = right.into_iter().peekable();
    loop {
        match (left.peek(), right.peek()) {
            (Some(l), Some(r)) => {
                let before = match (
                    position(server_order, l, key),
                    position(server_order, r, key),
                ) {
                    (Some(li), Some(ri)) => li < ri,
                    _ => false,
                };
                let next = if before { left.next() } else { right.next() };
                out.extend(next);
            }
            (Some(_), None) => out.extend(left.by_ref()),
            (None, Some(_)) => out.extend(right.by_ref()),
            (None, None) => break,
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
