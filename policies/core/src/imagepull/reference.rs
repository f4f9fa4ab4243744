//! Image references as Docker's `distribution/reference` reads them:
//! `[domain/]path[:tag][@digest]`, with Docker Hub's defaults filled in
//! (`nginx` is `docker.io/library/nginx:latest`). NodeImages key their
//! images by the *familiar* name (`nginx`, `foo/bar`, `reg.io:5000/a/b`)
//! and list a tag, or the digest when the reference has one.

use std::fmt;

/// Docker Hub, the domain of a reference that names none.
const DEFAULT_DOMAIN: &str = "docker.io";
/// Docker Hub's namespace of official images (`nginx` → `library/nginx`).
const OFFICIAL_NAMESPACE: &str = "library/";
const DEFAULT_TAG: &str = "latest";
const MAX_NAME_LENGTH: usize = 255;
const MAX_TAG_LENGTH: usize = 128;

/// A parsed reference, reduced to what a NodeImage records.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageRef {
    /// The familiar repository name (the NodeImage's image key).
    pub name: String,
    /// The tag, or the digest (`sha256:...`) when the reference has one;
    /// `latest` when it has neither.
    pub tag: String,
}

/// Why a reference does not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid image reference {reference:?}: {reason}")]
pub struct ReferenceError {
    pub reference: String,
    pub reason: String,
}

impl ImageRef {
    /// The reference to pull: `name:tag`, or `name@sha256:...`.
    pub fn pullable(&self) -> String {
        pullable(&self.name, &self.tag)
    }

    /// The registry host the image lives on (`docker.io` for Hub images).
    pub fn domain(&self) -> &str {
        split_domain(&self.name).0
    }
}

impl fmt::Display for ImageRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.pullable())
    }
}

/// The reference to pull for a NodeImage's image key and one of its tags.
pub fn pullable(name: &str, tag: &str) -> String {
    if tag.contains(':') {
        format!("{name}@{tag}")
    } else {
        format!("{name}:{tag}")
    }
}

/// Parses `reference` the way OpenKruise's `NormalizeImageRefToNameTag`
/// does: the familiar name, and the digest, else the tag, else `latest`.
pub fn parse(reference: &str) -> Result<ImageRef, ReferenceError> {
    let error = |reason: &str| ReferenceError {
        reference: reference.to_owned(),
        reason: reason.to_owned(),
    };
    if reference.is_empty() {
        return Err(error("the reference is empty"));
    }
    let (rest, digest) = match reference.split_once('@') {
        Some((rest, digest)) => {
            check_digest(digest).map_err(|reason| error(&reason))?;
            (rest, Some(digest))
        }
        None => (reference, None),
    };
    // A ':' after the last '/' starts the tag; one before it is a port.
    let last_slash = rest.rfind('/').map_or(0, |i| i + 1);
    let (name, tag) = match rest[last_slash..].rfind(':') {
        Some(colon) => {
            let at = last_slash + colon;
            (&rest[..at], Some(&rest[at + 1..]))
        }
        None => (rest, None),
    };
    if let Some(tag) = tag {
        check_tag(tag).map_err(|reason| error(&reason))?;
    }
    let familiar = familiar_name(name).map_err(|reason| error(&reason))?;
    let tag = digest.or(tag).unwrap_or(DEFAULT_TAG);
    Ok(ImageRef {
        name: familiar,
        tag: tag.to_owned(),
    })
}

/// The name without Docker Hub's implied domain and `library/` namespace,
/// after checking every part of it.
fn familiar_name(name: &str) -> Result<String, String> {
    if name.is_empty() {
        return Err("the repository name is empty".to_owned());
    }
    let (domain, path) = split_domain(name);
    check_domain(domain)?;
    if path.chars().any(|c| c.is_ascii_uppercase()) {
        return Err("the repository name must be lowercase".to_owned());
    }
    for component in path.split('/') {
        check_path_component(component)?;
    }
    let full_length = domain.len() + 1 + path.len();
    if full_length > MAX_NAME_LENGTH {
        return Err(format!(
            "the repository name is longer than {MAX_NAME_LENGTH} characters"
        ));
    }
    if domain != DEFAULT_DOMAIN {
        return Ok(format!("{domain}/{path}"));
    }
    match path.strip_prefix(OFFICIAL_NAMESPACE) {
        Some(official) if !official.contains('/') => Ok(official.to_owned()),
        _ => Ok(path.to_owned()),
    }
}

/// Splits off the domain: the first component is one when it has a `.`
/// or a `:`, or is `localhost`, or has capitals (as Docker decides).
fn split_domain(name: &str) -> (&str, &str) {
    match name.split_once('/') {
        Some((first, rest))
            if first.contains(['.', ':'])
                || first == "localhost"
                || first.chars().any(|c| c.is_ascii_uppercase()) =>
        {
            (first, rest)
        }
        _ => (DEFAULT_DOMAIN, name),
    }
}

fn check_domain(domain: &str) -> Result<(), String> {
    let (host, port) = match domain.rsplit_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (domain, None),
    };
    if let Some(port) = port
        && (port.is_empty() || !port.chars().all(|c| c.is_ascii_digit()))
    {
        return Err(format!("the registry port in {domain:?} is not a number"));
    }
    let label_ok = |label: &str| {
        !label.is_empty()
            && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
            && !label.starts_with('-')
            && !label.ends_with('-')
    };
    if host.split('.').all(label_ok) {
        Ok(())
    } else {
        Err(format!("{domain:?} is not a registry host"))
    }
}

/// `[a-z0-9]+` runs joined by one `.` or `_`, two `_`, or any number of `-`.
fn check_path_component(component: &str) -> Result<(), String> {
    let invalid = || {
        Err(format!(
            "{component:?} is not a valid repository path component (lowercase letters, digits and single separators)"
        ))
    };
    let bytes = component.as_bytes();
    let alnum = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    if bytes.is_empty() || !alnum(&bytes[0]) || !bytes.last().is_some_and(alnum) {
        return invalid();
    }
    let mut separator = String::new();
    for &byte in bytes {
        if alnum(&byte) {
            let ok = matches!(separator.as_str(), "" | "." | "_" | "__")
                || separator.bytes().all(|b| b == b'-');
            if !ok {
                return invalid();
            }
            separator.clear();
        } else if matches!(byte, b'.' | b'_' | b'-') {
            separator.push(char::from(byte));
        } else {
            return invalid();
        }
    }
    Ok(())
}

/// `[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}`.
fn check_tag(tag: &str) -> Result<(), String> {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let valid = tag.len() <= MAX_TAG_LENGTH
        && tag.chars().next().is_some_and(word)
        && tag.chars().all(|c| word(c) || c == '.' || c == '-');
    if valid {
        Ok(())
    } else {
        Err(format!(
            "tag {tag:?} must be 1 to {MAX_TAG_LENGTH} letters, digits, '_', '.' or '-', not starting with '.' or '-'"
        ))
    }
}

/// `algorithm:hex`, with 64 hex digits for sha256.
fn check_digest(digest: &str) -> Result<(), String> {
    let Some((algorithm, hex)) = digest.split_once(':') else {
        return Err(format!("digest {digest:?} has no algorithm"));
    };
    let is_hex = !hex.is_empty()
        && hex
            .chars()
            .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c));
    let length_ok = match algorithm {
        "sha256" => hex.len() == 64,
        "sha384" => hex.len() == 96,
        "sha512" => hex.len() == 128,
        _ => hex.len() >= 32,
    };
    if algorithm.is_empty() || !is_hex || !length_ok {
        return Err(format!("digest {digest:?} is not algorithm:hex"));
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn name_tag(reference: &str) -> (String, String) {
        let parsed = parse(reference).unwrap_or_else(|e| panic!("{e}"));
        (parsed.name, parsed.tag)
    }

    #[test]
    fn docker_hub_names_become_familiar() {
        for (reference, name, tag) in [
            ("nginx", "nginx", "latest"),
            ("nginx:1.25", "nginx", "1.25"),
            ("library/nginx:1.25", "nginx", "1.25"),
            ("docker.io/library/nginx", "nginx", "latest"),
            ("docker.io/foo/bar:v1", "foo/bar", "v1"),
            ("foo/bar", "foo/bar", "latest"),
            ("library/a/b", "library/a/b", "latest"),
        ] {
            assert_eq!(name_tag(reference), (name.to_owned(), tag.to_owned()));
        }
    }

    #[test]
    fn other_registries_keep_their_domain() {
        for (reference, name, tag) in [
            ("reg.io/a/b:v2", "reg.io/a/b", "v2"),
            ("127.0.0.1:5000/test:v1", "127.0.0.1:5000/test", "v1"),
            ("localhost/x", "localhost/x", "latest"),
            ("localhost:5000/x/y", "localhost:5000/x/y", "latest"),
        ] {
            assert_eq!(name_tag(reference), (name.to_owned(), tag.to_owned()));
        }
    }

    #[test]
    fn a_digest_wins_over_the_tag() {
        let digest = format!("sha256:{}", "a".repeat(64));
        assert_eq!(
            name_tag(&format!("nginx:1.25@{digest}")),
            ("nginx".to_owned(), digest.clone())
        );
        let parsed = parse(&format!("reg.io:5000/a@{digest}")).unwrap();
        assert_eq!(parsed.pullable(), format!("reg.io:5000/a@{digest}"));
        assert_eq!(parsed.domain(), "reg.io:5000");
    }

    #[test]
    fn pullable_joins_name_and_tag() {
        assert_eq!(pullable("nginx", "1.25"), "nginx:1.25");
        assert_eq!(pullable("a/b", "sha256:00"), "a/b@sha256:00");
        assert_eq!(parse("nginx").unwrap().domain(), "docker.io");
        assert_eq!(parse("nginx").unwrap().to_string(), "nginx:latest");
    }

    #[test]
    fn bad_references_say_why() {
        for (reference, reason) in [
            ("", "empty"),
            (":1.0", "empty"),
            ("Nginx", "lowercase"),
            ("nginx:", "tag"),
            ("nginx:-x", "tag"),
            ("nginx::1", "path component"),
            ("ngi nx", "path component"),
            ("a//b", "path component"),
            ("a/-b", "path component"),
            ("a/b.", "path component"),
            ("a/b..c", "path component"),
            ("a/b___c", "path component"),
            ("nginx@sha256:zz", "digest"),
            ("nginx@sha256:abc", "digest"),
            ("nginx@abc", "digest"),
            ("reg.io:x/a", "port"),
            ("bad_host.io/a", "registry host"),
        ] {
            match parse(reference) {
                Err(error) => assert!(
                    error.reason.contains(reason),
                    "{reference}: {} lacks {reason}",
                    error.reason
                ),
                Ok(parsed) => panic!("{reference} parsed as {parsed:?}"),
            }
        }
        let long = format!("{}:1", "a".repeat(300));
        assert!(parse(&long).is_err());
        let long_tag = format!("a:{}", "b".repeat(129));
        assert!(parse(&long_tag).is_err());
    }

    #[test]
    fn separators_that_docker_allows() {
        for reference in ["a.b/c", "a_b", "a__b", "a---b", "a-b.c_d"] {
            assert!(parse(reference).is_ok(), "{reference}");
        }
    }
}
