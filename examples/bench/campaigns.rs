//! Elector failover through `Elector::campaign`: three members, and the time from a crash (a
//! partition: the leader stops reaching the database), a `stop` and a `request_resign` until
//! another member is told `Elected`.

use std::time::{Duration, Instant};

use pgtenure::{
    elector::{Elector, LeaderEvent, Leadership},
    DbBuilder,
};
use serde_json::{json, Value};

use super::common::proxy::{database_addr, Proxy};
use super::Error;

const TTL: Duration = Duration::from_secs(2);
const RETRY: Duration = Duration::from_millis(200);

/// One member: its own proxy (to partition it) and its campaign.
struct Member {
    proxy: Proxy,
    elector: Elector,
    campaign: Option<Leadership>,
}

impl Member {
    fn leading(&self) -> bool {
        self.campaign.as_ref().is_some_and(Leadership::is_leading)
    }
}

/// Waits until a member other than `old` is told `Elected`; returns it and when it was seen.
fn next_elected(members: &[Member], old: usize) -> Result<(usize, Instant), Error> {
    let until = Instant::now() + TTL * 5;
    while Instant::now() < until {
        for (i, m) in members.iter().enumerate() {
            let Some(campaign) = &m.campaign else {
                continue;
            };
            for event in campaign.events().try_iter() {
                if i != old && matches!(event, LeaderEvent::Elected { .. }) {
                    return Ok((i, Instant::now()));
                }
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Err("no member took over".into())
}

/// Hand-over times after a crash, a stop and a requested resignation, `handovers` of each.
pub fn failover(leader_t: &str, handovers: usize) -> Result<Value, Error> {
    let fleet = format!("campaign-{}", std::process::id());
    let mut members: Vec<Member> = (0..3)
        .map(|i| -> Result<Member, Error> {
            let proxy = Proxy::start(0, database_addr())?;
            let db = DbBuilder::from_config(proxy.config())
                .connection_timeout(Duration::from_millis(500))?
                .build()?;
            let elector = Elector::new(&db)
                .with_table(leader_t)?
                .with_name(&fleet)?
                .with_holder(&format!("member-{i}"))?
                .with_ttl(TTL)?
                .with_retry_period(RETRY)?;
            let campaign = Some(elector.campaign()?);
            Ok(Member {
                proxy,
                elector,
                campaign,
            })
        })
        .collect::<Result<_, _>>()?;
    let mut times: [Vec<f64>; 3] = [Vec::new(), Vec::new(), Vec::new()];
    for n in 0..handovers * 3 {
        let leader = loop {
            if let Some(i) = members.iter().position(Member::leading) {
                break i;
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        for m in &members {
            if let Some(c) = &m.campaign {
                while c.events().try_recv().is_ok() {}
            }
        }
        let kind = n % 3;
        // Act at a spread of moments within the members' poll period, as a real stop or crash
        // would, not right after the election that was just detected (when the followers' polls,
        // started together, are due at once).
        std::thread::sleep(RETRY * ((n as u32 * 37) % 100) / 100);
        let start = Instant::now();
        match kind {
            0 => members[leader].proxy.blackhole(),
            1 => {
                if let Some(c) = members[leader].campaign.take() {
                    c.stop()?;
                }
            }
            _ => {
                let follower = (leader + 1) % 3;
                members[follower].elector.request_resign()?;
            }
        }
        let (_, at) = next_elected(&members, leader)?;
        times[kind].push(at.saturating_duration_since(start).as_secs_f64() * 1000.0);
        // Back to three campaigning members.
        match kind {
            0 => members[leader].proxy.heal(),
            1 => members[leader].campaign = Some(members[leader].elector.campaign()?),
            _ => {}
        }
    }
    for m in &mut members {
        if let Some(c) = m.campaign.take() {
            c.stop()?;
        }
    }
    let summary = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        json!({ "count": v.len(), "median_ms": v.get(v.len() / 2), "worst_ms": v.last() })
    };
    let [crash, stop, request] = &mut times;
    let value = json!({
        "ttl_ms": TTL.as_millis() as u64, "retry_ms": RETRY.as_millis() as u64,
        "after_crash": summary(crash), "after_stop": summary(stop),
        "after_request_resign": summary(request),
    });
    println!("campaign failover: {value}");
    Ok(value)
}
