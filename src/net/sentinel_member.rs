//! A Sentinel member's node as a [`Membership`]: it reaches the master its sentinels name
//! (`net::sentinel`), counts while they confirm it, and its requests renew the
//! confirmation once it is no longer fresh.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use redis::{Client, RedisResult};

use crate::net::member::Membership;
use crate::net::sentinel::{MasterAddr, SentinelMaster, Survey};
use crate::net::server_facts::KnownServer;

/// A Sentinel member's node: it reaches the master its sentinels name, counts while they
/// confirm it, and its requests renew the confirmation once it is no longer fresh.
impl Membership for Arc<SentinelMaster> {
    fn client(
        &self,
        timeout: Duration,
    ) -> BoxFuture<'_, RedisResult<(Client, Option<MasterAddr>)>> {
        Box::pin(async move {
            let (addr, client) = self.master_client(timeout).await?;
            Ok((client, Some(addr)))
        })
    }

    fn connected_to(&self, master: MasterAddr) {
        SentinelMaster::connected_to(self, master);
    }

    fn fails_over(&self) -> bool {
        true
    }

    fn vouches(&self, _node: &str, _slot: Option<u16>, _known: &KnownServer) -> bool {
        SentinelMaster::vouches(self)
    }

    fn renewal<'a>(&'a self, _node: &'a str, timeout: Duration) -> Option<BoxFuture<'a, bool>> {
        (!self.is_fresh()).then(|| Box::pin(self.keep_confirmed(timeout)) as BoxFuture<'a, bool>)
    }

    fn resolved_master(&self) -> Option<String> {
        self.named().map(|(host, port)| format!("{host}:{port}"))
    }

    fn survey(&self, timeout: Duration) -> Option<BoxFuture<'_, Survey>> {
        Some(Box::pin(SentinelMaster::survey(self, timeout)))
    }
}
