//! How much the store holds: Redis (`herald-router --redis-url`) or the standalone gateway's
//! embedded store (its data directory).
//!
//! Redis is measured by `INFO memory` `used_memory` (what the allocator holds for the data
//! set, all keys of the server: the bench's run writes under a prefix of its own, and its
//! figure is the difference before and after, so other users of a shared Redis add noise,
//! which the report says). Each run's keys start with its own prefix (`herald.{run id}:`), and
//! the run deletes them at the end: `SCAN` with `MATCH` on that prefix, and `UNLINK` of what it
//! finds (the non-blocking `DEL`: a sorted set of millions of members is freed in the
//! background, so other users of the Redis are not stalled), never anything else.
//!
//! The embedded store is measured by the size of its directory tree: bytes allocated on disk
//! (`st_blocks`, what `du` shows) and the files' lengths.

use std::path::Path;

use redis::aio::MultiplexedConnection;
use serde::Serialize;

/// Keys asked for per `SCAN` step, and deleted per `UNLINK`.
const SCAN_COUNT: usize = 1000;

/// A field of `INFO` (`name:value` lines) as a number.
pub(crate) fn info_field(info: &str, name: &str) -> Option<u64> {
    info.lines().find_map(|l| {
        let (k, v) = l.trim_end().split_once(':')?;
        (k == name).then(|| v.parse().ok())?
    })
}

/// A field of `INFO` as text.
pub(crate) fn info_text<'a>(info: &'a str, name: &str) -> Option<&'a str> {
    info.lines().find_map(|l| {
        let (k, v) = l.trim_end().split_once(':')?;
        (k == name).then_some(v)
    })
}

/// The bench's connection to the Redis the router uses.
pub(crate) struct RedisProbe {
    conn: MultiplexedConnection,
    /// Every key of the run starts with this and `:`.
    pub(crate) prefix: String,
}

/// What the report says about the Redis.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct RedisInfo {
    pub(crate) version: String,
    pub(crate) pid: Option<u32>,
    /// `appendonly` and `appendfsync`, `save`: how durable an acknowledged write is.
    pub(crate) persistence: String,
}

/// Redis's AOF rewrites at one moment (`INFO persistence`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AofRewrites {
    /// `aof_rewrites`: completed since Redis started.
    pub(crate) done: u64,
    /// `aof_rewrite_in_progress`.
    pub(crate) running: bool,
}

impl AofRewrites {
    /// How many rewrites ran (wholly or in part) between `self` and `later`: a rewrite forks
    /// Redis and its child takes a core, so a window with one is not like one without.
    pub(crate) fn during(&self, later: &AofRewrites) -> u64 {
        // Those that finished in between (one running at the start among them), and the one
        // running at the end, if any (it started after the last of those, or is the one that
        // was already running at the start and never finished).
        later.done.saturating_sub(self.done) + u64::from(later.running)
    }
}

impl RedisProbe {
    pub(crate) async fn connect(url: &str, prefix: &str) -> Result<Self, String> {
        let client = redis::Client::open(url).map_err(|e| format!("redis {url}: {e}"))?;
        let conn = client
            .get_multiplexed_async_connection()
            .await
            .map_err(|e| format!("redis {url}: {e}"))?;
        Ok(Self {
            conn,
            prefix: prefix.to_owned(),
        })
    }

    async fn info(&self, section: &str) -> Result<String, String> {
        redis::cmd("INFO")
            .arg(section)
            .query_async(&mut self.conn.clone())
            .await
            .map_err(|e| format!("redis INFO {section}: {e}"))
    }

    /// `used_memory`, bytes.
    pub(crate) async fn used_memory(&self) -> Result<u64, String> {
        let info = self.info("memory").await?;
        info_field(&info, "used_memory").ok_or_else(|| "INFO memory has no used_memory".into())
    }

    /// The AOF rewrites Redis has done so far, and whether one is running.
    pub(crate) async fn aof_rewrites(&self) -> Result<AofRewrites, String> {
        let info = self.info("persistence").await?;
        Ok(AofRewrites {
            done: info_field(&info, "aof_rewrites").unwrap_or(0),
            running: info_field(&info, "aof_rewrite_in_progress").unwrap_or(0) == 1,
        })
    }

    /// Version, pid and persistence settings.
    pub(crate) async fn describe(&self) -> Result<RedisInfo, String> {
        let server = self.info("server").await?;
        let persistence = self.info("persistence").await?;
        let mut conn = self.conn.clone();
        let config = |key: &'static str| {
            let mut c = redis::cmd("CONFIG");
            c.arg("GET").arg(key);
            c
        };
        let fsync: Vec<String> = config("appendfsync")
            .query_async(&mut conn)
            .await
            .unwrap_or_default();
        let save: Vec<String> = config("save")
            .query_async(&mut conn)
            .await
            .unwrap_or_default();
        let aof = info_field(&persistence, "aof_enabled").unwrap_or(0) == 1;
        Ok(RedisInfo {
            version: info_text(&server, "redis_version")
                .unwrap_or("?")
                .to_owned(),
            pid: info_field(&server, "process_id").and_then(|p| u32::try_from(p).ok()),
            persistence: format!(
                "appendonly {}{}, save {:?}",
                if aof { "yes" } else { "no" },
                fsync
                    .get(1)
                    .map_or(String::new(), |f| format!(" (appendfsync {f})")),
                save.get(1).map_or("?", String::as_str),
            ),
        })
    }

    /// Deletes every key of the run (`prefix:*`); returns how many.
    pub(crate) async fn delete_run_keys(&self) -> Result<u64, String> {
        let pattern = format!("{}:*", self.prefix);
        let mut conn = self.conn.clone();
        let mut cursor: u64 = 0;
        let mut deleted = 0u64;
        loop {
            let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(SCAN_COUNT)
                .query_async(&mut conn)
                .await
                .map_err(|e| format!("redis SCAN: {e}"))?;
            // MATCH is a glob; the prefix has no glob characters, but keep only exact prefixes.
            let keys: Vec<String> = keys
                .into_iter()
                .filter(|k| k.starts_with(&pattern[..pattern.len() - 1]))
                .collect();
            if !keys.is_empty() {
                let n: u64 = redis::cmd("UNLINK")
                    .arg(&keys)
                    .query_async(&mut conn)
                    .await
                    .map_err(|e| format!("redis UNLINK: {e}"))?;
                deleted += n;
            }
            if next == 0 {
                return Ok(deleted);
            }
            cursor = next;
        }
    }
}

/// Bytes of a directory tree: `(allocated on disk, files' lengths)`. A file that vanishes
/// while walking (a store compacting) is skipped.
pub(crate) fn dir_size(path: &Path) -> std::io::Result<(u64, u64)> {
    use std::os::unix::fs::MetadataExt as _;
    let mut allocated = 0u64;
    let mut length = 0u64;
    let mut stack = vec![path.to_owned()];
    while let Some(dir) = stack.pop() {
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && dir != path => continue,
            Err(e) => return Err(e),
        };
        for entry in entries {
            let Ok(entry) = entry else { continue };
            let Ok(meta) = entry.metadata() else { continue };
            if meta.is_dir() {
                stack.push(entry.path());
            } else {
                allocated += meta.blocks() * 512;
                length += meta.len();
            }
        }
    }
    Ok((allocated, length))
}

#[cfg(test)]
mod tests {
    use super::*;

    const INFO: &str = "# Memory\r\nused_memory:1694584\r\nused_memory_human:1.62M\r\n\
                        used_memory_rss:10055680\r\n# Server\r\nredis_version:7.0.15\r\n";

    #[test]
    fn rewrites_during_a_window() {
        let at = |done, running| AofRewrites { done, running };
        let cases = [
            (at(3, false), at(3, false), 0, "none"),
            (at(3, false), at(5, false), 2, "two started and finished"),
            (at(3, false), at(3, true), 1, "one started, still running"),
            (at(3, true), at(3, true), 1, "the same one throughout"),
            (at(3, true), at(4, false), 1, "the one running finished"),
            (at(3, true), at(4, true), 2, "it finished, another started"),
        ];
        for (start, end, ran, what) in cases {
            assert_eq!(start.during(&end), ran, "{what}");
        }
    }

    #[test]
    fn info_fields() {
        assert_eq!(info_field(INFO, "used_memory"), Some(1_694_584));
        assert_eq!(info_field(INFO, "used_memory_rss"), Some(10_055_680));
        assert_eq!(info_field(INFO, "used_memory_human"), None, "not a number");
        assert_eq!(info_field(INFO, "used_mem"), None);
        assert_eq!(info_text(INFO, "redis_version"), Some("7.0.15"));
    }

    #[test]
    fn directory_sizes() {
        let dir = crate::harness::configs::RunDir::create(&crate::harness::configs::new_run_id())
            .unwrap();
        dir.write("a", &"x".repeat(10_000)).unwrap();
        std::fs::create_dir(dir.path.join("sub")).unwrap();
        std::fs::write(dir.path.join("sub/b"), "yz").unwrap();
        let (allocated, length) = dir_size(&dir.path).unwrap();
        assert_eq!(length, 10_002);
        assert!(allocated >= 10_000, "{allocated}");
        assert!(dir_size(&dir.path.join("missing")).is_err());
        dir.remove();
    }
}
