//! `pgtenure leader`: who leads each fleet; `pgtenure leader resign --force`: ask a leader to step
//! down.

use clap::{Args, Subcommand};
use pgtenure::{elector::Elector, Db, Error};
use serde_json::json;

use crate::output::{leaders_json, leaders_table, show, view};
use crate::{Failure, Global};

#[derive(Args, Debug)]
pub(crate) struct LeaderArgs {
    /// Only this fleet.
    #[arg(long)]
    name: Option<String>,
    #[command(subcommand)]
    action: Option<LeaderAction>,
}

#[derive(Subcommand, Debug)]
enum LeaderAction {
    /// Ask the fleet's live leader to step down (Elector::request_resign): at its next renewal it
    /// stops leading and then resigns, and another member wins the next poll. A leader that no
    /// longer renews keeps the tenure until it expires.
    Resign {
        /// The fleet.
        #[arg(long, default_value = pgtenure::elector::DEFAULT_NAME)]
        name: String,
        /// Required: this moves the leadership away from a running leader.
        #[arg(long, required = true)]
        force: bool,
    },
}

impl LeaderArgs {
    /// Checks the fleet name `resign` is given, as the elector checks it.
    pub(crate) fn check(&self, db: &Db) -> Result<(), Error> {
        match &self.action {
            Some(LeaderAction::Resign { name, .. }) => Elector::new(db).with_name(name).map(drop),
            None => Ok(()),
        }
    }

    /// Whether it only lists: without `resign` it does.
    pub(crate) fn lists(&self) -> bool {
        self.action.is_none()
    }

    pub(crate) fn role(&self) -> String {
        match &self.name {
            Some(name) => format!("leader {name}"),
            None => "leader".to_owned(),
        }
    }

    pub(crate) fn run(&self, db: &Db, global: &Global) -> Result<u8, Failure> {
        let elector = global.elector(db)?;
        match &self.action {
            Some(LeaderAction::Resign { name, force: _ }) => {
                let elector = elector.with_name(name)?;
                let leader = elector.leader()?;
                let asked = elector.request_resign()?;
                let holder = leader.as_ref().map(|l| l.holder.as_str());
                if global.as_json() {
                    outln!(
                        "{}",
                        json!({ "name": name, "asked": asked, "holder": holder })
                    );
                } else if asked {
                    outln!(
                        "asked {} to step down from fleet {name:?}; it does at its next renewal",
                        holder.unwrap_or("the leader")
                    );
                } else {
                    outln!("nobody leads fleet {name:?}: nothing to resign");
                }
                Ok(0)
            }
            None => {
                let mut leaders = elector.leaders()?;
                if let Some(name) = &self.name {
                    leaders.retain(|l| &l.name == name);
                }
                let view = view(db, global)?;
                show(global, &leaders_json(&leaders), || {
                    leaders_table(&leaders, &view)
                })
            }
        }
    }
}
