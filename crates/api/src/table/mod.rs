//! Server-side Table output (`meta.k8s.io/v1 Table`): the columns `kubectl
//! get` prints, per kind, as upstream's printers define them
//! (`pkg/printers/internalversion/printers.go`, and kube-aggregator's for
//! APIServices). Columns of priority 1 are the `-o wide` ones; the server
//! always sends their cells, and kubectl hides them unless asked.
//!
//! Each kind's printer yields its columns and cells together,
//! so the two cannot disagree; a kind without a printer gets upstream's
//! default table (Name, Created At).

pub(crate) mod cluster;
pub(crate) mod core;
mod read;
pub(crate) mod workloads;

use serde_json::{Value, json};

use crate::json::str_at;
use crate::registry::ResourceDef;
use crate::time::{human_duration, parse_rfc3339};

/// One column definition.
#[derive(Debug, Clone, Copy)]
pub struct Column {
    pub name: &'static str,
    pub kind: &'static str,
    pub format: &'static str,
    pub description: &'static str,
    pub priority: u8,
}

/// A column and one object's value in it.
pub type Cell = (Column, Value);

/// A kind's printer: every cell of one object's row (the object, and now
/// in Unix seconds), in column order. A kind's strategy names its printer.
pub type Printer = fn(&Value, i64) -> Vec<Cell>;

const fn col(name: &'static str, kind: &'static str, description: &'static str) -> Column {
    Column {
        name,
        kind,
        format: "",
        description,
        priority: 0,
    }
}

const fn wide(name: &'static str, description: &'static str) -> Column {
    Column {
        name,
        kind: "string",
        format: "",
        description,
        priority: 1,
    }
}

const NAME: Column = Column {
    name: "Name",
    kind: "string",
    format: "name",
    description: "Name must be unique within a namespace.",
    priority: 0,
};

const CREATED_AT: Column = col(
    "Created At",
    "date",
    "CreationTimestamp is a timestamp representing the server time when this object was created.",
);

/// The columns of a kind.
pub fn columns(def: &ResourceDef) -> Vec<Column> {
    match def.strategy.printer {
        // A printer asked about no object names its columns all the same.
        Some(print) => print(&Value::Null, 0).into_iter().map(|(c, _)| c).collect(),
        None => vec![NAME, CREATED_AT],
    }
}

/// The column definitions of a Table, as JSON.
pub fn column_definitions(def: &ResourceDef) -> Value {
    if let Some(custom) = &def.custom {
        // A custom resource: its definition's printer columns after the name.
        let mut out = vec![
            json!({"name": NAME.name, "type": NAME.kind, "format": NAME.format, "description": NAME.description, "priority": 0}),
        ];
        out.extend(custom.printer_columns.iter().map(|c| {
            json!({"name": c.name, "type": c.type_, "format": c.format, "description": c.description, "priority": c.priority})
        }));
        return Value::Array(out);
    }
    Value::Array(
        columns(def)
            .iter()
            .map(|c| json!({"name": c.name, "type": c.kind, "format": c.format, "description": c.description, "priority": c.priority}))
            .collect(),
    )
}

/// The cells of one object's row, matching [`column_definitions`].
pub fn cells(def: &ResourceDef, o: &Value, now: i64) -> Vec<Value> {
    if let Some(custom) = &def.custom {
        let mut row = vec![json!(str_at(o, "/metadata/name"))];
        for column in &custom.printer_columns {
            let value = crate::crd::json_path(o, &column.json_path);
            row.push(match (column.type_.as_str(), value) {
                (_, None) => Value::Null,
                ("date", Some(Value::String(t))) => match parse_rfc3339(t) {
                    Some(at) => json!(human_duration(now - at)),
                    None => json!(t),
                },
                (_, Some(v)) => v.clone(),
            });
        }
        return row;
    }
    match def.strategy.printer {
        Some(print) => print(o, now).into_iter().map(|(_, v)| v).collect(),
        None => vec![
            json!(str_at(o, "/metadata/name")),
            json!(str_at(o, "/metadata/creationTimestamp")),
        ],
    }
}

#[cfg(test)]
mod tests;
