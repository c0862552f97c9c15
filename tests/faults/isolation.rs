//! A SERIALIZABLE default: contended acquires fail cleanly, never twice.

use std::time::Duration;

use crate::common::{client, lease_table, Role, Tables};
use pgtenure::{leases::Leases, DbBuilder, ErrorKind};

#[test]
fn a_serializable_default_makes_contended_acquires_fail_cleanly_never_twice() {
    let mut tables = Tables::new();
    let table = lease_table(&mut tables);
    let role = Role::new(&mut tables, "serializable");
    client()
        .batch_execute(&format!(
            "GRANT ALL ON {table}, {table}_promotion TO {0}; GRANT USAGE, UPDATE ON SEQUENCE {table}_token_seq TO {0}",
            role.name
        ))
        .unwrap();
    let strict = DbBuilder::from_config(role.config("strict"))
        .read_committed(false)
        .max_size(8)
        .unwrap()
        .build()
        .unwrap();
    let isolation: String = strict
        .connection()
        .unwrap()
        .query_one("SHOW transaction_isolation", &[])
        .unwrap()
        .get(0);
    assert_eq!(isolation, "serializable");
    let (mut granted, mut refused, mut serialization) = (0, 0, 0);
    for round in 0..20 {
        // The key lapses, then eight owners race for it.
        client()
            .execute(
                &format!("UPDATE {table} SET held_until = now() WHERE key = 'k'"),
                &[],
            )
            .unwrap();
        let strict = strict.clone();
        let t = table.clone();
        let outcomes = crate::common::race(8, move |i| {
            let leases = Leases::new(&strict)
                .with_table(&t)
                .unwrap()
                .with_owner(&format!("round{round}-owner{i}"))
                .unwrap();
            leases
                .try_acquire("k", Duration::from_secs(30))
                .map(|g| g.map(|g| g.token()))
        });
        let winners = outcomes.iter().filter(|o| matches!(o, Ok(Some(_)))).count();
        assert!(winners <= 1, "round {round}: {winners} holders");
        for outcome in &outcomes {
            match outcome {
                Ok(Some(_)) => granted += 1,
                Ok(None) => refused += 1,
                Err(e) => {
                    assert_eq!(e.kind(), ErrorKind::Serialization, "{e}");
                    serialization += 1;
                }
            }
        }
    }
    println!("SERIALIZABLE: {granted} granted, {refused} refused, {serialization} serialization failures");
    assert!(granted >= 1);
}
