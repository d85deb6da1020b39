//! Where the limits come from: the reference's runtime directory (`RUNTIME_ROOT`,
//! `RUNTIME_SUBDIRECTORY`, `RUNTIME_APPDIRECTORY`, `RUNTIME_IGNOREDOTFILES`), or with
//! `CONFIG_TYPE=GRPC_XDS_SOTW` an xDS control plane (`xds.rs`); and what is done before they
//! load (`FORCE_START_WITHOUT_INITIAL_CONFIG`, `HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED`).

use std::path::PathBuf;

use tollgate_rls::XdsSource;

use super::error::SettingsError;
use super::vars::Vars;
use super::xds;

/// The configuration's source and how it is read.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) source: ConfigSource,
    /// `FORCE_START_WITHOUT_INITIAL_CONFIG`: serve before a configuration loads (answering
    /// errors until then) instead of waiting for the xDS control plane's first one, or exiting
    /// on configuration files that do not load.
    pub(crate) force_start: bool,
    /// `RUNTIME_IGNOREDOTFILES`: files whose name starts with a dot are not read.
    pub(crate) ignore_dot_files: bool,
    /// `MERGE_DOMAIN_CONFIG`: files of one domain are merged instead of refused.
    pub(crate) merge_domains: bool,
    /// `HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED`: unhealthy while no domain is loaded.
    pub(crate) healthy_with_config: bool,
}

/// Where the limits come from.
#[derive(Debug, Clone)]
pub(crate) enum ConfigSource {
    /// `$RUNTIME_ROOT/$RUNTIME_SUBDIRECTORY/$RUNTIME_APPDIRECTORY`, watched.
    Dir(PathBuf),
    /// `CONFIG_TYPE=GRPC_XDS_SOTW`: this xDS control plane.
    Xds(Box<XdsSource>),
    /// An empty `RUNTIME_SUBDIRECTORY` (or `RUNTIME_ROOT`): no file is read, and the
    /// configuration stays empty, as the reference's nil loader leaves it.
    Nothing,
}

/// The reference's runtime directory (`src/provider/file_provider.go`, `setupRuntime`): with
/// `RUNTIME_WATCH_ROOT` (the default) its loader is given `RUNTIME_ROOT` and
/// `RUNTIME_SUBDIRECTORY`, and an empty one of them makes it goruntime's nil loader, which
/// never reads a file (`loader.New2`); without it, `RUNTIME_ROOT/RUNTIME_SUBDIRECTORY` and
/// `RUNTIME_APPDIRECTORY`. Either way the files are those under
/// `$RUNTIME_ROOT/$RUNTIME_SUBDIRECTORY/$RUNTIME_APPDIRECTORY`.
fn files(vars: &Vars<'_>) -> Result<ConfigSource, SettingsError> {
    let root = vars.get("RUNTIME_ROOT", "/srv/runtime_data/current");
    let subdirectory = vars.get("RUNTIME_SUBDIRECTORY", "");
    let app = vars.get("RUNTIME_APPDIRECTORY", "config");
    let watch_root = vars.flag("RUNTIME_WATCH_ROOT", true)?;
    let empty = match watch_root {
        true => root.is_empty() || subdirectory.is_empty(),
        false => (root.is_empty() && subdirectory.is_empty()) || app.is_empty(),
    };
    if empty {
        return Ok(ConfigSource::Nothing);
    }
    Ok(ConfigSource::Dir(
        PathBuf::from(root).join(subdirectory).join(app),
    ))
}

/// The configuration `vars` name.
pub(crate) fn read(vars: &Vars<'_>) -> Result<Config, SettingsError> {
    let source = match vars.get("CONFIG_TYPE", "FILE").as_str() {
        "FILE" => files(vars)?,
        "GRPC_XDS_SOTW" => ConfigSource::Xds(Box::new(xds::source(vars)?)),
        other => {
            let expected = "expected FILE or GRPC_XDS_SOTW";
            return Err(SettingsError::invalid("CONFIG_TYPE", other, expected));
        }
    };
    Ok(Config {
        source,
        force_start: vars.flag("FORCE_START_WITHOUT_INITIAL_CONFIG", false)?,
        ignore_dot_files: vars.flag("RUNTIME_IGNOREDOTFILES", false)?,
        merge_domains: vars.flag("MERGE_DOMAIN_CONFIG", false)?,
        healthy_with_config: vars.flag("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", false)?,
    })
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn read_from(vars: &[(&str, &str)]) -> Result<Config, String> {
        let map: HashMap<&str, &str> = vars.iter().copied().collect();
        let lookup = |name: &str| map.get(name).map(|v| (*v).to_owned());
        read(&Vars::new(&lookup)).map_err(|e| e.to_string())
    }

    fn dir(config: Config) -> Option<PathBuf> {
        match config.source {
            ConfigSource::Dir(dir) => Some(dir),
            ConfigSource::Xds(_) | ConfigSource::Nothing => None,
        }
    }

    /// The reference's `file_provider.go` (`setupRuntime`) and goruntime's `loader.New2`: with
    /// `RUNTIME_WATCH_ROOT` (default true) an empty `RUNTIME_SUBDIRECTORY` is the nil loader,
    /// which reads nothing; without it, the files of `$RUNTIME_ROOT/$RUNTIME_APPDIRECTORY`.
    #[test]
    fn the_references_runtime_directory() {
        let default = read_from(&[]).unwrap();
        assert!(matches!(default.source, ConfigSource::Nothing));
        let unwatched = read_from(&[("RUNTIME_WATCH_ROOT", "false")]).unwrap();
        assert_eq!(
            dir(unwatched),
            Some(PathBuf::from("/srv/runtime_data/current/config"))
        );
        let named = read_from(&[
            ("RUNTIME_ROOT", "/data"),
            ("RUNTIME_SUBDIRECTORY", "ratelimit"),
        ]);
        assert_eq!(
            dir(named.unwrap()),
            Some(PathBuf::from("/data/ratelimit/config"))
        );
    }

    #[test]
    fn xds_or_files_only() {
        let xds = read_from(&[("CONFIG_TYPE", "GRPC_XDS_SOTW")]).unwrap();
        assert!(matches!(xds.source, ConfigSource::Xds(_)));
        assert!(read_from(&[("CONFIG_TYPE", "GRPC_XDS_DELTA")])
            .unwrap_err()
            .starts_with("CONFIG_TYPE="));
    }
}
