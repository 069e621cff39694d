//! The connections whose request head the front is still reading, in the
//! order they came, with each client address's share.
//!
//! At most `max` are sniffed at once (`session.max_sniffing`), at most
//! `share` of them from one client address (`session.max_sniffing_per_address`).
//! A new connection is always taken in; when it would go over either
//! bound, a half-read head makes room for it instead:
//!
//! - its address holds its whole share: that address's oldest is shed
//!   ([`Shed::AddressShare`]), so an address only ever competes with
//!   itself;
//! - else every slot is taken: the oldest of all is shed
//!   ([`Shed::Oldest`]).
//!
//! A shed connection is told through its [`SniffPermit`] (its task answers
//! 503 and closes it; [`crate::front`]); its slot is free at once. Refusing
//! the newest instead would let anyone who keeps the slots full, renewing
//! each half head before its header timeout, refuse everyone else.
//!
//! Connections from trusted proxies are taken in without an address (they
//! carry many clients' requests, and name them inside the head): they
//! count against `max` only. An IPv6 client's address is its /64, the
//! block one host or one LAN is given.
//!
//! Every operation is one lock and O(log n) in the connections sniffed
//! now; the table never holds more than `max` of them.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::Arc;

use parking_lot::Mutex;
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::oneshot;

use crate::metrics::RefuseReason;

/// Why a sniffing connection was shed to make room.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Shed {
    /// Every slot was taken: the oldest of all made room.
    Oldest,
    /// Its address held its whole share: its own oldest made room.
    AddressShare,
}

impl Shed {
    /// How the shed connection is counted.
    pub(super) fn reason(self) -> RefuseReason {
        match self {
            Shed::Oldest => RefuseReason::SniffShed,
            Shed::AddressShare => RefuseReason::SniffAddressShed,
        }
    }
}

/// Whose share a connection counts against: an IPv4 address, or an IPv6
/// client's /64.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) enum Client {
    V4(u32),
    V6(u64),
}

impl Client {
    /// The share `ip` counts against (an IPv4-mapped IPv6 address is its
    /// IPv4 address).
    pub(super) fn of(ip: IpAddr) -> Client {
        match ip.to_canonical() {
            IpAddr::V4(v4) => Client::V4(u32::from(v4)),
            IpAddr::V6(v6) => Client::V6((u128::from(v6) >> 64) as u64),
        }
    }
}

/// The sniffing connections (see the module docs); the count is published
/// in a gauge (`herald_connections_sniffing`) set under the same lock, so it
/// cannot drift from the table.
#[derive(Debug, Clone)]
pub(super) struct SniffSlots {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    table: Mutex<Table>,
    gauge: Gauge,
}

#[derive(Debug)]
struct Table {
    max: usize,
    share: usize,
    /// The next connection's number: numbers grow with arrival, so the
    /// smallest in a map is its oldest.
    next: u64,
    /// Every sniffing connection by number.
    by_age: BTreeMap<u64, Entry>,
    /// The connections with an address, by address, then number.
    by_client: BTreeSet<(Client, u64)>,
    /// How many connections each address has in `by_client`; an address
    /// leaves with its last.
    counts: HashMap<Client, usize>,
}

#[derive(Debug)]
struct Entry {
    client: Option<Client>,
    /// Sent to when the connection is shed.
    shed: oneshot::Sender<Shed>,
}

impl SniffSlots {
    /// `max` slots, at most `share` per address, counted in `gauge`.
    pub(super) fn new(max: usize, share: usize, gauge: Gauge) -> Self {
        SniffSlots {
            inner: Arc::new(Inner {
                table: Mutex::new(Table {
                    max: max.max(1),
                    share: share.max(1),
                    next: 0,
                    by_age: BTreeMap::new(),
                    by_client: BTreeSet::new(),
                    counts: HashMap::new(),
                }),
                gauge,
            }),
        }
    }

    /// Take in a connection from `client` (None: from a trusted proxy),
    /// shedding another when the bounds say so.
    pub(super) fn take(&self, client: Option<Client>) -> SniffPermit {
        let (tx, rx) = oneshot::channel();
        let (number, shed) = {
            let mut table = self.inner.table.lock();
            let shed = table.make_room(client);
            let number = table.insert(client, tx);
            self.inner.gauge.set(table.by_age.len() as i64);
            (number, shed)
        };
        // Told outside the lock: its task wakes to answer and close.
        if let Some((entry, why)) = shed {
            // A connection whose head was decided meanwhile is no longer
            // listening; it is served, and not counted as shed.
            let _ = entry.shed.send(why);
        }
        SniffPermit {
            slots: Arc::clone(&self.inner),
            number,
            shed: rx,
        }
    }
}

impl Table {
    /// Remove the connection `client`'s arrival must shed, if any.
    fn make_room(&mut self, client: Option<Client>) -> Option<(Entry, Shed)> {
        if let Some(c) = client
            && self.counts.get(&c).is_some_and(|&n| n >= self.share)
        {
            let &(_, number) = self.by_client.range((c, 0)..=(c, u64::MAX)).next()?;
            return self.remove(number).map(|e| (e, Shed::AddressShare));
        }
        if self.by_age.len() >= self.max {
            let number = *self.by_age.keys().next()?;
            return self.remove(number).map(|e| (e, Shed::Oldest));
        }
        None
    }

    fn insert(&mut self, client: Option<Client>, shed: oneshot::Sender<Shed>) -> u64 {
        let number = self.next;
        self.next += 1;
        if let Some(c) = client {
            self.by_client.insert((c, number));
            *self.counts.entry(c).or_insert(0) += 1;
        }
        self.by_age.insert(number, Entry { client, shed });
        number
    }

    fn remove(&mut self, number: u64) -> Option<Entry> {
        let entry = self.by_age.remove(&number)?;
        if let Some(c) = entry.client {
            self.by_client.remove(&(c, number));
            if let Some(n) = self.counts.get_mut(&c) {
                *n -= 1;
                if *n == 0 {
                    self.counts.remove(&c);
                }
            }
        }
        Some(entry)
    }
}

/// One sniffing connection's slot; dropping it gives the slot back (unless
/// it was shed, which gave it back already).
#[derive(Debug)]
#[must_use = "the slot is given back as soon as the permit is dropped"]
pub(super) struct SniffPermit {
    slots: Arc<Inner>,
    number: u64,
    shed: oneshot::Receiver<Shed>,
}

impl SniffPermit {
    /// Resolves when this connection is shed to make room for a newer one;
    /// pending for as long as it is not. Await it once, in a `select!`
    /// beside the reading it interrupts.
    pub(super) async fn shed(&mut self) -> Shed {
        match (&mut self.shed).await {
            Ok(why) => why,
            // The table dropped the sender without a word: only when the
            // table itself is gone, which outlives every permit.
            Err(_) => std::future::pending().await,
        }
    }
}

impl Drop for SniffPermit {
    fn drop(&mut self) {
        let mut table = self.slots.table.lock();
        if table.remove(self.number).is_some() {
            self.slots.gauge.set(table.by_age.len() as i64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(s: &str) -> Option<Client> {
        Some(Client::of(s.parse().unwrap()))
    }

    /// What a permit was told, without waiting.
    fn told(p: &mut SniffPermit) -> Option<Shed> {
        p.shed.try_recv().ok()
    }

    #[test]
    fn the_bound_sheds_the_oldest_and_takes_the_newest() {
        let gauge = Gauge::default();
        let slots = SniffSlots::new(2, 2, gauge.clone());
        let mut a = slots.take(v4("192.0.2.1"));
        let mut b = slots.take(v4("192.0.2.2"));
        let mut c = slots.take(v4("192.0.2.3"));
        assert_eq!(told(&mut a), Some(Shed::Oldest));
        assert_eq!((told(&mut b), told(&mut c)), (None, None));
        assert_eq!(gauge.get(), 2);
        // The shed one's slot went with the shedding: its drop changes nothing.
        drop(a);
        assert_eq!(gauge.get(), 2);
        drop((b, c));
        assert_eq!(gauge.get(), 0);
    }

    #[test]
    fn an_address_over_its_share_sheds_its_own_oldest() {
        let gauge = Gauge::default();
        let slots = SniffSlots::new(8, 2, gauge.clone());
        let mut other = slots.take(v4("192.0.2.9"));
        let mut first = slots.take(v4("192.0.2.1"));
        let mut second = slots.take(v4("192.0.2.1"));
        let mut third = slots.take(v4("192.0.2.1"));
        assert_eq!(told(&mut first), Some(Shed::AddressShare));
        assert_eq!(told(&mut second), None);
        assert_eq!(told(&mut third), None);
        // The other address's older connection is left alone.
        assert_eq!(told(&mut other), None);
        assert_eq!(gauge.get(), 3);
        // A slot given back lets the address take one more without shedding.
        drop(second);
        let mut fourth = slots.take(v4("192.0.2.1"));
        assert_eq!((told(&mut third), told(&mut fourth)), (None, None));
        assert_eq!(gauge.get(), 3);
    }

    #[test]
    fn trusted_proxies_count_against_the_bound_only() {
        let slots = SniffSlots::new(4, 1, Gauge::default());
        let mut proxied: Vec<_> = (0..4).map(|_| slots.take(None)).collect();
        assert!(proxied.iter_mut().all(|p| told(p).is_none()));
        let _direct = slots.take(v4("192.0.2.1"));
        assert_eq!(told(&mut proxied[0]), Some(Shed::Oldest));
    }

    #[test]
    fn an_ipv6_client_is_its_slash_64_and_a_mapped_ipv4_its_address() {
        let a = Client::of("2001:db8:1:2::1".parse().unwrap());
        let b = Client::of("2001:db8:1:2:ffff::9".parse().unwrap());
        let c = Client::of("2001:db8:1:3::1".parse().unwrap());
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(
            Client::of("::ffff:192.0.2.1".parse().unwrap()),
            Client::of("192.0.2.1".parse().unwrap())
        );
    }

    #[tokio::test]
    async fn a_shed_permit_resolves_with_why() {
        let slots = SniffSlots::new(1, 1, Gauge::default());
        let mut a = slots.take(None);
        let _b = slots.take(None);
        assert_eq!(a.shed().await, Shed::Oldest);
    }
}
