//! What Redis does with acknowledged writes: the persistence check made at
//! start-up.
//!
//! "Accepted means durable" holds on Redis only as far as its settings go.
//! The store reads `appendonly`, `appendfsync` and `maxmemory-policy` from
//! every master and reports the weakest; an operator sees a WARN at start
//! when acknowledged entries can be lost.

use std::collections::HashMap;
use std::fmt;

/// How much of what Redis acknowledged survives a crash of Redis.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Durability {
    /// `appendonly yes`, `appendfsync always`: every write is fsynced
    /// before Redis answers. Nothing acknowledged is lost.
    Always,
    /// `appendonly yes`, `appendfsync everysec`: the AOF is fsynced once a
    /// second. A crash of Redis (or of its machine) loses up to about one
    /// second (two in the worst case) of acknowledged writes.
    EverySec,
    /// `appendonly yes`, `appendfsync no`: the kernel writes the AOF back
    /// when it likes (about 30 s on Linux): a machine crash loses that much.
    OsDecides,
    /// `appendonly no`: RDB snapshots at best; everything since the last
    /// snapshot is lost on a restart.
    NoAof,
    /// The settings could not be read (`CONFIG` renamed or refused, as on
    /// some managed services): check them with the provider.
    Unknown(String),
}

impl Durability {
    /// Lower is weaker; [`Durability::Unknown`] ranks between the settings
    /// known to lose data and those that bound the loss.
    fn rank(&self) -> u8 {
        match self {
            Durability::NoAof => 0,
            Durability::OsDecides => 1,
            Durability::Unknown(_) => 2,
            Durability::EverySec => 3,
            Durability::Always => 4,
        }
    }

    /// The weaker of two.
    pub fn weakest(self, other: Durability) -> Durability {
        if other.rank() < self.rank() {
            other
        } else {
            self
        }
    }

    /// What an acknowledged entry risks, in a sentence for the logs.
    pub fn loss_window(&self) -> &'static str {
        match self {
            Durability::Always => "none: every write is fsynced before Redis acknowledges it",
            Durability::EverySec => {
                "up to about 1 s of acknowledged entries on a crash of Redis or its machine (appendfsync everysec)"
            }
            Durability::OsDecides => {
                "up to about 30 s of acknowledged entries on a machine crash (appendfsync no: the kernel decides)"
            }
            Durability::NoAof => {
                "every entry accepted since the last RDB snapshot, on any restart of Redis (appendonly no)"
            }
            Durability::Unknown(_) => "unknown: the persistence settings could not be read",
        }
    }

    fn from_config(appendonly: Option<&str>, appendfsync: Option<&str>) -> Durability {
        match (appendonly, appendfsync) {
            (Some("no"), _) => Durability::NoAof,
            (Some("yes"), Some("always")) => Durability::Always,
            (Some("yes"), Some("everysec")) => Durability::EverySec,
            (Some("yes"), Some("no")) => Durability::OsDecides,
            (a, f) => {
                Durability::Unknown(format!("unexpected appendonly {a:?} / appendfsync {f:?}"))
            }
        }
    }
}

impl fmt::Display for Durability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Durability::Always => f.write_str("aof-always"),
            Durability::EverySec => f.write_str("aof-everysec"),
            Durability::OsDecides => f.write_str("aof-no-fsync"),
            Durability::NoAof => f.write_str("no-aof"),
            Durability::Unknown(_) => f.write_str("unknown"),
        }
    }
}

/// Whether Redis may evict keys under memory pressure (an evicted entry is
/// a lost entry).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Eviction {
    /// `maxmemory-policy noeviction`: writes fail when memory is full,
    /// nothing stored is dropped.
    Never,
    /// Another policy: Redis may drop Herald's keys.
    Policy(String),
    /// Not readable.
    Unknown,
}

/// A master and its `CONFIG GET` answer, or why it gave none.
pub(super) type NodeConfig = (String, Result<HashMap<String, String>, String>);

/// One master's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodePersistence {
    /// The node (`host:port`; `-` for a single server).
    pub node: String,
    /// Its durability.
    pub durability: Durability,
    /// Its eviction policy.
    pub eviction: Eviction,
}

/// The persistence of the Redis behind the store, read at start-up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Persistence {
    /// The weakest durability of any master.
    pub durability: Durability,
    /// Whether any master may evict keys (the first such policy found).
    pub eviction: Eviction,
    /// Per master.
    pub nodes: Vec<NodePersistence>,
}

impl Persistence {
    /// From each node's `CONFIG GET appendonly appendfsync
    /// maxmemory-policy` answer (or the error that refused it).
    pub(super) fn from_nodes(nodes: Vec<NodeConfig>) -> Persistence {
        let nodes: Vec<NodePersistence> = nodes
            .into_iter()
            .map(|(node, config)| match config {
                Ok(c) => NodePersistence {
                    node,
                    durability: Durability::from_config(
                        c.get("appendonly").map(String::as_str),
                        c.get("appendfsync").map(String::as_str),
                    ),
                    eviction: match c.get("maxmemory-policy").map(String::as_str) {
                        Some("noeviction") => Eviction::Never,
                        Some(p) => Eviction::Policy(p.to_owned()),
                        None => Eviction::Unknown,
                    },
                },
                Err(e) => NodePersistence {
                    node,
                    durability: Durability::Unknown(format!("CONFIG GET refused: {e}")),
                    eviction: Eviction::Unknown,
                },
            })
            .collect();
        let durability = nodes
            .iter()
            .map(|n| n.durability.clone())
            .reduce(Durability::weakest)
            .unwrap_or_else(|| Durability::Unknown("no master answered".into()));
        let eviction = nodes
            .iter()
            .map(|n| &n.eviction)
            .find(|e| matches!(e, Eviction::Policy(_)))
            .or_else(|| {
                nodes
                    .iter()
                    .map(|n| &n.eviction)
                    .find(|e| **e == Eviction::Unknown)
            })
            .cloned()
            .unwrap_or(Eviction::Never);
        Persistence {
            durability,
            eviction,
            nodes,
        }
    }

    /// Log what the settings mean for accepted entries: WARN when
    /// acknowledged entries can be lost or the settings are unknown.
    pub(super) fn log(&self) {
        for n in &self.nodes {
            let d = &n.durability;
            match d {
                Durability::Always => tracing::info!(
                    node = %n.node, durability = %d,
                    "Redis persistence: AOF fsynced on every write; acknowledged entries survive a crash"
                ),
                Durability::EverySec => tracing::info!(
                    node = %n.node, durability = %d, loss_window = d.loss_window(),
                    "Redis persistence: AOF fsynced every second"
                ),
                Durability::OsDecides | Durability::NoAof => tracing::warn!(
                    node = %n.node, durability = %d, loss_window = d.loss_window(),
                    "Redis persistence is too weak for delayed notifications: accepted entries can be lost; \
                     set appendonly yes and appendfsync always (or everysec)"
                ),
                Durability::Unknown(why) => tracing::warn!(
                    node = %n.node, durability = %d, reason = %why,
                    "cannot check Redis persistence; make sure appendonly is yes and appendfsync is always or everysec"
                ),
            }
            match &n.eviction {
                Eviction::Never => {}
                Eviction::Policy(p) => tracing::warn!(
                    node = %n.node, maxmemory_policy = %p,
                    "Redis may evict keys when memory is full: evicted entries are lost; set maxmemory-policy noeviction"
                ),
                Eviction::Unknown => tracing::warn!(
                    node = %n.node,
                    "cannot read Redis maxmemory-policy; it must be noeviction"
                ),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(pairs: &[(&str, &str)]) -> Result<HashMap<String, String>, String> {
        Ok(pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect())
    }

    #[test]
    fn the_weakest_master_decides() {
        let p = Persistence::from_nodes(vec![
            (
                "a".into(),
                config(&[
                    ("appendonly", "yes"),
                    ("appendfsync", "always"),
                    ("maxmemory-policy", "noeviction"),
                ]),
            ),
            (
                "b".into(),
                config(&[
                    ("appendonly", "yes"),
                    ("appendfsync", "everysec"),
                    ("maxmemory-policy", "allkeys-lru"),
                ]),
            ),
        ]);
        assert_eq!(p.durability, Durability::EverySec);
        assert_eq!(p.eviction, Eviction::Policy("allkeys-lru".into()));

        let p = Persistence::from_nodes(vec![
            ("a".into(), Err("unknown command 'CONFIG'".into())),
            (
                "b".into(),
                config(&[("appendonly", "no"), ("appendfsync", "always")]),
            ),
        ]);
        assert_eq!(p.durability, Durability::NoAof);
        assert_eq!(p.eviction, Eviction::Unknown);
        assert!(matches!(
            Persistence::from_nodes(vec![]).durability,
            Durability::Unknown(_)
        ));
    }
}
