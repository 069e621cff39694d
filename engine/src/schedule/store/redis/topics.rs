//! Registered topics in Redis, beside the shards: three keys in one slot
//! (hash tag `{topics}`), so the scripts below are atomic on a cluster too.
//!
//! ```text
//! <prefix>:{topics}        hash  name -> updated(8 LE) ++ settings JSON
//! <prefix>:{topics}:names  zset  name (score 0: lexical order, for pages)
//! <prefix>:{topics}:v      int   bumped by every put and delete
//! ```

use std::sync::LazyLock;

use redis::{Script, Value};

use super::RedisStore;
use super::conn::unavailable;
use super::reply::{array, blob, int, num, unexpected};
use crate::schedule::entry::Millis;
use crate::schedule::store::{PutTopic, StoreError, StoredTopic};

/// KEYS: hash, names, version. ARGV: name, value, max.
/// Returns 0 created, 1 replaced, -1 full.
static PUT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local exists = redis.call('HEXISTS', KEYS[1], ARGV[1])
if exists == 0 and redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[3]) then
  return -1
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[2], 0, ARGV[1])
redis.call('INCR', KEYS[3])
return exists
",
    )
});

/// KEYS: hash, names, version. ARGV: name. Returns 1 removed, 0 absent.
static DELETE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local removed = redis.call('HDEL', KEYS[1], ARGV[1])
if removed == 1 then
  redis.call('ZREM', KEYS[2], ARGV[1])
  redis.call('INCR', KEYS[3])
end
return removed
",
    )
});

impl RedisStore {
    fn topic_keys(&self) -> [String; 3] {
        let base = format!("{}:{{topics}}", self.config.prefix);
        [base.clone(), format!("{base}:names"), format!("{base}:v")]
    }

    pub(super) async fn put_topic_one(
        &self,
        name: &str,
        settings: &[u8],
        max_topics: usize,
        now: Millis,
    ) -> Result<PutTopic, StoreError> {
        let [hash, names, version] = self.topic_keys();
        let mut value = Vec::with_capacity(8 + settings.len());
        value.extend_from_slice(&now.to_le_bytes());
        value.extend_from_slice(settings);
        let answer: Value = PUT
            .key(hash)
            .key(names)
            .key(version)
            .arg(name)
            .arg(value)
            .arg(num(max_topics as u64))
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(unavailable)?;
        match int(&answer)? {
            0 => Ok(PutTopic::Created),
            1 => Ok(PutTopic::Replaced),
            -1 => Ok(PutTopic::Full),
            _ => Err(unexpected("put_topic")),
        }
    }

    pub(super) async fn delete_topic_one(&self, name: &str) -> Result<bool, StoreError> {
        let [hash, names, version] = self.topic_keys();
        let answer: Value = DELETE
            .key(hash)
            .key(names)
            .key(version)
            .arg(name)
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(unavailable)?;
        Ok(int(&answer)? == 1)
    }

    pub(super) async fn topic_one(&self, name: &str) -> Result<Option<StoredTopic>, StoreError> {
        let [hash, ..] = self.topic_keys();
        let raw: Value = self.query(redis::cmd("HGET").arg(hash).arg(name)).await?;
        match raw {
            Value::Nil => Ok(None),
            v => decode(name, blob(v)?).map(Some),
        }
    }

    pub(super) async fn topic_page(
        &self,
        after: Option<String>,
        limit: usize,
    ) -> Result<Vec<StoredTopic>, StoreError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let [hash, names, _] = self.topic_keys();
        let min = match &after {
            Some(after) => format!("({after}"),
            None => "-".to_owned(),
        };
        let page: Vec<String> = self
            .query(
                redis::cmd("ZRANGEBYLEX")
                    .arg(names)
                    .arg(min)
                    .arg("+")
                    .arg("LIMIT")
                    .arg(0)
                    .arg(limit),
            )
            .await?;
        if page.is_empty() {
            return Ok(Vec::new());
        }
        let values = array(self.query(redis::cmd("HMGET").arg(hash).arg(&page)).await?)?;
        let mut out = Vec::with_capacity(page.len());
        for (name, value) in page.into_iter().zip(values) {
            // Deleted between the two reads: left out.
            if value != Value::Nil {
                out.push(decode(&name, blob(value)?)?);
            }
        }
        Ok(out)
    }

    pub(super) async fn topics_version_now(&self) -> Result<u64, StoreError> {
        let [.., version] = self.topic_keys();
        let v: Option<u64> = self.query(redis::cmd("GET").arg(version)).await?;
        Ok(v.unwrap_or(0))
    }
}

fn decode(name: &str, raw: Vec<u8>) -> Result<StoredTopic, StoreError> {
    if raw.len() < 8 {
        return Err(StoreError::Corrupt {
            id: format!("topic {name}"),
            reason: format!("stored value of {} bytes", raw.len()),
        });
    }
    let updated_ms = u64::from_le_bytes(raw[..8].try_into().expect("8 bytes"));
    let mut raw = raw;
    raw.drain(..8);
    Ok(StoredTopic {
        name: name.to_owned(),
        settings: bytes::Bytes::from(raw),
        updated_ms,
    })
}
