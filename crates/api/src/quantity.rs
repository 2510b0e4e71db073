//! Quantities (`resource.Quantity`): the fixed-point numbers of resource
//! requests, limits and capacities. Upstream parses each one when it decodes
//! an object — a malformed one makes the request a 400 — and writes it back
//! in canonical form (`1.5` → `1500m`, `1.5Gi` → `1536Mi`, `1000m` → `1`):
//! the largest suffix that keeps the number whole, in the style (binary,
//! decimal SI or exponent) the client wrote. This module does the same, for
//! every Quantity field of the built-in kinds, as their OpenAPI schemas
//! place them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use serde_json::{Map, Value};

use crate::Status;
use crate::registry::ResourceDef;

/// Upstream's parse error, word for word.
pub const MALFORMED: &str =
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";

const QUANTITY: &str = "io.k8s.apimachinery.pkg.api.resource.Quantity";

/// How the quantity was written, and so how it is written back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    BinarySI,
    DecimalSI,
    DecimalExponent,
}

/// A parsed quantity: `mantissa × 10^scale`, exact, rounded up to
/// nano-units as upstream rounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quantity {
    mantissa: i128,
    scale: i32,
    format: Format,
}

const DECIMAL_SUFFIXES: &[(&str, i32)] = &[
    ("n", -9),
    ("u", -6),
    ("m", -3),
    ("", 0),
    ("k", 3),
    ("M", 6),
    ("G", 9),
    ("T", 12),
    ("P", 15),
    ("E", 18),
];
const BINARY_SUFFIXES: &[(&str, u32)] = &[
    ("Ki", 10),
    ("Mi", 20),
    ("Gi", 30),
    ("Ti", 40),
    ("Pi", 50),
    ("Ei", 60),
];

/// Digits beyond which a mantissa is not kept exactly (i128 holds 38).
const MAX_DIGITS: usize = 30;

impl Quantity {
    /// Parses `text` as upstream's `ParseQuantity` does.
    pub fn parse(text: &str) -> Result<Quantity, &'static str> {
        let (sign, rest) = match text.as_bytes().first() {
            Some(b'-') => (-1, &text[1..]),
            Some(b'+') => (1, &text[1..]),
            _ => (1, text),
        };
        let number_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, suffix) = rest.split_at(number_end);
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        if (whole.is_empty() && fraction.is_empty()) || fraction.contains('.') {
            return Err(MALFORMED);
        }
        let digits = format!("{whole}{fraction}");
        let digits = digits.trim_start_matches('0');
        if digits.len() > MAX_DIGITS {
            return Err(MALFORMED);
        }
        let mut mantissa: i128 = if digits.is_empty() {
            0
        } else {
            digits.parse().map_err(|_| MALFORMED)?
        };
        let mut scale = -(fraction.len() as i32);
        let format = if let Some(&(_, power)) = BINARY_SUFFIXES.iter().find(|(s, _)| *s == suffix) {
            mantissa = mantissa.checked_mul(1i128 << power).ok_or(MALFORMED)?;
            Format::BinarySI
        } else if let Some(&(_, exponent)) = DECIMAL_SUFFIXES.iter().find(|(s, _)| *s == suffix) {
            scale += exponent;
            Format::DecimalSI
        } else if let Some(exponent) = suffix.strip_prefix(['e', 'E']) {
            let exponent: i32 = exponent.parse().map_err(|_| MALFORMED)?;
            if !(-40..=40).contains(&exponent) {
                return Err(MALFORMED);
            }
            scale += exponent;
            Format::DecimalExponent
        } else {
            return Err(MALFORMED);
        };
        // Rounded up (away from zero) to nano-units.
        if scale < -9 {
            let divisor = 10i128.checked_pow((-9 - scale) as u32).ok_or(MALFORMED)?;
            let (quotient, remainder) = (mantissa / divisor, mantissa % divisor);
            mantissa = quotient + i128::from(remainder != 0);
            scale = -9;
        }
        let mut q = Quantity {
            mantissa: sign * mantissa,
            scale,
            format,
        };
        // Below one, binary quantities are written as decimal ones.
        if q.format == Format::BinarySI && q.mantissa != 0 && q.below_one() {
            q.format = Format::DecimalSI;
        }
        Ok(q)
    }

    fn below_one(&self) -> bool {
        self.scale < 0 && self.mantissa.abs() < 10i128.pow((-self.scale) as u32)
    }

    /// The value as an integer, if it is whole.
    fn whole(&self) -> Option<i128> {
        if self.scale >= 0 {
            self.mantissa
                .checked_mul(10i128.checked_pow(self.scale as u32)?)
        } else {
            let divisor = 10i128.pow((-self.scale) as u32);
            (self.mantissa % divisor == 0).then(|| self.mantissa / divisor)
        }
    }

    /// Upstream's canonical form (`Quantity.String()`).
    pub fn canonical(&self) -> String {
        if self.mantissa == 0 {
            return "0".into();
        }
        if self.format == Format::BinarySI {
            // Binary only when whole and at least 1Ki in size; else decimal.
            if let Some(mut value) = self.whole().filter(|v| v.abs() >= 1024) {
                let mut power = 0;
                while value % 1024 == 0 && power < 60 {
                    value /= 1024;
                    power += 10;
                }
                let suffix = BINARY_SUFFIXES
                    .iter()
                    .find(|(_, p)| *p == power)
                    .map_or("", |(s, _)| s);
                return format!("{value}{suffix}");
            }
        }
        // Trailing zeros into the exponent, then the exponent down to a
        // multiple of three.
        let (mut mantissa, mut exponent) = (self.mantissa, self.scale);
        while mantissa % 10 == 0 {
            mantissa /= 10;
            exponent += 1;
        }
        while exponent.rem_euclid(3) != 0 {
            mantissa *= 10;
            exponent -= 1;
        }
        if self.format == Format::DecimalExponent {
            return match exponent {
                0 => mantissa.to_string(),
                e => format!("{mantissa}e{e}"),
            };
        }
        // Past exa, the mantissa grows instead.
        while exponent > 18 {
            mantissa *= 1000;
            exponent -= 3;
        }
        let suffix = DECIMAL_SUFFIXES
            .iter()
            .find(|(_, e)| *e == exponent)
            .map_or("", |(s, _)| s);
        format!("{mantissa}{suffix}")
    }

    /// Whether the quantity is below zero.
    pub fn is_negative(&self) -> bool {
        self.mantissa < 0
    }

    /// Compares two quantities by value.
    pub fn cmp_value(&self, other: &Quantity) -> std::cmp::Ordering {
        let scale = self.scale.min(other.scale);
        let at = |q: &Quantity| {
            q.mantissa
                .saturating_mul(10i128.saturating_pow((q.scale - scale) as u32))
        };
        at(self).cmp(&at(other))
    }

    /// A whole number, written as a decimal one.
    pub fn from_int(value: i64) -> Quantity {
        Quantity {
            mantissa: i128::from(value),
            scale: 0,
            format: Format::DecimalSI,
        }
    }

    /// Zero.
    pub fn zero() -> Quantity {
        Quantity::from_int(0)
    }

    /// Whether the quantity is zero.
    pub fn is_zero(&self) -> bool {
        self.mantissa == 0
    }

    /// The sum, written as `self` is (as `other` is when `self` is zero),
    /// as upstream's `Quantity.Add`.
    pub fn add(&self, other: &Quantity) -> Quantity {
        self.combine(other, 1)
    }

    /// The difference, written as [`add`](Self::add) writes a sum.
    pub fn sub(&self, other: &Quantity) -> Quantity {
        self.combine(other, -1)
    }

    fn combine(&self, other: &Quantity, sign: i128) -> Quantity {
        let scale = self.scale.min(other.scale);
        let at = |q: &Quantity| {
            q.mantissa
                .saturating_mul(10i128.saturating_pow((q.scale - scale) as u32))
        };
        let format = if self.is_zero() {
            other.format
        } else {
            self.format
        };
        let mut sum = Quantity {
            mantissa: at(self).saturating_add(sign.saturating_mul(at(other))),
            scale,
            format,
        };
        // Keep mantissas small: trailing zeros back into the scale.
        while sum.mantissa != 0 && sum.mantissa % 10 == 0 && sum.scale < 0 {
            sum.mantissa /= 10;
            sum.scale += 1;
        }
        sum
    }

    /// The larger of the two (`self` when equal).
    pub fn max(self, other: Quantity) -> Quantity {
        if other.cmp_value(&self).is_gt() {
            other
        } else {
            self
        }
    }

    /// The value in thousandths, rounded up, saturating (upstream's
    /// `MilliValue`).
    pub fn milli_value(&self) -> i128 {
        self.scaled_value(-3)
    }

    /// The value rounded up to a whole number (upstream's `Value`).
    pub fn value(&self) -> i128 {
        self.scaled_value(0)
    }

    fn scaled_value(&self, unit: i32) -> i128 {
        if self.scale >= unit {
            self.mantissa
                .saturating_mul(10i128.saturating_pow((self.scale - unit) as u32))
        } else {
            let divisor = 10i128.pow((unit - self.scale) as u32);
            let (quotient, remainder) = (self.mantissa / divisor, self.mantissa % divisor);
            quotient + i128::from(remainder > 0)
        }
    }
}

impl std::fmt::Display for Quantity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.canonical())
    }
}

/// One step from a value to the Quantities inside it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    Field(String),
    /// Every item of a list.
    Items,
    /// Every value of a map.
    Values,
}

/// Puts every Quantity of a built-in object in canonical form; a malformed
/// one is a 400, as upstream's decoding makes it.
pub fn canonicalize(def: &ResourceDef, object: &mut Value) -> Result<(), Status> {
    if def.custom.is_some() {
        return Ok(());
    }
    let paths = paths_of(&def.schema_name);
    for path in paths.iter() {
        visit(object, path, &mut |value| {
            let text = match value {
                Value::String(s) => s.trim().to_string(),
                Value::Number(n) => n.to_string(),
                _ => return Err(MALFORMED),
            };
            *value = Value::String(Quantity::parse(&text)?.canonical());
            Ok(())
        })
        .map_err(|why| {
            Status::bad_request(format!(
                "{} in version {:?} cannot be handled as a {}: {why}",
                def.kind, def.version, def.kind
            ))
        })?;
    }
    Ok(())
}

fn visit(
    value: &mut Value,
    path: &[Step],
    f: &mut dyn FnMut(&mut Value) -> Result<(), &'static str>,
) -> Result<(), &'static str> {
    let Some((step, rest)) = path.split_first() else {
        return if value.is_null() { Ok(()) } else { f(value) };
    };
    match (step, value) {
        (Step::Field(name), Value::Object(map)) => match map.get_mut(name) {
            Some(child) => visit(child, rest, f),
            None => Ok(()),
        },
        (Step::Items, Value::Array(items)) => {
            items.iter_mut().try_for_each(|item| visit(item, rest, f))
        }
        (Step::Values, Value::Object(map)) => {
            map.values_mut().try_for_each(|child| visit(child, rest, f))
        }
        _ => Ok(()),
    }
}

/// Every path from an object to its Quantities.
type Paths = Arc<Vec<Vec<Step>>>;

/// The paths to Quantities in objects of a definition, worked out once.
fn paths_of(schema_name: &str) -> Paths {
    static PATHS: OnceLock<Mutex<HashMap<String, Paths>>> = OnceLock::new();
    let cache = PATHS.get_or_init(Default::default);
    let mut cache = cache.lock().unwrap_or_else(|e| e.into_inner());
    cache
        .entry(schema_name.to_string())
        .or_insert_with(|| {
            let definitions = crate::openapi::builtin_definitions();
            let mut out = Vec::new();
            let mut trail = Vec::new();
            collect(
                definitions,
                schema_name,
                &mut trail,
                &mut Vec::new(),
                &mut out,
            );
            Arc::new(out)
        })
        .clone()
}

/// The definition a property's schema names, through `allOf` wrappers.
fn reference(schema: &Value) -> Option<&str> {
    schema
        .get("$ref")
        .or_else(|| schema.pointer("/allOf/0/$ref"))
        .and_then(Value::as_str)
        .and_then(|r| r.strip_prefix("#/definitions/"))
}

fn collect(
    definitions: &Map<String, Value>,
    name: &str,
    trail: &mut Vec<Step>,
    open: &mut Vec<String>,
    out: &mut Vec<Vec<Step>>,
) {
    if name == QUANTITY {
        out.push(trail.clone());
        return;
    }
    // Recursive types (JSONSchemaProps) hold no Quantities.
    if open.iter().any(|n| n == name) {
        return;
    }
    let Some(properties) = definitions
        .get(name)
        .and_then(|d| d.get("properties"))
        .and_then(Value::as_object)
    else {
        return;
    };
    open.push(name.to_string());
    for (field, schema) in properties {
        trail.push(Step::Field(field.clone()));
        schema_paths(definitions, schema, trail, open, out);
        trail.pop();
    }
    open.pop();
}

fn schema_paths(
    definitions: &Map<String, Value>,
    schema: &Value,
    trail: &mut Vec<Step>,
    open: &mut Vec<String>,
    out: &mut Vec<Vec<Step>>,
) {
    if let Some(name) = reference(schema) {
        collect(definitions, name, trail, open, out);
    } else if let Some(items) = schema.get("items") {
        trail.push(Step::Items);
        schema_paths(definitions, items, trail, open, out);
        trail.pop();
    } else if let Some(values) = schema.get("additionalProperties").filter(|v| v.is_object()) {
        trail.push(Step::Values);
        schema_paths(definitions, values, trail, open, out);
        trail.pop();
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::Registry;

    fn canonical(text: &str) -> String {
        Quantity::parse(text).expect(text).canonical()
    }

    #[test]
    fn canonical_forms_are_upstreams() {
        for (written, canonical_form) in [
            ("1", "1"),
            ("1000m", "1"),
            ("1.5", "1500m"),
            ("0.5", "500m"),
            ("100m", "100m"),
            ("0.1m", "100u"),
            ("1000", "1k"),
            ("1500", "1500"),
            ("2000", "2k"),
            ("1.5Gi", "1536Mi"),
            ("1024Mi", "1Gi"),
            ("2000Mi", "2000Mi"),
            ("128974848", "128974848"),
            ("129e6", "129e6"),
            ("123Mi", "123Mi"),
            ("0.5Ki", "512"),
            ("1e3", "1e3"),
            ("12e2", "1200"),
            ("0", "0"),
            ("0Mi", "0"),
            ("-1", "-1"),
            ("+2k", "2k"),
            ("1.0000000001", "1000000001n"),
            ("0.5Mi", "512Ki"),
            (".5", "500m"),
            ("5.", "5"),
            ("1Ei", "1Ei"),
            ("8E", "8E"),
        ] {
            assert_eq!(canonical(written), canonical_form, "{written}");
        }
    }

    #[test]
    fn malformed_quantities_are_refused() {
        for bad in [
            "", "abc", "1.2.3", "1Zi", "Mi", "-", "1 Gi", "1e", "1ee3", "1.5.Gi",
        ] {
            assert_eq!(Quantity::parse(bad), Err(MALFORMED), "{bad:?}");
        }
    }

    #[test]
    fn a_pods_quantities_are_found_and_written_canonically() {
        let registry = Registry::builtin();
        let def = registry.get("", "v1", "pods").expect("def");
        let mut pod = json!({"spec": {
            "containers": [{"name": "a", "resources": {"requests": {"cpu": "1000m", "memory": "1024Mi"}, "limits": {"cpu": 2}}}],
            "volumes": [{"name": "v", "emptyDir": {"sizeLimit": "1.5Gi"}}],
            "overhead": {"cpu": "0.25"}
        }});
        canonicalize(def, &mut pod).expect("valid");
        assert_eq!(
            pod["spec"]["containers"][0]["resources"]["requests"],
            json!({"cpu": "1", "memory": "1Gi"})
        );
        assert_eq!(
            pod["spec"]["containers"][0]["resources"]["limits"]["cpu"],
            json!("2")
        );
        assert_eq!(
            pod["spec"]["volumes"][0]["emptyDir"]["sizeLimit"],
            json!("1536Mi")
        );
        assert_eq!(pod["spec"]["overhead"]["cpu"], json!("250m"));
        let mut bad = json!({"spec": {"containers": [{"name": "a", "resources": {"limits": {"cpu": "lots"}}}]}});
        let status = canonicalize(def, &mut bad).expect_err("malformed");
        assert_eq!(status.code, 400);
        assert!(status.message.ends_with(MALFORMED), "{}", status.message);
        // A Deployment's template, a quota's hard limits.
        let def = registry.get("apps", "v1", "deployments").expect("def");
        let mut d = json!({"spec": {"template": {"spec": {"containers": [{"resources": {"requests": {"memory": "2048Ki"}}}]}}}});
        canonicalize(def, &mut d).expect("valid");
        assert_eq!(
            d["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["memory"],
            json!("2Mi")
        );
        let def = registry.get("", "v1", "resourcequotas").expect("def");
        let mut q = json!({"spec": {"hard": {"pods": "10", "requests.cpu": "4000m"}}});
        canonicalize(def, &mut q).expect("valid");
        assert_eq!(
            q["spec"]["hard"],
            json!({"pods": "10", "requests.cpu": "4"})
        );
    }

    #[test]
    fn odd_inputs_never_panic() {
        let pieces = [
            "",
            "-",
            "+",
            ".",
            "0",
            "9",
            "1.",
            ".5",
            "e",
            "E",
            "e-",
            "e40",
            "e-40",
            "Ki",
            "Ei",
            "m",
            "n",
            "k",
            "99999999999999999999",
            "0.000000000001",
            "=",
            " ",
        ];
        for a in pieces {
            for b in pieces {
                for c in pieces {
                    let text = format!("{a}{b}{c}");
                    if let Ok(q) = Quantity::parse(&text) {
                        // The canonical form is stable and means the same.
                        let once = q.canonical();
                        let again = Quantity::parse(&once).expect(&once);
                        assert_eq!(again.canonical(), once, "{text:?}");
                        assert!(again.cmp_value(&q).is_eq(), "{text:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn quantities_compare_by_value() {
        let q = |s: &str| Quantity::parse(s).expect(s);
        assert!(q("500m").cmp_value(&q("1")).is_lt());
        assert!(q("1Ki").cmp_value(&q("1k")).is_gt());
        assert!(q("1").cmp_value(&q("1000m")).is_eq());
        assert!(q("-1").is_negative());
    }
}
