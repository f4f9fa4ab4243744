//! The webhook host's certificates, issued and renewed by the manager as
//! OpenKruise's manager does for its own webhook: a CA that lasts ten
//! years, whose certificate is the webhook configurations' `caBundle`, and
//! a one-year serving certificate for the host's Service that it signs.
//!
//! This module decides, from what the Secret holds, what to issue; the
//! I/O is in [`crate::webhook_certs`].

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::GeneralName;
use x509_parser::pem::Pem;

const DAY: Duration = Duration::from_hours(24);
const CA_LIFETIME: Duration = Duration::from_hours(10 * 365 * 24);
const SERVING_LIFETIME: Duration = Duration::from_hours(365 * 24);
/// A certificate this close to its end is replaced: a month leaves the
/// host (which reads its files every 10 s) and kubelet (which refreshes a
/// mounted Secret within about a minute) ample time.
const RENEW_BEFORE: Duration = Duration::from_hours(30 * 24);

/// The four PEM texts the Secret holds.
#[derive(Clone, PartialEq, Eq)]
pub struct Bundle {
    pub ca_cert: String,
    pub ca_key: String,
    pub cert: String,
    pub key: String,
}

impl std::fmt::Debug for Bundle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the keys.
        f.debug_struct("Bundle").finish_non_exhaustive()
    }
}

/// What the Secret needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Renewal {
    Keep,
    /// A new serving certificate from the same CA: the `caBundle` stays.
    Serving(&'static str),
    /// A new CA and serving certificate.
    Everything(&'static str),
}

/// What `current` (the Secret's, if it has all four parts) needs to serve
/// `names` at `now`.
pub fn check(current: Option<&Bundle>, names: &[String], now: SystemTime) -> Renewal {
    let Some(current) = current else {
        return Renewal::Everything("there are no certificates yet");
    };
    let renew_after = unix_seconds(now + RENEW_BEFORE);
    let Ok(ca) = parse_one(&current.ca_cert) else {
        return Renewal::Everything("the CA certificate does not parse");
    };
    let Ok(ca) = ca.parse_x509() else {
        return Renewal::Everything("the CA certificate does not parse");
    };
    if KeyPair::from_pem(&current.ca_key).is_err() {
        return Renewal::Everything("the CA key does not parse");
    }
    if ca.validity().not_after.timestamp() < renew_after {
        return Renewal::Everything("the CA expires within 30 days");
    }
    let Ok(serving) = parse_one(&current.cert) else {
        return Renewal::Serving("the serving certificate does not parse");
    };
    let Ok(serving) = serving.parse_x509() else {
        return Renewal::Serving("the serving certificate does not parse");
    };
    if KeyPair::from_pem(&current.key).is_err() {
        return Renewal::Serving("the serving key does not parse");
    }
    if serving.verify_signature(Some(ca.public_key())).is_err() {
        return Renewal::Serving("the serving certificate is not signed by the CA");
    }
    if serving.validity().not_after.timestamp() < renew_after {
        return Renewal::Serving("the serving certificate expires within 30 days");
    }
    if dns_names(&serving) != names {
        return Renewal::Serving("the serving certificate names another service");
    }
    Renewal::Keep
}

/// The bundle `renewal` asks for, keeping `current`'s CA when it may.
pub fn issue(
    renewal: Renewal,
    current: Option<&Bundle>,
    names: &[String],
    now: SystemTime,
) -> Result<Bundle, String> {
    let rcgen_error = |what: &'static str| move |e: rcgen::Error| format!("{what}: {e}");
    let (ca_cert, ca_key) = match (renewal, current) {
        (Renewal::Serving(_), Some(current)) => (current.ca_cert.clone(), current.ca_key.clone()),
        _ => new_ca(now)?,
    };
    let ca_key_pair = KeyPair::from_pem(&ca_key).map_err(rcgen_error("the CA key"))?;
    let issuer = Issuer::from_ca_cert_pem(&ca_cert, ca_key_pair)
        .map_err(rcgen_error("the CA certificate"))?;
    let key = KeyPair::generate().map_err(rcgen_error("a serving key"))?;
    let mut params =
        CertificateParams::new(names.to_vec()).map_err(rcgen_error("the service names"))?;
    let common_name = names.first().cloned().unwrap_or_default();
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.not_before = (now - DAY).into();
    params.not_after = (now + SERVING_LIFETIME).into();
    let cert = params
        .signed_by(&key, &issuer)
        .map_err(rcgen_error("signing the serving certificate"))?;
    Ok(Bundle {
        ca_cert,
        ca_key,
        cert: cert.pem(),
        key: key.serialize_pem(),
    })
}

/// The DNS names a Service is called by from the API server.
pub fn service_names(namespace: &str, service: &str) -> Vec<String> {
    vec![
        format!("{service}.{namespace}.svc"),
        format!("{service}.{namespace}.svc.cluster.local"),
        format!("{service}.{namespace}"),
        service.to_owned(),
    ]
}

fn new_ca(now: SystemTime) -> Result<(String, String), String> {
    let key = KeyPair::generate().map_err(|e| format!("a CA key: {e}"))?;
    let mut params =
        CertificateParams::new(Vec::<String>::new()).map_err(|e| format!("the CA: {e}"))?;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(DnType::CommonName, "kruise-wasm webhook CA");
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.not_before = (now - DAY).into();
    params.not_after = (now + CA_LIFETIME).into();
    let cert = params
        .self_signed(&key)
        .map_err(|e| format!("signing the CA: {e}"))?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// The one PEM block of `text`.
fn parse_one(text: &str) -> Result<Pem, ()> {
    let (rest, pem) = x509_parser::pem::parse_x509_pem(text.as_bytes()).map_err(|_| ())?;
    if rest.iter().all(u8::is_ascii_whitespace) {
        Ok(pem)
    } else {
        Err(())
    }
}

fn dns_names(cert: &X509Certificate<'_>) -> Vec<String> {
    let Ok(Some(names)) = cert.subject_alternative_name() else {
        return Vec::new();
    };
    names
        .value
        .general_names
        .iter()
        .filter_map(|name| match name {
            GeneralName::DNSName(name) => Some((*name).to_owned()),
            _ => None,
        })
        .collect()
}

fn unix_seconds(time: SystemTime) -> i64 {
    time.duration_since(UNIX_EPOCH).map_or(0, |since| {
        i64::try_from(since.as_secs()).unwrap_or(i64::MAX)
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn names() -> Vec<String> {
        service_names("kruise-system", "kruise-webhook")
    }

    fn issued(now: SystemTime) -> Bundle {
        issue(Renewal::Everything("test"), None, &names(), now).unwrap()
    }

    #[test]
    fn nothing_yet_issues_everything_and_a_fresh_bundle_is_kept() {
        let now = SystemTime::now();
        assert!(matches!(check(None, &names(), now), Renewal::Everything(_)));
        let bundle = issued(now);
        assert_eq!(check(Some(&bundle), &names(), now), Renewal::Keep);
        assert!(
            bundle.cert.starts_with("-----BEGIN CERTIFICATE-----"),
            "{}",
            bundle.cert
        );
    }

    #[test]
    fn a_serving_certificate_near_its_end_is_renewed_from_the_same_ca() {
        let issued_at = SystemTime::now();
        let bundle = issued(issued_at);
        let near_end = issued_at + SERVING_LIFETIME - RENEW_BEFORE + DAY;
        let renewal = check(Some(&bundle), &names(), near_end);
        assert_eq!(
            renewal,
            Renewal::Serving("the serving certificate expires within 30 days")
        );
        let renewed = issue(renewal, Some(&bundle), &names(), near_end).unwrap();
        assert_eq!(renewed.ca_cert, bundle.ca_cert, "the caBundle stays");
        assert_ne!(renewed.cert, bundle.cert);
        assert_eq!(check(Some(&renewed), &names(), near_end), Renewal::Keep);
        // Just before the window the first one was still kept.
        let before = issued_at + SERVING_LIFETIME - RENEW_BEFORE - DAY;
        assert_eq!(check(Some(&bundle), &names(), before), Renewal::Keep);
    }

    #[test]
    fn a_ca_near_its_end_renews_everything() {
        let issued_at = SystemTime::now();
        let bundle = issued(issued_at);
        let near_end = issued_at + CA_LIFETIME - RENEW_BEFORE + DAY;
        assert_eq!(
            check(Some(&bundle), &names(), near_end),
            Renewal::Everything("the CA expires within 30 days")
        );
    }

    #[test]
    fn another_service_or_a_foreign_signature_gets_a_new_serving_certificate() {
        let now = SystemTime::now();
        let bundle = issued(now);
        let other = service_names("kruise-system", "other");
        assert_eq!(
            check(Some(&bundle), &other, now),
            Renewal::Serving("the serving certificate names another service")
        );
        let foreign = Bundle {
            cert: issued(now).cert,
            ..bundle.clone()
        };
        assert_eq!(
            check(Some(&foreign), &names(), now),
            Renewal::Serving("the serving certificate is not signed by the CA")
        );
    }

    #[test]
    fn garbage_in_the_secret_is_replaced_not_trusted() {
        let now = SystemTime::now();
        let bundle = issued(now);
        let cases = [
            (
                Bundle {
                    ca_cert: "not a certificate".to_owned(),
                    ..bundle.clone()
                },
                Renewal::Everything("the CA certificate does not parse"),
            ),
            (
                Bundle {
                    ca_key: String::new(),
                    ..bundle.clone()
                },
                Renewal::Everything("the CA key does not parse"),
            ),
            (
                Bundle {
                    cert: format!("{}{}", bundle.cert, bundle.cert),
                    ..bundle.clone()
                },
                Renewal::Serving("the serving certificate does not parse"),
            ),
            (
                Bundle {
                    key: "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"
                        .to_owned(),
                    ..bundle.clone()
                },
                Renewal::Serving("the serving key does not parse"),
            ),
        ];
        for (broken, expected) in cases {
            assert_eq!(check(Some(&broken), &names(), now), expected);
            let fixed = issue(expected, Some(&broken), &names(), now).unwrap();
            assert_eq!(check(Some(&fixed), &names(), now), Renewal::Keep);
        }
    }
}
