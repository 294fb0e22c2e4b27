//! A validated acquisition, [`Plan`]: the resources sorted and deduplicated, their keys,
//! the TTL admitted by the ensemble, and what the attempt reads; and one attempt's inputs,
//! [`Attempt`]: the plan with the client and the attempt's place in the waiting lists.

use std::sync::Arc;
use std::time::Duration;

use crate::ensemble::Ensemble;
use crate::ensemble::config::whole_ms;
use crate::error::{Error, Result};
use crate::protocol::access::Access;
use crate::protocol::{keys, slots};
use crate::wait::{Enqueue, Requeue};

/// A validated acquisition: the resources, their keys and the TTL in whole milliseconds.
#[derive(Debug)]
pub(crate) struct Plan {
    pub(crate) resources: Arc<[String]>,
    pub(crate) keys: Arc<[String]>,
    pub(crate) ttl: Duration,
    pub(crate) fencing: bool,
    /// What the lock holds: a mutex, or a side of a read-write lock.
    pub(crate) access: Access,
    /// Read every node's answer (up to the node timeout), not only until the outcome is
    /// certain: a readmission probe reports every node's standing.
    pub(crate) every_answer: bool,
}

impl Plan {
    pub(crate) fn new(
        ensemble: &Ensemble,
        mut resources: Vec<String>,
        ttl: Duration,
        fencing: bool,
    ) -> Result<Plan> {
        ensemble.check_open()?;
        if resources.is_empty() {
            return Err(Error::Config("no resource names given".into()));
        }
        if resources.iter().any(String::is_empty) {
            return Err(Error::Config("empty resource name".into()));
        }
        // Sorted and unique: the order callers pass must not matter.
        resources.sort_unstable();
        resources.dedup();
        let ttl = ensemble.accept_ttl(ttl)?;
        let resources: Arc<[String]> = resources.into();
        let keys = keys::locks(ensemble.config.space(), &resources);
        one_slot(ensemble, &keys)?;
        Ok(Plan {
            resources,
            keys,
            ttl,
            fencing,
            // A mutex until `with_access` says otherwise.
            access: Access::default(),
            every_answer: false,
        })
    }

    /// The same plan for a side of a read-write lock or a semaphore's slot, which have one
    /// resource each.
    pub(crate) fn with_access(self, access: Access) -> Result<Plan> {
        if !access.takes_many_names() && self.resources.len() != 1 {
            return Err(Error::Config(
                "a read-write lock or a permit has one name".into(),
            ));
        }
        Ok(Plan { access, ..self })
    }

    /// The same plan, reading every node's answer (see [`Plan::every_answer`]).
    pub(crate) fn reading_every_answer(self) -> Plan {
        Plan {
            every_answer: true,
            ..self
        }
    }

    pub(super) fn ttl_ms(&self) -> u64 {
        whole_ms(self.ttl)
    }

    /// The expiry of the keys' waiting lists: twice the TTL, as the acquire script sets it.
    pub(crate) fn list_ttl_ms(&self) -> u64 {
        self.ttl_ms().saturating_mul(2)
    }
}

/// Refuses lock keys in more than one hash slot when a member is a Redis Cluster: every
/// key of one lock goes to one shard in one script.
fn one_slot(ensemble: &Ensemble, keys: &[String]) -> Result<()> {
    if !ensemble.config.slotted {
        return Ok(());
    }
    let slot = |key: &String| slots::slot_of(key.as_bytes());
    match keys.split_first() {
        Some((first, rest)) if rest.iter().any(|k| slot(k) != slot(first)) => {
            Err(Error::Config(format!(
                "the resources of one lock must share a Redis Cluster hash slot when a member \
                 is a Cluster ({first} is in slot {}): give them one hash tag, as in \
                 {{order-7}}:a and {{order-7}}:b",
                slot(first)
            )))
        }
        _ => Ok(()),
    }
}

/// One attempt's inputs: the client, the acquisition, and how the attempt keeps this
/// client in the waiting lists (when it listens for releases).
#[derive(Clone, Copy)]
pub(super) struct Attempt<'a> {
    pub(super) ensemble: &'a Arc<Ensemble>,
    pub(super) plan: &'a Plan,
    pub(super) enqueue: Option<Enqueue<'a>>,
}

impl Attempt<'_> {
    /// How this attempt's clean-up puts the client back in the waiting list, if listed.
    pub(super) fn requeue(&self) -> Option<Requeue<'_>> {
        (self.enqueue).map(|e| e.requeue(self.plan.list_ttl_ms()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The plan of a lock on `names` by a client with `prefix` (built, never connected).
    fn plan(prefix: &str, names: &[&str]) -> Plan {
        let client = crate::Redlock::builder()
            .node("redis://127.0.0.1:1")
            .key_prefix(prefix)
            .build()
            .expect("client");
        let names = names.iter().map(|n| (*n).to_owned()).collect();
        Plan::new(client.inner(), names, Duration::from_secs(1), false).expect("plan")
    }

    #[test]
    fn without_a_prefix_the_keys_are_the_resource_names_in_one_allocation() {
        let p = plan("", &["b", "a", "b"]);
        assert_eq!(&*p.resources, ["a", "b"]);
        assert_eq!(&*p.keys, ["a", "b"]);
        assert!(Arc::ptr_eq(&p.keys, &p.resources));

        let p = plan("app:", &["b", "a"]);
        assert_eq!(&*p.resources, ["a", "b"]);
        assert_eq!(&*p.keys, ["app:a", "app:b"]);
    }
}
