//! Reading JSON configurations strictly. Burn's `Config::load` ignores the fields it does not
//! know, so a misspelt field would silently keep its default; [`load`] names it instead.

use std::path::Path;

use burn::config::Config;
use serde_json::Value;

use crate::error::TrainingError;

/// The configuration in the JSON file `path`, or a one-line error naming the file and the
/// problem: unreadable, not the configuration's JSON, or a field the configuration lacks.
pub fn load<C: Config>(path: &Path) -> Result<C, TrainingError> {
    let path_buf = || path.to_path_buf();
    let text = std::fs::read_to_string(path)
        .map_err(|source| TrainingError::ConfigUnreadable { path: path_buf(), source })?;
    let invalid = |source| TrainingError::ConfigInvalid { path: path_buf(), source };
    let config: C = serde_json::from_str(&text).map_err(invalid)?;
    let written: Value = serde_json::from_str(&text).map_err(invalid)?;
    let known = serde_json::to_value(&config).map_err(invalid)?;
    match unknown_field(&written, &known) {
        Some(field) => Err(TrainingError::ConfigUnknownField { path: path_buf(), field }),
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
