//! Connecting to a Redis Cluster (feature `cluster`).

use redis::cluster::ClusterClientBuilder;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::{ConnectionInfo, ProtocolVersion};

use crate::client::conn::{Conn, Reopen};
use crate::client::pubsub::PubSub;
use crate::config::{Config, PubSubMode};
use crate::Result;

/// Opens the command and subscription connections to the cluster behind
/// `nodes`, and finds how unlock messages travel there: as the config
/// asks, or with [`PubSubMode::Auto`] sharded pub/sub when the nodes know
/// `PUBSUB SHARDNUMSUB` (Redis 7+), as Redisson probes it, classic
/// otherwise.
pub(crate) async fn connect(
    nodes: Vec<ConnectionInfo>,
    config: &Config,
) -> Result<(Conn, Reopen, PubSub, PubSubMode)> {
    let builder = || {
        ClusterClientBuilder::new(nodes.clone())
            .use_protocol(ProtocolVersion::RESP3)
            .tcp_settings(super::builder::tcp_settings())
            .connection_timeout(config.connection_timeout)
            .response_timeout(config.response_timeout)
    };
    let cluster = builder().build()?;
    let mut conn = cluster.get_async_connection().await?;
    let addr = nodes[0].addr().to_string();
    super::scripting::check(&mut Conn::Cluster(conn.clone()), &addr).await?;
    // One node answers: sent to all of them, as the crate routes it, the
    // errors of a Redis 6 cluster would not combine into one reply.
    let mut probe = redis::cmd("PUBSUB");
    probe.arg("SHARDNUMSUB");
    let probe = conn
        .route_command(
            probe,
            RoutingInfo::SingleNode(SingleNodeRoutingInfo::RandomPrimary),
        )
        .await
        .and_then(redis::Value::extract_error);
    let supported = match probe {
        Ok(_) => true,
        Err(err) if err.code().is_some() => false,
        Err(err) => return Err(err.into()),
    };
    let mode = match (config.pubsub_mode, supported) {
        (PubSubMode::Classic, _) | (PubSubMode::Auto, false) => PubSubMode::Classic,
        (PubSubMode::Sharded | PubSubMode::Auto, true) => PubSubMode::Sharded,
        (PubSubMode::Sharded, false) => {
            return Err(crate::Error::invalid(
                "sharded pub/sub was asked for, but the cluster does not support it (Redis 7+)",
            ))
        }
    };
    let pubsub = PubSub::connect_cluster(builder(), mode == PubSubMode::Sharded).await?;
    Ok((
        Conn::Cluster(conn),
        Reopen::Cluster(Box::new(cluster)),
        pubsub,
        mode,
    ))
}
