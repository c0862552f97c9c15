//! The ledger that fenced writes go to, and the proof read from it: in ledger order, per key, tokens
//! (or terms) never go down, and each token belongs to one owner. A write by an older tenure after a
//! newer one wrote would break the first; two holders of one tenure, the second.

use std::collections::{BTreeMap, BTreeSet};

use super::{client, Tables};

/// Creates a fresh ledger table and returns its name.
pub fn create(tables: &mut Tables) -> String {
    let ledger = tables.name("ledger");
    client()
        .batch_execute(&format!(
            "CREATE TABLE {ledger} (id bigserial PRIMARY KEY, key text NOT NULL DEFAULT '',
                                    token bigint NOT NULL, owner text NOT NULL)"
        ))
        .unwrap();
    ledger
}

/// `(key, token, owner)` of every write, in ledger order.
pub fn rows(ledger: &str) -> Vec<(String, i64, String)> {
    client()
        .query(
            &format!("SELECT key, token, owner FROM {ledger} ORDER BY id"),
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect()
}

/// What the proof found.
pub struct Proof {
    /// Writes in the ledger.
    pub writes: usize,
    /// Distinct tenures that wrote.
    pub tenures: usize,
    /// The last token that wrote, per key.
    pub last: BTreeMap<String, i64>,
}

/// Asserts the ledger's order (see the module docs) and returns what it found.
pub fn assert_ordered(ledger: &str) -> Proof {
    assert_ordered_handing(ledger, &BTreeSet::new())
}

/// As [`assert_ordered`], except that a token may pass from one owner to another where `handed`
/// lists `(key, token, new owner)`: an operator moved the unit keeping its token (its old owner's
/// fence fails from then on, so the old owner cannot write after the new one did).
pub fn assert_ordered_handing(ledger: &str, handed: &BTreeSet<(String, i64, String)>) -> Proof {
    let rows = rows(ledger);
    let mut last: BTreeMap<String, (i64, String)> = BTreeMap::new();
    let mut tenures = 0;
    for (key, token, owner) in &rows {
        match last.get(key) {
            Some((t, o)) if t == token => {
                if o != owner {
                    assert!(
                        handed.contains(&(key.clone(), *token, owner.clone())),
                        "{key}: token {token} has two owners ({o} wrote, then {owner})"
                    );
                }
            }
            Some((t, _)) => {
                assert!(
                    token > t,
                    "{key}: token {token} wrote after token {t} (overlapping tenures)"
                );
                tenures += 1;
            }
            None => tenures += 1,
        }
        last.insert(key.clone(), (*token, owner.clone()));
    }
    Proof {
        writes: rows.len(),
        tenures,
        last: last.into_iter().map(|(k, (t, _))| (k, t)).collect(),
    }
}
