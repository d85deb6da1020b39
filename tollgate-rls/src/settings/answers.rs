//! What an answer says and what a hit charges: `SHADOW_MODE`, `QUOTA_MODE`,
//! `RESPONSE_DYNAMIC_METADATA`, `LIMIT_RESPONSE_HEADERS_ENABLED` with its header names, and
//! `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT` with tollgate's `CHARGE_REFUSED`.

use tollgate::engine::Charging;

use super::error::SettingsError;
use super::vars::Vars;

/// How requests are answered and charged.
#[derive(Debug, Clone)]
pub(crate) struct Answers {
    pub(crate) shadow_mode: bool,
    pub(crate) quota_mode: bool,
    pub(crate) dynamic_metadata: bool,
    /// The three header names, when `LIMIT_RESPONSE_HEADERS_ENABLED`.
    pub(crate) headers: Option<[String; 3]>,
    /// Which hits are charged.
    pub(crate) charging: Charging,
}

/// The answers `vars` ask for.
pub(crate) fn read(vars: &Vars<'_>) -> Result<Answers, SettingsError> {
    let headers_on = vars.flag("LIMIT_RESPONSE_HEADERS_ENABLED", false)?
        || vars.flag("RESPONSE_HEADERS_ENABLED", false)?;
    let headers = headers_on.then(|| {
        [
            vars.get("LIMIT_LIMIT_HEADER", "RateLimit-Limit"),
            vars.get("LIMIT_REMAINING_HEADER", "RateLimit-Remaining"),
            vars.get("LIMIT_RESET_HEADER", "RateLimit-Reset"),
        ]
    });
    Ok(Answers {
        shadow_mode: vars.flag("SHADOW_MODE", false)?,
        quota_mode: vars.flag("QUOTA_MODE", false)?,
        dynamic_metadata: vars.flag("RESPONSE_DYNAMIC_METADATA", false)?,
        headers,
        charging: charging(vars)?,
    })
}

/// The reference's switch `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT` (descriptors over their
/// limit are not charged), or tollgate's `CHARGE_REFUSED=false` (nothing of a refused request
/// is); not both.
fn charging(vars: &Vars<'_>) -> Result<Charging, SettingsError> {
    match (
        vars.flag("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", false)?,
        vars.flag("CHARGE_REFUSED", true)?,
    ) {
        (false, true) => Ok(Charging::EveryHit),
        (true, true) => Ok(Charging::StopWhenOverLimit),
        (false, false) => Ok(Charging::AllowedOnly),
        (true, false) => Err(SettingsError::conflict_at(
            "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT",
            "true",
            "and CHARGE_REFUSED=false: pick one (the first charges the descriptors over their \
             limit, the second charges nothing of a refused request)",
        )),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn read_from(vars: &[(&str, &str)]) -> Result<Answers, String> {
        let map: HashMap<&str, &str> = vars.iter().copied().collect();
        let lookup = |name: &str| map.get(name).map(|v| (*v).to_owned());
        read(&Vars::new(&lookup)).map_err(|e| e.to_string())
    }

    #[test]
    fn charging_is_the_references_switch_or_ours() {
        let s = |vars: &[(&str, &str)]| read_from(vars).map(|s| s.charging);
        assert_eq!(s(&[]), Ok(Charging::EveryHit));
        let stop = ("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "true");
        assert_eq!(s(&[stop]), Ok(Charging::StopWhenOverLimit));
        assert_eq!(s(&[("CHARGE_REFUSED", "false")]), Ok(Charging::AllowedOnly));
        assert_eq!(s(&[("CHARGE_REFUSED", "true")]), Ok(Charging::EveryHit));
        let both = s(&[stop, ("CHARGE_REFUSED", "false")]).unwrap_err();
        assert!(both.starts_with("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true and CHARGE_REFUSED"));
        assert!(s(&[("CHARGE_REFUSED", "no")])
            .unwrap_err()
            .starts_with("CHARGE_REFUSED="));
    }

    #[test]
    fn headers_with_the_references_names() {
        assert!(read_from(&[]).unwrap().headers.is_none());
        let on = read_from(&[("LIMIT_RESPONSE_HEADERS_ENABLED", "true")]).unwrap();
        assert_eq!(on.headers.unwrap()[0], "RateLimit-Limit");
        assert_eq!(
            read_from(&[("SHADOW_MODE", "maybe")]).unwrap_err(),
            "SHADOW_MODE=\"maybe\": expected true or false"
        );
    }
}
