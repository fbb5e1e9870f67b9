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

#[cfg(test)]
mod tests {
    use swa_models::DecoderConfig;
    use swa_models::layers::AttentionKind;

    use super::*;
    use crate::train::TrainConfig;

    /// `json` written to a file of its own in the temp folder.
    fn file(name: &str, json: &str) -> std::path::PathBuf {
        let path = std::env::temp_dir().join(format!("swa-config-{}-{name}", std::process::id()));
        std::fs::write(&path, json).unwrap();
        path
    }

    fn config() -> TrainConfig {
        let model = DecoderConfig::new(vec![AttentionKind::Sliding { window: 8 }])
            .with_d_model(16)
            .with_layers(2)
            .with_heads(2);
        TrainConfig::new(model, 16)
    }

    #[test]
    fn a_written_configuration_reads_back() {
        let path = file("good.json", &config().to_string());
        let read: TrainConfig = load(&path).unwrap();
        assert_eq!(read.to_string(), config().to_string());
    }

    #[test]
    fn a_misspelt_field_is_named_with_its_path() {
        let json = config().to_string().replace("\"d_model\"", "\"d_modle\": 3, \"d_model\"");
        let path = file("misspelt.json", &json);
        let error = load::<TrainConfig>(&path).unwrap_err();
        assert!(
            matches!(&error, TrainingError::ConfigUnknownField { field, .. } if field == "model.d_modle"),
            "{error}"
        );
        assert!(error.to_string().contains(&path.display().to_string()), "{error}");
    }

    #[test]
    fn unreadable_and_invalid_files_are_told_apart() {
        let missing = std::env::temp_dir().join("swa-config-no-such-file.json");
        assert!(matches!(
            load::<TrainConfig>(&missing),
            Err(TrainingError::ConfigUnreadable { .. })
        ));
        let path = file("invalid.json", "{ \"seq_len\": ");
        assert!(matches!(load::<TrainConfig>(&path), Err(TrainingError::ConfigInvalid { .. })));
    }
}
