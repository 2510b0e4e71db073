//! Image garbage collection, as upstream's image manager
//! (`pkg/kubelet/images/image_gc_manager.go`): every five minutes the
//! agent notes which images exist and which are in use; when the image file
//! system is at or above `high_percent` used, images no container uses are
//! removed — least recently used first, none detected less than `min_age`
//! ago, never the sandbox image — until it is back under `low_percent`.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio_util::sync::CancellationToken;

use crate::cri::{Image, Runtime};

/// How often the collector looks (upstream's `ImageGCPeriod`).
pub const PERIOD: Duration = Duration::from_secs(5 * 60);

/// Upstream's `ImageGCPolicy`, with its defaults (`imageGCHighThresholdPercent`
/// 85, `imageGCLowThresholdPercent` 80, `imageMinimumGCAge` 2 minutes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    pub high_percent: u64,
    pub low_percent: u64,
    pub min_age: Duration,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            high_percent: 85,
            low_percent: 80,
            min_age: Duration::from_secs(2 * 60),
        }
    }
}

/// What the collector remembers of an image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Record {
    first_detected: SystemTime,
    last_used: SystemTime,
}

/// The images seen and when each was last used.
#[derive(Debug, Default)]
pub struct Collector {
    policy: Policy,
    records: HashMap<String, Record>,
}

fn used(image: &Image, in_use: &HashSet<String>) -> bool {
    in_use.contains(&image.id) || image.names.iter().any(|n| in_use.contains(n))
}

impl Collector {
    pub fn new(policy: Policy) -> Self {
        Collector {
            policy,
            records: HashMap::new(),
        }
    }

    /// Notes the runtime's `images` at `now`: new ones are detected, those
    /// in use (by id or by name) used now, those gone forgotten.
    pub fn observe(&mut self, images: &[Image], in_use: &HashSet<String>, now: SystemTime) {
        let present: HashSet<&str> = images.iter().map(|i| i.id.as_str()).collect();
        self.records.retain(|id, _| present.contains(id.as_str()));
        for image in images {
            let record = self.records.entry(image.id.clone()).or_insert(Record {
                first_detected: now,
                last_used: SystemTime::UNIX_EPOCH,
            });
            if used(image, in_use) {
                record.last_used = now;
            }
        }
    }

    /// The bytes to free for a file system of `capacity` bytes with `used`
    /// in use: none below the high threshold, else down to the low one.
    pub fn bytes_to_free(&self, capacity: u64, used: u64) -> u64 {
        if capacity == 0
            || used.saturating_mul(100) < capacity.saturating_mul(self.policy.high_percent)
        {
            return 0;
        }
        used.saturating_sub(capacity / 100 * self.policy.low_percent)
    }

    /// The images to remove to free `bytes`, in order: unused now, not
    /// `pinned` (by name), detected at least `min_age` before `now`; least
    /// recently used first, then the earliest detected.
    pub fn choose(
        &self,
        images: &[Image],
        in_use: &HashSet<String>,
        pinned: &[&str],
        bytes: u64,
        now: SystemTime,
    ) -> Vec<Image> {
        let mut candidates: Vec<(&Image, Record)> = images
            .iter()
            .filter(|i| !used(i, in_use))
            .filter(|i| !i.names.iter().any(|n| pinned.contains(&n.as_str())))
            .filter_map(|i| self.records.get(&i.id).map(|r| (i, *r)))
            .filter(|(_, r)| {
                now.duration_since(r.first_detected).unwrap_or_default() >= self.policy.min_age
            })
            .collect();
        candidates.sort_by_key(|(i, r)| (r.last_used, r.first_detected, i.id.clone()));
        let mut freed = 0;
        let mut chosen = Vec::new();
        for (image, _) in candidates {
            if freed >= bytes {
                break;
            }
            freed += image.size;
            chosen.push(image.clone());
        }
        chosen
    }
}

/// The size and use of the file system holding `dir`, bytes.
fn usage(dir: &std::path::Path) -> Option<(u64, u64)> {
    let s = rustix::fs::statvfs(dir).ok()?;
    let capacity = s.f_blocks * s.f_frsize;
    Some((capacity, capacity.saturating_sub(s.f_bfree * s.f_frsize)))
}

/// One round: note the images, and remove what must go.
async fn collect(
    collector: &mut Collector,
    runtime: &dyn Runtime,
    image_fs: &std::path::Path,
    pinned: &[&str],
    now: SystemTime,
) -> crate::cri::Result<()> {
    let images = runtime.list_images().await?;
    let in_use: HashSet<String> = runtime
        .list_containers(None)
        .await?
        .into_iter()
        .map(|c| c.image_ref)
        .collect();
    collector.observe(&images, &in_use, now);
    // The runtime's own answer first: an external runtime keeps its images
    // away from the agent's data directory.
    let mountpoint = runtime.image_fs_mountpoint().await.ok().flatten();
    let Some((capacity, used)) = mountpoint
        .as_deref()
        .and_then(usage)
        .or_else(|| usage(image_fs))
    else {
        return Ok(());
    };
    let bytes = collector.bytes_to_free(capacity, used);
    if bytes == 0 {
        return Ok(());
    }
    let mut freed = 0;
    for image in collector.choose(&images, &in_use, pinned, bytes, now) {
        tracing::info!(image = %image.id, names = ?image.names, size = image.size, "removing an unused image");
        match runtime.remove_image(&image.id).await {
            Ok(()) => freed += image.size,
            Err(error) => tracing::warn!(%error, image = %image.id, "could not remove an image"),
        }
    }
    if freed < bytes {
        // Upstream's FreeDiskSpaceFailed.
        tracing::warn!(
            wanted = bytes,
            freed,
            "image garbage collection freed less than the image file system needs"
        );
    }
    Ok(())
}

/// Collects every [`PERIOD`] until `stop`; `image_fs` is a directory on
/// the runtime's image file system when the runtime does not name one
/// (CRI `ImageFsInfo`), `pinned` the sandbox image.
pub async fn run(
    runtime: Arc<dyn Runtime>,
    image_fs: PathBuf,
    pinned: String,
    policy: Policy,
    stop: CancellationToken,
) {
    let mut collector = Collector::new(policy);
    loop {
        if let Err(error) = collect(
            &mut collector,
            runtime.as_ref(),
            &image_fs,
            &[pinned.as_str()],
            SystemTime::now(),
        )
        .await
        {
            tracing::debug!(%error, "image garbage collection");
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(PERIOD) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(id: &str, name: &str, size: u64) -> Image {
        Image {
            id: id.into(),
            names: vec![name.into()],
            size,
        }
    }

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000 + secs)
    }

    fn set(items: &[&str]) -> HashSet<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn nothing_is_freed_below_the_high_threshold() {
        let c = Collector::new(Policy::default());
        assert_eq!(c.bytes_to_free(1000, 849), 0);
        // At 85 % used, down to 80 %.
        assert_eq!(c.bytes_to_free(1000, 850), 50);
        assert_eq!(c.bytes_to_free(1000, 990), 190);
        assert_eq!(c.bytes_to_free(0, 0), 0);
    }

    #[test]
    fn the_least_recently_used_go_first_and_only_as_many_as_needed() {
        let mut c = Collector::new(Policy::default());
        let images = vec![
            image("sha256:a", "a:1", 100),
            image("sha256:b", "b:1", 100),
            image("sha256:c", "c:1", 100),
        ];
        c.observe(&images, &set(&["sha256:a", "sha256:b"]), at(0));
        c.observe(&images, &set(&["sha256:a"]), at(100));
        // Now nothing runs: c was never used, b last at 0, a at 100.
        let now = at(1000);
        c.observe(&images, &set(&[]), now);
        let ids = |v: Vec<Image>| v.into_iter().map(|i| i.id).collect::<Vec<_>>();
        assert_eq!(
            ids(c.choose(&images, &set(&[]), &[], 150, now)),
            ["sha256:c", "sha256:b"]
        );
        assert_eq!(
            ids(c.choose(&images, &set(&[]), &[], 1000, now)),
            ["sha256:c", "sha256:b", "sha256:a"]
        );
        assert!(c.choose(&images, &set(&[]), &[], 0, now).is_empty());
    }

    #[test]
    fn images_in_use_pinned_or_too_young_stay() {
        let mut c = Collector::new(Policy::default());
        let old = vec![
            image("sha256:used", "used:1", 100),
            image("sha256:pause", "rudder.local/pause:1", 100),
            image("sha256:free", "free:1", 100),
        ];
        c.observe(&old, &set(&[]), at(0));
        let young = image("sha256:young", "young:1", 100);
        let mut all = old.clone();
        all.push(young);
        let now = at(200);
        // In use by name, as a container's image may be referred to.
        let in_use = set(&["used:1"]);
        c.observe(&all, &in_use, now - Duration::from_secs(60));
        let chosen = c.choose(&all, &in_use, &["rudder.local/pause:1"], 10_000, now);
        assert_eq!(
            chosen.iter().map(|i| i.id.as_str()).collect::<Vec<_>>(),
            ["sha256:free"],
            "the young image was detected 60 s ago, under the 2 minute minimum"
        );
    }

    #[test]
    fn images_gone_from_the_runtime_are_forgotten() {
        let mut c = Collector::new(Policy::default());
        c.observe(&[image("sha256:a", "a:1", 1)], &set(&[]), at(0));
        c.observe(&[], &set(&[]), at(10));
        assert!(c.records.is_empty());
    }
}
