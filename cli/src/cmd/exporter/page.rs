//! `/`: the status page, the facts of `pgtenure status` in server-rendered HTML with the units per
//! process drawn as bars, reloading itself (a `<meta http-equiv="refresh">`; no script). Every text
//! that comes from the database is escaped.

use std::fmt::Write as _;
use std::time::Duration;

use super::snapshot::Snapshot;
use crate::output::{count, relative, time};

/// The content type of what [`render`] writes.
pub(super) const CONTENT_TYPE: &str = "text/html; charset=utf-8";

const STYLE: &str = "
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.3em; } h2 { font-size: 1.1em; margin-top: 1.6em; }
table { border-collapse: collapse; } td, th { padding: 2px 10px; text-align: left; }
th { border-bottom: 1px solid #bbb; } tr:nth-child(even) td { background: #f4f4f4; }
.num { text-align: right; font-variant-numeric: tabular-nums; }
.bad { color: #b00020; font-weight: bold; } .ok { color: #1b7a2e; } .muted { color: #777; }
.track { position: relative; width: 420px; height: 16px; background: #eee; border-radius: 3px; }
.bar { height: 100%; background: #3b78c2; border-radius: 3px; }
.bar.over { background: #d9822b; } .bar.under { background: #8fb3de; }
.legend { font-size: 12px; } .fair { position: absolute; top: -3px; bottom: -3px; border-left: 2px dashed #222; }
";

/// The page for a successful read.
pub(super) fn render(s: &Snapshot, refresh: Duration) -> String {
    let mut h = head(refresh);
    let _ = writeln!(
        h,
        "<p class=\"muted\">Read at {} (database time) in {} ms. Times are the database's, in UTC.</p>",
        time(s.now),
        s.took.as_millis()
    );
    leaders(&mut h, s);
    members(&mut h, s);
    jobs(&mut h, s);
    leases(&mut h, s);
    semaphores(&mut h, s);
    h.push_str("</body>\n</html>\n");
    h
}

/// The page when the read failed: what went wrong, and that the page keeps trying.
pub(super) fn failed(error: &str, refresh: Duration) -> String {
    let mut h = head(refresh);
    let _ = writeln!(
        h,
        "<p class=\"bad\" id=\"error\">Cannot read the tables: {}</p>\n<p>This page tries again \
         every {} s.</p>\n</body>\n</html>",
        escape(error),
        refresh.as_secs()
    );
    h
}

fn head(refresh: Duration) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta http-equiv=\"refresh\" content=\"{}\">\n<title>pgtenure status</title>\n\
         <style>{STYLE}</style>\n</head>\n<body>\n<h1>pgtenure status</h1>\n\
         <p class=\"muted\"><a href=\"/metrics\">/metrics</a></p>\n",
        refresh.as_secs().max(1)
    )
}

/// A section's heading, and a note when its table does not exist or cannot be read.
fn heading(
    h: &mut String,
    (s, primitive): (&Snapshot, &str),
    id: &str,
    title: &str,
    summary: Option<String>,
) -> bool {
    let _ = writeln!(h, "<h2 id=\"{id}\">{title}</h2>");
    if let Some(summary) = summary {
        let _ = writeln!(h, "<p>{summary}</p>");
        return true;
    }
    match s.denied.iter().find(|d| d.primitive == primitive) {
        Some(denied) => {
            let _ = writeln!(
                h,
                "<p class=\"bad\" id=\"{id}-denied\">Cannot read table {}: {}</p>",
                escape(&denied.table),
                escape(&denied.why)
            );
        }
        None => h.push_str("<p class=\"muted\">No table in this database.</p>\n"),
    }
    false
}

fn leaders(h: &mut String, s: &Snapshot) {
    let summary = s.leaders.as_ref().map(|rows| {
        let led = rows.iter().filter(|l| l.live).count();
        let class = if led == rows.len() { "ok" } else { "bad" };
        format!(
            "<span class=\"{class}\">{led} of {} led</span>",
            count(rows.len() as u64, "fleet", "fleets")
        )
    });
    if !heading(h, (s, "leader"), "leaders", "Leaders", summary) {
        return;
    }
    h.push_str("<table>\n<tr><th>Fleet</th><th>Leader</th><th class=\"num\">Term</th><th>Elected</th><th>Expires</th></tr>\n");
    for l in s.leaders.iter().flatten() {
        let leader = if l.live {
            let resign = if l.resign_requested {
                " (asked to resign)"
            } else {
                ""
            };
            format!("{}{resign}", escape(&l.holder))
        } else {
            format!(
                "<span class=\"bad\">nobody</span> <span class=\"muted\">(last: {})</span>",
                escape(&l.holder)
            )
        };
        let _ = writeln!(
            h,
            "<tr data-fleet=\"{}\"><td>{}</td><td>{leader}</td><td class=\"num\">{}</td><td>{}</td><td>{}</td></tr>",
            escape(&l.name),
            escape(&l.name),
            l.term,
            relative(l.elected_at, s.now),
            relative(l.expires_at, s.now),
        );
    }
    h.push_str("</table>\n");
}

fn members(h: &mut String, s: &Snapshot) {
    let summary = s.membership.as_ref().map(|m| {
        let live = m.live().count();
        let (spread, _) = m.spread();
        let unowned = if m.unowned.units > 0 {
            format!(
                "<span class=\"bad\" id=\"unowned\">{} units unowned</span>",
                m.unowned.units
            )
        } else {
            "<span class=\"ok\" id=\"unowned\">0 units unowned</span>".to_owned()
        };
        format!(
            "{live} live of {} processes; spread {spread} units between the most and least \
             loaded; {unowned}",
            m.processes.len()
        )
    });
    if !heading(h, (s, "membership"), "members", "Members", summary) {
        return;
    }
    let Some(m) = &s.membership else { return };
    let fair = m.fair_share();
    // The scale: the most loaded live process, or the fair share when every one is below it.
    let most = m
        .live()
        .map(|p| f64::from(p.units))
        .fold(fair.unwrap_or(0.0), f64::max)
        .max(1.0);
    h.push_str("<table>\n<tr><th>Process</th><th>Name</th><th>Version</th><th class=\"num\">Units</th><th class=\"num\">Weight</th><th>Load</th><th>Expires</th></tr>\n");
    for p in &m.processes {
        let width = if p.live {
            100.0 * f64::from(p.units) / most
        } else {
            0.0
        };
        // An expired process has no share: its units are among those nobody owns.
        let marker = match fair {
            Some(fair) if p.live => format!(
                "<div class=\"fair\" title=\"fair share: {fair:.1} units\" style=\"left: {:.1}%\"></div>",
                100.0 * fair / most
            ),
            _ => String::new(),
        };
        // Beyond one unit of the fair share, either way: what a balanced fleet does not show.
        let class = match fair {
            Some(fair) if p.live && f64::from(p.units) > fair.ceil() => "bar over",
            Some(fair) if p.live && f64::from(p.units) < fair.floor() => "bar under",
            _ => "bar",
        };
        let state = if p.live {
            relative(p.expires_at, s.now)
        } else {
            format!(
                "<span class=\"bad\">expired {}</span>",
                relative(p.expires_at, s.now)
            )
        };
        let _ = writeln!(
            h,
            "<tr class=\"process\" data-process=\"{id}\" data-live=\"{}\"><td title=\"{id}\">{}</td><td>{}</td><td>{}</td>\
             <td class=\"num\">{}</td><td class=\"num\">{}</td>\
             <td><div class=\"track\"><div class=\"{class}\" data-units=\"{}\" style=\"width: {width:.1}%\"></div>{marker}</div></td><td>{state}</td></tr>",
            p.live,
            escape(&p.id.chars().take(8).collect::<String>()),
            escape(&p.hostname),
            escape(&p.version),
            p.units,
            p.weight,
            p.units,
            id = escape(&p.id),
        );
    }
    h.push_str(
        "</table>\n<p class=\"muted legend\">Bars: units per live process against the most \
                loaded; the dashed line is the fair share (the units live processes own and those \
                nobody owns, shared out among the live processes); orange above it by more than a \
                unit, pale below.</p>\n",
    );
}

fn jobs(h: &mut String, s: &Snapshot) {
    let summary = s.jobs.as_ref().map(|rows| {
        let busy = rows.iter().filter(|j| j.busy).count();
        format!("{busy} busy of {}", count(rows.len() as u64, "job", "jobs"))
    });
    if !heading(h, (s, "jobs"), "jobs", "Jobs", summary) {
        return;
    }
    h.push_str("<table>\n<tr><th>Job</th><th>Last tick</th><th>Claimed by</th><th class=\"num\">Token</th><th>Busy</th></tr>\n");
    for j in s.jobs.iter().flatten() {
        let busy = match j.busy_until {
            Some(until) if j.busy => format!("until {}", relative(until, s.now)),
            _ => "no".to_owned(),
        };
        let _ = writeln!(
            h,
            "<tr data-job=\"{}\"><td>{}</td><td>{}</td><td>{}</td><td class=\"num\">{}</td><td>{busy}</td></tr>",
            escape(&j.job_id),
            escape(&j.job_id),
            relative(j.tick, s.now),
            escape(&j.owner),
            j.token,
        );
    }
    h.push_str("</table>\n");
}

fn leases(h: &mut String, s: &Snapshot) {
    let summary = s.leases.as_ref().map(|leases| {
        format!(
            "{} held of {}; closest to lapsing first",
            leases.held,
            count(leases.rows.unsigned_abs(), "lease", "leases")
        )
    });
    if !heading(h, (s, "leases"), "leases", "Leases", summary) {
        return;
    }
    let Some(leases) = &s.leases else { return };
    h.push_str("<table>\n<tr><th>Key</th><th>Owner</th><th class=\"num\">Token</th><th>Expires</th><th>Acquired</th></tr>\n");
    for l in &leases.soonest {
        let superseded = if l.superseded { " (superseded)" } else { "" };
        let _ = writeln!(
            h,
            "<tr data-key=\"{}\"><td>{}</td><td>{}</td><td class=\"num\">{}</td><td>{}{superseded}</td><td>{}</td></tr>",
            escape(&l.key),
            escape(&l.key),
            escape(&l.owner),
            l.token,
            relative(l.held_until, s.now),
            relative(l.acquired_at, s.now),
        );
    }
    h.push_str("</table>\n");
    let more = s.unlisted_leases();
    if more > 0 {
        let _ = writeln!(
            h,
            "<p class=\"muted\">and {more} more (pgtenure leases lists every one).</p>"
        );
    }
}

fn semaphores(h: &mut String, s: &Snapshot) {
    let summary = s.semaphores.as_ref().map(|sem| {
        format!(
            "{} held, on {} of {}; the keys with the most first",
            count(sem.held, "permit", "permits"),
            sem.held_keys,
            count(sem.keys, "key", "keys")
        )
    });
    if !heading(h, (s, "semaphores"), "semaphores", "Semaphores", summary) {
        return;
    }
    let Some(sem) = &s.semaphores else { return };
    h.push_str("<table>\n<tr><th>Key</th><th class=\"num\">Permits held</th><th class=\"num\">Slots</th></tr>\n");
    for k in &sem.busiest {
        let _ = writeln!(
            h,
            "<tr data-semaphore=\"{}\"><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
            escape(&k.key),
            escape(&k.key),
            k.held,
            k.slots,
        );
    }
    h.push_str("</table>\n");
    let more = s.unlisted_semaphores();
    if more > 0 {
        let _ = writeln!(
            h,
            "<p class=\"muted\">and {more} more keys (pgtenure semaphores lists every permit).</p>"
        );
    }
}

/// `text` safe inside HTML text and quoted attribute values.
pub(super) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::escape;

    #[test]
    fn database_text_is_escaped_for_html() {
        assert_eq!(
            escape("<script>alert('x' & \"y\")</script>"),
            "&lt;script&gt;alert(&#39;x&#39; &amp; &quot;y&quot;)&lt;/script&gt;"
        );
    }
}
