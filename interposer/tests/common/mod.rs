//! Helpers for the interposer's integration tests: the C test programs, reading logs back,
//! output shapes; artifact lookup, ports and running programs traced or untraced come from
//! `sigmatrace-testkit`.

#![allow(dead_code)]
// Each test binary uses a subset of the re-exported helpers.
#![allow(unused_imports)]

use std::path::{Path, PathBuf};

pub use sigmatrace_testkit::{
    build_dir, free_port, libsigmatrace, listening, softnic_run, system_bin, Cmd, Out, Running,
};

use sigmatrace_schemas::{
    AhCreate, AsyncEvent, ClockSnapshot, CqCreate, CqEvent, CqeObserved, DeviceOpen, EmptyPolls,
    FileHeader, GpuClockPair, GpuMemory, KernelExec, KernelLaunch, LogFile, MrReg, ObserveOverrun,
    PostError, PostRecv, PostSend, QpCreate, QpDestroy, QpModify, QueueDiscovered, Record,
    WorkCompletion, WqeObserved,
};

/// A C program compiled by build.rs.
pub fn cprog(name: &str) -> PathBuf {
    let p = Path::new(env!("OUT_DIR")).join("cprogs").join(name);
    assert!(
        p.exists(),
        "{} missing (build.rs compiles cprogs/)",
        p.display()
    );
    p
}

/// The `.sigmalog` files of a directory, sorted by name.
pub fn logs_in(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    v.retain(|p| p.extension().is_some_and(|e| e == "sigmalog"));
    v.sort();
    v
}

/// One log, decoded into owned records (in chunk order, each chunk in append order).
#[derive(Debug, Default)]
pub struct Trace {
    pub path: PathBuf,
    pub header: Option<FileHeader>,
    /// Per record: (writer tid, kind name, index into the typed vectors below is implicit).
    pub order: Vec<(u32, Rec)>,
    pub clean: bool,
    pub chunk_pids: Vec<u32>,
}

/// An owned record.
#[derive(Debug, Clone)]
pub enum Rec {
    DeviceOpen(DeviceOpen),
    MrReg(MrReg),
    CqCreate(CqCreate),
    QpCreate(QpCreate),
    QpModify(QpModify),
    QpDestroy(QpDestroy),
    AhCreate(AhCreate),
    AsyncEvent(AsyncEvent),
    CqEvent(CqEvent),
    PostSend(PostSend),
    PostRecv(PostRecv),
    PostError(PostError),
    Wc(WorkCompletion),
    Empty(EmptyPolls),
    Snapshot(ClockSnapshot),
    Meta(String),
    /// StringDef: (namespace, key, text).
    Def(u32, u64, String),
    Queue(QueueDiscovered),
    Wqe(WqeObserved),
    Cqe(CqeObserved),
    Overrun(ObserveOverrun),
    GpuMem(GpuMemory),
    Launch(KernelLaunch),
    Exec(KernelExec),
    ClockPair(GpuClockPair),
    Other(String),
}

impl Trace {
    pub fn open(path: &Path) -> Trace {
        let log = LogFile::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let mut t = Trace {
            path: path.to_owned(),
            header: Some(log.header().clone()),
            clean: log.salvage().is_clean(),
            ..Default::default()
        };
        for c in log.chunks() {
            t.chunk_pids.push(c.header.pid);
            for raw in log.records(c) {
                let raw = raw.unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                let rec = raw
                    .decode()
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                let r = match rec {
                    Record::DeviceOpen(r) => Rec::DeviceOpen(*r),
                    Record::MrReg(r) => Rec::MrReg(*r),
                    Record::CqCreate(r) => Rec::CqCreate(*r),
                    Record::QpCreate(r) => Rec::QpCreate(*r),
                    Record::QpModify(r) => Rec::QpModify(*r),
                    Record::QpDestroy(r) => Rec::QpDestroy(*r),
                    Record::AhCreate(r) => Rec::AhCreate(*r),
                    Record::AsyncEvent(r) => Rec::AsyncEvent(*r),
                    Record::CqEvent(r) => Rec::CqEvent(*r),
                    Record::PostSend(r) => Rec::PostSend(*r),
                    Record::PostRecv(r) => Rec::PostRecv(*r),
                    Record::PostError(r) => Rec::PostError(*r),
                    Record::WorkCompletion(r) => Rec::Wc(*r),
                    Record::EmptyPolls(r) => Rec::Empty(*r),
                    Record::ClockSnapshot(r) => Rec::Snapshot(*r),
                    Record::StringDef(m) => Rec::Def(m.aux, m.key, m.text().into_owned()),
                    Record::Annotation(m) | Record::ThreadName(m) => {
                        Rec::Meta(m.text().into_owned())
                    }
                    Record::QueueDiscovered(r) => Rec::Queue(*r),
                    Record::WqeObserved(r) => Rec::Wqe(*r),
                    Record::CqeObserved(r) => Rec::Cqe(*r),
                    Record::ObserveOverrun(r) => Rec::Overrun(*r),
                    Record::GpuMemory(r) => Rec::GpuMem(*r),
                    Record::KernelLaunch(r) => Rec::Launch(*r),
                    Record::KernelExec(r) => Rec::Exec(*r),
                    Record::GpuClockPair(r) => Rec::ClockPair(*r),
                    other => Rec::Other(
                        format!("{other:?}")
                            .split('(')
                            .next()
                            .unwrap_or("?")
                            .to_string(),
                    ),
                };
                t.order.push((c.header.tid, r));
            }
        }
        t
    }

    pub fn pid(&self) -> u32 {
        self.header.as_ref().map(|h| h.pid).unwrap_or(0)
    }

    /// Names of the records, for counting.
    pub fn count(&self, f: impl Fn(&Rec) -> bool) -> usize {
        self.order.iter().filter(|(_, r)| f(r)).count()
    }

    pub fn sends(&self) -> Vec<PostSend> {
        self.order
            .iter()
            .filter_map(|(_, r)| {
                if let Rec::PostSend(s) = r {
                    Some(*s)
                } else {
                    None
                }
            })
            .collect()
    }
    pub fn recvs(&self) -> Vec<PostRecv> {
        self.order
            .iter()
            .filter_map(|(_, r)| {
                if let Rec::PostRecv(s) = r {
                    Some(*s)
                } else {
                    None
                }
            })
            .collect()
    }
    pub fn wcs(&self) -> Vec<WorkCompletion> {
        self.order
            .iter()
            .filter_map(|(_, r)| if let Rec::Wc(s) = r { Some(*s) } else { None })
            .collect()
    }
    pub fn errors(&self) -> Vec<PostError> {
        self.order
            .iter()
            .filter_map(|(_, r)| {
                if let Rec::PostError(s) = r {
                    Some(*s)
                } else {
                    None
                }
            })
            .collect()
    }
    pub fn empties(&self) -> Vec<EmptyPolls> {
        self.order
            .iter()
            .filter_map(|(_, r)| {
                if let Rec::Empty(s) = r {
                    Some(*s)
                } else {
                    None
                }
            })
            .collect()
    }
    pub fn qps(&self) -> Vec<QpCreate> {
        self.order
            .iter()
            .filter_map(|(_, r)| {
                if let Rec::QpCreate(s) = r {
                    Some(*s)
                } else {
                    None
                }
            })
            .collect()
    }
    pub fn modifies(&self) -> Vec<QpModify> {
        self.order
            .iter()
            .filter_map(|(_, r)| {
                if let Rec::QpModify(s) = r {
                    Some(*s)
                } else {
                    None
                }
            })
            .collect()
    }
    pub fn cq_events(&self) -> Vec<CqEvent> {
        self.order
            .iter()
            .filter_map(|(_, r)| {
                if let Rec::CqEvent(s) = r {
                    Some(*s)
                } else {
                    None
                }
            })
            .collect()
    }
    pub fn mrs(&self) -> Vec<MrReg> {
        self.order
            .iter()
            .filter_map(|(_, r)| {
                if let Rec::MrReg(s) = r {
                    Some(*s)
                } else {
                    None
                }
            })
            .collect()
    }
    pub fn cqs(&self) -> Vec<CqCreate> {
        self.order
            .iter()
            .filter_map(|(_, r)| {
                if let Rec::CqCreate(s) = r {
                    Some(*s)
                } else {
                    None
                }
            })
            .collect()
    }
    pub fn ahs(&self) -> Vec<AhCreate> {
        self.order
            .iter()
            .filter_map(|(_, r)| {
                if let Rec::AhCreate(s) = r {
                    Some(*s)
                } else {
                    None
                }
            })
            .collect()
    }
    pub fn devices(&self) -> Vec<DeviceOpen> {
        self.order
            .iter()
            .filter_map(|(_, r)| {
                if let Rec::DeviceOpen(s) = r {
                    Some(*s)
                } else {
                    None
                }
            })
            .collect()
    }
    /// Every record matching `f`'s pattern, e.g. `t.all(|r| match r { Rec::Wqe(w) => Some(*w), _ => None })`.
    pub fn all<T>(&self, f: impl Fn(&Rec) -> Option<T>) -> Vec<T> {
        self.order.iter().filter_map(|(_, r)| f(r)).collect()
    }

    /// StringDef records of one namespace: (key, text).
    pub fn defs(&self, ns: u32) -> Vec<(u64, String)> {
        self.all(|r| match r {
            Rec::Def(n, k, s) if *n == ns => Some((*k, s.clone())),
            _ => None,
        })
    }

    /// The value of process attribute `name=` (StringDef namespace 4), if written.
    pub fn attr(&self, name: &str) -> Option<String> {
        let prefix = format!("{name}=");
        self.defs(sigmatrace_schemas::string_ns::PROCESS_ATTR)
            .into_iter()
            .find_map(|(_, s)| s.strip_prefix(&prefix).map(str::to_string))
    }

    /// Total empty polls recorded (sum of the aggregated counts).
    pub fn empty_poll_count(&self) -> u64 {
        self.empties().iter().map(|e| e.count).sum()
    }
}

/// The single log in `dir` (asserts there is exactly one).
/// Runs `argv` traced into a fresh directory, with `env` set: what it printed, the one log it
/// left, and the directory (the log is deleted with it).
pub fn traced_run(
    argv: &[String],
    env: &[(&str, &str)],
    limit: std::time::Duration,
) -> (Out, Trace, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let cmd = env
        .iter()
        .fold(Cmd::new(argv), |c, (k, v)| c.env(k, v))
        .traced(dir.path());
    let out = cmd.run(limit);
    let logs = logs_in(dir.path());
    assert_eq!(logs.len(), 1, "expected one log: {logs:?}; {out:?}");
    let t = Trace::open(&logs[0]);
    (out, t, dir)
}

pub fn only_log(dir: &Path) -> Trace {
    let logs = logs_in(dir);
    assert_eq!(
        logs.len(),
        1,
        "expected one log in {}: {logs:?}",
        dir.display()
    );
    Trace::open(&logs[0])
}

/// Output with every number (decimal, hex, `0x…`, fractions, and the words `nan`, `-nan`,
/// `inf`, `-inf` printf writes for a float — perftest's standard deviation is `-nan` when
/// rounding makes the variance negative) replaced by `#` and runs of whitespace collapsed:
/// timings, PSNs and addresses differ between runs, the shape of each line must not.
pub fn shape(s: &str) -> Vec<String> {
    s.lines()
        // perftest's CPU-frequency check depends on the moment, not on the program.
        .filter(|l| !l.contains("CPU Frequency") && !l.contains("Conflicting CPU frequency"))
        .map(|l| {
            let chars: Vec<char> = l.chars().collect();
            let mut out = String::new();
            let mut i = 0;
            while i < chars.len() {
                let at_start = i == 0 || !chars[i - 1].is_ascii_alphanumeric();
                if chars[i].is_ascii_digit() && at_start {
                    while i < chars.len()
                        && (chars[i].is_ascii_hexdigit() || chars[i] == 'x' || chars[i] == '.')
                    {
                        i += 1;
                    }
                    out.push('#');
                } else {
                    out.push(chars[i]);
                    i += 1;
                }
            }
            out.split_whitespace()
                .map(|w| match w.trim_start_matches('-') {
                    "nan" | "inf" => "#",
                    _ => w,
                })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

/// A directory holding `libcuda.so.1` → the workspace's TEST DOUBLE
/// (`libsigmatrace_cuda_double.so`), for `LD_LIBRARY_PATH`.
pub fn cuda_double_dir() -> tempfile::TempDir {
    let lib = build_dir().join("libsigmatrace_cuda_double.so");
    assert!(
        lib.exists(),
        "{} missing: run `cargo build --workspace` first",
        lib.display()
    );
    let d = tempfile::tempdir().expect("tempdir");
    std::os::unix::fs::symlink(&lib, d.path().join("libcuda.so.1")).expect("symlink");
    d
}

/// Lines of `out` starting with `tag ` split into whitespace-separated fields (tag removed).
pub fn tagged(out: &str, tag: &str) -> Vec<Vec<String>> {
    let prefix = format!("{tag} ");
    out.lines()
        .filter_map(|l| l.strip_prefix(&prefix))
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .collect()
}

/// A decimal or `0x` hexadecimal number.
pub fn num(s: &str) -> u64 {
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16),
        None => s.parse(),
    }
    .unwrap_or_else(|_| panic!("not a number: {s:?}"))
}

/// `key=value` fields of a line such as `A qpn=257 sq=0x… wqebbs=512`.
pub fn fields(line: &str) -> std::collections::HashMap<String, String> {
    line.split_whitespace()
        .filter_map(|f| f.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}
