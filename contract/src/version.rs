//! The version check every shared format goes through when it is read.

use serde::de::DeserializeOwned;

/// Why a shared document could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    #[error("{format}: not valid JSON: {source}")]
    Json {
        format: &'static str,
        #[source]
        source: serde_json::Error,
    },
    #[error("{format}: not valid YAML: {source}")]
    Yaml {
        format: &'static str,
        #[source]
        source: serde_yaml_ng::Error,
    },
    #[error("{format}: version {found} is not supported (this build reads version {supported})")]
    UnsupportedVersion {
        format: &'static str,
        found: u32,
        supported: u32,
    },
    #[error("{format}: field `{field}`: {reason}")]
    InvalidField {
        format: &'static str,
        field: String,
        reason: String,
    },
}

/// A document with a format version. Reading goes through the version first, so a newer writer's
/// document is refused with a clear message rather than half-understood.
pub trait Versioned: Sized + DeserializeOwned + serde::Serialize {
    /// Name used in error messages, e.g. "checkpoint manifest".
    const FORMAT: &'static str;
    /// The version this build writes and reads.
    const VERSION: u32;

    fn version(&self) -> u32;

    /// Checks the fields the schema cannot express. The default accepts everything.
    fn check(&self) -> Result<(), FormatError> {
        Ok(())
    }

    fn from_json(bytes: &[u8]) -> Result<Self, FormatError> {
        check_version::<Self>(read_version_json(bytes, Self::FORMAT)?)?;
        let doc: Self = serde_json::from_slice(bytes).map_err(|source| FormatError::Json {
            format: Self::FORMAT,
            source,
        })?;
        doc.check()?;
        Ok(doc)
    }

    fn from_yaml(text: &str) -> Result<Self, FormatError> {
        let raw: serde_yaml_ng::Value =
            serde_yaml_ng::from_str(text).map_err(|source| FormatError::Yaml {
                format: Self::FORMAT,
                source,
            })?;
        let found = raw
            .get("version")
            .and_then(serde_yaml_ng::Value::as_u64)
            .ok_or_else(|| missing_version(Self::FORMAT))?;
        check_version::<Self>(found)?;
        let doc: Self = serde_yaml_ng::from_value(raw).map_err(|source| FormatError::Yaml {
            format: Self::FORMAT,
            source,
        })?;
        doc.check()?;
        Ok(doc)
    }

    fn to_json(&self) -> Vec<u8> {
        // Serializing plain data structs with string keys cannot fail.
        serde_json::to_vec_pretty(self).unwrap_or_default()
    }

    fn to_yaml(&self) -> String {
        serde_yaml_ng::to_string(self).unwrap_or_default()
    }
}

fn missing_version(format: &'static str) -> FormatError {
    FormatError::InvalidField {
        format,
        field: "version".into(),
        reason: "missing or not a number".into(),
    }
}

fn read_version_json(bytes: &[u8], format: &'static str) -> Result<u64, FormatError> {
    #[derive(serde::Deserialize)]
    struct VersionOnly {
        version: Option<u64>,
    }
    let probe: VersionOnly =
        serde_json::from_slice(bytes).map_err(|source| FormatError::Json { format, source })?;
    probe.version.ok_or_else(|| missing_version(format))
}

fn check_version<T: Versioned>(found: u64) -> Result<(), FormatError> {
    if found == u64::from(T::VERSION) {
        Ok(())
    } else {
        Err(FormatError::UnsupportedVersion {
            format: T::FORMAT,
            found: u32::try_from(found).unwrap_or(u32::MAX),
            supported: T::VERSION,
        })
    }
}
