//! API keys for the publish API.

/// The set of API keys a backend may present.
#[derive(Clone, Default)]
pub struct ApiKeys {
    keys: Vec<Vec<u8>>,
}

impl std::fmt::Debug for ApiKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ApiKeys({} keys)", self.keys.len())
    }
}

impl ApiKeys {
    /// Keys from configuration. Empty keys are ignored.
    pub fn new<I, S>(keys: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        ApiKeys {
            keys: keys
                .into_iter()
                .filter(|k| !k.as_ref().is_empty())
                .map(|k| k.as_ref().as_bytes().to_vec())
                .collect(),
        }
    }

    /// Whether no key is configured (then every request is refused).
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Whether `presented` is one of the keys. Every key is compared, each in
    /// time independent of where the bytes differ.
    pub fn verify(&self, presented: &str) -> bool {
        let presented = presented.as_bytes();
        let mut found = false;
        for key in &self.keys {
            found |= constant_time_eq(key, presented);
        }
        found
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verifies_only_configured_keys() {
        let keys = ApiKeys::new(["alpha", "", "beta"]);
        assert!(keys.verify("alpha"));
        assert!(keys.verify("beta"));
        assert!(!keys.verify(""));
        assert!(!keys.verify("alph"));
        assert!(!keys.verify("alphaa"));
        assert!(ApiKeys::new([""; 0]).is_empty());
    }
}
