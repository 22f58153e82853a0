//! How long block import takes on the chain worker (`modnode_block_import_seconds`, a
//! histogram): fork choice, the deposits module's run, the state root check and the flushed
//! commit of every block that reaches import, whatever the outcome.
//!
//! One histogram per process (like the output-bound counters of `runtime::bounds`): a process
//! runs one node, and tests that run several in one process only read its shape.

use std::sync::LazyLock;
use std::time::Duration;

use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

static IMPORT_SECONDS: LazyLock<Histogram> =
    // 0.5 ms doubling to ~8 s: an empty dev block at the bottom, a 2M-validator deposit block
    // on a slow disk near the top.
    LazyLock::new(|| Histogram::new(exponential_buckets(0.0005, 2.0, 15)));

/// Records one import that took `took`.
pub fn observe_import(took: Duration) {
    IMPORT_SECONDS.observe(took.as_secs_f64());
}

/// `modnode_block_import_seconds` as OpenMetrics lines, without the closing `# EOF`.
pub fn render_import() -> String {
    let mut out = String::new();
    if prometheus_client::encoding::text::encode(&mut out, &IMPORT_REGISTRY).is_err() {
        return String::new();
    }
    super::without_eof(out)
}

/// The histogram, registered once.
static IMPORT_REGISTRY: LazyLock<Registry> = LazyLock::new(|| {
    let mut registry = Registry::with_prefix("modnode");
    registry.register(
        "block_import_seconds",
        "Time the chain worker took to import a block (fork choice, transition, commit)",
        IMPORT_SECONDS.clone(),
    );
    registry
});

#[cfg(test)]
mod tests {
    use super::*;

    fn count(text: &str) -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix("modnode_block_import_seconds_count "))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no count in\n{text}"))
    }

    #[test]
    fn imports_are_observed_into_the_histogram() {
        let before = count(&render_import());
        observe_import(Duration::from_millis(3));
        let text = render_import();
        assert!(count(&text) > before, "{text}");
        assert!(
            text.contains("# TYPE modnode_block_import_seconds histogram"),
            "{text}"
        );
        assert!(
            text.contains(r#"modnode_block_import_seconds_bucket{le="+Inf"}"#),
            "{text}"
        );
    }
}
