//! What one commit writes to the value log: its values appended and synced, and the pointer and
//! use-count changes staged into the commit's sled batch.

use super::*;

/// What a commit changes in sled for its logged keys, built under the log's lock.
pub struct Staged<'a> {
    log: &'a ValueLog,
    state: MutexGuard<'a, State>,
    uses: BTreeMap<u32, Use>,
    /// Each logged key's pointer as this batch leaves it.
    pending: HashMap<Vec<u8>, Option<Pointer>>,
    appended: bool,
}

impl ValueLog {
    /// Starts a commit: takes the log's lock until the batch is applied.
    pub fn stage(&self) -> Staged<'_> {
        let state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Staged {
            log: self,
            uses: state.uses.clone(),
            state,
            pending: HashMap::new(),
            appended: false,
        }
    }
}

impl Staged<'_> {
    fn pointer_of(&self, tree: &sled::Tree, key: &[u8]) -> Result<Option<Pointer>, StoreError> {
        if let Some(p) = self.pending.get(key) {
            return Ok(*p);
        }
        Ok(tree
            .get(pointer_key(key))
            .map_err(|e| sled_err(&self.log.dir, &e))?
            .and_then(|p| Pointer::decode(&p)))
    }

    /// Stages `key` set to `value` (appending it to the log) or deleted, adding its pointer's
    /// change to `batch`.
    pub fn put_or_delete(
        &mut self,
        tree: &sled::Tree,
        key: &[u8],
        value: Option<&[u8]>,
        batch: &mut sled::Batch,
    ) -> Result<(), StoreError> {
        if let Some(old) = self.pointer_of(tree, key)? {
            let used = self.uses.entry(old.segment).or_default();
            used.count = used.count.saturating_sub(1);
            used.bytes = used.bytes.saturating_sub(u64::from(old.len));
        }
        let pkey = pointer_key(key);
        let Some(value) = value else {
            batch.remove(pkey);
            self.pending.insert(key.to_vec(), None);
            return Ok(());
        };
        let record = encode_record(key, value)?;
        let active = &mut self.state.active;
        let pointer = active.append(&self.log.dir, &record)?;
        let used = self.uses.entry(active.id).or_default();
        used.count = used.count.saturating_add(1);
        used.bytes = used.bytes.saturating_add(u64::from(pointer.len));
        batch.insert(pkey, &pointer.encode()[..]);
        self.pending.insert(key.to_vec(), Some(pointer));
        self.appended = true;
        Ok(())
    }

    /// Stages `key`'s pointer moved from `from` to `to` (a record the collector copied and
    /// synced), if it still points at `from`; otherwise the copy is dead space.
    pub fn relocate(
        &mut self,
        tree: &sled::Tree,
        key: &[u8],
        from: Pointer,
        to: Pointer,
        batch: &mut sled::Batch,
    ) -> Result<(), StoreError> {
        if self.pointer_of(tree, key)? != Some(from) {
            return Ok(());
        }
        let old = self.uses.entry(from.segment).or_default();
        old.count = old.count.saturating_sub(1);
        old.bytes = old.bytes.saturating_sub(u64::from(from.len));
        let new = self.uses.entry(to.segment).or_default();
        new.count = new.count.saturating_add(1);
        new.bytes = new.bytes.saturating_add(u64::from(to.len));
        new.size = new.size.max(to.offset.saturating_add(u64::from(to.len)));
        batch.insert(pointer_key(key), &to.encode()[..]);
        self.pending.insert(key.to_vec(), Some(to));
        Ok(())
    }

    /// Makes the appended values durable, adds the changed segment uses to `batch`, applies it
    /// to `tree`, and starts a new segment when the current one is full.
    pub fn apply(mut self, tree: &sled::Tree, mut batch: sled::Batch) -> Result<(), StoreError> {
        let dir = self.log.dir.clone();
        let active_id = self.state.active.id;
        if self.appended {
            let path = dir.join(segment_name(active_id));
            self.state
                .active
                .file
                .sync_data()
                .map_err(|e| io_err(&path, "cannot sync value-log segment", &e))?;
        }
        let active_len = self.state.active.len;
        let mut emptied = Vec::new();
        for (id, used) in &mut self.uses {
            if *id == active_id {
                used.size = active_len;
            }
            if self.state.uses.get(id) == Some(used) {
                continue;
            }
            if used.count == 0 {
                batch.remove(use_key(*id));
                if *id != active_id && self.state.collecting != Some(*id) {
                    emptied.push(*id);
                }
            } else {
                batch.insert(use_key(*id), &used.encode()[..]);
            }
        }
        tree.apply_batch(batch).map_err(|e| sled_err(&dir, &e))?;
        let mut uses = std::mem::take(&mut self.uses);
        let collecting = self.state.collecting;
        uses.retain(|id, u| u.count > 0 || *id == active_id || collecting == Some(*id));
        self.state.uses = uses;
        self.state.doomed.extend(emptied);
        if self.state.active.len >= SEGMENT_BYTES {
            let next = self.state.next_id;
            self.state.next_id = next.checked_add(1).ok_or_else(exhausted)?;
            self.state.active = create_segment(&dir, next)?;
            if self
                .state
                .uses
                .get(&active_id)
                .is_some_and(|u| u.count == 0)
            {
                self.state.uses.remove(&active_id);
                self.state.doomed.push(active_id);
            }
        }
        Ok(())
    }
}
