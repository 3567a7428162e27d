//! A Redis Cluster of three masters, started by this test on free loopback
//! ports (`common::redis::RedisCluster`): the whole conformance suite runs
//! against it, the keys of different limits spread over every master while
//! the keys of one limit share one slot, scripts flushed from every node are
//! loaded again, and a limit whose slot moves to another master keeps its
//! state (the store follows `MOVED`).
//!
//! Needs `redis-server` and `redis-cli` on `PATH`: without them the tests say
//! so and pass, unless `REDIS_URL` is set (CI), where they fail.
#![cfg(feature = "redis-cluster")]

mod common;

use std::time::Duration;

use common::conformance::unique;
use common::redis::RedisCluster;
use redis::aio::MultiplexedConnection;
use tower_limits::store::{LeaseStore, Quota, QuotaStore, RedisStore, WindowDecision};

const WHAT: &str = "the Redis Cluster tests";

async fn cluster_store() -> Option<RedisStore> {
    Some(RedisCluster::shared(WHAT)?.store().await)
}

conformance!(cluster, cluster_store().await);

/// Direct connections to each master, to see where keys live.
struct Nodes {
    urls: Vec<String>,
    connections: Vec<MultiplexedConnection>,
}

impl Nodes {
    async fn connect(cluster: &RedisCluster) -> Self {
        let urls = cluster.urls();
        let mut connections = Vec::new();
        for url in &urls {
            let client = redis::Client::open(url.as_str()).unwrap();
            connections.push(client.get_multiplexed_async_connection().await.unwrap());
        }
        Self { urls, connections }
    }

    /// Runs `command` on the node at `index`.
    async fn query<T: redis::FromRedisValue>(
        &self,
        index: usize,
        command: &redis::Cmd,
    ) -> redis::RedisResult<T> {
        command
            .query_async(&mut self.connections[index].clone())
            .await
    }

    /// The hash slot of `key`.
    async fn slot(&self, key: &str) -> i64 {
        let command = redis::cmd("CLUSTER").arg("KEYSLOT").arg(key).clone();
        self.query(0, &command).await.unwrap()
    }

    /// The node holding `key`: the one that has it, while every other node
    /// redirects with `MOVED`.
    async fn owner(&self, key: &str) -> usize {
        let mut owners = Vec::new();
        for index in 0..self.urls.len() {
            match self
                .query::<i64>(index, redis::cmd("EXISTS").arg(key))
                .await
            {
                Ok(exists) => {
                    assert_eq!(
                        exists, 1,
                        "{key} is missing from its node {}",
                        self.urls[index]
                    );
                    owners.push(index);
                }
                Err(error) => assert!(
                    error.redirect_node().is_some(),
                    "{}: not a redirection: {error}",
                    self.urls[index]
                ),
            }
        }
        assert_eq!(owners.len(), 1, "{key} is served by {owners:?}");
        owners[0]
    }

    /// The node id of the node at `index`.
    async fn id(&self, index: usize) -> String {
        self.query(index, redis::cmd("CLUSTER").arg("MYID"))
            .await
            .unwrap()
    }
}

fn granted(decision: WindowDecision) {
    assert!(
        matches!(decision, WindowDecision::Granted { .. }),
        "{decision:?}"
    );
}

/// A sliding log of 10 a minute.
fn log() -> Quota {
    Quota::sliding_log(10, Duration::from_secs(60)).unwrap()
}

/// Writes the sliding log, the quota and the leases of the limit `name`
/// (a log and a fixed window under one name keep apart keys); all the
/// Redis keys written.
async fn write_limit(store: &RedisStore, name: &str) -> Vec<String> {
    let quota_key = store.quota_key(name);
    granted(store.decide(&quota_key, &log(), 1).await.unwrap());
    let window = Quota::fixed_window(10, Duration::from_secs(60)).unwrap();
    granted(store.decide(&quota_key, &window, 1).await.unwrap());
    let leases = store.lease_key(name);
    granted(
        store
            .lease(&leases, 3, Duration::from_secs(60), 1, 1)
            .await
            .unwrap(),
    );
    // The keys a log writes (`log`, `state`), the window's hash (its gaps
    // are written only by a GCRA refund inside the line) and the lease
    // set (its pause key only by a pause).
    let parts = quota_key.parts();
    let mut keys: Vec<String> = [parts[2], parts[3], parts[0]].map(str::to_owned).to_vec();
    keys.push(leases.parts()[0].to_owned());
    keys
}

/// Writes limits until every master holds at least `per_node`; the names of
/// the limits on each node.
async fn limits_on_every_node(
    store: &RedisStore,
    nodes: &Nodes,
    per_node: usize,
) -> Vec<Vec<String>> {
    let mut names = vec![Vec::new(); nodes.urls.len()];
    let mut slots = std::collections::BTreeSet::new();
    for i in 0..200 {
        if names
            .iter()
            .all(|on_node: &Vec<String>| on_node.len() >= per_node)
        {
            break;
        }
        let name = format!("limit-{i}");
        let keys = write_limit(store, &name).await;
        let slot = nodes.slot(&keys[0]).await;
        let owner = nodes.owner(&keys[0]).await;
        for key in &keys {
            assert_eq!(nodes.slot(key).await, slot, "{key}: one slot per limit");
            assert_eq!(nodes.owner(key).await, owner, "{key}: one node per limit");
        }
        slots.insert(slot);
        names[owner].push(name);
    }
    println!(
        "limits per master: {:?}, in {} slots",
        names.iter().map(Vec::len).collect::<Vec<_>>(),
        slots.len()
    );
    assert!(
        names.iter().all(|on_node| on_node.len() >= per_node),
        "200 limits did not reach every master: {names:?}"
    );
    names
}

/// Direct connections to the cluster's nodes, and a store on it; `None` if
/// the cluster tests are skipped.
async fn nodes_and_store() -> Option<(Nodes, RedisStore)> {
    let cluster = RedisCluster::shared(WHAT)?;
    Some((Nodes::connect(cluster).await, cluster.store().await))
}

/// One seed node is enough: the store learns the cluster from it. The keys
/// of one limit share a slot (and a node); different limits spread over all
/// three masters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_spread_over_every_master_and_each_keeps_one_slot() {
    let Some(cluster) = RedisCluster::shared(WHAT) else {
        return;
    };
    let nodes = Nodes::connect(cluster).await;
    let store = RedisStore::cluster_builder([nodes.urls[0].clone()])
        .prefix(format!("{}:", unique("spread")))
        .timeout(Duration::from_secs(2))
        .connect()
        .await
        .unwrap();
    limits_on_every_node(&store, &nodes, 3).await;
}

/// After `SCRIPT FLUSH` on a node, the next decision there loads the
/// scripts again (`NOSCRIPT` is handled on every node, not just one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_flushed_from_each_node_are_loaded_again() {
    let Some((nodes, store)) = nodes_and_store().await else {
        return;
    };
    let names = limits_on_every_node(&store, &nodes, 1).await;
    let quota = log();
    for (index, on_node) in names.iter().enumerate() {
        let flushed: String = nodes
            .query(index, redis::cmd("SCRIPT").arg("FLUSH"))
            .await
            .unwrap();
        assert_eq!(flushed, "OK");
        let key = store.quota_key(&on_node[0]);
        granted(store.decide(&key, &quota, 1).await.unwrap());
    }
}

/// Moving a limit's slot to another master (with its keys, as a resharding
/// does) keeps the limit: the store follows `MOVED` to the new owner and
/// finds the window as full as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limit_whose_slot_moves_keeps_its_state() {
    let Some((nodes, store)) = nodes_and_store().await else {
        return;
    };
    let key = store.quota_key(&unique("moving"));
    let log = Quota::sliding_log(3, Duration::from_secs(60)).unwrap();
    for _ in 0..3 {
        granted(store.decide(&key, &log, 1).await.unwrap());
    }
    let parts = key.parts()[2..].to_vec(); // the log's keys
    let (slot, from) = (nodes.slot(parts[0]).await, nodes.owner(parts[0]).await);
    let to = (from + 1) % nodes.urls.len();
    let (from_id, to_id) = (nodes.id(from).await, nodes.id(to).await);
    let setslot = |state: &str, id: &str| {
        redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg(state)
            .arg(id)
            .clone()
    };
    let ok = |reply: redis::RedisResult<String>| assert_eq!(reply.unwrap(), "OK");
    ok(nodes.query(to, &setslot("IMPORTING", &from_id)).await);
    ok(nodes.query(from, &setslot("MIGRATING", &to_id)).await);
    let port = nodes.urls[to].rsplit(':').next().unwrap();
    let migrate = redis::cmd("MIGRATE")
        .arg("127.0.0.1")
        .arg(port)
        .arg("")
        .arg(0)
        .arg(5_000)
        .arg("KEYS")
        .arg(&parts)
        .clone();
    ok(nodes.query(from, &migrate).await);
    ok(nodes.query(to, &setslot("NODE", &to_id)).await);
    ok(nodes.query(from, &setslot("NODE", &to_id)).await);
    let third = 3 - from - to;
    ok(nodes.query(third, &setslot("NODE", &to_id)).await);
    assert_eq!(nodes.owner(parts[0]).await, to, "the slot moved");

    // The store still maps the slot to the old node, which answers MOVED.
    let decision = store.decide(&key, &log, 1).await.unwrap();
    assert!(
        matches!(decision, WindowDecision::Denied { .. }),
        "the full window moved with the slot: {decision:?}"
    );
    let status = store.quota_status(&key, &log).await.unwrap();
    assert_eq!(status.remaining(), 0);
}
