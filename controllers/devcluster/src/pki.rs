//! The dev cluster's keys: one CA, serving certificates it signs (the
//! apiserver's, the webhook host's), the service-account signing key and a
//! static admin token. All generated per cluster; nothing is reused.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use sha2::{Digest, Sha256};

/// A certificate and its key, PEM-encoded.
#[derive(Debug, Clone)]
pub struct ServingCert {
    pub cert_pem: String,
    pub key_pem: String,
}

/// The files the control plane reads, and the CA that can sign more.
pub struct Pki {
    pub ca_pem: String,
    pub ca_file: PathBuf,
    pub apiserver_cert: PathBuf,
    pub apiserver_key: PathBuf,
    pub service_account_key: PathBuf,
    pub service_account_public_key: PathBuf,
    pub token_file: PathBuf,
    pub admin_token: String,
    issuer: Issuer<'static, KeyPair>,
}

impl std::fmt::Debug for Pki {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pki")
            .field("ca_file", &self.ca_file)
            .finish_non_exhaustive()
    }
}

impl Pki {
    /// Generates everything and writes the files into `dir`.
    pub fn generate(dir: &Path) -> Result<Self, String> {
        let rcgen_error = |what: &str| {
            let what = what.to_owned();
            move |e: rcgen::Error| format!("cannot generate the {what}: {e}")
        };
        let ca_key = KeyPair::generate().map_err(rcgen_error("CA key"))?;
        let mut ca_params =
            CertificateParams::new(Vec::<String>::new()).map_err(rcgen_error("CA"))?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "kruise-wasm dev cluster CA");
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_pem = ca_params
            .self_signed(&ca_key)
            .map_err(rcgen_error("CA certificate"))?
            .pem();
        let admin_token = token_from(&ca_key.serialize_pem());
        let issuer = Issuer::new(ca_params, ca_key);

        let service_account = KeyPair::generate().map_err(rcgen_error("service-account key"))?;
        let pki = Self {
            ca_file: dir.join("ca.crt"),
            apiserver_cert: dir.join("apiserver.crt"),
            apiserver_key: dir.join("apiserver.key"),
            service_account_key: dir.join("service-account.key"),
            service_account_public_key: dir.join("service-account.pub"),
            token_file: dir.join("tokens.csv"),
            ca_pem,
            admin_token,
            issuer,
        };
        let apiserver = pki.issue_serving(&[
            "localhost",
            "127.0.0.1",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "10.0.0.1",
        ])?;
        let write = |path: &Path, text: &str| {
            std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
        };
        write(&pki.ca_file, &pki.ca_pem)?;
        write(&pki.apiserver_cert, &apiserver.cert_pem)?;
        write(&pki.apiserver_key, &apiserver.key_pem)?;
        write(&pki.service_account_key, &service_account.serialize_pem())?;
        write(
            &pki.service_account_public_key,
            &service_account.public_key_pem(),
        )?;
        write(
            &pki.token_file,
            &format!("{},admin,admin,system:masters\n", pki.admin_token),
        )?;
        Ok(pki)
    }

    /// A serving certificate for these DNS names or IP addresses, signed by
    /// the cluster's CA (the webhook host's, for one).
    pub fn issue_serving(&self, names: &[&str]) -> Result<ServingCert, String> {
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let key = KeyPair::generate().map_err(|e| format!("cannot generate a key: {e}"))?;
        let mut params = CertificateParams::new(names.clone())
            .map_err(|e| format!("bad names {names:?}: {e}"))?;
        params.distinguished_name.push(
            DnType::CommonName,
            names.first().cloned().unwrap_or_default(),
        );
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let cert = params
            .signed_by(&key, &self.issuer)
            .map_err(|e| format!("cannot sign a certificate for {names:?}: {e}"))?;
        Ok(ServingCert {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }

    /// A client certificate for this user name (the common name) in this
    /// group (the organization; rcgen keeps one value per name part), signed by the cluster's CA: the
    /// apiserver authenticates it as that user (the real node's kubelet is
    /// `system:node:<name>` in `system:nodes`).
    pub fn issue_client(&self, user: &str, group: &str) -> Result<ServingCert, String> {
        let key = KeyPair::generate().map_err(|e| format!("cannot generate a key: {e}"))?;
        let mut params = CertificateParams::new(Vec::<String>::new())
            .map_err(|e| format!("bad client certificate for {user}: {e}"))?;
        params.distinguished_name.push(DnType::CommonName, user);
        params
            .distinguished_name
            .push(DnType::OrganizationName, group);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let cert = params
            .signed_by(&key, &self.issuer)
            .map_err(|e| format!("cannot sign a client certificate for {user}: {e}"))?;
        Ok(ServingCert {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

/// A token derived from fresh, never-written key material: as unguessable
/// as the key itself.
fn token_from(seed: &str) -> String {
    crate::hex(&Sha256::digest(seed.as_bytes())[..16])
}
