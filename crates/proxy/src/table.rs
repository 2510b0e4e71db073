//! The programmed table, in memory, and the transactions that change it.
//!
//! The kernel's table is never listed: [`Table`] remembers what it
//! programmed — every Service's [`ServiceRules`], and for every element
//! the Services that want it — and [`Table::transaction`] writes only the
//! difference a change of Services makes, as one `nft -f` transaction:
//! the kernel takes all of it or none. After a failed transaction the
//! caller [`Table::forget`]s, and the next one rebuilds the whole table
//! atomically ([`Table::rebuild`]).

use std::collections::{BTreeMap, BTreeSet};

use crate::model::ServiceName;
use crate::rules::{self, Config, Dispatch, Map, ServiceRules, TABLE};

/// Elements per `add element` / `delete element` statement.
const ELEMENTS_PER_STATEMENT: usize = 1000;

/// What the kernel's table holds, as far as the proxy knows.
#[derive(Debug)]
pub struct Table {
    config: Config,
    /// Whether the table and its fixed part are there.
    based: bool,
    services: BTreeMap<ServiceName, ServiceRules>,
    /// For every element, the Services that want it and the value each
    /// wants; the first Service's value is the one programmed.
    elements: BTreeMap<(Map, String), BTreeMap<ServiceName, String>>,
    dispatch: BTreeSet<Dispatch>,
}

impl Table {
    pub fn new(config: Config) -> Table {
        Table {
            config,
            based: false,
            services: BTreeMap::new(),
            elements: BTreeMap::new(),
            dispatch: BTreeSet::new(),
        }
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The Services programmed.
    pub fn len(&self) -> usize {
        self.services.len()
    }

    pub fn is_empty(&self) -> bool {
        self.services.is_empty()
    }

    /// Forgets what was programmed after a transaction the kernel
    /// refused; the next transaction is a rebuild.
    pub fn forget(&mut self) {
        self.based = false;
    }

    /// Whether the next transaction rebuilds the table.
    pub fn needs_rebuild(&self) -> bool {
        !self.based
    }

    /// The transaction that replaces the table whole (deleted and made
    /// again in one commit, so that traffic never sees it half-made) with
    /// the Services already known and `changes` applied.
    pub fn rebuild(
        &mut self,
        changes: impl IntoIterator<Item = (ServiceName, Option<ServiceRules>)>,
    ) -> String {
        for (name, rules) in changes {
            match rules {
                Some(rules) => self.services.insert(name, rules),
                None => self.services.remove(&name),
            };
        }
        self.elements.clear();
        self.dispatch.clear();
        let mut out = format!("add table ip {TABLE}\ndelete table ip {TABLE}\n");
        out.push_str(&rules::base(&self.config));
        let mut tx = Transaction::default();
        let services = std::mem::take(&mut self.services);
        for (name, rules) in &services {
            self.add_service(&mut tx, name, rules);
        }
        self.services = services;
        self.settle_elements(&mut tx);
        out.push_str(&tx.render());
        self.based = true;
        out
    }

    /// The transaction that takes the table to one where each of `changes`
    /// holds (`None`: the Service is gone), or `None` when nothing
    /// changes. The state is updated as if it were applied: when it is
    /// not, [`Table::forget`].
    pub fn transaction(
        &mut self,
        changes: impl IntoIterator<Item = (ServiceName, Option<ServiceRules>)>,
    ) -> Option<String> {
        if !self.based {
            let text = self.rebuild(changes);
            return Some(text);
        }
        let mut tx = Transaction::default();
        for (name, rules) in changes {
            let old = self.services.remove(&name);
            if old.as_ref() == rules.as_ref() {
                if let Some(old) = old {
                    self.services.insert(name, old);
                }
                continue;
            }
            if let Some(old) = &old {
                self.remove_service(&mut tx, &name, old, rules.as_ref());
            }
            if let Some(rules) = rules {
                self.add_service_after(&mut tx, &name, &rules, old.as_ref());
                self.services.insert(name, rules);
            }
        }
        self.settle_elements(&mut tx);
        let text = tx.render();
        (!text.is_empty()).then_some(text)
    }

    /// `name`'s elements, chains and sets into a table that has none of
    /// them (a rebuild).
    fn add_service(&mut self, tx: &mut Transaction, name: &ServiceName, rules: &ServiceRules) {
        self.add_service_after(tx, name, rules, None);
    }

    /// Takes out what `old` had that `new` has not (or has otherwise).
    fn remove_service(
        &mut self,
        tx: &mut Transaction,
        name: &ServiceName,
        old: &ServiceRules,
        new: Option<&ServiceRules>,
    ) {
        let empty = ServiceRules::default();
        let new = new.unwrap_or(&empty);
        for element in &old.elements {
            let key = (element.map, element.key.clone());
            let Some(owners) = self.elements.get_mut(&key) else {
                continue;
            };
            tx.touched
                .entry(key.clone())
                .or_insert_with(|| owners.values().next().cloned());
            owners.remove(name);
            if owners.is_empty() {
                self.elements.remove(&key);
            }
        }
        for (chain, body) in &old.chains {
            match new.chains.get(chain) {
                Some(same) if same == body => {}
                Some(_) => tx.flush_chains.push(chain.clone()),
                None => {
                    tx.flush_chains.push(chain.clone());
                    tx.delete_chains.push(chain.clone());
                }
            }
        }
        for (set, timeout) in &old.affinity_sets {
            if new.affinity_sets.get(set) != Some(timeout) {
                tx.delete_sets.push(set.clone());
            }
        }
    }

    /// Puts in what `new` has that `old` (already taken out by
    /// [`Table::remove_service`]) had not.
    fn add_service_after(
        &mut self,
        tx: &mut Transaction,
        name: &ServiceName,
        new: &ServiceRules,
        old: Option<&ServiceRules>,
    ) {
        for dispatch in &new.dispatch {
            if self.dispatch.insert(*dispatch) {
                tx.new_chains.push(dispatch.chain());
                tx.rules.push((dispatch.chain(), vec![dispatch.rule()]));
            }
        }
        for (set, timeout) in &new.affinity_sets {
            if old.and_then(|o| o.affinity_sets.get(set)) != Some(timeout) {
                tx.add_sets.push((set.clone(), *timeout));
            }
        }
        for (chain, body) in &new.chains {
            match old.and_then(|o| o.chains.get(chain)) {
                Some(same) if same == body => {}
                Some(_) => tx.rules.push((chain.clone(), body.clone())),
                None => {
                    tx.new_chains.push(chain.clone());
                    tx.rules.push((chain.clone(), body.clone()));
                }
            }
        }
        for element in &new.elements {
            let key = (element.map, element.key.clone());
            let owners = self.elements.entry(key.clone()).or_default();
            tx.touched
                .entry(key)
                .or_insert_with(|| owners.values().next().cloned());
            owners.insert(name.clone(), element.value.clone());
        }
    }

    /// The element statements for the keys `tx` touched: each key's
    /// value before the transaction against its value now.
    fn settle_elements(&self, tx: &mut Transaction) {
        for ((map, key), before) in std::mem::take(&mut tx.touched) {
            let after = self
                .elements
                .get(&(map, key.clone()))
                .and_then(|owners| owners.values().next().cloned());
            if before == after {
                continue;
            }
            if before.is_some() {
                tx.delete_elements.push((map, key.clone()));
            }
            if let Some(value) = after {
                tx.add_elements.push((map, key, value));
            }
        }
    }
}

/// One transaction's statements, by kind, written in the order that keeps
/// every reference valid: chains are made before anything points at
/// them, elements and rules leave a chain before it is deleted, a set is
/// made before a rule uses it.
#[derive(Debug, Default)]
struct Transaction {
    /// Every element key touched, with its value before.
    touched: BTreeMap<(Map, String), Option<String>>,
    new_chains: Vec<String>,
    flush_chains: Vec<String>,
    delete_elements: Vec<(Map, String)>,
    delete_chains: Vec<String>,
    delete_sets: Vec<String>,
    add_sets: Vec<(String, u32)>,
    rules: Vec<(String, Vec<String>)>,
    add_elements: Vec<(Map, String, String)>,
}

impl Transaction {
    fn render(&self) -> String {
        let t = TABLE;
        let mut out = String::new();
        for chain in &self.new_chains {
            out.push_str(&format!("add chain ip {t} {chain}\n"));
        }
        for chain in &self.flush_chains {
            out.push_str(&format!("flush chain ip {t} {chain}\n"));
        }
        let mut deletes: BTreeMap<Map, BTreeSet<&str>> = BTreeMap::new();
        for (map, key) in &self.delete_elements {
            deletes.entry(*map).or_default().insert(key);
        }
        for (map, keys) in &deletes {
            let keys: Vec<&str> = keys.iter().copied().collect();
            for chunk in keys.chunks(ELEMENTS_PER_STATEMENT) {
                out.push_str(&format!(
                    "delete element ip {t} {} {{ {} }}\n",
                    map.name(),
                    chunk.join(", ")
                ));
            }
        }
        for chain in &self.delete_chains {
            out.push_str(&format!("delete chain ip {t} {chain}\n"));
        }
        for set in &self.delete_sets {
            out.push_str(&format!("delete set ip {t} {set}\n"));
        }
        for (set, timeout) in &self.add_sets {
            out.push_str(&format!(
                "add set ip {t} {set} {{ type ipv4_addr ; flags dynamic,timeout ; timeout {timeout}s ; }}\n"
            ));
        }
        for (chain, body) in &self.rules {
            for rule in body {
                out.push_str(&format!("add rule ip {t} {chain} {rule}\n"));
            }
        }
        let mut adds: BTreeMap<Map, BTreeMap<&str, &str>> = BTreeMap::new();
        for (map, key, value) in &self.add_elements {
            adds.entry(*map).or_default().insert(key, value);
        }
        for (map, elements) in &adds {
            let items: Vec<String> = elements
                .iter()
                .map(|(key, value)| {
                    if map.is_set() {
                        key.to_string()
                    } else {
                        format!("{key} : {value}")
                    }
                })
                .collect();
            for chunk in items.chunks(ELEMENTS_PER_STATEMENT) {
                out.push_str(&format!(
                    "add element ip {t} {} {{ {} }}\n",
                    map.name(),
                    chunk.join(", ")
                ));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests;
