//! The topics in force: those of the configuration file
//! (`[schedule.topics.NAME]`, loaded at start) and those registered through
//! `PUT /v1/topics/{name}` (kept in the store, so they survive restarts and
//! every router sharing a Redis sees them). A registered topic replaces a
//! configured one of the same name.
//!
//! Readers take a [`Snapshot`] (a pointer copy) and look topics up in it
//! without a lock. A change made here takes effect at once in this
//! process; a change made by another process sharing the store takes
//! effect at this process's next [`Topics::refresh`] (every 0.5 s, and
//! before an HTTP publication naming a topic not known here is checked:
//! `Delayed::watch_topics`, `Delayed::know_topics`), which reads the
//! topics again only when the store's topics version moved.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::RwLock;

use super::config::{ScheduleConfig, TopicPolicy};
use super::store::{Store, StoreError, StoredTopic};
use crate::callback::destination::Class;
use crate::callback::topic::Topic;

/// How many topics one read of the store's list takes.
const PAGE: usize = 500;

/// The topics in force. Cheap to clone.
#[derive(Clone)]
pub struct Topics {
    inner: Arc<Inner>,
}

struct Inner {
    configured: BTreeMap<String, TopicPolicy>,
    /// Defaults of the settings a topic may leave unset.
    min_interval_ms: u64,
    merge: bool,
    /// Address classes callbacks may reach (for reading stored topics).
    allowed: Vec<Class>,
    current: RwLock<Arc<Snapshot>>,
    /// Changes made here ([`Topics::set`], [`Topics::remove`]), counted
    /// under `current`'s write lock: a read of the store that began before
    /// one may miss it, and is not installed over it.
    changes: AtomicU64,
    /// Held while the store is read, so two refreshes do not interleave.
    refreshing: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for Topics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.snapshot();
        f.debug_struct("Topics")
            .field("configured", &self.inner.configured.len())
            .field("registered", &s.registered.len())
            .field("version", &s.version)
            .finish()
    }
}

/// The topics at one moment.
#[derive(Debug, Default)]
pub struct Snapshot {
    /// The store's topics version this was read at (`None`: not read yet).
    pub version: Option<u64>,
    /// Registered topics by name.
    pub registered: HashMap<String, Arc<Topic>>,
    policies: HashMap<String, TopicPolicy>,
    longest_min_interval_ms: u64,
}

impl Topics {
    /// The configured topics of `config`, none registered yet (until the
    /// first [`Topics::refresh`]).
    pub fn new(config: &ScheduleConfig, allowed: Vec<Class>) -> Topics {
        let topics = Topics {
            inner: Arc::new(Inner {
                configured: config.topics.clone(),
                min_interval_ms: config.min_interval_ms,
                merge: config.merge,
                allowed,
                current: RwLock::new(Arc::default()),
                changes: AtomicU64::new(0),
                refreshing: tokio::sync::Mutex::new(()),
            }),
        };
        let empty = topics.snapshot_of(None, HashMap::new());
        *topics.inner.current.write() = Arc::new(empty);
        topics
    }

    /// The topics now.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        Arc::clone(&self.inner.current.read())
    }

    /// The delivery policy of `topic`: the registered one, else the
    /// configured one, else the defaults.
    pub fn policy(&self, topic: Option<&str>) -> TopicPolicy {
        self.snapshot().policy(topic)
    }

    /// Whether notifications of `topic` call back: it is registered with a
    /// `callback_url` (configured topics have none). Such a notification
    /// goes through the store even when it is immediate.
    pub fn calls_back(&self, topic: Option<&str>) -> bool {
        topic.is_some_and(|t| self.inner.current.read().calls_back(t))
    }

    /// The shortest time between two `when-online` sends for `topic`.
    pub fn min_interval_ms(&self, topic: Option<&str>) -> u64 {
        self.policy(topic)
            .min_interval_ms
            .unwrap_or(self.inner.min_interval_ms)
    }

    /// Whether `when-online` notifications of `topic` merge.
    pub fn merges(&self, topic: Option<&str>) -> bool {
        self.policy(topic).merge.unwrap_or(self.inner.merge)
    }

    /// The longest minimum interval of any topic or the default.
    pub fn longest_min_interval_ms(&self) -> u64 {
        self.snapshot()
            .longest_min_interval_ms
            .max(self.inner.min_interval_ms)
    }

    /// Put `name` into force in this process at once (after the store took
    /// it).
    /// The snapshot keeps the version it was read at, older than the
    /// store's now, so the next refresh reads the topics again.
    pub fn set(&self, name: &str, topic: Topic) {
        let mut current = self.inner.current.write();
        let mut registered = current.registered.clone();
        registered.insert(name.to_owned(), Arc::new(topic));
        *current = Arc::new(self.snapshot_of(current.version, registered));
        self.inner.changes.fetch_add(1, Ordering::SeqCst);
    }

    /// Take `name` out of force in this process at once (after the store
    /// removed it).
    pub fn remove(&self, name: &str) {
        let mut current = self.inner.current.write();
        if current.registered.contains_key(name) {
            let mut registered = current.registered.clone();
            registered.remove(name);
            *current = Arc::new(self.snapshot_of(current.version, registered));
            self.inner.changes.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Read the registered topics again if the store's version moved since
    /// the last read. Returns whether it read them. A stored topic that no
    /// longer passes the checks (say `allow_private_networks` was turned
    /// off since) is left out and logged.
    pub async fn refresh(&self, store: &dyn Store) -> Result<bool, StoreError> {
        let version = store.topics_version().await?;
        if self.snapshot().version == Some(version) {
            return Ok(false);
        }
        let _one = self.inner.refreshing.lock().await;
        let read = self.read(store, version).await?;
        Ok(self.install(read))
    }

    /// The registered topics as the store has them at `version` or later,
    /// with the count of changes made here before the read began.
    async fn read(&self, store: &dyn Store, version: u64) -> Result<Read, StoreError> {
        let changes = self.inner.changes.load(Ordering::SeqCst);
        let mut registered = HashMap::new();
        let mut after: Option<String> = None;
        loop {
            let page = store.topics(after.clone(), PAGE).await?;
            let full = page.len() == PAGE;
            for stored in page {
                after = Some(stored.name.clone());
                match self.parse(&stored) {
                    Ok(topic) => {
                        registered.insert(stored.name, Arc::new(topic));
                    }
                    Err(e) => tracing::error!(
                        topic = %stored.name,
                        error = %e,
                        "a registered topic no longer passes the checks; it is left out"
                    ),
                }
            }
            if !full {
                break;
            }
        }
        Ok(Read {
            version,
            changes,
            registered,
        })
    }

    /// Put `read` in force, unless a change was made here since it began:
    /// it may lack that change (a topic registered here a moment ago would
    /// be forgotten, and its notifications would fire without their
    /// callback), so it is dropped; the snapshot's version is older than
    /// the store's, so the next refresh reads again. Whether it was
    /// installed.
    fn install(&self, read: Read) -> bool {
        let mut current = self.inner.current.write();
        if self.inner.changes.load(Ordering::SeqCst) != read.changes {
            return false;
        }
        *current = Arc::new(self.snapshot_of(Some(read.version), read.registered));
        true
    }

    /// A stored topic's settings, checked as at registration.
    pub fn parse(&self, stored: &StoredTopic) -> Result<Topic, String> {
        let json: serde_json::Value =
            serde_json::from_slice(&stored.settings).map_err(|e| e.to_string())?;
        Topic::from_json(&json, &self.inner.allowed).map_err(|e| e.to_string())
    }

    /// The address classes callbacks may reach.
    pub fn allowed(&self) -> &[Class] {
        &self.inner.allowed
    }

    /// The snapshot of `registered` (with the configured topics) at
    /// `version`.
    fn snapshot_of(
        &self,
        version: Option<u64>,
        registered: HashMap<String, Arc<Topic>>,
    ) -> Snapshot {
        let mut policies: HashMap<String, TopicPolicy> = self
            .inner
            .configured
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        for (name, topic) in &registered {
            policies.insert(
                name.clone(),
                TopicPolicy {
                    jitter_ms: topic.jitter_ms,
                    min_interval_ms: topic.min_interval_ms,
                    merge: topic.merge,
                },
            );
        }
        let longest_min_interval_ms = policies
            .values()
            .filter_map(|p| p.min_interval_ms)
            .max()
            .unwrap_or(0);
        Snapshot {
            version,
            registered,
            policies,
            longest_min_interval_ms,
        }
    }
}

/// What one read of the store's topics found.
struct Read {
    version: u64,
    /// [`Inner::changes`] when the read began.
    changes: u64,
    registered: HashMap<String, Arc<Topic>>,
}

impl Snapshot {
    /// A snapshot of `registered` alone, for tests.
    #[cfg(test)]
    pub(crate) fn of_registered(registered: HashMap<String, Arc<Topic>>) -> Snapshot {
        Snapshot {
            registered,
            ..Snapshot::default()
        }
    }

    /// Whether `topic` is in force here: registered, or configured.
    pub fn knows(&self, topic: &str) -> bool {
        self.policies.contains_key(topic)
    }

    /// Whether `topic` is registered with a `callback_url` (see
    /// [`Topics::calls_back`]).
    pub fn calls_back(&self, topic: &str) -> bool {
        self.registered
            .get(topic)
            .is_some_and(|t| t.callback_url.is_some())
    }

    /// The delivery policy of `topic` (see [`Topics::policy`]).
    pub fn policy(&self, topic: Option<&str>) -> TopicPolicy {
        topic
            .and_then(|t| self.policies.get(t))
            .cloned()
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn config() -> ScheduleConfig {
        toml::from_str(
            "min_interval_ms = 100\n[topics.herd]\njitter_ms = 1000\n[topics.slow]\nmin_interval_ms = 5000\n",
        )
        .unwrap()
    }

    fn topic(body: serde_json::Value) -> Topic {
        Topic::from_json(&body, &[]).unwrap()
    }

    /// A topic registered here while the store's list was being read is
    /// not forgotten when that read (which may lack it) comes back.
    #[tokio::test]
    async fn a_read_that_began_before_a_registration_here_does_not_undo_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::schedule::store::embedded::EmbeddedStore::open(dir.path()).unwrap();
        let t = Topics::new(&config(), vec![]);
        let version = store.topics_version().await.unwrap();
        let read = t.read(&store, version).await.unwrap();
        assert!(read.registered.is_empty());
        let body = json!({"callback_url": "https://example.com/hook"});
        store
            .put_topic("billing", body.to_string().into(), 100, 1)
            .await
            .unwrap();
        t.set("billing", topic(body));
        assert!(!t.install(read), "the stale read is dropped");
        assert!(t.calls_back(Some("billing")), "still in force");
        assert!(
            t.refresh(&store).await.unwrap(),
            "the next refresh reads again"
        );
        assert!(t.calls_back(Some("billing")));
        assert_eq!(
            t.snapshot().version,
            Some(store.topics_version().await.unwrap())
        );
    }

    #[test]
    fn configured_topics_hold_until_one_is_registered() {
        let t = Topics::new(&config(), vec![]);
        assert_eq!(t.policy(Some("herd")).jitter_ms, 1000);
        assert_eq!(t.policy(Some("other")), TopicPolicy::default());
        assert_eq!(t.policy(None), TopicPolicy::default());
        assert_eq!(t.min_interval_ms(Some("herd")), 100, "the default");
        assert_eq!(t.min_interval_ms(Some("slow")), 5000);
        assert_eq!(t.longest_min_interval_ms(), 5000);

        t.set("herd", topic(json!({"jitter_ms": 5, "merge": true})));
        assert_eq!(t.policy(Some("herd")).jitter_ms, 5, "registered wins");
        assert!(t.merges(Some("herd")));
        assert!(!t.merges(Some("slow")));
        t.set("fast", topic(json!({"min_interval_ms": 60000})));
        assert_eq!(t.longest_min_interval_ms(), 60000);
        assert!(t.snapshot().registered.contains_key("fast"));

        t.remove("herd");
        assert_eq!(t.policy(Some("herd")).jitter_ms, 1000, "configured again");
    }

    #[test]
    fn only_a_registered_topic_with_a_callback_url_calls_back() {
        let t = Topics::new(&config(), vec![]);
        assert!(!t.calls_back(Some("herd")), "configured: no callback");
        t.set("quiet", topic(json!({"jitter_ms": 5})));
        t.set(
            "billing",
            topic(json!({"callback_url": "https://push.example.com/send"})),
        );
        assert!(!t.calls_back(Some("quiet")));
        assert!(t.calls_back(Some("billing")));
        assert!(!t.calls_back(Some("other")));
        assert!(!t.calls_back(None));
        t.remove("billing");
        assert!(!t.calls_back(Some("billing")));
    }

    #[test]
    fn a_stored_topic_is_checked_with_the_deployment_s_allowances() {
        let stored = StoredTopic {
            name: "local".into(),
            settings: bytes::Bytes::from_static(br#"{"callback_url":"http://127.0.0.1:9/cb"}"#),
            updated_ms: 1,
        };
        assert!(Topics::new(&config(), vec![]).parse(&stored).is_err());
        assert!(
            Topics::new(&config(), vec![Class::Loopback])
                .parse(&stored)
                .is_ok()
        );
    }
}
