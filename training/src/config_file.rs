//! Reading JSON configurations strictly. Burn's `Config::load` ignores the fields it does not
//! know, so a misspelt field would silently keep its default; [`load`] names it instead.

use std::path::Path;

use burn::config::Config;
use serde_json::Value;

/// The configuration in the JSON file `path`, or a one-line error naming the file and the
/// problem: unreadable, not the configuration's JSON, or a field the configuration lacks.
pub fn load<C: Config>(path: &Path) -> Result<C, String> {
    let fail = |problem: String| format!("{}: {problem}", path.display());
    let text = std::fs::read_to_string(path).map_err(|e| fail(format!("cannot read: {e}")))?;
    let config: C =
        serde_json::from_str(&text).map_err(|e| fail(format!("not a valid configuration: {e}")))?;
    let written: Value = serde_json::from_str(&text).map_err(|e| fail(e.to_string()))?;
    let known = serde_json::to_value(&config).map_err(|e| fail(e.to_string()))?;
    match unknown_field(&written, &known) {
        Some(field) => Err(fail(format!("unknown field `{field}`"))),
        None => Ok(config),
    }
}

/// The first field of `written` (dotted path) that the configuration read from it does not
/// have when written back.
fn unknown_field(written: &Value, known: &Value) -> Option<String> {
    match (written, known) {
        (Value::Object(written), Value::Object(known)) => {
            written.iter().find_map(|(key, value)| match known.get(key) {
                None => Some(key.clone()),
                Some(inner) => unknown_field(value, inner).map(|rest| format!("{key}.{rest}")),
            })
        }
        (Value::Array(written), Value::Array(known)) => {
            written.iter().zip(known).enumerate().find_map(|(i, (value, inner))| {
                unknown_field(value, inner).map(|rest| format!("{i}.{rest}"))
            })
        }
        _ => None,
    }
}
