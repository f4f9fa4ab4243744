//! Pull secrets. A node agent may read Secrets of one namespace only
//! (`kruise-daemon-config`), so the ImagePullJob controller mirrors each
//! job's secrets there, one mirror per source secret shared by every job
//! that names it; the agent turns a mirror's docker config into registry
//! credentials.

use std::collections::{BTreeMap, BTreeSet};

use base64::Engine as _;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kruise_api::nodeimage::ReferenceObject;
use serde::Deserialize;

/// Where the mirrors live (`KRUISE_DAEMON_CONFIG_NS` overrides it).
pub const DEFAULT_CONFIG_NAMESPACE: &str = "kruise-daemon-config";
/// `<namespace>/<name>` of the secret a mirror copies.
pub const SOURCE_KEY_ANNOTATION: &str = "imagepulljobs.kruise.io/source-key";
/// The comma-separated, sorted `<namespace>/<name>` of the jobs using it.
pub const REFERENCES_ANNOTATION: &str = "imagepulljobs.kruise.io/references";
/// Marks the mirrors made this way (`batch`).
pub const MODE_ANNOTATION: &str = "imagepulljobs.kruise.io/mode";
pub const MODE_BATCH: &str = "batch";

/// One write to the mirrors.
#[derive(Clone, Debug, PartialEq)]
pub enum MirrorWrite {
    /// Create this secret (its name already chosen).
    Create(Secret),
    /// Replace this secret (it carries the resourceVersion it was read at).
    Replace(Secret),
    /// Delete this mirror, as read (its UID and resourceVersion): no job
    /// uses it any more, unless one was added since it was read.
    Delete(Secret),
}

/// The mirrors a job needs: for each source secret (read from the job's
/// namespace), the existing mirror of it with this job added to its
/// references and its data refreshed, or a new one named
/// `<source>-<suffix>`; mirrors the job names no more lose the job, and
/// are deleted when no job is left. Returns the writes and the mirror
/// references the job's NodeImage tags list.
pub fn plan_mirrors(
    job_key: &str,
    sources: &[Secret],
    mirrors: &[Secret],
    config_namespace: &str,
    suffix: &mut dyn FnMut() -> String,
) -> (Vec<MirrorWrite>, Vec<ReferenceObject>) {
    let mut writes = Vec::new();
    let mut refs = Vec::new();
    let mut wanted_keys = BTreeSet::new();
    for source in sources {
        let key = object_key(&source.metadata);
        wanted_keys.insert(key.clone());
        let existing = mirrors
            .iter()
            .find(|m| annotation(m, SOURCE_KEY_ANNOTATION) == Some(&key));
        let mirror = if let Some(existing) = existing {
            let mut updated = existing.clone();
            updated.data.clone_from(&source.data);
            updated.type_.clone_from(&source.type_);
            set_references(&mut updated, with_job(&references(existing), job_key));
            if updated != *existing {
                writes.push(MirrorWrite::Replace(updated.clone()));
            }
            updated
        } else {
            let name = format!(
                "{}-{}",
                source.metadata.name.as_deref().unwrap_or("secret"),
                suffix()
            );
            let mut created = Secret {
                metadata: ObjectMeta {
                    name: Some(name),
                    namespace: Some(config_namespace.to_owned()),
                    annotations: Some(BTreeMap::from([
                        (SOURCE_KEY_ANNOTATION.to_owned(), key.clone()),
                        (MODE_ANNOTATION.to_owned(), MODE_BATCH.to_owned()),
                    ])),
                    ..ObjectMeta::default()
                },
                data: source.data.clone(),
                type_: source.type_.clone(),
                ..Secret::default()
            };
            set_references(&mut created, BTreeSet::from([job_key.to_owned()]));
            writes.push(MirrorWrite::Create(created.clone()));
            created
        };
        refs.push(ReferenceObject {
            namespace: mirror.metadata.namespace.clone(),
            name: mirror.metadata.name.clone(),
        });
    }
    let unwanted = mirrors
        .iter()
        .filter(|m| annotation(m, SOURCE_KEY_ANNOTATION).is_none_or(|k| !wanted_keys.contains(k)));
    writes.extend(release_from(job_key, unwanted));
    (writes, refs)
}

/// The writes that take the job out of every mirror (it finished or was
/// deleted).
pub fn release(job_key: &str, mirrors: &[Secret]) -> Vec<MirrorWrite> {
    release_from(job_key, mirrors.iter())
}

fn release_from<'a>(job_key: &str, mirrors: impl Iterator<Item = &'a Secret>) -> Vec<MirrorWrite> {
    mirrors
        .filter_map(|mirror| {
            let mut users = references(mirror);
            if !users.remove(job_key) {
                return None;
            }
            if users.is_empty() {
                return Some(MirrorWrite::Delete(mirror.clone()));
            }
            let mut updated = mirror.clone();
            set_references(&mut updated, users);
            Some(MirrorWrite::Replace(updated))
        })
        .collect()
}

fn object_key(meta: &ObjectMeta) -> String {
    format!(
        "{}/{}",
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default()
    )
}

fn annotation<'a>(secret: &'a Secret, key: &str) -> Option<&'a String> {
    secret.metadata.annotations.as_ref()?.get(key)
}

fn references(secret: &Secret) -> BTreeSet<String> {
    annotation(secret, REFERENCES_ANNOTATION)
        .map(|text| {
            text.split(',')
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

fn with_job(references: &BTreeSet<String>, job_key: &str) -> BTreeSet<String> {
    let mut all = references.clone();
    all.insert(job_key.to_owned());
    all
}

fn set_references(secret: &mut Secret, users: BTreeSet<String>) {
    let joined = users.into_iter().collect::<Vec<_>>().join(",");
    secret
        .metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(REFERENCES_ANNOTATION.to_owned(), joined);
}

/// A user name and password for one registry.
#[derive(Clone, PartialEq, Eq)]
pub struct Credential {
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the password, not even in a log line.
        f.debug_struct("Credential")
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

#[derive(Deserialize)]
struct DockerConfigJson {
    #[serde(default)]
    auths: BTreeMap<String, DockerAuth>,
}

#[derive(Deserialize, Default)]
struct DockerAuth {
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
    /// base64 of `user:password`.
    #[serde(default)]
    auth: Option<String>,
}

/// The credentials a pull secret holds for `domain` (an image
/// reference's registry host), from `.dockerconfigjson` or the older
/// `.dockercfg`. A secret that is neither gives an error naming the key.
pub fn credentials_for(
    data: &BTreeMap<String, ByteString>,
    domain: &str,
) -> Result<Vec<Credential>, String> {
    let auths: BTreeMap<String, DockerAuth> = if let Some(json) = data.get(".dockerconfigjson") {
        serde_json::from_slice::<DockerConfigJson>(&json.0)
            .map_err(|e| format!(".dockerconfigjson is not a docker config: {e}"))?
            .auths
    } else if let Some(json) = data.get(".dockercfg") {
        serde_json::from_slice(&json.0)
            .map_err(|e| format!(".dockercfg is not a docker config: {e}"))?
    } else {
        return Err("the secret has neither .dockerconfigjson nor .dockercfg".to_owned());
    };
    let mut found = Vec::new();
    for (server, auth) in &auths {
        if !same_registry(server, domain) {
            continue;
        }
        found.push(credential(auth).map_err(|e| format!("the entry for {server}: {e}"))?);
    }
    Ok(found)
}

fn credential(auth: &DockerAuth) -> Result<Credential, String> {
    if let (Some(username), Some(password)) = (&auth.username, &auth.password) {
        return Ok(Credential {
            username: username.clone(),
            password: password.clone(),
        });
    }
    let encoded = auth
        .auth
        .as_deref()
        .ok_or("it has no username/password and no auth")?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .map_err(|e| format!("auth is not base64: {e}"))?;
    let text = String::from_utf8(decoded).map_err(|_| "auth is not text".to_owned())?;
    let (username, password) = text.split_once(':').ok_or("auth is not user:password")?;
    Ok(Credential {
        username: username.to_owned(),
        password: password.to_owned(),
    })
}

/// Whether a docker config key (`https://reg.io/v1/`, `reg.io:5000`)
/// names the registry `domain`; Docker Hub answers to several names.
fn same_registry(server: &str, domain: &str) -> bool {
    let host = server
        .trim_start_matches("https://")
        .trim_start_matches("http://");
    let host = host.split('/').next().unwrap_or(host);
    let hub = |h: &str| matches!(h, "docker.io" | "index.docker.io" | "registry-1.docker.io");
    host == domain || (hub(host) && hub(domain))
}
