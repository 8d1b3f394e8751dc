//! Asynchronous events: each context has a queue and a pipe whose read end is the context's
//! `async_fd` (one byte per queued event, so poll/select and O_NONBLOCK work as on a device).
//! Opening a context queues IBV_EVENT_PORT_ACTIVE for port 1 (the port is up); the wire raises
//! QP and SRQ events through `wire::state::raise_async`, delivered here to the context that
//! owns the object.

use crate::ffi::*;
use crate::verbs::ctx::{sn_ctx, SnContext};
use crate::wire::state::{set_async_sink, AsyncObj};
use std::ffi::{c_int, c_void};

/// A queued event: its type and element.
#[derive(Clone, Copy, Debug)]
pub enum Event {
    Port(u32, c_int),
    Qp(u32, usize),
    Srq(u32, usize),
}

fn push(c: &SnContext, e: Event) {
    c.events
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push_back(e);
    let b = 1u8;
    // SAFETY: async_wfd is the write end of this context's pipe.
    unsafe { libc::write(c.async_wfd, &b as *const u8 as *const c_void, 1) };
}

/// Delivers a wire-raised event to the context that owns the object.
fn deliver(event: u32, obj: AsyncObj) {
    // SAFETY: the wire raises events only on live objects created by softnic's verbs, whose
    // `context` is a live softnic context.
    unsafe {
        let (ctx, e) = match obj {
            AsyncObj::Qp(0) | AsyncObj::Srq(0) => return,
            AsyncObj::Qp(p) => ((*(p as *mut ibv_qp)).context, Event::Qp(event, p)),
            AsyncObj::Srq(p) => ((*(p as *mut ibv_srq)).context, Event::Srq(event, p)),
        };
        push(&*sn_ctx(ctx), e);
    }
}

/// A context was opened: install the sink and report the active port.
pub fn opened(c: &mut SnContext) {
    set_async_sink(deliver);
    push(c, Event::Port(IBV_EVENT_PORT_ACTIVE, 1));
}

#[no_mangle]
pub unsafe extern "C" fn sv_ibv_get_async_event(
    ctx: *mut ibv_context,
    event: *mut ibv_async_event,
) -> c_int {
    let mut b = 0u8;
    // Blocks until an event is queued (or EAGAIN when the program made async_fd non-blocking).
    if libc::read((*ctx).async_fd, &mut b as *mut u8 as *mut c_void, 1) != 1 {
        return -1;
    }
    let c = &*sn_ctx(ctx);
    let Some(e) = c
        .events
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .pop_front()
    else {
        crate::verbs::ctx::set_errno(libc::EAGAIN);
        return -1;
    };
    std::ptr::write_bytes(event, 0, 1);
    let ev = &mut *event;
    match e {
        Event::Port(t, port) => {
            ev.event_type = t;
            ev.element.port_num = port;
        }
        Event::Qp(t, p) => {
            ev.event_type = t;
            ev.element.qp = p as *mut ibv_qp;
        }
        Event::Srq(t, p) => {
            ev.event_type = t;
            ev.element.srq = p as *mut ibv_srq;
        }
    }
    0
}

/// `ibv_ack_async_event`: counts the event on its QP/SRQ (`events_completed`), as rdma-core
/// does, so destroy paths that wait on it see every event acknowledged.
#[no_mangle]
pub unsafe extern "C" fn sv_ibv_ack_async_event(event: *mut ibv_async_event) {
    let ev = &*event;
    match ev.event_type {
        IBV_EVENT_QP_FATAL
        | IBV_EVENT_QP_REQ_ERR
        | IBV_EVENT_QP_ACCESS_ERR
        | IBV_EVENT_COMM_EST
        | IBV_EVENT_SQ_DRAINED
        | IBV_EVENT_PATH_MIG
        | IBV_EVENT_PATH_MIG_ERR
        | IBV_EVENT_QP_LAST_WQE_REACHED => {
            let qp = ev.element.qp;
            if !qp.is_null() {
                count(&mut (*qp).mutex, &mut (*qp).events_completed);
            }
        }
        IBV_EVENT_SRQ_ERR | IBV_EVENT_SRQ_LIMIT_REACHED => {
            let srq = ev.element.srq;
            if !srq.is_null() {
                count(&mut (*srq).mutex, &mut (*srq).events_completed);
            }
        }
        _ => {}
    }
}

unsafe fn count(m: *mut pthread_mutex_t, n: *mut u32) {
    let m = m as *mut libc::pthread_mutex_t;
    libc::pthread_mutex_lock(m);
    *n += 1;
    libc::pthread_mutex_unlock(m);
}
