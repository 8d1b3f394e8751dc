//! Helper verbs: strings, rates, sysfs, fork, unsupported/compat entry points.

use crate::ffi::*;
use crate::verbs::ctx::{set_errno, BOARD_ID, FW_VER, IBDEV_PATH, VENDOR_ID, VENDOR_PART_ID};
use crate::wire::state::*;
use std::ffi::{c_char, c_int, c_void, CStr};

macro_rules! cstr_table {
    ($v:expr, $default:expr, $($k:path => $s:literal),* $(,)?) => {
        match $v {
            $($k => concat!($s, "\0").as_ptr() as *const c_char,)*
            _ => concat!($default, "\0").as_ptr() as *const c_char,
        }
    };
}

#[no_mangle]
pub extern "C" fn sv_ibv_wc_status_str(status: u32) -> *const c_char {
    cstr_table!(status, "unknown",
        IBV_WC_SUCCESS => "success",
        IBV_WC_LOC_LEN_ERR => "local length error",
        IBV_WC_LOC_QP_OP_ERR => "local QP operation error",
        IBV_WC_LOC_EEC_OP_ERR => "local EE context operation error",
        IBV_WC_LOC_PROT_ERR => "local protection error",
        IBV_WC_WR_FLUSH_ERR => "Work Request Flushed Error",
        IBV_WC_MW_BIND_ERR => "memory management operation error",
        IBV_WC_BAD_RESP_ERR => "bad response error",
        IBV_WC_LOC_ACCESS_ERR => "local access error",
        IBV_WC_REM_INV_REQ_ERR => "remote invalid request error",
        IBV_WC_REM_ACCESS_ERR => "remote access error",
        IBV_WC_REM_OP_ERR => "remote operation error",
        IBV_WC_RETRY_EXC_ERR => "transport retry counter exceeded",
        IBV_WC_RNR_RETRY_EXC_ERR => "RNR retry counter exceeded",
        IBV_WC_LOC_RDD_VIOL_ERR => "local RDD violation error",
        IBV_WC_REM_INV_RD_REQ_ERR => "remote invalid RD request",
        IBV_WC_REM_ABORT_ERR => "aborted error",
        IBV_WC_INV_EECN_ERR => "invalid EE context number",
        IBV_WC_INV_EEC_STATE_ERR => "invalid EE context state",
        IBV_WC_FATAL_ERR => "fatal error",
        IBV_WC_RESP_TIMEOUT_ERR => "response timeout error",
        IBV_WC_GENERAL_ERR => "general error",
        IBV_WC_TM_ERR => "TM error",
        IBV_WC_TM_RNDV_INCOMPLETE => "TM software rendezvous",
    )
}

#[no_mangle]
pub extern "C" fn sv_ibv_event_type_str(ev: u32) -> *const c_char {
    cstr_table!(ev, "unknown",
        IBV_EVENT_CQ_ERR => "CQ error",
        IBV_EVENT_QP_FATAL => "local work queue catastrophic error",
        IBV_EVENT_QP_REQ_ERR => "invalid request local work queue error",
        IBV_EVENT_QP_ACCESS_ERR => "local access violation work queue error",
        IBV_EVENT_COMM_EST => "communication established",
        IBV_EVENT_SQ_DRAINED => "send queue drained",
        IBV_EVENT_PATH_MIG => "path migrated",
        IBV_EVENT_PATH_MIG_ERR => "path migration request error",
        IBV_EVENT_DEVICE_FATAL => "local catastrophic error",
        IBV_EVENT_PORT_ACTIVE => "port active",
        IBV_EVENT_PORT_ERR => "port error",
        IBV_EVENT_LID_CHANGE => "LID change",
        IBV_EVENT_PKEY_CHANGE => "P_Key change",
        IBV_EVENT_SM_CHANGE => "SM change",
        IBV_EVENT_SRQ_ERR => "SRQ catastrophic error",
        IBV_EVENT_SRQ_LIMIT_REACHED => "SRQ limit reached",
        IBV_EVENT_QP_LAST_WQE_REACHED => "last WQE reached",
        IBV_EVENT_CLIENT_REREGISTER => "client reregistration",
        IBV_EVENT_GID_CHANGE => "GID table change",
        IBV_EVENT_WQ_FATAL => "WQ fatal",
    )
}

#[no_mangle]
pub extern "C" fn sv_ibv_node_type_str(t: c_int) -> *const c_char {
    cstr_table!(t, "unknown",
        IBV_NODE_CA => "InfiniBand channel adapter",
        IBV_NODE_SWITCH => "InfiniBand switch",
        IBV_NODE_ROUTER => "InfiniBand router",
        IBV_NODE_RNIC => "iWARP NIC",
        IBV_NODE_USNIC => "usNIC",
        IBV_NODE_USNIC_UDP => "usNIC UDP",
        IBV_NODE_UNSPECIFIED => "unspecified",
    )
}

#[no_mangle]
pub extern "C" fn sv_ibv_port_state_str(s: u32) -> *const c_char {
    cstr_table!(s, "unknown",
        IBV_PORT_NOP => "PORT_NOP",
        IBV_PORT_DOWN => "PORT_DOWN",
        IBV_PORT_INIT => "PORT_INIT",
        IBV_PORT_ARMED => "PORT_ARMED",
        IBV_PORT_ACTIVE => "PORT_ACTIVE",
        IBV_PORT_ACTIVE_DEFER => "PORT_ACTIVE_DEFER",
    )
}

/// (enum ibv_rate, multiple of 2.5 Gb/s, Mb/s)
const RATES: &[(u32, c_int, c_int)] = &[
    (IBV_RATE_2_5_GBPS, 1, 2500),
    (IBV_RATE_5_GBPS, 2, 5000),
    (IBV_RATE_10_GBPS, 4, 10000),
    (IBV_RATE_20_GBPS, 8, 20000),
    (IBV_RATE_30_GBPS, 12, 30000),
    (IBV_RATE_40_GBPS, 16, 40000),
    (IBV_RATE_60_GBPS, 24, 60000),
    (IBV_RATE_80_GBPS, 32, 80000),
    (IBV_RATE_120_GBPS, 48, 120000),
    (IBV_RATE_14_GBPS, 5, 14062),
    (IBV_RATE_56_GBPS, 22, 56250),
    (IBV_RATE_112_GBPS, 45, 112500),
    (IBV_RATE_168_GBPS, 67, 168750),
    (IBV_RATE_25_GBPS, 10, 25781),
    (IBV_RATE_100_GBPS, 40, 103125),
    (IBV_RATE_200_GBPS, 80, 206250),
    (IBV_RATE_300_GBPS, 120, 309375),
    (IBV_RATE_28_GBPS, 11, 28125),
    (IBV_RATE_50_GBPS, 20, 53125),
    (IBV_RATE_400_GBPS, 160, 425000),
    (IBV_RATE_600_GBPS, 240, 637500),
    (IBV_RATE_800_GBPS, 320, 850000),
    (IBV_RATE_1200_GBPS, 480, 1275000),
];

#[no_mangle]
pub extern "C" fn sv_ibv_rate_to_mult(rate: u32) -> c_int {
    RATES.iter().find(|r| r.0 == rate).map_or(-1, |r| r.1)
}
#[no_mangle]
pub extern "C" fn sv_mult_to_ibv_rate(mult: c_int) -> u32 {
    RATES
        .iter()
        .find(|r| r.1 == mult)
        .map_or(IBV_RATE_MAX, |r| r.0)
}
#[no_mangle]
pub extern "C" fn sv_ibv_rate_to_mbps(rate: u32) -> c_int {
    RATES.iter().find(|r| r.0 == rate).map_or(-1, |r| r.2)
}
#[no_mangle]
pub extern "C" fn sv_mbps_to_ibv_rate(mbps: c_int) -> u32 {
    RATES
        .iter()
        .find(|r| r.2 == mbps)
        .map_or(IBV_RATE_MAX, |r| r.0)
}

/// `ibv_get_sysfs_path`: `$SYSFS_PATH` without trailing slashes, else `/sys` (read once, as
/// rdma-core does).
#[no_mangle]
pub extern "C" fn sv_ibv_get_sysfs_path() -> *const c_char {
    static PATH: std::sync::OnceLock<std::ffi::CString> = std::sync::OnceLock::new();
    PATH.get_or_init(|| {
        let p = std::env::var_os("SYSFS_PATH")
            .map(|v| {
                use std::os::unix::ffi::OsStrExt;
                let b = v.as_bytes();
                let end = b.iter().rposition(|&c| c != b'/').map_or(0, |i| i + 1);
                b[..end].to_vec()
            })
            .filter(|b| !b.is_empty() && !b.contains(&0))
            .unwrap_or_else(|| b"/sys".to_vec());
        std::ffi::CString::new(p).expect("no NUL")
    })
    .as_ptr()
}

/// The sysfs attributes softnic's device presents (relative to its ibdev path).
fn sysfs_attr(file: &str) -> Option<String> {
    let g = global();
    let guid = node_guid(g.node);
    let guid_str = format!(
        "{:04x}:{:04x}:{:04x}:{:04x}",
        guid >> 48,
        (guid >> 32) & 0xffff,
        (guid >> 16) & 0xffff,
        guid & 0xffff
    );
    Some(match file.trim_start_matches('/') {
        "node_guid" | "sys_image_guid" => guid_str,
        "board_id" => BOARD_ID.into(),
        "fw_ver" => FW_VER.into(),
        "hca_type" => format!("MT{VENDOR_PART_ID}"),
        "device/device" => format!("0x{VENDOR_PART_ID:04x}"),
        "device/vendor" => format!("0x{VENDOR_ID:04x}"),
        "hw_rev" => "1".into(),
        "node_type" => "1: CA".into(),
        "node_desc" => format!("softnic node {}", g.node),
        "ports/1/state" => "4: ACTIVE".into(),
        "ports/1/phys_state" => "5: LinkUp".into(),
        "ports/1/link_layer" if crate::wire::state::roce() => "Ethernet".into(),
        "ports/1/link_layer" => "InfiniBand".into(),
        "ports/1/lid" => format!("0x{:x}", node_lid(g.node)),
        "ports/1/rate" => "100 Gb/sec (4X EDR)".into(),
        _ => return None,
    })
}

#[no_mangle]
pub unsafe extern "C" fn sv_ibv_read_sysfs_file(
    dir: *const c_char,
    file: *const c_char,
    buf: *mut c_char,
    size: usize,
) -> c_int {
    let d = CStr::from_ptr(dir).to_string_lossy().into_owned();
    let f = CStr::from_ptr(file).to_string_lossy().into_owned();
    let content = if d.trim_end_matches('/') == IBDEV_PATH {
        match sysfs_attr(&f) {
            Some(s) => s.into_bytes(),
            None => {
                set_errno(libc::ENOENT);
                return -1;
            }
        }
    } else {
        match std::fs::read(format!("{d}/{f}")) {
            Ok(mut v) => {
                if v.last() == Some(&b'\n') {
                    v.pop();
                }
                v
            }
            Err(e) => {
                set_errno(e.raw_os_error().unwrap_or(libc::EIO));
                return -1;
            }
        }
    };
    if size == 0 {
        return 0;
    }
    let n = content.len().min(size - 1);
    std::ptr::copy_nonoverlapping(content.as_ptr() as *const c_char, buf, n);
    *buf.add(n) = 0;
    n as c_int
}

#[no_mangle]
pub extern "C" fn sv_ibv_fork_init() -> c_int {
    0
}
#[no_mangle]
pub extern "C" fn sv_ibv_is_fork_initialized() -> u32 {
    IBV_FORK_UNNEEDED
}
#[no_mangle]
pub extern "C" fn sv_ibv_dontfork_range(_base: *mut c_void, _size: usize) -> c_int {
    0
}
#[no_mangle]
pub extern "C" fn sv_ibv_dofork_range(_base: *mut c_void, _size: usize) -> c_int {
    0
}

#[no_mangle]
pub extern "C" fn sv_ibv_register_driver(_name: *const c_char, _init: *mut c_void) {}
#[no_mangle]
pub extern "C" fn sv_verbs_register_driver_34(_drv: *mut c_void) {}

/// The IBVERBS_1.0 ABI (pre-2006 structs) is not implemented: pointer/void entry points.
#[no_mangle]
pub extern "C" fn sv_compat_null() -> usize {
    set_errno(libc::EOPNOTSUPP);
    0
}
/// The IBVERBS_1.0 ABI is not implemented: int entry points.
#[no_mangle]
pub extern "C" fn sv_compat_int() -> c_int {
    set_errno(libc::EOPNOTSUPP);
    libc::EOPNOTSUPP
}

#[no_mangle]
pub extern "C" fn sv_ibv_query_ece(_qp: *mut ibv_qp, _ece: *mut ibv_ece) -> c_int {
    libc::EOPNOTSUPP
}
#[no_mangle]
pub extern "C" fn sv_ibv_set_ece(_qp: *mut ibv_qp, _ece: *mut ibv_ece) -> c_int {
    libc::EOPNOTSUPP
}
#[no_mangle]
pub extern "C" fn sv_ibv_query_qp_data_in_order(_qp: *mut ibv_qp, _op: u32, _flags: u32) -> c_int {
    // The responder places each message's bytes in order.
    IBV_QUERY_QP_DATA_IN_ORDER_WHOLE_MSG as c_int
}
#[no_mangle]
pub extern "C" fn sv_ibv_resolve_eth_l2_from_gid(
    _ctx: *mut ibv_context,
    _attr: *mut ibv_ah_attr,
    _mac: *mut u8,
    _vid: *mut u16,
) -> c_int {
    // softnic's port is InfiniBand: there is no Ethernet L2 address.
    set_errno(libc::EINVAL);
    -1
}

#[no_mangle]
pub unsafe extern "C" fn sv_ibv_copy_qp_attr_from_kern(dst: *mut ibv_qp_attr, src: *const u8) {
    // struct ib_uverbs_qp_attr: see <rdma/ib_user_verbs.h>; copied field by field.
    let rd32 = |o: usize| (src.add(o) as *const u32).read_unaligned();
    let rd8 = |o: usize| *src.add(o);
    let d = &mut *dst;
    d.qp_state = rd32(4);
    d.cur_qp_state = rd32(8);
    d.path_mtu = rd32(12);
    d.path_mig_state = rd32(16);
    d.qkey = rd32(20);
    d.rq_psn = rd32(24);
    d.sq_psn = rd32(28);
    d.dest_qp_num = rd32(32);
    d.qp_access_flags = rd32(36);
    copy_ah_from_kern(&mut d.ah_attr, src.add(40));
    copy_ah_from_kern(&mut d.alt_ah_attr, src.add(72));
    d.cap.max_send_wr = rd32(104);
    d.cap.max_recv_wr = rd32(108);
    d.cap.max_send_sge = rd32(112);
    d.cap.max_recv_sge = rd32(116);
    d.cap.max_inline_data = rd32(120);
    d.pkey_index = (src.add(124) as *const u16).read_unaligned();
    d.alt_pkey_index = (src.add(126) as *const u16).read_unaligned();
    d.en_sqd_async_notify = rd8(128);
    d.sq_draining = rd8(129);
    d.max_rd_atomic = rd8(130);
    d.max_dest_rd_atomic = rd8(131);
    d.min_rnr_timer = rd8(132);
    d.port_num = rd8(133);
    d.timeout = rd8(134);
    d.retry_cnt = rd8(135);
    d.rnr_retry = rd8(136);
    d.alt_port_num = rd8(137);
    d.alt_timeout = rd8(138);
}

/// struct ib_uverbs_ah_attr (32 bytes) → ibv_ah_attr.
unsafe fn copy_ah_from_kern(d: &mut ibv_ah_attr, s: *const u8) {
    std::ptr::copy_nonoverlapping(s, d.grh.dgid.raw.as_mut_ptr(), 16);
    d.grh.flow_label = (s.add(16) as *const u32).read_unaligned();
    d.grh.sgid_index = *s.add(20);
    d.grh.hop_limit = *s.add(21);
    d.grh.traffic_class = *s.add(22);
    d.dlid = (s.add(24) as *const u16).read_unaligned();
    d.sl = *s.add(26);
    d.src_path_bits = *s.add(27);
    d.static_rate = *s.add(28);
    d.is_global = *s.add(29);
    d.port_num = *s.add(30);
}

#[no_mangle]
pub unsafe extern "C" fn sv_ibv_copy_ah_attr_from_kern(dst: *mut ibv_ah_attr, src: *const u8) {
    copy_ah_from_kern(&mut *dst, src);
}

/// struct ib_user_path_rec (kernel, 64 bytes) ↔ struct ibv_sa_path_rec.
#[no_mangle]
pub unsafe extern "C" fn sv_ibv_copy_path_rec_from_kern(dst: *mut u8, src: *const u8) {
    path_rec_copy(dst, src, true);
}
#[no_mangle]
pub unsafe extern "C" fn sv_ibv_copy_path_rec_to_kern(dst: *mut u8, src: *const u8) {
    path_rec_copy(dst, src, false);
}

/// Field map between ib_user_path_rec (kern) and ibv_sa_path_rec (user):
/// (kern offset, user offset, size).
const PATH_FIELDS: &[(usize, usize, usize)] = &[
    (0, 0, 16),   // dgid
    (16, 16, 16), // sgid
    (32, 32, 2),  // dlid
    (34, 34, 2),  // slid
    (36, 36, 4),  // raw_traffic
    (40, 40, 4),  // flow_label
    (44, 48, 4),  // reversible
    (48, 58, 1),  // mtu (u32 in the kernel struct, low byte on little-endian)
    (52, 54, 2),  // pkey
    (54, 44, 1),  // hop_limit
    (55, 45, 1),  // traffic_class
    (56, 52, 1),  // numb_path
    (57, 56, 1),  // sl
    (58, 57, 1),  // mtu_selector
    (59, 59, 1),  // rate_selector
    (60, 60, 1),  // rate
    (61, 61, 1),  // packet_life_time_selector
    (62, 62, 1),  // packet_life_time
    (63, 63, 1),  // preference
];

unsafe fn path_rec_copy(dst: *mut u8, src: *const u8, from_kern: bool) {
    if !from_kern {
        std::ptr::write_bytes(dst, 0, 64);
    }
    for &(k, u, n) in PATH_FIELDS {
        let (s, d) = if from_kern { (k, u) } else { (u, k) };
        std::ptr::copy_nonoverlapping(src.add(s), dst.add(d), n);
    }
}

/// Whether libmlx5's allocation-type variable `var` (`MLX_QP_ALLOC_TYPE`,
/// `MLX_CQ_ALLOC_TYPE`, `MLX_SRQ_ALLOC_TYPE`) demands huge pages (`HUGE`) that the system
/// cannot give: libmlx5 then fails the object's creation (`ENOMEM`) instead of falling back
/// as it does for `PREFER_HUGE`. softnic keeps these queues in its own memory, so only the
/// availability of a 2 MiB huge page is checked (and the page given back).
pub fn huge_pages_refused(var: &str) -> bool {
    if std::env::var_os(var).is_none_or(|v| v != "HUGE") {
        return false;
    }
    const HUGE: usize = 2 << 20;
    // SAFETY: a fresh anonymous private mapping, unmapped right away if it was made.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            HUGE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_HUGETLB,
            -1,
            0,
        );
        if p == libc::MAP_FAILED {
            return true;
        }
        libc::munmap(p, HUGE);
    }
    false
}
