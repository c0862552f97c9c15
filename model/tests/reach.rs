//! The models' properties are not vacuous: within CI's bounds the checker reaches the states they
//! are about (a takeover, a renewal, an expiry, a fenced commit, a term won after another, a tick
//! run by each scheduler...). Each goal is a transition (state, action, next state) the checker must
//! reach at least once; a bound made too small, or a step that can no longer happen, fails here
//! although every `always` property still holds.

use std::fmt::Debug;
use std::hash::Hash;

use pgtenure_model::check;
use stateright::{Checker, Model, Property};

/// A transition the checker must reach: its name and its test on (last, action, next).
type Goal<M> = (
    &'static str,
    fn(&<M as Model>::State, &<M as Model>::Action, &<M as Model>::State) -> bool,
);

/// `inner`, whose states also carry which goals the path to them reached.
struct Reach<M: Model> {
    inner: M,
    goals: Vec<Goal<M>>,
}

#[derive(Clone, Debug, Hash, PartialEq)]
struct Seen<S> {
    inner: S,
    seen: u32,
}

/// A property's condition on the wrapped model.
type Condition<M> = fn(&Reach<M>, &Seen<<M as Model>::State>) -> bool;

/// Whether goal `I` was reached on the way to `state`.
fn slot<const I: u32, M: Model>(_: &Reach<M>, state: &Seen<M::State>) -> bool {
    state.seen & (1 << I) != 0
}

impl<M> Model for Reach<M>
where
    M: Model,
    M::State: Clone + Debug + Hash + PartialEq,
    M::Action: Clone,
{
    type State = Seen<M::State>;
    type Action = M::Action;

    fn init_states(&self) -> Vec<Self::State> {
        self.inner
            .init_states()
            .into_iter()
            .map(|inner| Seen { inner, seen: 0 })
            .collect()
    }

    fn actions(&self, state: &Self::State, actions: &mut Vec<Self::Action>) {
        self.inner.actions(&state.inner, actions);
    }

    fn next_state(&self, last: &Self::State, action: Self::Action) -> Option<Self::State> {
        let next = self.inner.next_state(&last.inner, action.clone())?;
        let mut seen = last.seen;
        for (i, (_, reached)) in self.goals.iter().enumerate() {
            if reached(&last.inner, &action, &next) {
                seen |= 1 << i;
            }
        }
        Some(Seen { inner: next, seen })
    }

    fn within_boundary(&self, state: &Self::State) -> bool {
        self.inner.within_boundary(&state.inner)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let slots: [Condition<M>; 12] = [
            slot::<0, M>,
            slot::<1, M>,
            slot::<2, M>,
            slot::<3, M>,
            slot::<4, M>,
            slot::<5, M>,
            slot::<6, M>,
            slot::<7, M>,
            slot::<8, M>,
            slot::<9, M>,
            slot::<10, M>,
            slot::<11, M>,
        ];
        assert!(self.goals.len() <= slots.len(), "more goals than slots");
        self.goals
            .iter()
            .zip(slots)
            .map(|((name, _), slot)| Property::sometimes(name, slot))
            .collect()
    }
}

/// Checks that every goal is reached within `inner`'s bounds (the checker stops once all are).
fn reaches<M>(inner: M, what: &str, goals: Vec<Goal<M>>)
where
    M: Model + Send + Sync + 'static,
    M::State: Clone + Debug + Hash + PartialEq + Send + Sync + 'static,
    M::Action: Clone + Debug + PartialEq,
{
    let names: Vec<&'static str> = goals.iter().map(|(name, _)| *name).collect();
    let checker = check(Reach { inner, goals }, what, None);
    let missed: Vec<&str> = names
        .into_iter()
        .filter(|name| checker.discovery(name).is_none())
        .collect();
    if let Ok(goal) = std::env::var("PGTENURE_REACH_SHOW") {
        let goal: &'static str = Box::leak(goal.into_boxed_str());
        if let Some(path) = checker.discovery(goal) {
            println!("{goal}:\n{path}");
        }
    }
    assert!(missed.is_empty(), "{what}: never reached: {missed:?}");
}

mod leases {
    use pgtenure_model::leases::{Action, Leases, Op, Owner, Proc, State, Tenure, Tick};

    pub fn believes(proc: &Proc, now: Tick) -> Option<&Tenure> {
        proc.tenure.as_ref().filter(|tenure| now < tenure.deadline)
    }

    fn believers(state: &State) -> usize {
        state
            .procs
            .iter()
            .filter(|proc| believes(proc, state.now).is_some())
            .count()
    }

    /// `owner` is none of the names the run began with: a restart's new one.
    fn new_name(state: &State, owner: Owner) -> bool {
        usize::from(owner) >= Leases::ci().procs.len() && state.restarts > 0
    }

    pub fn goals() -> Vec<super::Goal<Leases>> {
        vec![
            (
                "a renewal moves a believer's deadline on",
                |last, action, next| {
                    matches!(action, Action::Deliver(_))
                        && last.procs.iter().zip(&next.procs).any(|(a, b)| {
                            match (&a.tenure, &b.tenure) {
                                (Some(a), Some(b)) => a.token == b.token && b.deadline > a.deadline,
                                _ => false,
                            }
                        })
                },
            ),
            (
                "a holder stops believing at its local deadline",
                |last, action, next| {
                    matches!(action, Action::Tick) && believers(next) < believers(last)
                },
            ),
            (
                "another process is granted the key while the last holder still has its tenure",
                |last, action, next| {
                    let Action::Exec(i) = action else {
                        return false;
                    };
                    let msg = &last.inflight[*i];
                    let (Some(was), Some(row)) = (&last.db.row, &next.db.row) else {
                        return false;
                    };
                    matches!(msg.op, Op::Acquire { .. })
                        && row.token != was.token
                        && last.procs.iter().enumerate().any(|(p, proc)| {
                            p != msg.proc
                                && proc.tenure.as_ref().is_some_and(|t| t.token == was.token)
                        })
                },
            ),
            (
                "a believer's local deadline is the database's expiry",
                |_, _, next| {
                    next.procs.iter().any(|proc| {
                        believes(proc, next.now).is_some_and(|tenure| {
                            next.db.row.as_ref().is_some_and(|row| {
                                row.token == tenure.token && row.held_until == tenure.deadline
                            })
                        })
                    })
                },
            ),
            (
                "a statement executes after a later one was sent",
                |last, action, _| {
                    let Action::Exec(i) = action else {
                        return false;
                    };
                    last.inflight[*i].now < last.now
                },
            ),
            (
                "a renewal of an ended tenure tells its holder",
                |last, action, next| {
                    matches!(action, Action::Deliver(_))
                        && last.procs.iter().zip(&next.procs).any(|(a, b)| {
                            a.tenure.is_some()
                                && b.tenure.is_none()
                                && matches!(
                                    a.waiting,
                                    Some((Op::RenewTenure { .. } | Op::Renew, _))
                                )
                        })
                },
            ),
            ("a fenced write commits", |_, action, _| {
                matches!(action, Action::Commit(_))
            }),
            ("a force-released holder still believes", |_, _, next| {
                next.procs.iter().any(|proc| {
                    believes(proc, next.now)
                        .is_some_and(|t| next.forced.binary_search(&t.token).is_ok())
                })
            }),
            (
                "a process restarts under the other's owner name",
                |last, action, _| matches!(action, Action::Restart(p, owner, _) if *p != 0 && last.procs[0].owner == *owner),
            ),
            (
                "a process restarted under a new owner name is granted the key",
                |last, action, next| {
                    let Action::Exec(i) = action else {
                        return false;
                    };
                    let msg = &last.inflight[*i];
                    matches!(msg.op, Op::Acquire { .. })
                        && !msg.orphan
                        && new_name(last, msg.owner)
                        && next.db.row.as_ref().is_some_and(|row| row.owner == msg.owner)
                        && last.db.row.as_ref().map(|row| row.token)
                            != next.db.row.as_ref().map(|row| row.token)
                },
            ),
            (
                "a process restarted under a new owner name is refused while its old name's tenure lives",
                |last, action, next| {
                    let Action::Exec(i) = action else {
                        return false;
                    };
                    let msg = &last.inflight[*i];
                    // The row's owner name is no process's any more: the old incarnation's.
                    matches!(msg.op, Op::Acquire { .. })
                        && !msg.orphan
                        && new_name(last, msg.owner)
                        && last.db.row == next.db.row
                        && last.db.row.as_ref().is_some_and(|row| {
                            row.held_until > msg.now
                                && last.procs.iter().all(|proc| proc.owner != row.owner)
                        })
                },
            ),
            ("a row is swept", |_, action, _| {
                matches!(action, Action::Sweep)
            }),
        ]
    }
}

/// A force-release draws a token of its own: with CI's 2 tokens nothing is granted after one.
pub fn after_force_release() -> Vec<Goal<pgtenure_model::leases::Leases>> {
    use pgtenure_model::leases::{Action, Op};
    vec![(
        "the key is granted while a force-released holder still believes",
        |last, action, next| {
            let Action::Exec(i) = action else {
                return false;
            };
            matches!(last.inflight[*i].op, Op::Acquire { .. })
                && next.db.row.as_ref().map(|r| r.token) != last.db.row.as_ref().map(|r| r.token)
                && next.procs.iter().any(|proc| {
                    leases::believes(proc, next.now)
                        .is_some_and(|t| next.forced.binary_search(&t.token).is_ok())
                })
        },
    )]
}

#[test]
fn the_leases_model_reaches_what_its_properties_are_about() {
    use pgtenure_model::leases::Leases;
    reaches(Leases::ci(), "leases goals", leases::goals());
}

mod elector {
    use pgtenure_model::elector::{Action, Answer, Election, Op, State};

    fn believers(state: &State) -> usize {
        state
            .members
            .iter()
            .filter(|member| member.elector_term(state.now).is_some())
            .count()
    }

    pub fn goals() -> Vec<super::Goal<Election>> {
        vec![
            (
                "a renewal moves a leader's deadline on",
                |last, action, next| {
                    matches!(action, Action::Deliver(_))
                        && last.members.iter().zip(&next.members).any(|(a, b)| {
                            a.term.is_some() && a.term == b.term && b.deadline > a.deadline
                        })
                },
            ),
            (
                "a leader stops believing at its local deadline",
                |last, action, next| {
                    matches!(action, Action::Tick) && believers(next) < believers(last)
                },
            ),
            ("the watcher tells Lost Expired", |_, action, _| {
                matches!(action, Action::Watch(_))
            }),
            (
                "a term is won while another member still holds the previous one",
                |last, action, next| {
                    let Action::Exec(i) = action else {
                        return false;
                    };
                    let (Some(was), Some(row)) = (&last.db.row, &next.db.row) else {
                        return false;
                    };
                    row.term != was.term
                        && last.inflight[*i].holder != was.holder
                        && last.members.iter().any(|m| m.term == Some(was.term))
                },
            ),
            ("a second member is told Elected", |last, action, next| {
                matches!(action, Action::Deliver(_))
                    && last.elected > 0
                    && next.elected > last.elected
                    && last
                        .members
                        .iter()
                        .zip(&next.members)
                        .any(|(a, b)| a.announced.is_none() && b.announced.is_some())
            }),
            (
                "a leader's local deadline is the database's expiry",
                |_, _, next| {
                    next.members.iter().any(|m| {
                        m.elector_term(next.now).is_some_and(|term| {
                            next.db.row.as_ref().is_some_and(|row| {
                                row.term == term && Some(row.expires_at) == m.deadline
                            })
                        })
                    })
                },
            ),
            (
                "a renewal answers ended (resignation requested)",
                |last, action, next| {
                    let Action::Deliver(i) = action else {
                        return false;
                    };
                    matches!(&last.answers[*i], Answer::Poll { answer, .. } if answer.ended)
                        && next.members.iter().any(|m| m.resigning.is_some())
                },
            ),
            ("a resignation ends a live tenure", |last, action, next| {
                let Action::Exec(i) = action else {
                    return false;
                };
                matches!(last.inflight[*i].op, Op::Resign { .. }) && last.db.row != next.db.row
            }),
            (
                "a poll won while its member stood down is resigned",
                |last, action, next| {
                    let Action::Deliver(i) = action else {
                        return false;
                    };
                    let Answer::Poll { member, answer, .. } = &last.answers[*i] else {
                        return false;
                    };
                    answer.mine
                        && last.members[*member]
                            .waiting
                            .as_ref()
                            .is_some_and(|w| w.stood_down)
                        && next.members[*member].resigning == answer.my_term
                },
            ),
            (
                "a statement executes after a later one was sent",
                |last, action, _| {
                    let Action::Exec(i) = action else {
                        return false;
                    };
                    last.inflight[*i].now < last.now
                },
            ),
            (
                "a cut-off member only observes while the row is lapsed",
                |last, action, _| {
                    let Action::Exec(i) = action else {
                        return false;
                    };
                    let msg = &last.inflight[*i];
                    msg.op == Op::Observe
                        && last
                            .db
                            .row
                            .as_ref()
                            .is_some_and(|row| row.expires_at <= msg.now)
                },
            ),
            (
                "the former leader re-takes its lapsed tenure with a new term while another defers",
                |last, action, next| {
                    let Action::Exec(i) = action else {
                        return false;
                    };
                    let msg = &last.inflight[*i];
                    let (Some(was), Some(row)) = (&last.db.row, &next.db.row) else {
                        return false;
                    };
                    matches!(msg.op, Op::Poll { .. })
                        && was.holder == msg.holder
                        && was.expires_at <= msg.now
                        && row.holder == msg.holder
                        && row.term > was.term
                        && last
                            .members
                            .iter()
                            .any(|m| m.holder != msg.holder && m.defers(last.now))
                },
            ),
        ]
    }
}

#[test]
fn the_elector_model_reaches_what_its_properties_are_about() {
    use pgtenure_model::elector::Election;
    reaches(Election::ci(), "elector goals", elector::goals());
}

/// With a fenced transaction (`Election::fenced`): a fenced write commits, one commits past its
/// tenure's expiry while the new election waits for its lock, and a fence is refused.
#[test]
fn the_elector_model_reaches_a_fenced_commit() {
    use pgtenure_model::elector::{Action, Election, Op};
    let goals: Vec<Goal<Election>> = vec![
        ("a fenced write commits", |_, action, _| {
            matches!(action, Action::Commit(_))
        }),
        (
            "a fenced write commits past its tenure's expiry, a new election waiting",
            |last, action, _| {
                let Some(row) = &last.db.row else {
                    return false;
                };
                // A poll of another holder whose transaction began past the expiry takes the row
                // once the fenced transaction ends.
                matches!(action, Action::Commit(_))
                    && row.expires_at <= last.now
                    && last.inflight.iter().any(|msg| {
                        matches!(msg.op, Op::Poll { .. })
                            && msg.holder != row.holder
                            && msg.now >= row.expires_at
                    })
            },
        ),
        ("a fence is refused", |last, action, next| {
            let Action::Exec(i) = action else {
                return false;
            };
            matches!(last.inflight[*i].op, Op::Fence { .. })
                && last
                    .members
                    .iter()
                    .zip(&next.members)
                    .any(|(a, b)| matches!(a.fence, Some((_, false))) && b.fence.is_none())
        }),
    ];
    reaches(
        Election::fenced(),
        "elector goals with a fenced transaction",
        goals,
    );
}

mod ticks {
    use pgtenure_model::ticks::{Action, Answer, Msg, Op, State, Ticks};

    fn runs(state: &State) -> usize {
        state.procs.iter().filter(|p| p.run.is_some()).count()
    }

    pub fn goals() -> Vec<super::Goal<Ticks>> {
        vec![
            ("both ticks run", |_, _, next| next.ran.len() == 2),
            (
                "a scheduler wins the tick after the other's",
                |last, action, next| {
                    let Action::Exec(i, _) = action else {
                        return false;
                    };
                    let (Some(was), Some(row)) = (&last.db.row, &next.db.row) else {
                        return false;
                    };
                    row.tick > was.tick
                        && row.owner != was.owner
                        && row.owner == last.inflight[*i].owner
                },
            ),
            (
                "an extension moves a run's deadline on",
                |last, action, next| {
                    matches!(action, Action::Deliver(_))
                        && last
                            .procs
                            .iter()
                            .zip(&next.procs)
                            .any(|(a, b)| match (&a.run, &b.run) {
                                (Some(a), Some(b)) => a.token == b.token && b.deadline > a.deadline,
                                _ => false,
                            })
                },
            ),
            ("a run ends at its local deadline", |last, action, next| {
                matches!(action, Action::Tick) && runs(next) < runs(last)
            }),
            ("a fenced write commits", |_, action, _| {
                matches!(action, Action::Commit(_))
            }),
            ("a claim is answered not yet due", |last, action, _| {
                let Action::Deliver(i) = action else {
                    return false;
                };
                matches!(last.answers[*i], Answer::Claim(_, claimed) if claimed.too_far)
            }),
            ("a resent claim finds its own win", |last, action, next| {
                let Action::Exec(i, _) = action else {
                    return false;
                };
                matches!(last.inflight[*i].op, Op::Claim { .. })
                    && last.db.row.is_some()
                    && last.db.row == next.db.row
                    && matches!(next.answers.last(), Some(Answer::Claim(_, c)) if c.token.is_some())
            }),
            (
                "a run's local deadline is the database's busy-until",
                |_, _, next| {
                    next.procs.iter().any(|p| {
                        p.run.as_ref().is_some_and(|run| {
                            next.db.row.as_ref().is_some_and(|row| {
                                row.token == run.token && row.busy_until == Some(run.deadline)
                            })
                        })
                    })
                },
            ),
            (
                "a statement executes with the row busy and is refused",
                |last, action, next| {
                    let Action::Exec(i, _) = action else {
                        return false;
                    };
                    matches!(last.inflight[*i].op, Op::Claim { .. })
                        && last
                            .db
                            .row
                            .as_ref()
                            .is_some_and(|r| r.busy_until.is_some_and(|b| b > last.now))
                        && matches!(next.answers.last(), Some(Answer::Claim(_, c)) if c.token.is_none() && !c.too_far)
                },
            ),
            (
                "a scheduler restarted under a new owner wins a tick",
                |last, action, next| {
                    let Some(msg) = renamed_claim(last, action) else {
                        return false;
                    };
                    next.db
                        .row
                        .as_ref()
                        .is_some_and(|row| row.owner == msg.owner)
                        && matches!(next.answers.last(), Some(Answer::Claim(_, c)) if c.token.is_some())
                },
            ),
            (
                "a scheduler restarted under a new owner is refused the tick its old name won",
                |last, action, next| {
                    let Some(msg) = renamed_claim(last, action) else {
                        return false;
                    };
                    let Op::Claim { tick, .. } = msg.op else {
                        return false;
                    };
                    // Its old name: the restarted scheduler's index (owners start as indexes).
                    last.db
                        .row
                        .as_ref()
                        .is_some_and(|row| row.tick == tick && usize::from(row.owner) == msg.proc)
                        && matches!(next.answers.last(), Some(Answer::Claim(_, c)) if c.token.is_none() && !c.too_far)
                },
            ),
        ]
    }

    /// The claim `action` executes when its sender restarted under a new owner name.
    fn renamed_claim<'a>(last: &'a State, action: &Action) -> Option<&'a Msg> {
        let Action::Exec(i, _) = action else {
            return None;
        };
        let msg = &last.inflight[*i];
        (matches!(msg.op, Op::Claim { .. }) && usize::from(msg.owner) >= last.procs.len())
            .then_some(msg)
    }
}

#[test]
fn the_ticks_model_reaches_what_its_properties_are_about() {
    use pgtenure_model::ticks::Ticks;
    reaches(Ticks::ci(), "ticks goals", ticks::goals());
}

/// CI's leases bounds draw 2 tokens, and a force-release draws one: no grant after a force-release
/// (while its holder may still believe, the case the fence is for) is ever checked there. These
/// bounds (3 tokens, no restart) check it: every property holds, and the checker reaches it.
#[test]
fn the_leases_model_checks_a_grant_after_a_force_release() {
    use pgtenure_model::leases::Leases;
    let model = Leases {
        max_tokens: 3,
        max_restarts: 0,
        ..Leases::ci()
    };
    check(model.clone(), "leases, 3 tokens, no restart", None).assert_properties();
    reaches(
        model,
        "leases goals after a force-release",
        after_force_release(),
    );
}

mod membership {
    use pgtenure_model::membership::{Action, Answer, Membership, Op, Pid, State};

    fn believers(state: &State) -> usize {
        state
            .processes
            .iter()
            .map(|p| {
                (0..2)
                    .filter(|&u| p.believes(u, state.now).is_some())
                    .count()
            })
            .sum()
    }

    /// Whether process `p`, claiming, does so in a cold fleet (it owns nothing, no other live
    /// process owns units) while another live process has not settled: only a process whose
    /// warm-up is over (it claimed before) may.
    fn warm_claim(state: &State, p: Pid) -> bool {
        let process = &state.processes[p as usize];
        let others: Vec<Pid> = (0..state.processes.len() as Pid)
            .filter(|&q| q != p && state.db.live(state.now, q))
            .collect();
        process.owned.iter().all(Option::is_none)
            && process.pending.is_none()
            && others.iter().all(|&q| state.db.weight_of(q) == 0)
            && others
                .iter()
                .any(|&q| !state.db.processes[q as usize].is_some_and(|row| row.settled))
    }

    pub fn goals() -> Vec<super::Goal<Membership>> {
        vec![
            (
                "a unit of an expired process is claimed by the other",
                |last, action, next| {
                    let Action::Exec(i) = action else {
                        return false;
                    };
                    let msg = &last.inflight[*i];
                    matches!(msg.op, Op::Claim(_))
                        && last.db.units.iter().zip(&next.db.units).any(|(a, b)| {
                            a.owner.is_some_and(|q| q != msg.process)
                                && b.owner == Some(msg.process)
                        })
                },
            ),
            (
                "a unit shed by one process is claimed by the other",
                |last, action, next| {
                    let Action::Exec(i) = action else {
                        return false;
                    };
                    let msg = &last.inflight[*i];
                    matches!(msg.op, Op::Claim(_))
                        && last.db.units.iter().zip(&next.db.units).any(|(a, b)| {
                            a.owner.is_none() && a.token > 0 && b.owner == Some(msg.process)
                        })
                },
            ),
            (
                "a heartbeat answers lapsed to a process that believed a unit",
                |last, action, _| {
                    let Action::Deliver(i) = action else {
                        return false;
                    };
                    match &last.answers[*i] {
                        Answer::Heartbeat { process, lapsed } => {
                            *lapsed
                                && last.processes[*process as usize]
                                    .owned
                                    .iter()
                                    .any(Option::is_some)
                        }
                        _ => false,
                    }
                },
            ),
            (
                "a process stops believing its units at its local deadline",
                |last, action, next| {
                    matches!(action, Action::Tick) && believers(next) < believers(last)
                },
            ),
            // Counted over the processes that believe a unit: the spare id (down until a
            // replacement starts it) never does in a run without interventions.
            ("two processes believe a unit at once", |_, _, next| {
                next.processes
                    .iter()
                    .filter(|p| (0..2).any(|u| p.believes(u, next.now).is_some()))
                    .count()
                    >= 2
            }),
            (
                "a process whose warm-up is over claims while another live process has not settled",
                |last, action, _| {
                    let Action::Send(p, Op::Claim(_)) = action else {
                        return false;
                    };
                    warm_claim(last, *p)
                },
            ),
            (
                "a believer's local deadline is its row's expiry",
                |_, _, next| {
                    next.processes.iter().enumerate().any(|(p, process)| {
                        (0..2).any(|u| process.believes(u, next.now).is_some())
                            && process.deadline.is_some()
                            && next.db.processes[p].as_ref().map(|row| row.expires_at)
                                == process.deadline
                    })
                },
            ),
            (
                "a cut-off process only heartbeats while another's units lapsed",
                |last, action, _| {
                    let Action::Exec(i) = action else {
                        return false;
                    };
                    let msg = &last.inflight[*i];
                    msg.op == Op::Heartbeat
                        && last.processes[msg.process as usize].defers(last.now)
                        && last.db.units.iter().any(|unit| {
                            unit.owner
                                .is_some_and(|q| q != msg.process && !last.db.live(msg.now, q))
                        })
                },
            ),
        ]
    }
}

/// `Membership::ci` (3 tokens) never reaches a claim of an expired process's units: its first
/// claim draws a token for each of the two units, and the takeover two more. These bounds (4
/// tokens) reach it. The one intervention is for the claim of a process whose warm-up is over
/// while another live process has not settled, which no run without one reaches (the other is
/// then a replacement under a new id).
#[test]
fn the_membership_model_reaches_what_its_properties_are_about() {
    use pgtenure_model::membership::Membership;
    let model = Membership {
        max_tokens: 4,
        max_interventions: 1,
        ..Membership::ci()
    };
    reaches(model, "membership goals", membership::goals());
}
