//! Errors of reading and validating the broker configuration. Each names the
//! key, the value and where it came from, and says what is allowed, so that a
//! failed startup tells the operator what to change.
//!
//! # Invariants
//!
//! - Values copied into an error are cut to [`ERROR_VALUE_SIZE_MAX`] bytes.

use std::fmt;

/// Longest configuration value kept inside an error, in bytes.
pub const ERROR_VALUE_SIZE_MAX: usize = 200;

/// Where a configuration entry came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigSource {
    /// A line of the properties file.
    File {
        /// The file as the operator named it.
        path: String,
        /// 1-based line number.
        line: usize,
    },
    /// A `--KEY=VALUE` command-line override.
    Override,
    /// The `-n ADDR` flag.
    NamesrvFlag,
    /// An UPDATE_BROKER_CONFIG request (`mqadmin updateBrokerConfig`).
    Update,
}

impl fmt::Display for ConfigSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigSource::File { path, line } => write!(f, "{path}:{line}"),
            ConfigSource::Override => f.write_str("command-line override"),
            ConfigSource::NamesrvFlag => f.write_str("-n"),
            ConfigSource::Update => f.write_str("UPDATE_BROKER_CONFIG"),
        }
    }
}

/// A configuration that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// A key that is not a configuration key.
    #[error(
        "{origin}: unknown configuration key `{key}` (set to `{value}`){}; known keys: {known}",
        suggestion.map(|s| format!(" (did you mean `{s}`?)")).unwrap_or_default()
    )]
    UnknownKey {
        /// The key as written (cut to [`ERROR_VALUE_SIZE_MAX`] bytes).
        key: String,
        /// The value it was given (cut to [`ERROR_VALUE_SIZE_MAX`] bytes).
        value: String,
        /// Where it was written.
        origin: ConfigSource,
        /// A known key differing only in letter case, if any.
        suggestion: Option<&'static str>,
        /// The known keys, comma-separated.
        known: String,
    },
    /// A value that does not parse or is out of range.
    #[error("{origin}: invalid value `{value}` for `{key}`: expected {allowed}")]
    InvalidValue {
        /// The canonical key.
        key: &'static str,
        /// The value as written (cut to [`ERROR_VALUE_SIZE_MAX`] bytes).
        value: String,
        /// Where it was written.
        origin: ConfigSource,
        /// What the key accepts.
        allowed: String,
    },
    /// Values that are valid alone but not together.
    #[error("inconsistent configuration: {message}")]
    Inconsistent {
        /// The keys, their values and the rule they break.
        message: String,
    },
    /// A key UPDATE_BROKER_CONFIG may not change while the broker runs.
    #[error(
        "{key} cannot be changed while the broker runs (these can: {changeable}); set it in the configuration file or as --{key}=VALUE and restart the broker"
    )]
    NotChangeableAtRuntime {
        /// The canonical key.
        key: &'static str,
        /// The keys that can be, comma-separated.
        changeable: String,
    },
    /// A command-line argument that is not `--KEY=VALUE`.
    #[error("`{argument}` is not a configuration override: expected --KEY=VALUE")]
    MalformedOverride {
        /// The argument (cut to [`ERROR_VALUE_SIZE_MAX`] bytes).
        argument: String,
    },
    /// A `\u` escape in the properties file without four hex digits.
    #[error("line {line}: malformed \\uXXXX escape")]
    MalformedUnicodeEscape {
        /// 1-based line number.
        line: usize,
    },
}

impl ConfigError {
    /// Builds [`ConfigError::InvalidValue`], cutting `value` to
    /// [`ERROR_VALUE_SIZE_MAX`] bytes on a character boundary.
    pub fn invalid_value(
        key: &'static str,
        value: &str,
        origin: &ConfigSource,
        allowed: impl Into<String>,
    ) -> Self {
        ConfigError::InvalidValue {
            key,
            value: truncate(value).to_owned(),
            origin: origin.clone(),
            allowed: allowed.into(),
        }
    }
}

/// `text` cut to at most [`ERROR_VALUE_SIZE_MAX`] bytes on a char boundary.
pub(crate) fn truncate(text: &str) -> &str {
    if text.len() <= ERROR_VALUE_SIZE_MAX {
        return text;
    }
    let mut end = ERROR_VALUE_SIZE_MAX;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_values_are_cut_on_a_char_boundary() {
        let value = "é".repeat(ERROR_VALUE_SIZE_MAX);
        let error = ConfigError::invalid_value("brokerName", &value, &ConfigSource::Override, "x");
        let ConfigError::InvalidValue { value: kept, .. } = error else {
            panic!("wrong variant");
        };
        assert!(kept.len() <= ERROR_VALUE_SIZE_MAX);
        assert!(kept.len() >= ERROR_VALUE_SIZE_MAX - 1);
    }

    #[test]
    fn sources_name_the_file_and_line() {
        let source = ConfigSource::File {
            path: "broker.conf".into(),
            line: 7,
        };
        assert_eq!(source.to_string(), "broker.conf:7");
        assert_eq!(ConfigSource::NamesrvFlag.to_string(), "-n");
    }
}
