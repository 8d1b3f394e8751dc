//! The byte format of what shards exchange: a shard's logs' pass-1 results ([`Scan`]) and
//! per-QP counts, little-endian, length-prefixed. Written and read only by the same binary
//! during one conversion, so it carries a magic and nothing else for versioning.
//!
//! Every exchanged type is [`Wire`]: one definition gives both directions, and a struct's
//! fields are listed once ([`wire_struct!`], which destructures without `..`: a new field
//! must be added there).

#![forbid(unsafe_code)]

use sigmatrace_schemas::records::{ClockSnapshot, DeviceOpen, GpuClockPair, QpCreate, QpModify};

use crate::error::ConvertError;
use crate::read::input::RecordIssue;
use crate::read::scan::{QpCounts, Scan};

/// First bytes of every exchanged binary file.
pub const MAGIC: &[u8; 8] = b"STSHARD1";

/// A value that is written to and read from the exchange format.
pub trait Wire: Sized {
    fn put(&self, e: &mut Enc);
    fn get(d: &mut Dec<'_>) -> Result<Self, ConvertError>;
}

/// An encoder into a byte vector.
#[derive(Default)]
pub struct Enc(pub Vec<u8>);

impl Enc {
    pub fn new() -> Enc {
        Enc(MAGIC.to_vec())
    }
    pub fn put<T: Wire>(&mut self, v: &T) {
        v.put(self);
    }
    pub fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    pub fn str(&mut self, s: &str) {
        self.u64(s.len() as u64);
        self.0.extend_from_slice(s.as_bytes());
    }
    pub fn strs(&mut self, v: &[String]) {
        self.u64(v.len() as u64);
        for s in v {
            self.str(s);
        }
    }
    pub fn scan(&mut self, s: &Scan) {
        s.put(self);
    }
    pub fn qp_counts(&mut self, v: &[QpCounts]) {
        self.u64(v.len() as u64);
        for c in v {
            c.put(self);
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
    pub fn get<T: Wire>(&mut self) -> Result<T, ConvertError> {
        T::get(self)
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
    pub fn str(&mut self) -> Result<String, ConvertError> {
        let n = self.len()?;
        Ok(String::from_utf8_lossy(self.take(n)?).into_owned())
    }
    pub fn strs(&mut self) -> Result<Vec<String>, ConvertError> {
        self.get()
    }
    pub fn scan(&mut self) -> Result<Scan, ConvertError> {
        self.get()
    }
    pub fn qp_counts(&mut self) -> Result<Vec<QpCounts>, ConvertError> {
        self.get()
    }
}

impl Wire for u64 {
    fn put(&self, e: &mut Enc) {
        e.u64(*self);
    }
    fn get(d: &mut Dec<'_>) -> Result<u64, ConvertError> {
        d.u64()
    }
}

/// Narrower integers travel as u64 (the value is checked on the way back).
macro_rules! wire_narrow {
    ($($t:ty),*) => {$(
        impl Wire for $t {
            fn put(&self, e: &mut Enc) {
                e.u64(u64::from(*self));
            }
            fn get(d: &mut Dec<'_>) -> Result<$t, ConvertError> {
                let v = d.u64()?;
                <$t>::try_from(v).map_err(|_| {
                    ConvertError::Shard(format!("{}: value {v} out of range", d.what))
                })
            }
        }
    )*};
}
wire_narrow!(u16, u32);

impl Wire for String {
    fn put(&self, e: &mut Enc) {
        e.str(self);
    }
    fn get(d: &mut Dec<'_>) -> Result<String, ConvertError> {
        d.str()
    }
}

/// Records of the log format travel as their bytes.
macro_rules! wire_pod {
    ($($t:ty),*) => {$(
        impl Wire for $t {
            fn put(&self, e: &mut Enc) {
                e.0.extend_from_slice(bytemuck::bytes_of(self));
            }
            fn get(d: &mut Dec<'_>) -> Result<$t, ConvertError> {
                Ok(bytemuck::pod_read_unaligned(d.take(std::mem::size_of::<$t>())?))
            }
        }
    )*};
}
wire_pod!(ClockSnapshot, GpuClockPair, DeviceOpen, QpCreate, QpModify);

/// A length, then the elements.
impl<T: Wire> Wire for Vec<T> {
    fn put(&self, e: &mut Enc) {
        e.u64(self.len() as u64);
        for v in self {
            v.put(e);
        }
    }
    fn get(d: &mut Dec<'_>) -> Result<Vec<T>, ConvertError> {
        let n = d.len()?;
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            out.push(T::get(d)?);
        }
        Ok(out)
    }
}

/// A flag, then the value (0 when absent).
impl Wire for Option<u64> {
    fn put(&self, e: &mut Enc) {
        e.u64(self.map_or(0, |_| 1));
        e.u64(self.unwrap_or(0));
    }
    fn get(d: &mut Dec<'_>) -> Result<Option<u64>, ConvertError> {
        let (has, v) = (d.u64()? != 0, d.u64()?);
        Ok(has.then_some(v))
    }
}

impl<A: Wire, B: Wire> Wire for (A, B) {
    fn put(&self, e: &mut Enc) {
        self.0.put(e);
        self.1.put(e);
    }
    fn get(d: &mut Dec<'_>) -> Result<(A, B), ConvertError> {
        Ok((A::get(d)?, B::get(d)?))
    }
}

impl<A: Wire, B: Wire, C: Wire> Wire for (A, B, C) {
    fn put(&self, e: &mut Enc) {
        self.0.put(e);
        self.1.put(e);
        self.2.put(e);
    }
    fn get(d: &mut Dec<'_>) -> Result<(A, B, C), ConvertError> {
        Ok((A::get(d)?, B::get(d)?, C::get(d)?))
    }
}

/// Per-QP counts, sorted by QPN (the same bytes whatever the map's order).
impl Wire for crate::fastmap::FastMap<u32, QpCounts> {
    fn put(&self, e: &mut Enc) {
        let mut qps: Vec<(u32, QpCounts)> = self.iter().map(|(&q, &c)| (q, c)).collect();
        qps.sort_by_key(|e| e.0);
        qps.put(e);
    }
    fn get(d: &mut Dec<'_>) -> Result<Self, ConvertError> {
        Ok(Vec::<(u32, QpCounts)>::get(d)?.into_iter().collect())
    }
}

/// A struct as its fields in order, each field named once for both directions.
macro_rules! wire_struct {
    ($t:ident { $($f:ident),* $(,)? }) => {
        impl Wire for $t {
            fn put(&self, e: &mut Enc) {
                let $t { $($f),* } = self;
                $($f.put(e);)*
            }
            fn get(d: &mut Dec<'_>) -> Result<$t, ConvertError> {
                // Struct expression fields are evaluated in the order written.
                Ok($t { $($f: Wire::get(d)?),* })
            }
        }
    };
}

wire_struct!(QpCounts {
    consuming_sends,
    recv_ok,
    posts,
    completions
});
wire_struct!(RecordIssue { offset, what });
wire_struct!(Scan {
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
});

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
