//! What the validating policies report: one violation per problem, each
//! naming its field, as Kubernetes' own field errors do.

use std::fmt;

/// One reason an object is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The field, as a path: `spec.targets.includedNamespaces.list[0].name`.
    pub field: String,
    pub message: String,
}

impl Violation {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}
