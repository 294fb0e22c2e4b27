//! With a Redis Cluster member: the views of an ensemble seated for one hash slot, each
//! with every Cluster member's node the shard master that owns the slot, made once per slot
//! and set of masters and shared while a lock or an attempt uses them.

use std::sync::{Arc, Weak};

use crate::ensemble::Ensemble;
use crate::net::cluster::ClusterMember;
use crate::net::node::Node;
use crate::protocol::slots;

impl Ensemble {
    /// Whether node `i`'s votes may count now, as far as its membership goes
    /// (`Node::vouches`, for this view's slot): a Sentinel member's only while its
    /// sentinels confirm its master, a Cluster member's only while more than half of the
    /// cluster's other masters, asked less than a confirmation window ago, named the node
    /// owner of this view's slot (see `net::cluster`); any other node's always.
    pub(crate) fn vouches(&self, i: usize) -> bool {
        self.nodes
            .get(i)
            .is_some_and(|node| node.vouches(self.slot))
    }

    /// The ensemble a lock on `keys` (which share one hash slot) runs on: this one without
    /// a Cluster member; else a view with each Cluster member's node the shard master that
    /// owns the slot (its first seed's node when none is known: a request there is
    /// redirected and does not vote).
    pub(crate) async fn seated(self: &Arc<Self>, keys: &[String]) -> Arc<Ensemble> {
        let base = self.base();
        let Some(seating) = &base.seating else {
            return Arc::clone(self);
        };
        let slot = keys.first().map_or(0, |k| slots::slot_of(k.as_bytes()));
        let seats = (base.nodes.iter().zip(&seating.clusters)).map(|(node, cluster)| async move {
            match cluster {
                Some(cluster) => cluster.seat(slot).await.unwrap_or_else(|| Arc::clone(node)),
                None => Arc::clone(node),
            }
        });
        let nodes: Vec<Arc<Node>> = futures::future::join_all(seats).await;
        // By slot too: a view's confirmation is its slot's (`vouches`), and two slots of one
        // master part when one of them moves.
        let id = (
            slot,
            nodes.iter().map(|n| Arc::as_ptr(n) as usize).collect(),
        );
        let mut views = seating.views.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(view) = views.get(&id).and_then(Weak::upgrade) {
            return view;
        }
        views.retain(|_, v| v.strong_count() > 0);
        let view = Arc::new(Ensemble {
            nodes,
            config: base.config.clone(),
            quorum: base.quorum,
            queue: Arc::clone(&base.queue),
            notifier: base.notifier.clone(),
            background: Arc::clone(&base.background),
            life: Arc::clone(&base.life),
            seating: None,
            base: Some(Arc::clone(base)),
            slot: Some(slot),
        });
        views.insert(id, Arc::downgrade(&view));
        view
    }

    /// Where a lock on `keys` seated in this view is seated once every Cluster member has
    /// learnt its slot table again, when that differs from this view: its slot moved (a
    /// request was redirected). `None` without a Cluster member, or when it did not move.
    pub(crate) async fn moved_seat(self: &Arc<Self>, keys: &[String]) -> Option<Arc<Ensemble>> {
        let seating = self.base().seating.as_ref()?;
        let relearnt = seating.clusters.iter().flatten().map(|c| c.learn_now());
        futures::future::join_all(relearnt).await;
        let view = self.seated(keys).await;
        (!Arc::ptr_eq(&view, self)).then_some(view)
    }

    /// Member `i`'s Redis Cluster, if it is one.
    pub(crate) fn cluster_of(&self, i: usize) -> Option<&Arc<ClusterMember>> {
        let seating = self.base.as_deref().unwrap_or(self).seating.as_ref()?;
        seating.clusters.get(i)?.as_ref()
    }

    /// For member `i` when it is a Redis Cluster, each shard master its slot table names
    /// (learnt first if it never was), sorted, with the `INFO replication` it gave (see
    /// `ClusterMember::shard_replication`); empty for any other member.
    pub(crate) async fn cluster_shards(&self, i: usize) -> Vec<(String, Option<String>)> {
        match self.cluster_of(i) {
            Some(cluster) => cluster.shard_replication().await,
            None => Vec::new(),
        }
    }

    /// For member `i` when it is a Redis Cluster, each master that owns a slot this
    /// client's names can reach, with the first such slot it owns (see
    /// `ClusterMember::owner_first_slots`): with a key prefix that carries a hash tag every
    /// name is in that tag's slot, so only its owner. `None` for any other member.
    pub(crate) async fn cluster_owner_slots(&self, i: usize) -> Option<Vec<(Arc<Node>, u16)>> {
        let cluster = self.cluster_of(i)?;
        let prefix = &self.config.key_prefix;
        if prefix.contains('{') {
            let slot = slots::slot_of(prefix.as_bytes());
            return Some(
                cluster
                    .seat(slot)
                    .await
                    .map(|n| (n, slot))
                    .into_iter()
                    .collect(),
            );
        }
        Some(cluster.owner_first_slots().await)
    }

    /// Every node this client has: its members' and, for a Cluster member, every shard
    /// master named so far.
    pub(crate) fn every_node(&self) -> Vec<Arc<Node>> {
        let mut every = self.nodes.clone();
        let clusters = self
            .seating
            .iter()
            .flat_map(|s| s.clusters.iter().flatten());
        for cluster in clusters {
            every.extend(cluster.shards());
        }
        every
    }
}
