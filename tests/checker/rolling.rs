//! A rolling upgrade under load: processes running the previous release's membership statements
//! (`tests/fixtures/membership_before_settled/`) beside processes of this build on tables migrated
//! to this build's schema (by the first new instance, while the old ones run), the old ones replaced by new ones one by one (each stops as a crash
//! would); every process writes through the unit's fence. The ledger must show no unit worked by
//! two processes at once and tokens only growing; at the end every unit has one live owner.

use crate::harness::{run_for, Load};
use crate::rolling_fleet::rolling_upgrade;

#[test]
fn a_rolling_upgrade_keeps_every_unit_worked_by_one_process() {
    let _load = Load::start(19);
    let duration = run_for();
    let figures = rolling_upgrade(300, 4, 4, duration, true);
    println!(
        "rolling upgrade checker, {duration:?}: {} units, {} old processes replaced one by one by \
         new ones ({} new in all), {} fenced writes in {} tenures (in order), {} by old processes, \
         {} units claimed by old processes, migrate (the old processes running) took {:?}, {} \
         old heartbeats found their row expired, {} violations",
        figures.units,
        figures.old_processes,
        figures.new_processes,
        figures.writes,
        figures.tenures,
        figures.old_writes,
        figures.old_claimed,
        figures.migrate_took,
        figures.old_lapses,
        figures.violations
    );
    assert_eq!(figures.violations, 0);
    assert!(figures.old_claimed > 0, "the old processes claimed nothing");
}
