//! The connection: one multiplexed connection to a single server (redis-rs
//! `ConnectionManager`, which reconnects after a failure) or a cluster
//! connection (redis-rs `cluster_async`, which follows slot moves and
//! reconnects to nodes). Requests from concurrent tasks share it and are
//! pipelined on the wire.

use std::collections::HashMap;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo};
use redis::{Cmd, RedisError, RedisFuture, Value};

use super::config::{RedisConfig, Topology};
use super::persistence::NodeConfig;
use crate::process::redact;
use crate::schedule::store::StoreError;

/// How many times the cluster client retries a request that failed for a
/// reason it can recover from (a moved slot, a reconnect). Low: a store
/// operation must fail soon when a node is down.
const CLUSTER_RETRIES: u32 = 2;

/// A connection to the single server or the cluster; cheap to clone.
#[derive(Clone)]
pub(crate) enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

/// A Redis failure as the store reports it.
pub(crate) fn unavailable(e: RedisError) -> StoreError {
    StoreError::Unavailable(format!("redis: {e}"))
}

/// Connect, failing when Redis cannot be reached now.
pub(super) async fn connect(config: &RedisConfig) -> Result<Conn, StoreError> {
    let refused = |what: &str, e: RedisError| {
        StoreError::Unavailable(format!("cannot connect to Redis at {what}: {e}"))
    };
    match &config.topology {
        Topology::Single(url) => {
            let shown = redact(url);
            let client = redis::Client::open(url.as_str()).map_err(|e| refused(&shown, e))?;
            // No retries inside one request: while Redis is down each
            // operation fails at once (Unavailable) and schedules a new
            // connection attempt; the first request after Redis is back
            // gets a fresh connection.
            let manager = ConnectionManagerConfig::new()
                .set_connection_timeout(Some(config.connect_timeout))
                .set_response_timeout(Some(config.response_timeout))
                .set_number_of_retries(0)
                .set_pipeline_buffer_size(config.request_queue);
            let c = ConnectionManager::new_with_config(client, manager)
                .await
                .map_err(|e| refused(&shown, e))?;
            Ok(Conn::Single(c))
        }
        Topology::Cluster(seeds) => {
            let shown = seeds
                .iter()
                .map(|s| redact(s))
                .collect::<Vec<_>>()
                .join(",");
            let client = ClusterClientBuilder::new(seeds.iter().map(String::as_str))
                .connection_timeout(config.connect_timeout)
                .response_timeout(config.response_timeout)
                .retries(CLUSTER_RETRIES)
                .build()
                .map_err(|e| refused(&shown, e))?;
            let c = client
                .get_async_connection()
                .await
                .map_err(|e| refused(&shown, e))?;
            Ok(Conn::Cluster(c))
        }
    }
}

/// The persistence settings of every master: `CONFIG GET appendonly
/// appendfsync maxmemory-policy`, or why each could not be read.
pub(super) async fn config_of_masters(conn: &Conn) -> Vec<NodeConfig> {
    let mut cmd = redis::cmd("CONFIG");
    cmd.arg("GET")
        .arg("appendonly")
        .arg("appendfsync")
        .arg("maxmemory-policy");
    match conn {
        Conn::Single(c) => {
            let got = cmd.query_async::<Value>(&mut c.clone()).await;
            vec![("-".into(), got.map_err(|e| e.to_string()).and_then(pairs))]
        }
        Conn::Cluster(c) => {
            let routing = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
            match c.clone().route_command(cmd, routing).await {
                Ok(Value::Map(per_node)) => per_node
                    .into_iter()
                    .map(|(node, v)| (text(&node), pairs(v)))
                    .collect(),
                Ok(other) => vec![(
                    "cluster".into(),
                    Err(format!("unexpected answer {other:?}")),
                )],
                Err(e) => vec![("cluster".into(), Err(e.to_string()))],
            }
        }
    }
}

fn text(v: &Value) -> String {
    match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        other => format!("{other:?}"),
    }
}

/// A `CONFIG GET` answer (a flat array in RESP2, a map in RESP3), or the
/// server error it carries.
fn pairs(v: Value) -> Result<HashMap<String, String>, String> {
    match v {
        Value::Array(items) => Ok(items
            .chunks(2)
            .filter_map(|kv| match kv {
                [k, v] => Some((text(k), text(v))),
                _ => None,
            })
            .collect()),
        Value::Map(items) => Ok(items.iter().map(|(k, v)| (text(k), text(v))).collect()),
        Value::ServerError(e) => Err(e.to_string()),
        other => Err(format!("unexpected answer {other:?}")),
    }
}
