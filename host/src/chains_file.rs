//! The chains file (`serve --chains`): a map from chain name to the ids of
//! policies.yml entries, run in order by `POST /mutate/<chain>`.
//!
//! ```yaml
//! pod-webhook: [sidecarset, launch-priority]
//! ```
//!
//! It is a file of its own because policy-server rejects policies.yml
//! entries it does not know, and the same policies.yml must keep working
//! there.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::policy::Policy;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ChainsFileError {
    #[error("chains file is not a map from chain names to lists of policy ids: {0}")]
    Shape(String),
    #[error("chain `{0}` must not contain `/`")]
    SlashInName(String),
    #[error("chain `{0}` lists no policy")]
    Empty(String),
    #[error("chain `{chain}`: policy `{policy}` is not in the policies file")]
    UnknownPolicy { chain: String, policy: String },
}

/// Parses the chains file and resolves each id against the loaded policies.
pub fn parse(
    text: &str,
    policies: &BTreeMap<String, Arc<Policy>>,
) -> Result<BTreeMap<String, Vec<Arc<Policy>>>, ChainsFileError> {
    let chains: Option<BTreeMap<String, Vec<String>>> =
        serde_yaml::from_str(text).map_err(|e| ChainsFileError::Shape(e.to_string()))?;
    chains
        .unwrap_or_default()
        .into_iter()
        .map(|(chain, ids)| {
            if chain.contains('/') {
                return Err(ChainsFileError::SlashInName(chain));
            }
            if ids.is_empty() {
                return Err(ChainsFileError::Empty(chain));
            }
            let members =
                ids.into_iter()
                    .map(|policy| {
                        policies.get(&policy).cloned().ok_or_else(|| {
                            ChainsFileError::UnknownPolicy {
                                chain: chain.clone(),
                                policy,
                            }
                        })
                    })
                    .collect::<Result<Vec<_>, _>>()?;
            Ok((chain, members))
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn bad_chains_are_named() {
        let none = BTreeMap::new();
        assert_eq!(parse("", &none).unwrap().len(), 0);
        assert!(matches!(
            parse("[a, b]", &none),
            Err(ChainsFileError::Shape(_))
        ));
        assert_eq!(
            parse("a/b: [x]", &none).unwrap_err(),
            ChainsFileError::SlashInName("a/b".to_owned())
        );
        assert_eq!(
            parse("pods: []", &none).unwrap_err(),
            ChainsFileError::Empty("pods".to_owned())
        );
        assert_eq!(
            parse("pods: [sidecarset]", &none).unwrap_err().to_string(),
            "chain `pods`: policy `sidecarset` is not in the policies file"
        );
    }
}
