//! Kubernetes name syntax, with apimachinery's messages.

use crate::selector::{is_dns_label, is_dns_subdomain};

/// A DNS-1123 label (namespace names): at most 63 characters, lowercase
/// alphanumerics and '-', starting and ending with an alphanumeric.
pub(crate) fn dns_label_error(name: &str) -> Option<String> {
    if name.len() > 63 {
        return Some("must be no more than 63 characters".to_owned());
    }
    (!is_dns_label(name)).then(|| {
        "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', \
         and must start and end with an alphanumeric character"
            .to_owned()
    })
}

/// A DNS-1123 subdomain (object names): at most 253 characters, labels
/// separated by '.'.
pub(crate) fn dns_subdomain_error(name: &str) -> Option<String> {
    if name.len() > 253 {
        return Some("must be no more than 253 characters".to_owned());
    }
    (!is_dns_subdomain(name)).then(|| {
        "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, \
         '-' or '.', and must start and end with an alphanumeric character"
            .to_owned()
    })
}

/// A ConfigMap or Secret key: `[-._a-zA-Z0-9]+`, at most 253 characters,
/// not `.`, `..` or starting with `..`.
pub(crate) fn config_key_error(key: &str) -> Option<String> {
    if key.is_empty() || key.len() > 253 {
        return Some("must be 1 to 253 characters".to_owned());
    }
    if !key
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    {
        return Some(
            "a valid config key must consist of alphanumeric characters, '-', '_' or '.'"
                .to_owned(),
        );
    }
    if key == "." || key.starts_with("..") {
        return Some("must not be '.' or '..' or start with '..'".to_owned());
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_subdomains_and_keys() {
        assert_eq!(dns_label_error("ns-1"), None);
        assert!(dns_label_error("ns.1").is_some());
        assert!(dns_label_error("").is_some());
        assert!(dns_label_error("-a").is_some());
        assert!(dns_label_error("A").is_some());
        assert!(dns_label_error(&"a".repeat(64)).is_some());
        assert_eq!(dns_subdomain_error("a.b-c"), None);
        assert!(dns_subdomain_error("a..b").is_some());
        assert!(dns_subdomain_error("a_b").is_some());
        assert!(dns_subdomain_error(&"a".repeat(254)).is_some());
        assert_eq!(config_key_error("game.properties"), None);
        assert_eq!(config_key_error("A_b-1"), None);
        assert!(config_key_error("..x").is_some());
        assert!(config_key_error(".").is_some());
        assert!(config_key_error("a/b").is_some());
        assert!(config_key_error("").is_some());
    }
}
