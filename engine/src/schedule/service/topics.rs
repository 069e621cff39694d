//! The topics side of [`Delayed`]: registered topics through the store,
//! each failure counted like every other store operation, and each change
//! put into force in this process as soon as the store took it.

use bytes::Bytes;

use super::Delayed;
use crate::callback::topic::{Topic, TopicError};
use crate::schedule::entry::Millis;
use crate::schedule::store::{PutTopic, StoreError, StoredTopic};

/// How often the registered topics' version is read between maintenance
/// rounds: a topic registered through another router is in force here
/// within this long (one small store read each time).
pub(super) const TOPICS_WATCH: std::time::Duration = std::time::Duration::from_millis(500);

impl Delayed {
    /// Make sure the topics that `named` names are in force here as the
    /// store has them: when one is not known to this process (another
    /// router may have registered it a moment ago), read the topics again
    /// (one version read; the list only when it moved). A failure is
    /// counted and logged, and the topics known here are used.
    pub async fn know_topics<'a>(&self, mut named: impl Iterator<Item = &'a str>) {
        let snapshot = self.inner.topics.snapshot();
        if !named.any(|t| !snapshot.knows(t)) {
            return;
        }
        if let Err(e) = self.inner.topics.refresh(&*self.inner.store).await {
            self.inner.metrics.store_error("topics");
            tracing::warn!(error = %e, "reading the registered topics failed; the topics known here are used");
        }
    }

    /// Read the topics' version every [`TOPICS_WATCH`] until `shutdown`,
    /// and the topics when it moved: registrations through another
    /// router take effect here within that time, also for what comes in
    /// over AMQP.
    pub(super) async fn watch_topics(&self, shutdown: tokio_util::sync::CancellationToken) {
        let mut every = crate::task::Every::new(TOPICS_WATCH);
        while every.tick(&shutdown).await {
            if let Err(e) = self.inner.topics.refresh(&*self.inner.store).await {
                self.inner.metrics.store_error("topics");
                tracing::debug!(error = %e, "reading the topics' version failed; the next tick tries again");
            }
        }
    }

    /// `topic`, if one attempt of its callback (a recheck and a call, each
    /// up to `timeout_ms`) fits in a claim's lease: the lease is what keeps
    /// another firer from making the same call while it is on its way.
    /// Otherwise the 422 names `timeout_ms` and the longest that fits.
    pub fn fits_lease(&self, topic: Topic) -> Result<Topic, TopicError> {
        let longest = crate::schedule::sender::longest_timeout_ms(&self.inner.config);
        if topic.timeout_ms > longest {
            return Err(TopicError::new(
                "timeout_ms",
                format!(
                    "is {} ms, but at most {longest} ms fits twice (a recheck and a call) in this deployment's schedule.lease_ms of {} ms",
                    topic.timeout_ms, self.inner.config.lease_ms,
                ),
            ));
        }
        Ok(topic)
    }

    /// Register `name` with `topic`, or replace its settings (bounded by
    /// `schedule.max_topics`), and put it in force here when the store
    /// took it. Answers what the store did and what it stored.
    pub async fn put_topic(
        &self,
        name: &str,
        topic: Topic,
        now: Millis,
    ) -> Result<(PutTopic, StoredTopic), StoreError> {
        let settings = Bytes::from(topic.to_stored_json().to_string());
        let outcome = self
            .inner
            .store
            .put_topic(name, settings.clone(), self.inner.config.max_topics, now)
            .await
            .inspect_err(|_| self.inner.metrics.store_error("put_topic"))?;
        if outcome != PutTopic::Full {
            self.inner.topics.set(name, topic);
        }
        let stored = StoredTopic {
            name: name.to_owned(),
            settings,
            updated_ms: now,
        };
        Ok((outcome, stored))
    }

    /// One registered topic, as stored.
    pub async fn topic(&self, name: &str) -> Result<Option<StoredTopic>, StoreError> {
        self.inner
            .store
            .topic(name)
            .await
            .inspect_err(|_| self.inner.metrics.store_error("topic"))
    }

    /// Unregister `name`, taking it out of force here; whether it was
    /// registered.
    pub async fn delete_topic(&self, name: &str) -> Result<bool, StoreError> {
        let removed = self
            .inner
            .store
            .delete_topic(name)
            .await
            .inspect_err(|_| self.inner.metrics.store_error("delete_topic"))?;
        if removed {
            self.inner.topics.remove(name);
        }
        Ok(removed)
    }

    /// A page of registered topics after `after`, in name order.
    pub async fn topic_page(
        &self,
        after: Option<String>,
        limit: usize,
    ) -> Result<Vec<StoredTopic>, StoreError> {
        self.inner
            .store
            .topics(after, limit)
            .await
            .inspect_err(|_| self.inner.metrics.store_error("topics"))
    }
}
