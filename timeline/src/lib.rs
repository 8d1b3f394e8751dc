//! `sigmatrace-timeline`: the trace sink. A small generic timeline API ([`TraceSink`]) and its
//! two encoders, Perfetto protobuf ([`perfetto::PerfettoSeq`], with its packet framing and block
//! compression: [`fastz`] structured deflate or zlib) and Chrome JSON ([`chrome::ChromeSeq`]).
//!
//! This crate knows nothing about SigmaTrace: it deals in tracks (uuids), slices, instants,
//! counters, flows, interned names and clock snapshots. One sink instance is one writer
//! *sequence*: its events should be fed in non-decreasing timestamp order (the Perfetto encoder
//! writes incremental timestamps); an event earlier than the one before it is written with its
//! absolute time (never moved), at a few bytes more.

#![forbid(unsafe_code)]

pub mod batch;
pub mod chrome;
pub mod fastz;
pub mod groups;
pub mod perfetto;
pub mod proto;

/// What kind of track a [`TrackDef`] declares.
#[derive(Clone, Debug, PartialEq)]
pub enum TrackKind {
    /// A process track (top level), shown as a process group in the UI.
    Process { pid: i32, labels: Vec<String> },
    /// A plain slice/instant track. Tracks with the same `merge_key` under one parent are
    /// shown as one track (Perfetto `BY_SIBLING_MERGE_KEY`); without a key the track is never
    /// merged with siblings of the same name.
    Slices { merge_key: Option<String> },
    /// A counter track.
    Counter { unit: CounterUnit },
}

/// Unit of a counter track.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CounterUnit {
    Count,
    Bytes,
    /// A named unit (e.g. "B/s").
    Custom(&'static str),
}

/// A track declaration. `uuid` must be unique and non-zero in the whole trace.
#[derive(Clone, Debug, PartialEq)]
pub struct TrackDef {
    pub uuid: u64,
    pub parent: Option<u64>,
    pub name: String,
    pub description: Option<String>,
    /// Order among siblings (the parent must ask for explicit ordering).
    pub order: Option<i32>,
    /// Ask for children to be ordered by their `order`.
    pub explicit_child_order: bool,
    pub kind: TrackKind,
}

impl TrackDef {
    /// A plain slice track.
    pub fn slices(uuid: u64, parent: Option<u64>, name: impl Into<String>) -> Self {
        TrackDef {
            uuid,
            parent,
            name: name.into(),
            description: None,
            order: None,
            explicit_child_order: false,
            kind: TrackKind::Slices { merge_key: None },
        }
    }
}

/// An interned event name (index into the sink's name table).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Name(pub u32);

/// An interned argument name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ArgKey(pub u32);

/// An argument value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ArgValue<'a> {
    U64(u64),
    I64(i64),
    Bool(bool),
    Str(&'a str),
    /// Shown as hexadecimal (addresses, keys).
    Hex(u64),
}

/// Optional parts of an event.
#[derive(Clone, Copy, Debug, Default)]
pub struct Extra<'a> {
    pub args: &'a [(ArgKey, ArgValue<'a>)],
    /// Flow ids this event starts or continues.
    pub flows: &'a [u64],
    /// Flow ids this event terminates.
    pub terminating: &'a [u64],
}

impl Extra<'_> {
    /// No args, no flows.
    pub const NONE: Extra<'static> = Extra {
        args: &[],
        flows: &[],
        terminating: &[],
    };
}

/// One writer sequence of a timeline.
pub trait TraceSink: Send {
    /// Interns an event name for this sequence.
    fn name(&mut self, s: &str) -> Name;
    /// Interns an argument name for this sequence.
    fn arg_key(&mut self, s: &str) -> ArgKey;
    /// Declares a track (once per trace, before its first event in file order).
    fn track(&mut self, def: &TrackDef);
    /// Declares a lane: a slice track named `key` under `parent`, merged with its siblings of
    /// the same key ([`TrackKind::Slices`] with `merge_key` = `key`) — what a sink may encode
    /// without building a [`TrackDef`].
    fn lane(&mut self, uuid: u64, parent: u64, key: &'static str) {
        let mut def = TrackDef::slices(uuid, Some(parent), key);
        def.kind = TrackKind::Slices {
            merge_key: Some(key.to_string()),
        };
        self.track(&def);
    }
    /// Opens a slice on `track`.
    fn begin(&mut self, ts: u64, track: u64, name: Name, extra: &Extra<'_>);
    /// Closes the most recent open slice on `track`; `extra.args` are added to it.
    fn end(&mut self, ts: u64, track: u64, extra: &Extra<'_>);
    /// Opens a slice on `a` and then one on `b` (track, name), without args or flows: the
    /// same as the two [`TraceSink::begin`] calls (a recording sink records both at once).
    fn begin_two(&mut self, ts: u64, a: (u64, Name), b: (u64, Name)) {
        self.begin(ts, a.0, a.1, &Extra::NONE);
        self.begin(ts, b.0, b.1, &Extra::NONE);
    }
    /// Closes the most recent open slice on `a` and then on `b`, without args: the same as
    /// the two [`TraceSink::end`] calls (a recording sink records both at once).
    fn end_two(&mut self, ts: u64, a: u64, b: u64) {
        self.end(ts, a, &Extra::NONE);
        self.end(ts, b, &Extra::NONE);
    }
    /// A zero-duration event.
    fn instant(&mut self, ts: u64, track: u64, name: Name, extra: &Extra<'_>);
    /// A counter sample.
    fn counter(&mut self, ts: u64, track: u64, value: i64);
    /// Bytes encoded so far and not yet taken.
    fn pending_bytes(&self) -> usize;
    /// This sink as a trait object (for a caller generic over the sink type, on its paths that
    /// take any sink).
    fn as_dyn(&mut self) -> &mut dyn TraceSink;
    /// Events recorded and not yet encoded: those a recording sink
    /// ([`batch::Recorder`]) holds; 0 for a sink that encodes as it goes.
    fn recorded(&self) -> usize {
        0
    }
    /// Takes the encoded bytes (whole packets / events), ready to be appended to the output.
    fn take(&mut self) -> Vec<u8>;
    /// The events that follow belong to group `g` (until the next call): a sink that keeps
    /// several packet sequences ([`groups::PerfettoGroups`]) writes each group into its own,
    /// others ignore it. A track's events and its declaration must be in one group.
    #[inline]
    fn group(&mut self, _g: u32) {}
    /// Takes what is ready to go out: the encoded bytes when at least `min` are pending (a
    /// sink of several sequences: those of its sequences that hold enough), else nothing.
    fn take_ready(&mut self, min: usize) -> Vec<u8> {
        if self.pending_bytes() >= min {
            self.take()
        } else {
            Vec::new()
        }
    }
}

/// Nothing: a sink that encodes nothing (for passes that only need the events' side effects).
#[derive(Default)]
pub struct NullSink {
    names: u32,
}

impl TraceSink for NullSink {
    fn as_dyn(&mut self) -> &mut dyn TraceSink {
        self
    }
    fn name(&mut self, _: &str) -> Name {
        self.names += 1;
        Name(self.names)
    }
    fn arg_key(&mut self, _: &str) -> ArgKey {
        ArgKey(0)
    }
    fn track(&mut self, _: &TrackDef) {}
    fn begin(&mut self, _: u64, _: u64, _: Name, _: &Extra<'_>) {}
    fn end(&mut self, _: u64, _: u64, _: &Extra<'_>) {}
    fn instant(&mut self, _: u64, _: u64, _: Name, _: &Extra<'_>) {}
    fn counter(&mut self, _: u64, _: u64, _: i64) {}
    fn pending_bytes(&self) -> usize {
        0
    }
    fn take(&mut self) -> Vec<u8> {
        Vec::new()
    }
}
