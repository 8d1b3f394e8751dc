//! Queue discovery: the API the interposer's hooks call with what they intercepted. Each
//! `on_*` method updates the registries and returns the queue descriptions that became
//! known (to log as `QueueDiscovered` and hand to a poller).
//!
//! Hooks → methods: `mlx5dv_init_obj` (QP, CQ) → [`Discovery::on_init_obj_qp`] /
//! [`Discovery::on_init_obj_cq`]; `mlx5dv_devx_umem_reg[_ex]` / `_dereg` →
//! [`Discovery::on_devx_umem_reg`] / [`Discovery::on_devx_umem_dereg`];
//! `mlx5dv_devx_obj_create` / `_modify` / `_destroy` → [`Discovery::on_devx_obj_create`] /
//! [`Discovery::on_devx_obj_modify`] / [`Discovery::on_devx_obj_destroy`];
//! `mlx5dv_devx_alloc_uar` → [`Discovery::on_alloc_uar`]; CUDA memory calls →
//! [`Discovery::on_cuda_mem`]. `Discovery` is plain data: the interposer wraps it in a
//! mutex (hooks are control-path calls).

use std::collections::HashMap;

use sigmatrace_schemas::{discovery, gpu_mem_op, mem_kind, GpuMemory, RecordHeader};

use crate::queue::{CqDesc, QueueDesc, SendQueueDesc, UarDesc};
use crate::umem::{MemRange, MemoryMap, Umem, UmemError, UmemRegistry};
use sigmatrace_mlx5::cqe::TsFormat;
use sigmatrace_mlx5::prm::{self, Command, ModifyQpIn, PrmError};
use sigmatrace_mlx5::wqe::Transport;
use verbs_sys::{ibv_qp, mlx5dv_cq, mlx5dv_qp};

/// `CU_MEMHOSTREGISTER_IOMEMORY`: the registered range is a device's I/O (doorbell) page.
pub const CU_MEMHOSTREGISTER_IOMEMORY: u32 = 0x04;

/// What `mlx5dv_init_obj` returned for a QP (`struct mlx5dv_qp`) plus the verbs QP fields.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InitObjQp {
    pub qpn: u32,
    /// `ibv_qp_type` (RC 2, UC 3, UD 4, RAW_PACKET 8, XRC_SEND 9, DRIVER 0xff for DC).
    pub qp_type: u32,
    pub dbrec: u64,
    pub sq_buf: u64,
    pub sq_wqe_cnt: u32,
    pub sq_stride: u32,
    pub bf_reg: u64,
    pub bf_size: u32,
    /// CQN of the send CQ if the interposer knows it, else 0.
    pub send_cqn: u32,
}

/// What `mlx5dv_init_obj` returned for a CQ (`struct mlx5dv_cq`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InitObjCq {
    pub cqn: u32,
    pub buf: u64,
    pub dbrec: u64,
    pub cqe_cnt: u32,
    pub cqe_size: u32,
    pub cq_uar: u64,
}

impl InitObjQp {
    /// From the program's QP and what `mlx5dv_init_obj` filled in for it (`send_cqn`: the
    /// CQN of its send CQ when known, else 0).
    pub fn of(qp: &ibv_qp, out: &mlx5dv_qp, send_cqn: u32) -> InitObjQp {
        InitObjQp {
            qpn: qp.qp_num,
            qp_type: qp.qp_type,
            dbrec: out.dbrec as u64,
            sq_buf: out.sq.buf as u64,
            sq_wqe_cnt: out.sq.wqe_cnt,
            sq_stride: out.sq.stride,
            bf_reg: out.bf.reg as u64,
            bf_size: out.bf.size,
            send_cqn,
        }
    }
}

impl InitObjCq {
    /// From what `mlx5dv_init_obj` filled in for a CQ.
    pub fn of(out: &mlx5dv_cq) -> InitObjCq {
        InitObjCq {
            cqn: out.cqn,
            buf: out.buf as u64,
            dbrec: out.dbrec as u64,
            cqe_cnt: out.cqe_cnt,
            cqe_size: out.cqe_size,
            cq_uar: out.cq_uar as u64,
        }
    }
}

/// What `mlx5dv_devx_alloc_uar` returned.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UarInfo {
    pub handle: u64,
    pub page_id: u32,
    pub reg_addr: u64,
    pub base_addr: u64,
    pub mmap_off: u64,
}

/// A CUDA memory call relevant to discovery (arguments and, for allocations, results).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CudaMemEvent {
    /// `cuMemAlloc_v2`.
    DeviceAlloc { ptr: u64, size: u64 },
    /// `cuMemFree_v2`.
    DeviceFree { ptr: u64 },
    /// `cuMemHostAlloc`.
    HostAlloc { ptr: u64, size: u64, flags: u32 },
    /// `cuMemHostRegister_v2`.
    HostRegister { ptr: u64, size: u64, flags: u32 },
    /// `cuMemHostUnregister`.
    HostUnregister { ptr: u64 },
    /// `cuMemHostGetDevicePointer[_v2]`: the device alias of a host pointer.
    DevicePointer { host: u64, device: u64 },
}

impl CudaMemEvent {
    /// The schemas `GpuMemory` record for this call (`result` = the CUresult).
    pub fn to_record(&self, ts: u64, result: i32) -> GpuMemory {
        let (op, addr, size, alias, flags) = match *self {
            CudaMemEvent::DeviceAlloc { ptr, size } => (gpu_mem_op::DEVICE_ALLOC, ptr, size, 0, 0),
            CudaMemEvent::DeviceFree { ptr } => (gpu_mem_op::DEVICE_FREE, ptr, 0, 0, 0),
            CudaMemEvent::HostAlloc { ptr, size, flags } => {
                (gpu_mem_op::HOST_ALLOC, ptr, size, 0, flags)
            }
            CudaMemEvent::HostRegister { ptr, size, flags } => {
                (gpu_mem_op::HOST_REGISTER, ptr, size, 0, flags)
            }
            CudaMemEvent::HostUnregister { ptr } => (gpu_mem_op::HOST_UNREGISTER, ptr, 0, 0, 0),
            CudaMemEvent::DevicePointer { host, device } => {
                (gpu_mem_op::DEVICE_POINTER, host, 0, device, 0)
            }
        };
        GpuMemory {
            hdr: RecordHeader::of::<GpuMemory>(op),
            ts,
            addr,
            size,
            alias,
            flags,
            result,
        }
    }
}

/// The connection a QP transition established (INIT2RTR carries the remote side).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpTransition {
    pub qpn: u32,
    /// New state as `ibv_qp_state`.
    pub state: u8,
    pub cmd: ModifyQpIn,
}

/// Why a devx command could not be turned into a queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DiscoverError {
    #[error("PRM decode: {0}")]
    Prm(#[from] PrmError),
    #[error("umem: {0}")]
    Umem(#[from] UmemError),
    #[error("command output missing or too short")]
    NoOutput,
}

#[derive(Clone, Copy, Debug)]
enum Obj {
    Qp(u32),
    Cq(u32),
}

/// Discovery state: umems, memory map, UARs and the queues found so far.
#[derive(Debug, Default)]
pub struct Discovery {
    umems: UmemRegistry,
    memory: MemoryMap,
    uars: HashMap<u32, UarDesc>,
    objs: HashMap<u64, Obj>,
    sqs: HashMap<u32, SendQueueDesc>,
    cqs: HashMap<u32, CqDesc>,
    transitions: HashMap<u32, QpTransition>,
}

impl Discovery {
    pub fn new() -> Discovery {
        Discovery::default()
    }

    /// The umem registry.
    pub fn umems(&self) -> &UmemRegistry {
        &self.umems
    }

    /// The CUDA memory map.
    pub fn memory(&self) -> &MemoryMap {
        &self.memory
    }

    /// Send ring of a QP.
    pub fn send_queue(&self, qpn: u32) -> Option<&SendQueueDesc> {
        self.sqs.get(&qpn)
    }

    /// A CQ.
    pub fn cq(&self, cqn: u32) -> Option<&CqDesc> {
        self.cqs.get(&cqn)
    }

    /// The last transition seen for a QP.
    pub fn last_transition(&self, qpn: u32) -> Option<&QpTransition> {
        self.transitions.get(&qpn)
    }

    /// A UAR by page id.
    pub fn uar(&self, page_id: u32) -> Option<&UarDesc> {
        self.uars.get(&page_id)
    }

    /// `mlx5dv_init_obj` for a QP.
    pub fn on_init_obj_qp(&mut self, q: &InitObjQp) -> Option<QueueDesc> {
        if q.sq_wqe_cnt == 0 || q.sq_buf == 0 {
            return None;
        }
        let d = SendQueueDesc {
            qpn: q.qpn,
            transport: Transport::from_ibv_qp_type(q.qp_type).unwrap_or(Transport::Rc),
            base: q.sq_buf,
            wqebbs: q.sq_wqe_cnt * q.sq_stride.max(64) / 64,
            dbrec: q.dbrec,
            doorbell: q.bf_reg,
            uar_page: 0,
            cqn: q.send_cqn,
            memory: self.memory.kind_of(q.sq_buf),
            dbr_memory: self.memory.kind_of(q.dbrec),
            discovery: discovery::INIT_OBJ,
        };
        self.sqs.insert(q.qpn, d);
        Some(QueueDesc::Send(d))
    }

    /// `mlx5dv_init_obj` for a CQ. libmlx5 and UCX keep the DBR consumer index current.
    pub fn on_init_obj_cq(&mut self, c: &InitObjCq) -> Option<QueueDesc> {
        if c.cqe_cnt == 0 || c.buf == 0 {
            return None;
        }
        let d = CqDesc {
            cqn: c.cqn,
            base: c.buf,
            cqe_cnt: c.cqe_cnt,
            cqe_size: if c.cqe_size == 128 { 128 } else { 64 },
            dbrec: c.dbrec,
            doorbell: c.cq_uar,
            uar_page: 0,
            memory: self.memory.kind_of(c.buf),
            dbr_memory: self.memory.kind_of(c.dbrec),
            ts_format: TsFormat::FreeRunning,
            ci_valid: true,
            discovery: discovery::INIT_OBJ,
        };
        self.cqs.insert(c.cqn, d);
        Some(QueueDesc::Cq(d))
    }

    /// `mlx5dv_devx_umem_reg[_ex]` returned `handle` with `umem_id` for `[addr, addr+size)`.
    pub fn on_devx_umem_reg(
        &mut self,
        handle: u64,
        umem_id: u32,
        addr: u64,
        size: u64,
        dmabuf_fd: Option<i32>,
    ) {
        self.umems.register(Umem {
            id: umem_id,
            addr,
            size,
            dmabuf_fd,
            handle,
        });
    }

    /// `mlx5dv_devx_umem_dereg(handle)`.
    pub fn on_devx_umem_dereg(&mut self, handle: u64) -> Option<Umem> {
        self.umems.deregister_handle(handle)
    }

    /// `mlx5dv_devx_alloc_uar`.
    pub fn on_alloc_uar(&mut self, u: &UarInfo) -> QueueDesc {
        let alias = self
            .memory
            .find(u.reg_addr)
            .and_then(|r| r.device_alias.map(|a| a + (u.reg_addr - r.start)));
        let d = UarDesc {
            page_id: u.page_id,
            reg_addr: u.reg_addr,
            base_addr: u.base_addr,
            mmap_off: u.mmap_off,
            device_alias: alias.unwrap_or(0),
        };
        self.uars.insert(u.page_id, d);
        QueueDesc::Uar(d)
    }

    /// `mlx5dv_devx_obj_create(handle, in, out)`: CREATE_QP / CREATE_CQ become queues.
    pub fn on_devx_obj_create(
        &mut self,
        handle: u64,
        input: &[u8],
        output: &[u8],
    ) -> Result<Option<QueueDesc>, DiscoverError> {
        let cmd = prm::decode_command(input)?;
        let out = prm::decode_output(output).ok_or(DiscoverError::NoOutput)?;
        if out.status != 0 {
            return Ok(None);
        }
        match cmd {
            Command::CreateCq(c) => {
                let cnt = c.cqe_cnt();
                let base = self.umems.resolve(
                    c.cq_umem_id,
                    c.cq_umem_offset,
                    cnt as u64 * c.cqe_size as u64,
                )?;
                let (dbr_umem, dbr_off) = c.dbr_location();
                let dbrec = self.umems.resolve(dbr_umem, dbr_off, 8)?;
                let d = CqDesc {
                    cqn: out.number,
                    base,
                    cqe_cnt: cnt,
                    cqe_size: c.cqe_size,
                    dbrec,
                    doorbell: self.uars.get(&c.uar_page).map_or(0, |u| u.reg_addr),
                    uar_page: c.uar_page,
                    memory: self.memory.kind_of(base),
                    dbr_memory: self.memory.kind_of(dbrec),
                    ts_format: TsFormat::from_prm(c.ts_format),
                    ci_valid: !c.oi,
                    discovery: discovery::DEVX,
                };
                self.objs.insert(handle, Obj::Cq(d.cqn));
                self.cqs.insert(d.cqn, d);
                Ok(Some(QueueDesc::Cq(d)))
            }
            Command::CreateQp(q) => {
                let wqebbs = q.sq_wqebbs();
                if wqebbs == 0 {
                    self.objs.insert(handle, Obj::Qp(out.number));
                    return Ok(None);
                }
                let sq_off = q.wq_umem_offset + q.rq_bytes();
                let base = self
                    .umems
                    .resolve(q.wq_umem_id, sq_off, wqebbs as u64 * 64)?;
                let (dbr_umem, dbr_off) = q.dbr_location();
                let dbrec = self.umems.resolve(dbr_umem, dbr_off, 8)?;
                let d = SendQueueDesc {
                    qpn: out.number,
                    transport: q.transport().unwrap_or(Transport::Rc),
                    base,
                    wqebbs,
                    dbrec,
                    doorbell: self.uars.get(&q.uar_page).map_or(0, |u| u.reg_addr),
                    uar_page: q.uar_page,
                    cqn: q.cqn_snd,
                    memory: self.memory.kind_of(base),
                    dbr_memory: self.memory.kind_of(dbrec),
                    discovery: discovery::DEVX,
                };
                self.objs.insert(handle, Obj::Qp(d.qpn));
                self.sqs.insert(d.qpn, d);
                Ok(Some(QueueDesc::Send(d)))
            }
            _ => Ok(None),
        }
    }

    /// `mlx5dv_devx_obj_modify(handle, in, out)`: QP state transitions. Returns the decoded
    /// transition (INIT2RTR carries the remote QPN and address path).
    pub fn on_devx_obj_modify(
        &mut self,
        _handle: u64,
        input: &[u8],
        output: &[u8],
    ) -> Result<Option<QpTransition>, DiscoverError> {
        let cmd = prm::decode_command(input)?;
        if let Some(o) = prm::decode_output(output) {
            if o.status != 0 {
                return Ok(None);
            }
        }
        let Command::ModifyQp(m) = cmd else {
            return Ok(None);
        };
        let state = prm::transition_target_state(m.opcode).unwrap_or(0);
        let mut t = QpTransition {
            qpn: m.qpn,
            state,
            cmd: m,
        };
        if let Some(prev) = self.transitions.get(&m.qpn) {
            // Later transitions (RTR2RTS) do not repeat the remote side; keep it.
            if m.remote_qpn == 0 {
                t.cmd.remote_qpn = prev.cmd.remote_qpn;
                t.cmd.path = prev.cmd.path;
                t.cmd.mtu = prev.cmd.mtu;
            }
        }
        self.transitions.insert(m.qpn, t);
        Ok(Some(t))
    }

    /// `mlx5dv_devx_obj_destroy(handle)`: returns the queue that went away (unregister it from
    /// pollers before the real destroy frees its memory).
    pub fn on_devx_obj_destroy(&mut self, handle: u64) -> Option<QueueDesc> {
        match self.objs.remove(&handle)? {
            Obj::Qp(qpn) => {
                self.transitions.remove(&qpn);
                self.sqs.remove(&qpn).map(QueueDesc::Send)
            }
            Obj::Cq(cqn) => self.cqs.remove(&cqn).map(QueueDesc::Cq),
        }
    }

    /// A CUDA memory call. Returns UARs whose GPU alias became known.
    pub fn on_cuda_mem(&mut self, e: &CudaMemEvent) -> Vec<QueueDesc> {
        match *e {
            CudaMemEvent::DeviceAlloc { ptr, size } => self.memory.insert(MemRange {
                start: ptr,
                size,
                kind: mem_kind::GPU,
                device_alias: None,
            }),
            CudaMemEvent::HostAlloc { ptr, size, .. } => self.memory.insert(MemRange {
                start: ptr,
                size,
                kind: mem_kind::HOST_PINNED,
                device_alias: None,
            }),
            CudaMemEvent::HostRegister { ptr, size, flags } => {
                let kind = if flags & CU_MEMHOSTREGISTER_IOMEMORY != 0 {
                    mem_kind::IO
                } else {
                    mem_kind::HOST_PINNED
                };
                self.memory.insert(MemRange {
                    start: ptr,
                    size,
                    kind,
                    device_alias: None,
                })
            }
            CudaMemEvent::DeviceFree { ptr } | CudaMemEvent::HostUnregister { ptr } => {
                self.memory.remove(ptr);
            }
            CudaMemEvent::DevicePointer { host, device } => {
                if let Some(r) = self.memory.find_mut(host) {
                    r.device_alias = Some(device - (host - r.start));
                }
                let mut changed = Vec::new();
                for u in self.uars.values_mut() {
                    if let Some(r) = self.memory.find(u.reg_addr) {
                        if let Some(a) = r.device_alias {
                            let alias = a + (u.reg_addr - r.start);
                            if u.device_alias != alias {
                                u.device_alias = alias;
                                changed.push(QueueDesc::Uar(*u));
                            }
                        }
                    }
                }
                return changed;
            }
        }
        Vec::new()
    }
}
