//! [`SlotTable`]: a hash table whose lookups read the slot first, for the memory store's tables.
//!
//! A SwissTable (hashbrown, `std`) reads a group of control bytes first and the slot they point
//! to after. Once a table outgrows the caches, that is two dependent cache misses per decision,
//! and the decision waits for both: at a million keys, they were 95% of the time of a lookup.
//! Here the cells are the slots themselves, probed in order from the key's home cell (linear
//! probing), and a table is at most three quarters full: most keys sit in their home cell or the
//! next, so a lookup costs one miss. (A slot of GCRA state takes 32 bytes, half a cache line.
//! Aligning cells to 32 bytes, so that none straddles two lines, measured no faster.)
//!
//! A removal moves the keys after it back into the gap (backward-shift deletion), so the table
//! keeps no tombstones and a lookup stops at the first empty cell.

use super::client_key::ClientKey;
use super::key_hasher::KeyHasher;

/// A table grows once it would be more than `FULL_NUMERATOR / FULL_DENOMINATOR` full.
const FULL_NUMERATOR: usize = 3;
const FULL_DENOMINATOR: usize = 4;
/// Cells in a table's first allocation.
const MIN_CELLS: usize = 8;

/// One client's state in a table.
pub(super) struct Slot<K> {
    key: ClientKey,
    pub(super) kept: K,
}

/// Slots of `K`, found by a client key and its hash (from the store's [`KeyHasher`], which is
/// also given to every call that may move slots, to find their home cells again).
pub(super) struct SlotTable<K> {
    /// A power of two of cells, or none before the first insert.
    cells: Box<[Option<Slot<K>>]>,
    len: usize,
}

impl<K> Default for SlotTable<K> {
    fn default() -> Self {
        Self {
            cells: Box::new([]),
            len: 0,
        }
    }
}

impl<K> SlotTable<K> {
    pub(super) fn len(&self) -> usize {
        self.len
    }

    pub(super) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// How many slots fit before the table grows.
    pub(super) fn capacity(&self) -> usize {
        self.cells.len() / FULL_DENOMINATOR * FULL_NUMERATOR
    }

    pub(super) fn find(&self, hash: u64, key: &str) -> Option<&Slot<K>> {
        let at = self.position(hash, key)?;
        self.cells[at].as_ref()
    }

    pub(super) fn find_mut(&mut self, hash: u64, key: &str) -> Option<&mut Slot<K>> {
        let at = self.position(hash, key)?;
        self.cells[at].as_mut()
    }

    /// Keeps `kept` for `key` (of `hash`), which the table does not hold yet.
    pub(super) fn insert(&mut self, hash: u64, key: &str, kept: K, hasher: &KeyHasher) {
        if self.len >= self.capacity() {
            self.resize(cells_for(self.len + 1), hasher);
        }
        let at = self.free_cell(hash);
        let key = ClientKey::new(key);
        self.cells[at] = Some(Slot { key, kept });
        self.len += 1;
    }

    /// Removes `key`'s slot; whether there was one.
    pub(super) fn remove(&mut self, hash: u64, key: &str, hasher: &KeyHasher) -> bool {
        match self.position(hash, key) {
            Some(at) => {
                self.remove_at(at, hasher);
                true
            }
            None => false,
        }
    }

    /// Removes one slot, any; whether there was one.
    pub(super) fn remove_any(&mut self, hasher: &KeyHasher) -> bool {
        match self.cells.iter().position(Option::is_some) {
            Some(at) => {
                self.remove_at(at, hasher);
                true
            }
            None => false,
        }
    }

    /// Keeps the slots `keep` says to keep, and removes the others.
    pub(super) fn retain(&mut self, mut keep: impl FnMut(&Slot<K>) -> bool, hasher: &KeyHasher) {
        // The scan starts at an empty cell, which stays empty: no run of slots wraps past the
        // scan's end, so a removal moves only slots the scan has yet to visit, and the one it
        // moves into the cell just emptied is checked next.
        let Some(start) = self.cells.iter().position(Option::is_none) else {
            return;
        };
        let mask = self.cells.len() - 1;
        let mut visited = 0;
        while visited < self.cells.len() {
            let at = (start + visited) & mask;
            match &self.cells[at] {
                Some(slot) if !keep(slot) => self.remove_at(at, hasher),
                _ => visited += 1,
            }
        }
    }

    /// The same keys in the same cells, each kept value mapped by `f`.
    pub(super) fn map<L>(self, mut f: impl FnMut(K) -> L) -> SlotTable<L> {
        let cells = (self.cells.into_vec().into_iter())
            .map(|cell| cell.map(|Slot { key, kept }| Slot { key, kept: f(kept) }))
            .collect();
        SlotTable {
            cells,
            len: self.len,
        }
    }

    /// Gives back room: keeps room for `keys` slots (or for those it holds, if more).
    pub(super) fn shrink_to(&mut self, keys: usize, hasher: &KeyHasher) {
        let cells = cells_for(keys.max(self.len));
        if cells < self.cells.len() {
            self.resize(cells, hasher);
        }
    }

    /// The cell of `key`'s slot. The probe ends at the first empty cell, and one always comes:
    /// a table is never full.
    fn position(&self, hash: u64, key: &str) -> Option<usize> {
        let mask = self.cells.len().checked_sub(1)?;
        let mut at = home(hash, mask);
        loop {
            match &self.cells[at] {
                None => return None,
                Some(slot) if slot.key.is(key) => return Some(at),
                Some(_) => at = (at + 1) & mask,
            }
        }
    }

    /// The first empty cell from `hash`'s home cell.
    fn free_cell(&self, hash: u64) -> usize {
        let mask = self.cells.len() - 1;
        let mut at = home(hash, mask);
        while self.cells[at].is_some() {
            at = (at + 1) & mask;
        }
        at
    }

    /// Empties the cell at `hole`, then moves back each slot after it, up to the next empty
    /// cell, that may sit in the gap (one whose home cell is not between the gap and itself),
    /// so that every slot stays reachable from its home cell without a gap.
    fn remove_at(&mut self, mut hole: usize, hasher: &KeyHasher) {
        self.cells[hole] = None;
        self.len -= 1;
        let mask = self.cells.len() - 1;
        let mut at = hole;
        loop {
            at = (at + 1) & mask;
            let Some(slot) = &self.cells[at] else {
                return;
            };
            let from_home = at.wrapping_sub(home(hasher.hash(slot.key.as_bytes()), mask)) & mask;
            let from_hole = at.wrapping_sub(hole) & mask;
            if from_home >= from_hole {
                self.cells[hole] = self.cells[at].take();
                hole = at;
            }
        }
    }

    /// Moves every slot into `cells` new cells.
    fn resize(&mut self, cells: usize, hasher: &KeyHasher) {
        let new = (0..cells).map(|_| None).collect();
        let old = std::mem::replace(&mut self.cells, new);
        for slot in old.into_vec().into_iter().flatten() {
            let at = self.free_cell(hasher.hash(slot.key.as_bytes()));
            self.cells[at] = Some(slot);
        }
    }
}

/// The cell where a probe for `hash` starts: from the hash's lowest bits (the store picks a
/// shard by its upper half).
fn home(hash: u64, mask: usize) -> usize {
    hash as usize & mask
}

/// The cells a table needs to hold `keys` slots: none for none.
fn cells_for(keys: usize) -> usize {
    if keys == 0 {
        return 0;
    }
    let cells = keys
        .saturating_mul(FULL_DENOMINATOR)
        .div_ceil(FULL_NUMERATOR);
    cells.next_power_of_two().max(MIN_CELLS)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::algorithm::Gcra;

    fn insert(table: &mut SlotTable<u64>, hasher: &KeyHasher, key: &str, kept: u64) {
        table.insert(hasher.hash(key.as_bytes()), key, kept, hasher);
    }

    fn get(table: &SlotTable<u64>, hasher: &KeyHasher, key: &str) -> Option<u64> {
        let found = table.find(hasher.hash(key.as_bytes()), key)?;
        Some(found.kept)
    }

    /// Every key of `model` is found with its value, and no other.
    fn agrees(table: &SlotTable<u64>, hasher: &KeyHasher, model: &HashMap<String, u64>) {
        assert_eq!(table.len(), model.len());
        for (key, kept) in model {
            assert_eq!(get(table, hasher, key), Some(*kept), "{key}");
        }
        assert_eq!(get(table, hasher, "absent"), None);
    }

    #[test]
    fn a_gcra_cell_fills_half_a_cache_line() {
        assert_eq!(std::mem::size_of::<Option<Slot<Gcra>>>(), 32);
    }

    #[test]
    fn slots_are_found_after_inserts_removals_and_resizes() {
        let hasher = KeyHasher::default();
        let mut table = SlotTable::default();
        let mut model = HashMap::new();
        assert_eq!(get(&table, &hasher, "k"), None);
        assert!(!table.remove(0, "k", &hasher));
        // A pseudo-random walk over 3,000 keys: inserts, updates and removals, in runs that
        // wrap around the end of the cells.
        let mut seed = 0x9e37_79b9_u64;
        for step in 0..40_000_u64 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let key = format!("key-{}", seed % 3_000);
            let hash = hasher.hash(key.as_bytes());
            match (seed >> 32) % 3 {
                0 | 1 => match table.find_mut(hash, &key) {
                    Some(found) => found.kept = step,
                    None => insert(&mut table, &hasher, &key, step),
                },
                _ => assert_eq!(
                    table.remove(hash, &key, &hasher),
                    model.remove(&key).is_some()
                ),
            }
            if (seed >> 32) % 3 != 2 {
                model.insert(key, step);
            }
            assert!(table.len() <= table.capacity());
        }
        agrees(&table, &hasher, &model);
    }

    /// `n` keys whose home is `cell` in a table of 8 cells.
    fn homed_at(hasher: &KeyHasher, cell: usize, n: usize) -> Vec<String> {
        (0..)
            .map(|i| format!("{cell}-{i}"))
            .filter(|key| home(hasher.hash(key.as_bytes()), 7) == cell)
            .take(n)
            .collect()
    }

    #[test]
    fn a_removal_moves_back_the_run_after_it_across_the_end_of_the_cells() {
        let hasher = KeyHasher::default();
        let last = homed_at(&hasher, 7, 3);
        let first = homed_at(&hasher, 0, 1);
        let fill = |table: &mut SlotTable<u64>| {
            // The run: cells 7, 0 and 1 for the keys homed at 7, cell 2 for the one at 0.
            for (i, key) in last.iter().chain(&first).enumerate() {
                insert(table, &hasher, key, i as u64);
            }
            assert_eq!(table.capacity(), 6, "still 8 cells");
        };
        for removed in last.iter().chain(&first) {
            let mut table = SlotTable::default();
            fill(&mut table);
            let hash = hasher.hash(removed.as_bytes());
            assert!(table.remove(hash, removed, &hasher));
            for (i, key) in last.iter().chain(&first).enumerate() {
                let expected = (key != removed).then_some(i as u64);
                assert_eq!(
                    get(&table, &hasher, key),
                    expected,
                    "{key} after removing {removed}"
                );
            }
        }
        let mut table = SlotTable::default();
        fill(&mut table);
        table.retain(|slot| slot.kept % 2 == 1, &hasher);
        assert_eq!(get(&table, &hasher, &last[0]), None);
        assert_eq!(get(&table, &hasher, &last[1]), Some(1));
        assert_eq!(get(&table, &hasher, &last[2]), None);
        assert_eq!(get(&table, &hasher, &first[0]), Some(3));
    }

    #[test]
    fn retain_keeps_exactly_what_it_is_told_and_every_kept_key_is_found() {
        let hasher = KeyHasher::default();
        let mut table = SlotTable::default();
        let mut model = HashMap::new();
        for i in 0..5_000 {
            let key = format!("k{i}");
            insert(&mut table, &hasher, &key, i);
            model.insert(key, i);
        }
        let mut seen = 0;
        table.retain(
            |slot| {
                seen += 1;
                slot.kept % 3 == 0
            },
            &hasher,
        );
        assert_eq!(seen, 5_000, "every slot is asked about once");
        model.retain(|_, kept| *kept % 3 == 0);
        agrees(&table, &hasher, &model);
        table.retain(|_| false, &hasher);
        assert!(table.is_empty());
        agrees(&table, &hasher, &HashMap::new());
    }

    #[test]
    fn a_table_grows_when_three_quarters_full_and_shrinks_to_what_it_is_asked() {
        let hasher = KeyHasher::default();
        let mut table = SlotTable::default();
        assert_eq!(table.capacity(), 0);
        insert(&mut table, &hasher, "first", 0);
        assert_eq!(table.capacity(), 6);
        for i in 0..6 {
            insert(&mut table, &hasher, &i.to_string(), i);
        }
        assert_eq!(table.capacity(), 12, "grown at the seventh key");
        for i in 0..1_000 {
            insert(&mut table, &hasher, &format!("more-{i}"), i);
        }
        assert_eq!(table.capacity(), 1_536);
        table.retain(|slot| slot.kept < 10, &hasher);
        table.shrink_to(20, &hasher);
        assert_eq!(table.capacity(), 24);
        assert_eq!(table.len(), 17);
        assert_eq!(get(&table, &hasher, "first"), Some(0));
        assert_eq!(get(&table, &hasher, "more-9"), Some(9));
        table.shrink_to(0, &hasher);
        assert_eq!(table.capacity(), 24, "never below the slots it holds");
        while table.remove_any(&hasher) {}
        assert!(table.is_empty());
        table.shrink_to(0, &hasher);
        assert_eq!(table.capacity(), 0);
    }
}
