//! Shared by the examples: where Redis is.

pub(crate) use ferrisson_test_support::RedisServer;

/// `REDIS_URL` when set; otherwise a throwaway `redis-server` from `PATH`,
/// started for this run and stopped when the returned value is dropped.
pub(crate) fn redis_url() -> (String, Option<RedisServer>) {
    match std::env::var("REDIS_URL") {
        Ok(url) if !url.is_empty() => (url, None),
        _ => {
            let server = RedisServer::start();
            println!("(started a throwaway redis-server at {})", server.url());
            (server.url(), Some(server))
        }
    }
}
