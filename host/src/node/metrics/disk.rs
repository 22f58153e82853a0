//! The data directory's size on `/metrics` (`modnode_data_dir_bytes`): what `du` counts, so an
//! alert on disk growth watches what the file system actually holds, not keys or records.

use std::os::unix::fs::MetadataExt as _;
use std::path::Path;

use super::Snapshot;

/// Bytes allocated on disk under `dir` (512-byte blocks, as `du` counts them; a sparse file
/// counts what it holds), following no symbolic link. Entries that vanish or cannot be read
/// while walking are skipped: a scrape must not fail because sled renamed a file meanwhile.
pub fn dir_bytes(dir: &Path) -> u64 {
    let mut total: u64 = 0;
    let mut pending = vec![dir.to_path_buf()];
    while let Some(path) = pending.pop() {
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        total = total.saturating_add(meta.blocks().saturating_mul(512));
        if meta.is_dir()
            && let Ok(entries) = std::fs::read_dir(&path)
        {
            pending.extend(entries.flatten().map(|e| e.path()));
        }
    }
    total
}

/// `modnode_data_dir_bytes` as OpenMetrics lines, without the closing `# EOF`.
pub fn render_disk(data_dir_bytes: u64) -> String {
    let snapshot = Snapshot {
        counters: [],
        gauges: [(
            "data_dir_bytes",
            "Bytes the data directory takes on disk, as du counts them",
            i64::try_from(data_dir_bytes).unwrap_or(i64::MAX),
        )],
    };
    super::without_eof(snapshot.encode_with_prefix("modnode"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dir_bytes_counts_what_the_files_hold_on_disk() {
        let dir = tempfile::TempDir::new().unwrap();
        let before = dir_bytes(dir.path());
        std::fs::create_dir(dir.path().join("db")).unwrap();
        // Written, not truncated up: a sparse file would hold no blocks.
        std::fs::write(dir.path().join("db").join("blob"), vec![7u8; 1 << 20]).unwrap();
        let after = dir_bytes(dir.path());
        assert!(after >= before + (1 << 20), "{before} -> {after}");
        assert!(after < before + (2 << 20), "{before} -> {after}");
        assert_eq!(dir_bytes(&dir.path().join("gone")), 0);
        let text = render_disk(after);
        assert!(
            text.lines()
                .any(|l| l == format!("modnode_data_dir_bytes {after}")),
            "{text}"
        );
    }
}
