//! The daemon's transfers in id order, in one vector.
//!
//! Ids only grow (a new transfer takes the next one), so an add is a push
//! and a lookup a binary search. A `BTreeMap` kept each ~0.8 KB entry
//! inline in nodes of eleven that in-order inserts leave about half empty
//! (heaptrack: 1.84 KB per transfer); boxing the entries instead made each
//! `torrent-get` walk chase a pointer per transfer (0.35 -> 0.45 ms for
//! 1,000). Here the entries sit side by side, walked in order.

use std::ops::Index;

use super::Entry;
use crate::backend::TransferId;

/// Entries by id, ascending (generic for its tests).
pub(super) struct Entries<T = Entry> {
    items: Vec<(TransferId, T)>,
}

impl<T> Default for Entries<T> {
    fn default() -> Self {
        Entries { items: Vec::new() }
    }
}

impl<T> Entries<T> {
    fn find(&self, id: &TransferId) -> Result<usize, usize> {
        // The newest is the likeliest to be asked for right after its add.
        match self.items.last() {
            Some((last, _)) if last == id => Ok(self.items.len() - 1),
            Some((last, _)) if last < id => Err(self.items.len()),
            _ => self.items.binary_search_by_key(id, |(k, _)| *k),
        }
    }

    pub(super) fn len(&self) -> usize {
        self.items.len()
    }

    pub(super) fn get(&self, id: &TransferId) -> Option<&T> {
        self.find(id).ok().map(|i| &self.items[i].1)
    }

    pub(super) fn get_mut(&mut self, id: &TransferId) -> Option<&mut T> {
        self.find(id).ok().map(|i| &mut self.items[i].1)
    }

    pub(super) fn contains_key(&self, id: &TransferId) -> bool {
        self.find(id).is_ok()
    }

    /// Adds or replaces the entry of `id` (the old one returned).
    pub(super) fn insert(&mut self, id: TransferId, e: T) -> Option<T> {
        match self.find(&id) {
            Ok(i) => Some(std::mem::replace(&mut self.items[i].1, e)),
            Err(i) => {
                self.items.insert(i, (id, e));
                None
            }
        }
    }

    pub(super) fn remove(&mut self, id: &TransferId) -> Option<T> {
        self.find(id).ok().map(|i| self.items.remove(i).1)
    }

    pub(super) fn keys(&self) -> impl Iterator<Item = &TransferId> {
        self.items.iter().map(|(k, _)| k)
    }

    pub(super) fn values(&self) -> impl Iterator<Item = &T> {
        self.items.iter().map(|(_, e)| e)
    }

    pub(super) fn values_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.items.iter_mut().map(|(_, e)| e)
    }

    pub(super) fn iter_mut(&mut self) -> impl Iterator<Item = (&TransferId, &mut T)> {
        self.items.iter_mut().map(|(k, e)| (&*k, e))
    }
}

impl<T> Index<&TransferId> for Entries<T> {
    type Output = T;

    /// The entry of `id`; panics if there is none (as a map's index does):
    /// for ids just read from these entries under the same lock.
    fn index(&self, id: &TransferId) -> &T {
        self.get(id).expect("no entry with this id")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u64, u32),
        Remove(u64),
        Set(u64, u32),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u64..64, any::<u32>()).prop_map(|(k, v)| Op::Insert(k, v)),
            (0u64..64).prop_map(Op::Remove),
            (0u64..64, any::<u32>()).prop_map(|(k, v)| Op::Set(k, v)),
        ]
    }

    proptest! {
        /// Whatever the order of inserts and removes, it answers as a map.
        #[test]
        fn behaves_as_an_ordered_map(ops in proptest::collection::vec(op(), 0..200)) {
            let mut e: Entries<u32> = Entries::default();
            let mut m = BTreeMap::new();
            for o in ops {
                match o {
                    Op::Insert(k, v) => {
                        prop_assert_eq!(e.insert(k, v), m.insert(k, v));
                    }
                    Op::Remove(k) => {
                        prop_assert_eq!(e.remove(&k), m.remove(&k));
                    }
                    Op::Set(k, v) => {
                        if let Some(x) = e.get_mut(&k) {
                            *x = v;
                        }
                        if let Some(x) = m.get_mut(&k) {
                            *x = v;
                        }
                    }
                }
                prop_assert_eq!(e.len(), m.len());
            }
            prop_assert!(e.keys().eq(m.keys()));
            prop_assert!(e.values().eq(m.values()));
            for k in 0..64 {
                let id = k;
                prop_assert_eq!(e.get(&id), m.get(&id));
                prop_assert_eq!(e.contains_key(&id), m.contains_key(&id));
            }
            for (v, (_, w)) in e.values_mut().zip(m.iter_mut()) {
                *v = v.wrapping_add(1);
                *w = w.wrapping_add(1);
            }
            prop_assert!(e.iter_mut().map(|(k, v)| (*k, *v)).eq(m.iter().map(|(k, v)| (*k, *v))));
        }
    }
}
