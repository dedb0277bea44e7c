//! Counters and a latency histogram, rendered in the Prometheus text exposition format.
//! Labels are bounded: plans and error codes, never client ids.

use std::collections::HashMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::RwLock;
use std::time::Duration;

use tessera_proto::ErrorCode;

/// A counter per label value.
#[derive(Debug, Default)]
struct CounterVec(RwLock<HashMap<String, AtomicU64>>);

impl CounterVec {
    fn inc(&self, label: &str) {
        if let Some(c) = self.0.read().unwrap_or_else(|p| p.into_inner()).get(label) {
            c.fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.0
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .entry(label.to_owned())
            .or_default()
            .fetch_add(1, Ordering::Relaxed);
    }

    fn snapshot(&self) -> Vec<(String, u64)> {
        let mut all: Vec<_> = self
            .0
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(k, v)| (k.clone(), v.load(Ordering::Relaxed)))
            .collect();
        all.sort();
        all
    }
}

/// Upper bounds of the latency buckets, in seconds.
const BUCKETS: [f64; 12] = [
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 1.0,
];

#[derive(Debug, Default)]
struct Histogram {
    buckets: [AtomicU64; BUCKETS.len()],
    count: AtomicU64,
    sum_nanos: AtomicU64,
}

/// The server's metrics.
#[derive(Debug, Default)]
pub struct Metrics {
    issued: CounterVec,
    reused: CounterVec,
    /// Keyed `plan\0code`.
    refused: CounterVec,
    /// Keyed by what limited: a plan name, `auth_failure` or `in_flight`.
    rate_limited: CounterVec,
    latency: Histogram,
}

/// The plan label for requests whose client was not identified.
pub const NO_PLAN: &str = "";

impl Metrics {
    /// A token was issued (`reused`: an earlier one was returned again).
    pub fn issued(&self, plan: &str, reused: bool) {
        self.issued.inc(plan);
        if reused {
            self.reused.inc(plan);
        }
    }

    /// A token request was refused.
    pub fn refused(&self, plan: &str, code: ErrorCode) {
        self.refused.inc(&format!("{plan}\0{}", code.as_str()));
        if code == ErrorCode::RateLimited {
            self.rate_limited.inc(if plan.is_empty() {
                "auth_failure"
            } else {
                plan
            });
        }
    }

    /// A token request took `elapsed`.
    pub fn observe(&self, elapsed: Duration) {
        let secs = elapsed.as_secs_f64();
        let h = &self.latency;
        if let Some(i) = BUCKETS.iter().position(|b| secs <= *b) {
            h.buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        h.count.fetch_add(1, Ordering::Relaxed);
        h.sum_nanos
            .fetch_add(elapsed.as_nanos() as u64, Ordering::Relaxed);
    }

    /// Renders everything; `key_age_secs` is the age of the active signing key.
    pub fn render(&self, key_age_secs: Option<i64>) -> String {
        let mut out = String::new();
        let plan = |p: &str| {
            if p.is_empty() {
                "none".to_owned()
            } else {
                escape(p)
            }
        };
        header(
            &mut out,
            "tessera_tokens_issued_total",
            "counter",
            "Access tokens issued, by plan.",
        );
        for (p, v) in self.issued.snapshot() {
            let _ = writeln!(
                out,
                "tessera_tokens_issued_total{{plan=\"{}\"}} {v}",
                plan(&p)
            );
        }
        header(
            &mut out,
            "tessera_tokens_reused_total",
            "counter",
            "Issued tokens that were an earlier token returned again, by plan.",
        );
        for (p, v) in self.reused.snapshot() {
            let _ = writeln!(
                out,
                "tessera_tokens_reused_total{{plan=\"{}\"}} {v}",
                plan(&p)
            );
        }
        header(
            &mut out,
            "tessera_token_requests_refused_total",
            "counter",
            "Token requests refused, by plan and OAuth error code.",
        );
        for (key, v) in self.refused.snapshot() {
            let (p, code) = key.split_once('\0').unwrap_or((&key, ""));
            let _ = writeln!(
                out,
                "tessera_token_requests_refused_total{{plan=\"{}\",error=\"{code}\"}} {v}",
                plan(p)
            );
        }
        header(
            &mut out,
            "tessera_rate_limited_total",
            "counter",
            "Requests refused by a rate limit, by plan or by auth_failure.",
        );
        for (what, v) in self.rate_limited.snapshot() {
            let _ = writeln!(
                out,
                "tessera_rate_limited_total{{limit=\"{}\"}} {v}",
                escape(&what)
            );
        }
        let name = "tessera_token_request_duration_seconds";
        header(
            &mut out,
            name,
            "histogram",
            "Time to answer a token request.",
        );
        let mut cumulative = 0;
        for (i, bound) in BUCKETS.iter().enumerate() {
            cumulative += self.latency.buckets[i].load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}_bucket{{le=\"{bound}\"}} {cumulative}");
        }
        let count = self.latency.count.load(Ordering::Relaxed);
        let sum = self.latency.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9;
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {count}");
        let _ = writeln!(out, "{name}_sum {sum}");
        let _ = writeln!(out, "{name}_count {count}");
        if let Some(age) = key_age_secs {
            header(
                &mut out,
                "tessera_signing_key_age_seconds",
                "gauge",
                "Seconds since the active signing key started signing.",
            );
            let _ = writeln!(out, "tessera_signing_key_age_seconds {age}");
        }
        out
    }
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// Escapes a label value (Prometheus text format: backslash, quote, newline).
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_and_histogram() {
        let m = Metrics::default();
        m.issued("pro", false);
        m.issued("pro", true);
        m.refused("pro", ErrorCode::InvalidScope);
        m.refused(NO_PLAN, ErrorCode::InvalidClient);
        m.refused("pro", ErrorCode::RateLimited);
        m.observe(Duration::from_micros(80));
        let text = m.render(Some(5));
        assert!(text.contains("tessera_tokens_issued_total{plan=\"pro\"} 2"));
        assert!(text.contains("tessera_tokens_reused_total{plan=\"pro\"} 1"));
        assert!(text.contains(
            "tessera_token_requests_refused_total{plan=\"pro\",error=\"invalid_scope\"} 1"
        ));
        assert!(text.contains(
            "tessera_token_requests_refused_total{plan=\"none\",error=\"invalid_client\"} 1"
        ));
        assert!(text.contains("tessera_rate_limited_total{limit=\"pro\"} 1"));
        assert!(text.contains("tessera_token_request_duration_seconds_bucket{le=\"0.0001\"} 1"));
        assert!(text.contains("tessera_token_request_duration_seconds_count 1"));
        assert!(text.contains("tessera_signing_key_age_seconds 5"));
    }
}
