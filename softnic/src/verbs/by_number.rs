//! PDs and CQs by number (PD number, CQN), as PRM commands name them: the verbs layer
//! registers each object it creates; devx commands look them up.

use crate::ffi::*;
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, OnceLock};

#[derive(Default)]
struct Numbers {
    pds: HashMap<u32, usize>,
    cqs: HashMap<u32, usize>,
}

fn numbers() -> MutexGuard<'static, Numbers> {
    static N: OnceLock<Mutex<Numbers>> = OnceLock::new();
    N.get_or_init(|| Mutex::new(Numbers::default()))
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

pub fn register_pd(pdn: u32, pd: *mut ibv_pd) {
    numbers().pds.insert(pdn, pd as usize);
}
pub fn unregister_pd(pdn: u32) {
    numbers().pds.remove(&pdn);
}
/// `cq` is the CQ's `ibv_cq` (softnic's CQ object starts with it).
pub fn register_cq(cqn: u32, cq: *mut ibv_cq) {
    numbers().cqs.insert(cqn, cq as usize);
}
pub fn unregister_cq(cqn: u32) {
    numbers().cqs.remove(&cqn);
}
/// The live PD numbered `pdn`.
pub fn pd(pdn: u32) -> Option<*mut ibv_pd> {
    numbers().pds.get(&pdn).map(|&p| p as *mut ibv_pd)
}
/// The live CQ numbered `cqn`.
pub fn cq(cqn: u32) -> Option<*mut ibv_cq> {
    numbers().cqs.get(&cqn).map(|&p| p as *mut ibv_cq)
}
