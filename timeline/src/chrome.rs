//! Chrome JSON ("Trace Event Format") encoder, the secondary output format.
//!
//! Process tracks become `pid`s, every slice track (lane) a `tid` named after its track path,
//! counters `C` events, flows `s`/`f` pairs bound to the enclosing slices. There is no track
//! hierarchy or interning in this format, so files are several times larger than protobuf.

use std::collections::HashMap;
use std::fmt::Write;
use std::sync::Arc;

use crate::{ArgKey, ArgValue, Extra, Name, TraceSink, TrackDef, TrackKind};

/// Where a track's events go: (pid, tid, display name, is counter).
#[derive(Clone, Debug)]
pub struct JsonTrack {
    pub pid: u64,
    pub tid: u64,
    pub name: String,
    pub counter: bool,
}

/// Track table shared by all JSON sequences (static tracks).
pub type JsonTracks = Arc<HashMap<u64, JsonTrack>>;

/// Builds the shared table and the header text from the static track tree.
pub fn header(defs: &[TrackDef], other: &serde_json::Value) -> (JsonTracks, Vec<u8>) {
    let mut seq = ChromeSeq::new(Arc::new(HashMap::new()));
    let mut out = String::from("{\"otherData\":");
    out.push_str(&other.to_string());
    out.push_str(",\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n");
    out.push_str("{\"ph\":\"M\",\"pid\":0,\"tid\":0,\"name\":\"process_name\",\"args\":{\"name\":\"sigmatrace\"}}");
    for d in defs {
        seq.track(d);
    }
    let mut bytes = out.into_bytes();
    bytes.extend_from_slice(&seq.take());
    (Arc::new(seq.local), bytes)
}

/// Closing text of the JSON document.
pub const FOOTER: &[u8] = b"\n]}\n";

/// One JSON writer sequence.
pub struct ChromeSeq {
    shared: JsonTracks,
    local: HashMap<u64, JsonTrack>,
    names: Vec<String>,
    name_ids: HashMap<String, u32>,
    keys: Vec<String>,
    buf: String,
}

fn esc(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

impl ChromeSeq {
    pub fn new(shared: JsonTracks) -> Self {
        ChromeSeq {
            shared,
            local: HashMap::new(),
            names: Vec::new(),
            name_ids: HashMap::new(),
            keys: Vec::new(),
            buf: String::with_capacity(1 << 20),
        }
    }

    fn lookup(&self, uuid: u64) -> Option<&JsonTrack> {
        self.local.get(&uuid).or_else(|| self.shared.get(&uuid))
    }

    fn head(&mut self, ph: &str, ts: u64, track: u64) -> bool {
        let Some(t) = self.lookup(track) else {
            return false;
        };
        let (pid, tid) = (t.pid, t.tid);
        let _ = write!(
            self.buf,
            ",\n{{\"ph\":\"{ph}\",\"pid\":{pid},\"tid\":{tid},\"ts\":{}.{:03}",
            ts / 1000,
            ts % 1000
        );
        true
    }

    fn args(&mut self, args: &[(ArgKey, ArgValue<'_>)]) {
        if args.is_empty() {
            return;
        }
        self.buf.push_str(",\"args\":{");
        for (i, (k, v)) in args.iter().enumerate() {
            if i > 0 {
                self.buf.push(',');
            }
            let key = self.keys[k.0 as usize].clone();
            esc(&key, &mut self.buf);
            self.buf.push(':');
            match v {
                ArgValue::U64(x) => {
                    let _ = write!(self.buf, "{x}");
                }
                ArgValue::I64(x) => {
                    let _ = write!(self.buf, "{x}");
                }
                ArgValue::Bool(b) => {
                    let _ = write!(self.buf, "{b}");
                }
                ArgValue::Hex(x) => {
                    let _ = write!(self.buf, "\"{x:#x}\"");
                }
                ArgValue::Str(s) => esc(s, &mut self.buf),
            }
        }
        self.buf.push('}');
    }

    fn flows(&mut self, ts: u64, track: u64, extra: &Extra<'_>) {
        for (ids, ph) in [(extra.flows, "s"), (extra.terminating, "f")] {
            for &f in ids {
                if self.head(ph, ts, track) {
                    let _ = write!(
                        self.buf,
                        ",\"id\":\"{f:#x}\",\"cat\":\"flow\",\"name\":\"message\""
                    );
                    if ph == "f" {
                        self.buf.push_str(",\"bp\":\"e\"");
                    }
                    self.buf.push('}');
                }
            }
        }
    }
}

impl TraceSink for ChromeSeq {
    fn as_dyn(&mut self) -> &mut dyn TraceSink {
        self
    }

    fn name(&mut self, s: &str) -> Name {
        if let Some(&i) = self.name_ids.get(s) {
            return Name(i);
        }
        self.names.push(s.to_string());
        self.name_ids
            .insert(s.to_string(), self.names.len() as u32 - 1);
        Name(self.names.len() as u32 - 1)
    }

    fn arg_key(&mut self, s: &str) -> ArgKey {
        if let Some(i) = self.keys.iter().position(|k| k == s) {
            return ArgKey(i as u32);
        }
        self.keys.push(s.to_string());
        ArgKey(self.keys.len() as u32 - 1)
    }

    fn track(&mut self, def: &TrackDef) {
        let parent = def.parent.and_then(|p| self.lookup(p).cloned());
        let (pid, path) = match (&def.kind, &parent) {
            (TrackKind::Process { .. }, _) => (def.uuid, String::new()),
            (_, Some(p)) => (
                p.pid,
                if p.name.is_empty() {
                    String::new()
                } else {
                    format!("{} / ", p.name)
                },
            ),
            (_, None) => (0, String::new()),
        };
        let name = format!("{path}{}", def.name);
        let counter = matches!(def.kind, TrackKind::Counter { .. });
        let mut line = String::new();
        match def.kind {
            TrackKind::Process { .. } => {
                line.push_str(",\n{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":");
                let _ = write!(line, "{pid},\"tid\":0,\"args\":{{\"name\":");
                esc(&def.name, &mut line);
                line.push_str("}}");
            }
            TrackKind::Slices { .. } => {
                let _ = write!(line, ",\n{{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":{pid},\"tid\":{},\"args\":{{\"name\":", def.uuid);
                esc(&name, &mut line);
                line.push_str("}}");
            }
            TrackKind::Counter { .. } => {}
        }
        self.buf.push_str(&line);
        let stored = match def.kind {
            TrackKind::Process { .. } => String::new(),
            _ => name,
        };
        self.local.insert(
            def.uuid,
            JsonTrack {
                pid,
                tid: def.uuid,
                name: stored,
                counter,
            },
        );
    }

    fn begin(&mut self, ts: u64, track: u64, name: Name, extra: &Extra<'_>) {
        if self.head("B", ts, track) {
            self.buf.push_str(",\"name\":");
            let n = self.names[name.0 as usize].clone();
            esc(&n, &mut self.buf);
            self.args(extra.args);
            self.buf.push('}');
            self.flows(ts, track, extra);
        }
    }

    fn end(&mut self, ts: u64, track: u64, extra: &Extra<'_>) {
        if self.head("E", ts, track) {
            self.args(extra.args);
            self.buf.push('}');
        }
    }

    fn instant(&mut self, ts: u64, track: u64, name: Name, extra: &Extra<'_>) {
        if self.head("i", ts, track) {
            self.buf.push_str(",\"s\":\"t\",\"name\":");
            let n = self.names[name.0 as usize].clone();
            esc(&n, &mut self.buf);
            self.args(extra.args);
            self.buf.push('}');
            // A flow must bind to a slice: give the instant a 1 ns slice for its arrows.
            if !extra.flows.is_empty() || !extra.terminating.is_empty() {
                self.flows(ts, track, extra);
            }
        }
    }

    fn counter(&mut self, ts: u64, track: u64, value: i64) {
        let Some(t) = self.lookup(track) else { return };
        let (pid, name) = (t.pid, t.name.clone());
        let _ = write!(
            self.buf,
            ",\n{{\"ph\":\"C\",\"pid\":{pid},\"ts\":{}.{:03},\"name\":",
            ts / 1000,
            ts % 1000
        );
        esc(&name, &mut self.buf);
        let _ = write!(self.buf, ",\"args\":{{\"value\":{value}}}}}");
    }

    fn pending_bytes(&self) -> usize {
        self.buf.len()
    }

    fn take(&mut self) -> Vec<u8> {
        std::mem::replace(&mut self.buf, String::with_capacity(1 << 20)).into_bytes()
    }
}
