//! `pgtenure lease show KEY` and `pgtenure lease release KEY --force`: one lease.

use clap::{Args, Subcommand};
use pgtenure::Db;
use serde_json::json;

use crate::output::{leases_json, leases_table, show, view};
use crate::{Failure, Global, EXIT_ERROR};

#[derive(Args, Debug)]
pub(crate) struct LeaseArgs {
    #[command(subcommand)]
    action: LeaseAction,
}

#[derive(Subcommand, Debug)]
enum LeaseAction {
    /// Who holds KEY, with which token, until when.
    Show { key: String },
    /// End KEY's tenure now, whoever holds it: its holder learns it at its next renewal (a
    /// `lease-run` holder stops its command) and its fencing token no longer passes the fence.
    Release {
        key: String,
        /// Required: this cuts another process's tenure short.
        #[arg(long, required = true)]
        force: bool,
    },
}

impl LeaseArgs {
    fn key(&self) -> &str {
        match &self.action {
            LeaseAction::Show { key } | LeaseAction::Release { key, .. } => key,
        }
    }

    /// Checks the key as an acquire checks it.
    pub(crate) fn check(&self) -> Result<(), String> {
        crate::input::check_key("lease key", self.key())
    }

    /// Whether it only lists: `show` does, `release` acts.
    pub(crate) fn lists(&self) -> bool {
        matches!(self.action, LeaseAction::Show { .. })
    }

    pub(crate) fn role(&self) -> String {
        match &self.action {
            LeaseAction::Show { key } => format!("lease show {key}"),
            LeaseAction::Release { key, .. } => format!("lease release {key}"),
        }
    }

    pub(crate) fn run(&self, db: &Db, global: &Global) -> Result<u8, Failure> {
        let leases = global.leases(db)?;
        match &self.action {
            LeaseAction::Show { key } => match leases.holder(key)? {
                Some(row) => {
                    let rows = [row];
                    let view = view(db, global)?;
                    show(global, &leases_json(&rows)[0], || {
                        leases_table(&rows, &view)
                    })
                }
                None => {
                    // Not found: exit 1, as `kubectl get` does for a missing object.
                    if global.as_json() {
                        outln!("null");
                    } else {
                        say!("pgtenure: lease {key:?} has no row: nobody holds it");
                    }
                    Ok(EXIT_ERROR)
                }
            },
            LeaseAction::Release { key, force: _ } => {
                let before = leases.holder(key)?;
                let released = leases.force_release(key)?;
                let owner = before.as_ref().map(|row| row.owner.as_str());
                if global.as_json() {
                    outln!(
                        "{}",
                        json!({ "key": key, "released": released, "owner": owner })
                    );
                } else if released {
                    outln!(
                        "released lease {key:?} (held by {}); its holder learns it at its next \
                         renewal",
                        owner.unwrap_or("?")
                    );
                } else {
                    outln!("lease {key:?} was not held: nothing to release");
                }
                Ok(0)
            }
        }
    }
}
