//! What in a configuration file would count differently in the reference and in
//! tollgate-rls, for `tollgate-rls check` to warn about before a rolling swap: while both
//! fleets read the same files and share one Redis, every limit must be one the reference
//! loads and counts in its own keys.

use super::yaml::{YamlDescriptor, YamlRateLimit, YamlRoot};

/// One warning per limit of `root` (the file `name`) that uses one of tollgate's extensions:
/// the reference refuses the whole file (its `validateYamlKeys`, `src/config/config_impl.go`
/// lines 355-370: "config error, unknown key"), and a limit that is not a plain fixed window
/// of one unit counts in tollgate's keys, apart from the reference's.
pub(crate) fn warnings(name: &str, root: &YamlRoot) -> Vec<String> {
    let mut found = Vec::new();
    walk(name, &root.domain, &root.descriptors, &mut found);
    found
}

fn walk(name: &str, parent: &str, descriptors: &[YamlDescriptor], found: &mut Vec<String>) {
    for d in descriptors {
        let path = match d.value.is_empty() {
            true => format!("{parent}.{}", d.key),
            false => format!("{parent}.{}_{}", d.key, d.value),
        };
        if let Some(r) = &d.rate_limit {
            if let Some(warning) = warning(name, &path, r) {
                found.push(warning);
            }
        }
        walk(name, &path, &d.descriptors, found);
    }
}

/// The warning for one `rate_limit` block, if it uses an extension.
fn warning(name: &str, path: &str, r: &YamlRateLimit) -> Option<String> {
    let mut used = Vec::new();
    if let Some(algorithm) = &r.algorithm {
        used.push(format!("algorithm: {algorithm}"));
    }
    if let Some(burst) = r.burst {
        used.push(format!("burst: {burst}"));
    }
    if let Some(multiplier) = r.unit_multiplier {
        used.push(format!("unit_multiplier: {multiplier}"));
    }
    if let Some(lease) = &r.lease {
        used.push(format!("lease: {lease}"));
    }
    let first = used
        .first()?
        .split(':')
        .next()
        .unwrap_or_default()
        .to_owned();
    let fixed = r.algorithm.as_deref().is_none_or(|a| a == "fixed_window");
    let plain = fixed && r.unit_multiplier.unwrap_or(1) == 1 && r.lease.is_none();
    let counted = match plain || r.unlimited {
        true => "its counts are the reference's keys all the same",
        false => {
            "and tollgate-rls counts this limit in its own keys, apart from the reference's \
             (a mixed fleet would let each fleet's share of the limit through)"
        }
    };
    Some(format!(
        "{name}: descriptor '{path}': {} is tollgate's: the reference refuses this file \
         (config error, unknown key '{first}'); {counted}",
        used.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::super::yaml;
    use super::*;

    #[test]
    fn extensions_are_named_with_what_they_change() {
        let root = yaml::parse(
            "domain: edge\ndescriptors:\n\
             - key: ip\n  rate_limit: { unit: second, requests_per_unit: 10 }\n\
             - key: tenant\n  value: acme\n  rate_limit: { unit: second, requests_per_unit: 10, algorithm: gcra, burst: 20 }\n\
             - key: path\n  descriptors:\n    - key: user\n      rate_limit: { unit: minute, requests_per_unit: 5, algorithm: fixed_window }\n",
        )
        .unwrap();
        let found = warnings("edge.yaml", &root);
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(
            found[0].starts_with(
                "edge.yaml: descriptor 'edge.tenant_acme': algorithm: gcra, burst: 20 is \
                 tollgate's: the reference refuses this file (config error, unknown key \
                 'algorithm'); and tollgate-rls counts this limit in its own keys"
            ),
            "{}",
            found[0]
        );
        assert!(
            found[1].ends_with("its counts are the reference's keys all the same"),
            "{}",
            found[1]
        );
        assert!(found[1].contains("'edge.path.user'"), "{}", found[1]);
    }
}
