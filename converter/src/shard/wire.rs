//! The byte format of what shards exchange: a shard's logs' pass-1 results ([`Scan`]) and
//! per-QP counts, little-endian, length-prefixed. Written and read only by the same binary
//! during one conversion, so it carries a magic and nothing else for versioning.

#![forbid(unsafe_code)]

use bytemuck::Pod;

use crate::error::ConvertError;
use crate::read::input::RecordIssue;
use crate::read::scan::{QpCounts, Scan};

/// First bytes of every exchanged binary file.
pub const MAGIC: &[u8; 8] = b"STSHARD1";

/// An encoder into a byte vector.
#[derive(Default)]
pub struct Enc(pub Vec<u8>);

impl Enc {
    pub fn new() -> Enc {
        Enc(MAGIC.to_vec())
    }
    pub fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    pub fn bytes(&mut self, b: &[u8]) {
        self.u64(b.len() as u64);
        self.0.extend_from_slice(b);
    }
    pub fn str(&mut self, s: &str) {
        self.bytes(s.as_bytes());
    }
    pub fn strs(&mut self, v: &[String]) {
        self.u64(v.len() as u64);
        for s in v {
            self.str(s);
        }
    }
    pub fn pods<T: Pod>(&mut self, v: &[T]) {
        self.u64(v.len() as u64);
        self.0.extend_from_slice(bytemuck::cast_slice(v));
    }
    fn counts(&mut self, c: &QpCounts) {
        for v in [c.consuming_sends, c.recv_ok, c.posts, c.completions] {
            self.u64(v);
        }
    }
    pub fn qp_counts(&mut self, v: &[QpCounts]) {
        self.u64(v.len() as u64);
        for c in v {
            self.counts(c);
        }
    }

    /// Every field of a scan (the destructuring names them all: a new field must be added here).
    pub fn scan(&mut self, s: &Scan) {
        let Scan {
            snapshots,
            gpu_pairs,
            devices,
            qp_creates,
            qp_modifies,
            strings,
            thread_names,
            min_ts,
            max_ts,
            records,
            wr_events,
            per_qp,
            dropped,
            dropped_by_kind,
            first_loss_ts,
            overrun,
            unknown_records,
            issues,
        } = s;
        self.pods(snapshots);
        self.pods(gpu_pairs);
        self.pods(devices);
        self.pods(qp_creates);
        self.pods(qp_modifies);
        self.u64(strings.len() as u64);
        for (ns, key, text) in strings {
            self.u64(u64::from(*ns));
            self.u64(*key);
            self.str(text);
        }
        self.u64(thread_names.len() as u64);
        for (tid, name) in thread_names {
            self.u64(*tid);
            self.str(name);
        }
        for v in [*min_ts, *max_ts, *records, *wr_events] {
            self.u64(v);
        }
        let mut qps: Vec<(&u32, &QpCounts)> = per_qp.iter().collect();
        qps.sort_by_key(|e| *e.0);
        self.u64(qps.len() as u64);
        for (qpn, c) in qps {
            self.u64(u64::from(*qpn));
            self.counts(c);
        }
        self.u64(*dropped);
        self.u64(dropped_by_kind.len() as u64);
        for (kind, n) in dropped_by_kind {
            self.u64(u64::from(*kind));
            self.u64(*n);
        }
        self.u64(first_loss_ts.map_or(0, |_| 1));
        self.u64(first_loss_ts.unwrap_or(0));
        self.u64(*overrun);
        self.u64(*unknown_records);
        self.u64(issues.len() as u64);
        for i in issues {
            self.u64(i.offset);
            self.str(&i.what);
        }
    }
}

/// A decoder over exchanged bytes; every read checks the length (a damaged or cut file is an
/// error naming `what`).
pub struct Dec<'a> {
    b: &'a [u8],
    pos: usize,
    what: &'a str,
}

impl<'a> Dec<'a> {
    pub fn new(b: &'a [u8], what: &'a str) -> Result<Dec<'a>, ConvertError> {
        if b.get(..MAGIC.len()) != Some(&MAGIC[..]) {
            return Err(ConvertError::Shard(format!(
                "{what}: not a shard exchange file"
            )));
        }
        Ok(Dec {
            b,
            pos: MAGIC.len(),
            what,
        })
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8], ConvertError> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.b.len());
        let Some(end) = end else {
            return Err(ConvertError::Shard(format!(
                "{}: cut short at byte {}",
                self.what, self.pos
            )));
        };
        let s = &self.b[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    pub fn u64(&mut self) -> Result<u64, ConvertError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8")))
    }
    fn len(&mut self) -> Result<usize, ConvertError> {
        let n = self.u64()?;
        usize::try_from(n)
            .ok()
            .filter(|&n| n <= self.b.len())
            .ok_or_else(|| ConvertError::Shard(format!("{}: bad length {n}", self.what)))
    }
    pub fn bytes(&mut self) -> Result<&'a [u8], ConvertError> {
        let n = self.len()?;
        self.take(n)
    }
    pub fn str(&mut self) -> Result<String, ConvertError> {
        Ok(String::from_utf8_lossy(self.bytes()?).into_owned())
    }
    pub fn strs(&mut self) -> Result<Vec<String>, ConvertError> {
        let n = self.len()?;
        (0..n).map(|_| self.str()).collect()
    }
    pub fn pods<T: Pod>(&mut self) -> Result<Vec<T>, ConvertError> {
        let n = self.len()?;
        let size = std::mem::size_of::<T>();
        let b = self.take(n.saturating_mul(size))?;
        Ok(b.chunks_exact(size.max(1))
            .map(bytemuck::pod_read_unaligned)
            .collect())
    }
    fn counts(&mut self) -> Result<QpCounts, ConvertError> {
        Ok(QpCounts {
            consuming_sends: self.u64()?,
            recv_ok: self.u64()?,
            posts: self.u64()?,
            completions: self.u64()?,
        })
    }
    pub fn qp_counts(&mut self) -> Result<Vec<QpCounts>, ConvertError> {
        let n = self.len()?;
        (0..n).map(|_| self.counts()).collect()
    }

    pub fn scan(&mut self) -> Result<Scan, ConvertError> {
        let snapshots = self.pods()?;
        let gpu_pairs = self.pods()?;
        let devices = self.pods()?;
        let qp_creates = self.pods()?;
        let qp_modifies = self.pods()?;
        let n = self.len()?;
        let mut strings = Vec::with_capacity(n);
        for _ in 0..n {
            strings.push((self.u64()? as u32, self.u64()?, self.str()?));
        }
        let n = self.len()?;
        let mut thread_names = Vec::with_capacity(n);
        for _ in 0..n {
            thread_names.push((self.u64()?, self.str()?));
        }
        let (min_ts, max_ts, records, wr_events) =
            (self.u64()?, self.u64()?, self.u64()?, self.u64()?);
        let n = self.len()?;
        let mut per_qp = crate::fastmap::FastMap::default();
        for _ in 0..n {
            let qpn = self.u64()? as u32;
            per_qp.insert(qpn, self.counts()?);
        }
        let dropped = self.u64()?;
        let n = self.len()?;
        let mut dropped_by_kind = Vec::with_capacity(n);
        for _ in 0..n {
            dropped_by_kind.push((self.u64()? as u16, self.u64()?));
        }
        let has_loss = self.u64()? != 0;
        let loss_ts = self.u64()?;
        let (overrun, unknown_records) = (self.u64()?, self.u64()?);
        let n = self.len()?;
        let mut issues = Vec::with_capacity(n);
        for _ in 0..n {
            issues.push(RecordIssue {
                offset: self.u64()?,
                what: self.str()?,
            });
        }
        Ok(Scan {
            snapshots,
            gpu_pairs,
            devices,
            qp_creates,
            qp_modifies,
            strings,
            thread_names,
            min_ts,
            max_ts,
            records,
            wr_events,
            per_qp,
            dropped,
            dropped_by_kind,
            first_loss_ts: has_loss.then_some(loss_ts),
            overrun,
            unknown_records,
            issues,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sigmatrace_schemas::records::{ClockSnapshot, QpCreate};

    #[test]
    fn a_scan_survives_the_round_trip() {
        let mut s = Scan {
            min_ts: 5,
            max_ts: 99,
            records: 7,
            wr_events: 3,
            dropped: 2,
            dropped_by_kind: vec![(4, 2)],
            first_loss_ts: Some(44),
            overrun: 1,
            unknown_records: 6,
            ..Default::default()
        };
        s.snapshots.push(ClockSnapshot {
            ts: 11,
            realtime: 12,
            ..Default::default()
        });
        s.qp_creates.push(QpCreate {
            qpn: 0x1a2,
            ts: 3,
            ..Default::default()
        });
        s.strings.push((1, 2, "qp_cq=qp=0x1".into()));
        s.thread_names.push((9, "main".into()));
        s.per_qp.insert(
            0x1a2,
            QpCounts {
                consuming_sends: 1,
                recv_ok: 2,
                posts: 3,
                completions: 4,
            },
        );
        s.issues.push(RecordIssue {
            offset: 4096,
            what: "damaged".into(),
        });
        let mut e = Enc::new();
        e.scan(&s);
        e.qp_counts(&[QpCounts::default()]);
        let mut d = Dec::new(&e.0, "test").unwrap();
        let back = d.scan().unwrap();
        assert_eq!(format!("{back:?}"), format!("{s:?}"));
        assert_eq!(d.qp_counts().unwrap(), vec![QpCounts::default()]);
        // A cut file is an error, never a short read.
        let cut = &e.0[..e.0.len() - 3];
        let mut d = Dec::new(cut, "cut").unwrap();
        d.scan().unwrap();
        assert!(d.qp_counts().is_err());
    }
}
