//! CUDA graphs as far as a program launches them: a graph created and instantiated, its
//! executable launched on a stream — where it occupies the stream for one simulated kernel
//! time, as a kernel launch does, and is recorded as a launch of API 4 — and destroyed. The
//! graph's nodes are not modelled (a graph runs nothing on the host).

use std::ffi::{c_uint, c_ulonglong};

use super::{count, new_handle, put, with, CUresult, LaunchRecord, INVALID_HANDLE, SUCCESS};

#[no_mangle]
pub unsafe extern "C" fn cuGraphCreate(graph: *mut u64, _flags: c_uint) -> CUresult {
    count("cuGraphCreate");
    // SAFETY: `graph` is the caller's out pointer: null (refused by `put`) or writable.
    unsafe { put(graph, new_handle) }
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphInstantiateWithFlags(
    exec: *mut u64,
    _graph: u64,
    _flags: c_ulonglong,
) -> CUresult {
    count("cuGraphInstantiateWithFlags");
    let instantiate = || {
        let h = new_handle();
        with(|s| s.graph_execs.insert(h));
        h
    };
    // SAFETY: as in `cuGraphCreate`.
    unsafe { put(exec, instantiate) }
}

#[no_mangle]
pub extern "C" fn cuGraphLaunch(exec: u64, stream: u64) -> CUresult {
    count("cuGraphLaunch");
    with(|s| {
        if !s.graph_execs.contains(&exec) {
            return INVALID_HANDLE;
        }
        let span = s.timing.launch(stream);
        s.spans.push(span);
        s.launches.push(LaunchRecord {
            api: 4,
            function: exec,
            stream,
            ..Default::default()
        });
        SUCCESS
    })
}

// The driver's signature, as the callers' one definition states it.
const _: super::abi::GraphLaunchFn = cuGraphLaunch;

#[no_mangle]
pub extern "C" fn cuGraphExecDestroy(exec: u64) -> CUresult {
    count("cuGraphExecDestroy");
    match with(|s| s.graph_execs.remove(&exec)) {
        true => SUCCESS,
        false => INVALID_HANDLE,
    }
}

#[no_mangle]
pub extern "C" fn cuGraphDestroy(_graph: u64) -> CUresult {
    count("cuGraphDestroy");
    SUCCESS
}
