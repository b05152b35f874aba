//! Connecting: a plain connection for the reads the library has no call for
//! (key types, SCAN, pub/sub counts), and a library client for the rest.

use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::{Cmd, Pipeline, RedisFuture, Value};

use crate::Fail;

/// How long connecting may take before the server counts as unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Where the inspector reads and acts.
pub(crate) struct Target {
    /// For the commands the library has no call for.
    pub(crate) raw: Raw,
    /// For lock state and force-unlock.
    pub(crate) client: ferrisson::Client,
    /// One per URL given: `list` scans each, `watch` subscribes on the first.
    pub(crate) nodes: Vec<(redis::Client, String)>,
    /// Whether the URLs are a cluster's nodes (read where the `cluster`
    /// feature is on: without it, connecting to a cluster is refused).
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))]
    pub(crate) cluster: bool,
    /// The CA given with `--tls-ca`, for the masters `list` finds.
    tls_ca: Option<Vec<u8>>,
}

/// The servers whose keys `list` scans: the one server; on a cluster, the
/// masters among the nodes given, and the masters these know of that were
/// not given (reached by the address the cluster gives, with the first
/// URL's scheme, user and password).
pub(crate) async fn scanned(target: &Target) -> Result<Vec<(redis::Client, String)>, Fail> {
    if !target.cluster {
        return Ok(target.nodes.clone());
    }
    let mut masters = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut known = Vec::new();
    for (node, url) in &target.nodes {
        let mut conn = node
            .get_multiplexed_async_connection()
            .await
            .map_err(|e| connect_error(url, &e))?;
        let role: Vec<Value> = redis::cmd("ROLE").query_async(&mut conn).await?;
        if matches!(role.first(), Some(Value::BulkString(r)) if r == b"master") {
            seen.insert(node.get_connection_info().addr().to_string());
            masters.push((node.clone(), url.clone()));
        }
        if known.is_empty() {
            let nodes: String = redis::cmd("CLUSTER")
                .arg("NODES")
                .query_async(&mut conn)
                .await?;
            known = cluster_masters(&nodes);
        }
    }
    let first = &target.nodes[0].1;
    for addr in known {
        if seen.insert(addr.clone()) {
            let Some(url) = with_addr(first, &addr) else {
                continue;
            };
            masters.push((open(&url, target.tls_ca.as_deref())?, url));
        }
    }
    Ok(masters)
}

/// The `ip:port` of each master that serves slots, from `CLUSTER NODES`.
fn cluster_masters(nodes: &str) -> Vec<String> {
    nodes
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let flags = fields.get(2)?;
            let serving = fields.len() > 8;
            let master = flags.split(',').any(|f| f == "master")
                && !flags.split(',').any(|f| f == "fail" || f == "noaddr");
            let addr = fields.get(1)?.split(['@', ',']).next()?;
            (master && serving && !addr.starts_with(':')).then(|| addr.to_owned())
        })
        .collect()
}

/// `url` with its `host:port` replaced by `addr`.
fn with_addr(url: &str, addr: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let (user, host) = match rest.rsplit_once('@') {
        Some((user, host)) => (format!("{user}@"), host),
        None => (String::new(), rest),
    };
    let end = host.find(['/', '?']).unwrap_or(host.len());
    Some(format!("{scheme}://{user}{addr}{}", &host[end..]))
}

/// The URL of the master named `master` by the first of the `sentinels`
/// that answers: its address, with the first sentinel URL's scheme, user
/// and password. A sentinel without a password of its own (a common setup
/// in front of a master with one) is asked again without the URL's.
pub(crate) async fn sentinel_master(
    sentinels: &[String],
    master: &str,
    tls_ca: Option<&[u8]>,
) -> Result<String, Fail> {
    let mut unknown = None;
    let mut failed = None;
    for url in sentinels {
        let mut asked = ask_sentinel(url, master, tls_ca).await;
        if let (Err(_), Some(bare)) = (&asked, without_auth(url)) {
            if let Ok(found) = ask_sentinel(&bare, master, tls_ca).await {
                asked = Ok(found);
            }
        }
        match asked {
            Ok(Some((host, port))) => {
                let first = &sentinels[0];
                let addr = match host.contains(':') {
                    true => format!("[{host}]:{port}"),
                    false => format!("{host}:{port}"),
                };
                return with_addr(first, &addr)
                    .ok_or_else(|| Fail(format!("invalid Redis URL {}", shown(first))));
            }
            Ok(None) => {
                unknown = Some(Fail(format!(
                    "the sentinel at {} knows no master named `{master}`",
                    shown(url)
                )));
            }
            Err(fail) => failed = Some(fail),
        }
    }
    // A sentinel's "no such master" says more than another's silence.
    Err(unknown
        .or(failed)
        .unwrap_or_else(|| Fail("no --url given".to_owned())))
}

/// The address a sentinel at `url` gives for `master`; `None` when it
/// knows no master of that name.
async fn ask_sentinel(
    url: &str,
    master: &str,
    tls_ca: Option<&[u8]>,
) -> Result<Option<(String, u16)>, Fail> {
    let mut conn = open(url, tls_ca)?
        .get_multiplexed_async_connection_with_config(&connection_config())
        .await
        .map_err(|e| connect_error(url, &e))?;
    redis::cmd("SENTINEL")
        .arg("GET-MASTER-ADDR-BY-NAME")
        .arg(master)
        .query_async(&mut conn)
        .await
        .map_err(|e| Fail(format!("{} is no sentinel, or refused: {e}", shown(url))))
}

/// `url` without its user and password; `None` when it has none.
fn without_auth(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let (_, host) = rest.rsplit_once('@')?;
    Some(format!("{scheme}://{host}"))
}

/// Timeouts for the inspector's own connections.
fn connection_config() -> redis::AsyncConnectionConfig {
    redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(CONNECT_TIMEOUT))
        .set_response_timeout(Some(Duration::from_secs(10)))
}

/// A message heard on a channel: the channel and the payload.
pub(crate) type Heard = (String, String);

/// Subscribes to `channels` and `patterns` and hands each message to the
/// receiver, until it is dropped. On a cluster, the channels are followed
/// both as sharded channels (SSUBSCRIBE, on their slot's node) and as
/// classic ones, as a ferrisson or Redisson client may publish either way
/// (classic only on Redis 6, which has no sharded pub/sub); patterns are
/// not, as a cluster has no sharded pattern.
pub(crate) async fn follow(
    target: &Target,
    channels: &[String],
    patterns: &[String],
) -> Result<tokio::sync::mpsc::UnboundedReceiver<Heard>, Fail> {
    use futures_util::StreamExt;
    let (send, heard) = tokio::sync::mpsc::unbounded_channel();
    let (node, url) = &target.nodes[0];
    #[cfg(feature = "cluster")]
    if target.cluster {
        let (push, mut pushed) = tokio::sync::mpsc::unbounded_channel::<redis::PushInfo>();
        let urls: Vec<&str> = target.nodes.iter().map(|(_, url)| url.as_str()).collect();
        let client = redis::cluster::ClusterClientBuilder::new(urls)
            .use_protocol(redis::ProtocolVersion::RESP3)
            .push_sender(push)
            .connection_timeout(CONNECT_TIMEOUT)
            .build()
            .map_err(|e| connect_error(url, &e))?;
        let mut conn = client
            .get_async_connection()
            .await
            .map_err(|e| connect_error(url, &e))?;
        // Redis 6 has no sharded pub/sub: refused once, classic only.
        let mut sharded = true;
        for channel in channels {
            if sharded {
                match conn.ssubscribe(channel).await {
                    Ok(()) => {}
                    Err(err) if err.code().is_some() => sharded = false,
                    Err(err) => return Err(err.into()),
                }
            }
            conn.subscribe(channel).await?;
        }
        tokio::spawn(async move {
            // The connection lives as long as the forwarding does.
            let _conn = conn;
            while let Some(push) = pushed.recv().await {
                let text = |value: &redis::Value| {
                    redis::from_redis_value_ref::<String>(value).unwrap_or_default()
                };
                let heard = match (push.kind, push.data.as_slice()) {
                    (redis::PushKind::Message | redis::PushKind::SMessage, [channel, payload]) => {
                        (text(channel), text(payload))
                    }
                    _ => continue,
                };
                if send.send(heard).is_err() {
                    break;
                }
            }
        });
        return Ok(heard);
    }
    let mut pubsub = node
        .get_async_pubsub()
        .await
        .map_err(|e| connect_error(url, &e))?;
    for channel in channels {
        pubsub.subscribe(channel).await?;
    }
    for pattern in patterns {
        pubsub.psubscribe(pattern).await?;
    }
    tokio::spawn(async move {
        let mut messages = pubsub.into_on_message();
        while let Some(message) = messages.next().await {
            let payload: String = message.get_payload().unwrap_or_default();
            let heard = (message.get_channel_name().to_owned(), payload);
            if send.send(heard).is_err() {
                break;
            }
        }
    });
    Ok(heard)
}

/// A plain command connection to one server or a cluster.
#[derive(Clone)]
pub(crate) enum Raw {
    Single(redis::aio::MultiplexedConnection),
    #[cfg(feature = "cluster")]
    Cluster(redis::cluster_async::ClusterConnection),
}

impl ConnectionLike for Raw {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Raw::Single(conn) => conn.req_packed_command(cmd),
            #[cfg(feature = "cluster")]
            Raw::Cluster(conn) => conn.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Raw::Single(conn) => conn.req_packed_commands(cmd, offset, count),
            #[cfg(feature = "cluster")]
            Raw::Cluster(conn) => conn.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Raw::Single(conn) => conn.get_db(),
            #[cfg(feature = "cluster")]
            Raw::Cluster(conn) => conn.get_db(),
        }
    }
}

/// `url` without its password, for messages.
pub(crate) fn shown(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    match rest.rsplit_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split_once(':').map_or("", |(user, _)| user);
            format!("{scheme}://{user}:***@{host}")
        }
        None => url.to_owned(),
    }
}

/// A failure to connect to `url`, said plainly.
pub(crate) fn connect_error(url: &str, err: &redis::RedisError) -> Fail {
    let url = shown(url);
    let auth = err.kind() == redis::ErrorKind::AuthenticationFailed
        || matches!(err.code(), Some("NOAUTH" | "WRONGPASS"));
    Fail(if auth {
        format!("authentication failed at {url}: wrong user name or password ({err})")
    } else if err.kind() == redis::ErrorKind::InvalidClientConfig {
        format!("invalid Redis URL {url}: {err}")
    } else if err.to_string().contains("certificate") {
        format!(
            "cannot connect to {url}: its TLS certificate is not trusted \
             (--tls-ca FILE names a private CA): {err}"
        )
    } else {
        format!("cannot connect to {url}: {err}")
    })
}

/// How to connect: the URLs given, and the CA of a TLS server.
pub(crate) struct Settings {
    pub(crate) urls: Vec<String>,
    pub(crate) cluster: bool,
    /// The one URL is the master a sentinel named (`--sentinel`): the
    /// client sends the latched protocol, as the library's sentinel
    /// clients do.
    pub(crate) sentinel: bool,
    pub(crate) tls_ca: Option<Vec<u8>>,
    /// The client's watchdog timeout, when not the library's default
    /// (`run --lease`).
    pub(crate) watchdog_timeout: Option<Duration>,
}

fn open(url: &str, tls_ca: Option<&[u8]>) -> Result<redis::Client, Fail> {
    let opened = match tls_ca {
        #[cfg(feature = "tls")]
        Some(pem) => redis::Client::build_with_tls(
            url,
            redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(pem.to_vec()),
            },
        ),
        _ => redis::Client::open(url),
    };
    opened.map_err(|e| connect_error(url, &e))
}

/// Connects to the server (or cluster) of `settings`.
pub(crate) async fn connect(settings: &Settings) -> Result<Target, Fail> {
    let first = settings
        .urls
        .first()
        .ok_or_else(|| Fail("no --url given".to_owned()))?;
    let mut nodes = Vec::new();
    for url in &settings.urls {
        nodes.push((open(url, settings.tls_ca.as_deref())?, url.clone()));
    }
    let config = connection_config();
    // Each node answers once first, so a refused password or a dead node
    // is said at once and by its URL.
    for (node, url) in &nodes {
        let mut conn = node
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .map_err(|e| connect_error(url, &e))?;
        // A server with a password refuses commands (NOAUTH), not
        // connections, when the URL gives none.
        redis::cmd("PING")
            .query_async::<()>(&mut conn)
            .await
            .map_err(|e| connect_error(url, &e))?;
    }
    let (raw, builder) = if settings.cluster {
        cluster(settings, first).await?
    } else {
        let raw = nodes[0]
            .0
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .map_err(|e| connect_error(first, &e))?;
        (Raw::Single(raw), ferrisson::Client::builder(first.as_str()))
    };
    let builder = builder.connection_timeout(CONNECT_TIMEOUT);
    let builder = match settings.sentinel {
        true => builder.lean(false),
        false => builder,
    };
    let builder = match settings.watchdog_timeout {
        Some(timeout) => builder.watchdog_timeout(timeout),
        None => builder,
    };
    #[cfg(feature = "tls")]
    let builder = match &settings.tls_ca {
        Some(pem) => builder.tls_root_certificate(pem.clone()),
        None => builder,
    };
    let client = builder.build().await.map_err(|e| match e {
        ferrisson::Error::Redis(e) | ferrisson::Error::Connect { source: e, .. } => {
            connect_error(first, &e)
        }
        other => Fail(format!("cannot use {}: {other}", shown(first))),
    })?;
    Ok(Target {
        raw,
        client,
        nodes,
        cluster: settings.cluster,
        tls_ca: settings.tls_ca.clone(),
    })
}

/// A plain cluster connection and the library's builder for the cluster.
async fn cluster(
    settings: &Settings,
    first: &str,
) -> Result<(Raw, ferrisson::ClientBuilder), Fail> {
    #[cfg(feature = "cluster")]
    {
        if settings.tls_ca.is_some() {
            // As the library's cluster client: the system's trust store.
            return Err(Fail(
                "--tls-ca is for one server; a cluster's certificates are checked \
                 against the system's trust store"
                    .to_owned(),
            ));
        }
        let builder = redis::cluster::ClusterClientBuilder::new(settings.urls.clone())
            .connection_timeout(CONNECT_TIMEOUT);
        let client = builder.build().map_err(|e| connect_error(first, &e))?;
        let raw = client
            .get_async_connection()
            .await
            .map_err(|e| connect_error(first, &e))?;
        Ok((
            Raw::Cluster(raw),
            ferrisson::Client::cluster_builder(settings.urls.clone()),
        ))
    }
    #[cfg(not(feature = "cluster"))]
    {
        let _ = (settings, first);
        Err(Fail(
            "this ferrisson was built without the `cluster` feature: \
             install it with its default features (`cargo install ferrisson-cli`) \
             for a Redis Cluster"
                .to_owned(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_hide_passwords_and_take_other_addresses() {
        assert_eq!(shown("redis://u:pw@h:1/0"), "redis://u:***@h:1/0");
        assert_eq!(shown("redis://h:1/"), "redis://h:1/");
        assert_eq!(
            with_addr("rediss://u:pw@h:1/0?protocol=3", "10.0.0.2:7001").as_deref(),
            Some("rediss://u:pw@10.0.0.2:7001/0?protocol=3")
        );
        assert_eq!(
            with_addr("redis://h", "10.0.0.2:7001").as_deref(),
            Some("redis://10.0.0.2:7001")
        );
        assert_eq!(
            without_auth("rediss://u:pw@h:1/0").as_deref(),
            Some("rediss://h:1/0")
        );
        assert_eq!(without_auth("redis://h:1/"), None);
    }

    #[test]
    fn cluster_masters_are_the_serving_ones() {
        let nodes = "\
a 127.0.0.1:7001@17001 myself,master - 0 0 1 connected 0-5460
b 127.0.0.1:7002@17002,host-b master - 0 0 2 connected 5461-10922
c 127.0.0.1:7003@17003 slave a 0 0 1 connected
d 127.0.0.1:7004@17004 master,fail - 0 0 3 disconnected 10923-16383
e 127.0.0.1:7005@17005 master - 0 0 4 connected
";
        assert_eq!(cluster_masters(nodes), ["127.0.0.1:7001", "127.0.0.1:7002"]);
    }
}
