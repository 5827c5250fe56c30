//! Reading the four labels of a leaf device: the config nvlist of each and
//! every uberblock in each ring, each verified by its embedded SHA-256
//! checksum (verifier = the region's absolute device offset) before it is
//! believed. FORMAT.md §1.

use crate::device::BlockDevice;
use ozfs_codec::checksum::sha256;
use ozfs_format::label::{
    self, aligned_psize, label_offset, parse_eck, uberblock_shift, with_verifier, Uberblock,
    UBERBLOCK_RING_OFFSET, UBERBLOCK_RING_SIZE, VDEV_LABELS, VDEV_LABEL_SIZE, VDEV_PHYS_OFFSET,
    VDEV_PHYS_SIZE,
};
use ozfs_format::{Error, NvList, Result};

/// One uberblock that passed its checksum, and where it was found.
#[derive(Debug, Clone)]
pub struct FoundUberblock {
    pub ub: Uberblock,
    pub label: usize,
    pub slot: usize,
    /// Absolute device offset of the slot.
    pub offset: u64,
}

/// What the labels of one device say.
#[derive(Debug, Default, Clone)]
pub struct LabelSet {
    pub device: String,
    pub size: u64,
    /// Per label: the decoded config, or why it could not be read.
    pub configs: Vec<std::result::Result<NvList, String>>,
    /// Every valid uberblock of every label.
    pub uberblocks: Vec<FoundUberblock>,
}

impl LabelSet {
    /// The valid config with the greatest `txg` (ties: lowest label index).
    pub fn best_config(&self) -> Option<&NvList> {
        let mut best: Option<&NvList> = None;
        for c in self.configs.iter().flatten() {
            let t = c.get_u64("txg").unwrap_or(0);
            if best.is_none_or(|b| t > b.get_u64("txg").unwrap_or(0)) {
                best = Some(c);
            }
        }
        best
    }

    /// The newest valid uberblock (largest txg, then timestamp, then MMP sequence).
    pub fn best_uberblock(&self) -> Option<&FoundUberblock> {
        self.uberblocks
            .iter()
            .max_by_key(|u| (u.ub.txg, u.ub.timestamp, u.ub.mmp_seq()))
    }

    /// Whether at least one label carries a valid config.
    pub fn has_label(&self) -> bool {
        self.configs.iter().any(|c| c.is_ok())
    }
}

/// Verify the embedded checksum of `region` located at absolute `offset`.
pub fn verify_eck(region: &[u8], offset: u64, what: &str) -> Result<()> {
    let eck = parse_eck(region).map_err(|e| e.context(what))?;
    let data = with_verifier(region, [offset, 0, 0, 0], eck.byteswapped);
    let computed = sha256(&data);
    if computed.0 != eck.cksum {
        return Err(Error::Checksum {
            what: what.to_string(),
            expected: ozfs_format::Cksum(eck.cksum),
            computed,
        });
    }
    Ok(())
}

/// Read and verify all four labels of `dev`. Never fails as a whole: a device
/// with no valid label yields a `LabelSet` whose configs are all errors.
pub fn read_labels(dev: &dyn BlockDevice) -> LabelSet {
    let size = dev.size();
    let psize = aligned_psize(size);
    let mut set = LabelSet {
        device: dev.name().to_string(),
        size,
        ..Default::default()
    };
    if psize < VDEV_LABELS as u64 * VDEV_LABEL_SIZE {
        for _ in 0..VDEV_LABELS {
            set.configs.push(Err(format!(
                "device too small ({size} bytes) to hold labels"
            )));
        }
        return set;
    }
    let mut buf = vec![0u8; VDEV_LABEL_SIZE as usize];
    for l in 0..VDEV_LABELS {
        let base = label_offset(psize, l, 0);
        if let Err(e) = dev.read_at(&mut buf, base) {
            set.configs.push(Err(e.to_string()));
            continue;
        }
        let phys_start = VDEV_PHYS_OFFSET as usize;
        let phys = &buf[phys_start..phys_start + VDEV_PHYS_SIZE];
        let what = format!("{} label {l} config", dev.name());
        let cfg = verify_eck(phys, base + VDEV_PHYS_OFFSET, &what).and_then(|_| {
            NvList::unpack(&phys[..VDEV_PHYS_SIZE - label::ZIO_ECK_SIZE])
                .map_err(|e| e.context(&what))
        });
        let ashift = cfg
            .as_ref()
            .ok()
            .and_then(|c| c.get_nvlist("vdev_tree"))
            .and_then(|t| t.get_u64("ashift"))
            .unwrap_or(9);
        set.configs.push(cfg.map_err(|e| e.to_string()));
        // Try the slot size from the config first; without a config try the common ones.
        let shifts: Vec<u32> = if set.configs[l].is_ok() {
            vec![uberblock_shift(ashift)]
        } else {
            vec![10, 12, 13]
        };
        for shift in shifts {
            let slot_size = 1usize << shift;
            let nslots = UBERBLOCK_RING_SIZE as usize / slot_size;
            let mut found_any = false;
            for slot in 0..nslots {
                let start = UBERBLOCK_RING_OFFSET as usize + slot * slot_size;
                let region = &buf[start..start + slot_size];
                if region[..8].iter().all(|&b| b == 0) {
                    continue;
                }
                let offset = base + start as u64;
                if verify_eck(region, offset, "uberblock").is_err() {
                    continue;
                }
                if let Ok(ub) = Uberblock::parse(region) {
                    if ub.txg == 0 {
                        continue;
                    }
                    found_any = true;
                    set.uberblocks.push(FoundUberblock {
                        ub,
                        label: l,
                        slot,
                        offset,
                    });
                }
            }
            if found_any {
                break;
            }
        }
    }
    set
}
