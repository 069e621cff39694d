//! Tenants' namespaces of notification ids.
//!
//! A notification's `id` is its idempotency key and names it in the status
//! and cancel endpoints. API keys limited to sites belong to a tenant (by
//! default their sites; see the engine's `api_key`), and each tenant has
//! ids of its own: a key of site `a` that publishes `invoice-77` does not
//! make site `b`'s `invoice-77` a duplicate, nor see its status.
//!
//! Herald keeps a tenant's id as a *scoped id*, `id:tenant`: the id, a
//! colon, the tenant. Ids never hold a colon ([`is_valid_name`]), so the
//! first colon splits the two whatever the tenant holds, and no backend can
//! write a scoped id itself. Everything that keys by id (the duplicate
//! window, the delayed stores, the attempt logs, routers' bundles to edges)
//! keys by the scoped id as it is; what a browser or a callback receiver
//! reads is the id alone ([`split`]). An id published by a key of no
//! tenant (every site) is kept as written.

/// Between an id and its tenant in a scoped id.
pub const SEPARATOR: char = ':';

/// The longest tenant, in bytes.
pub const MAX_TENANT_BYTES: usize = 256;

/// The id Herald keeps for `id` published under `tenant`.
pub fn scope(id: &str, tenant: Option<&str>) -> String {
    match tenant {
        None => id.to_owned(),
        Some(t) => {
            let mut s = String::with_capacity(id.len() + 1 + t.len());
            s.push_str(id);
            s.push(SEPARATOR);
            s.push_str(t);
            s
        }
    }
}

/// The id and the tenant (None: no tenant) of a kept id.
pub fn split(kept: &str) -> (&str, Option<&str>) {
    match kept.split_once(SEPARATOR) {
        Some((id, tenant)) => (id, Some(tenant)),
        None => (kept, None),
    }
}

/// The id alone, as a browser or a callback receiver reads it.
pub fn public_id(kept: &str) -> &str {
    split(kept).0
}

/// Whether `t` may name a tenant: 1 to [`MAX_TENANT_BYTES`] bytes, no
/// control characters.
pub fn is_valid_tenant(t: &str) -> bool {
    !t.is_empty() && t.len() <= MAX_TENANT_BYTES && !t.chars().any(char::is_control)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scoped_id_splits_back_whatever_its_tenant_holds() {
        for tenant in ["a", "eu,uk", "odd:tenant", "ünï"] {
            let kept = scope("invoice-77", Some(tenant));
            assert_eq!(split(&kept), ("invoice-77", Some(tenant)));
            assert_eq!(public_id(&kept), "invoice-77");
        }
        assert_eq!(scope("invoice-77", None), "invoice-77");
        assert_eq!(split("invoice-77"), ("invoice-77", None));
    }

    #[test]
    fn tenants_do_not_share_ids() {
        let a = scope("invoice-77", Some("a"));
        let b = scope("invoice-77", Some("b"));
        assert_ne!(a, b);
        assert_ne!(a, scope("invoice-77", None));
    }

    #[test]
    fn a_tenant_is_text_of_a_bounded_length() {
        assert!(is_valid_tenant("eu,uk"));
        assert!(!is_valid_tenant(""));
        assert!(!is_valid_tenant("a\nb"));
        assert!(!is_valid_tenant(&"t".repeat(MAX_TENANT_BYTES + 1)));
    }
}
