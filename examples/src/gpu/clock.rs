//! `%globaltimer` ↔ host time: a probe kernel (`sigmatrace_clock_probe`, `gpu/smoke.cu`)
//! answers the host's requests through host-mapped memory; each exchange gives a pair (host
//! `CLOCK_REALTIME` before, GPU ns, host after). [`ClockFit`] maps GPU ns onto host ns by least
//! squares (offset + rate) and states its error: the distance of a pair's GPU time, mapped,
//! from its host bracket's middle, plus half that bracket — and, for pairs taken long after
//! the fit ([`ClockFit::error_on`]), how far the mapping drifted.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::driver::{Function, Gpu, GpuError, Module, Pinned, Stream};

/// One request/answer exchange.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct ClockPair {
    pub host_before: u64,
    pub gpu: u64,
    pub host_after: u64,
}

impl ClockPair {
    fn mid(&self) -> f64 {
        (self.host_before as f64 + self.host_after as f64) / 2.0
    }
    fn half(&self) -> f64 {
        (self.host_after - self.host_before) as f64 / 2.0
    }
}

/// host = host0 + offset + rate · (gpu − gpu0), fitted by least squares weighted by each
/// pair's bracket (1 / (half bracket + 100 ns)²: a preempted exchange counts little).
#[derive(Clone, Copy, Debug, Serialize)]
pub struct ClockFit {
    pub gpu0: u64,
    pub host0: u64,
    pub offset: f64,
    pub rate: f64,
    pub pairs: usize,
    /// Host − GPU at gpu0 (ns).
    pub host_minus_gpu_ns: f64,
    /// (rate − 1) in ppm.
    pub drift_ppm: f64,
    /// Largest |mapped − bracket middle| over the fitted pairs.
    pub residual_max_ns: f64,
    /// Median and largest half bracket (the exchange's own uncertainty).
    pub half_bracket_median_ns: f64,
    pub half_bracket_max_ns: f64,
    /// Median |mapped − bracket middle| + median half bracket: the typical error of a mapped
    /// time.
    pub error_median_ns: f64,
}

impl ClockFit {
    /// Fits the pairs (at least 2).
    pub fn fit(pairs: &[ClockPair]) -> Option<ClockFit> {
        if pairs.len() < 2 {
            return None;
        }
        let (gpu0, host0) = (pairs[0].gpu, pairs[0].host_before);
        let xs: Vec<f64> = pairs.iter().map(|p| p.gpu as f64 - gpu0 as f64).collect();
        let ys: Vec<f64> = pairs.iter().map(|p| p.mid() - host0 as f64).collect();
        let ws: Vec<f64> = pairs.iter().map(|p| (p.half() + 100.0).powi(-2)).collect();
        let sw: f64 = ws.iter().sum();
        let mx = xs.iter().zip(&ws).map(|(x, w)| x * w).sum::<f64>() / sw;
        let my = ys.iter().zip(&ws).map(|(y, w)| y * w).sum::<f64>() / sw;
        let sxx: f64 = xs
            .iter()
            .zip(&ws)
            .map(|(x, w)| w * (x - mx) * (x - mx))
            .sum();
        let sxy: f64 = (0..xs.len())
            .map(|i| ws[i] * (xs[i] - mx) * (ys[i] - my))
            .sum();
        let rate = if sxx > 0.0 { sxy / sxx } else { 1.0 };
        let offset = my - rate * mx;
        let mut f = ClockFit {
            gpu0,
            host0,
            offset,
            rate,
            pairs: pairs.len(),
            host_minus_gpu_ns: (host0 as i128 - gpu0 as i128) as f64 + offset,
            drift_ppm: (rate - 1.0) * 1e6,
            residual_max_ns: 0.0,
            half_bracket_median_ns: 0.0,
            half_bracket_max_ns: 0.0,
            error_median_ns: 0.0,
        };
        let mut halves: Vec<f64> = pairs.iter().map(|p| p.half()).collect();
        halves.sort_by(|a, b| a.total_cmp(b));
        let mut res: Vec<f64> = pairs.iter().map(|p| f.residual(p)).collect();
        res.sort_by(|a, b| a.total_cmp(b));
        f.half_bracket_median_ns = halves[halves.len() / 2];
        f.half_bracket_max_ns = *halves.last().expect("≥ 2 pairs");
        f.residual_max_ns = *res.last().expect("≥ 2 pairs");
        f.error_median_ns = res[res.len() / 2] + f.half_bracket_median_ns;
        Some(f)
    }

    /// Host ns of GPU ns `g`.
    pub fn to_host(&self, g: u64) -> u64 {
        let d = self.offset + self.rate * (g as f64 - self.gpu0 as f64);
        (self.host0 as i128 + d.round() as i128).max(0) as u64
    }

    fn residual(&self, p: &ClockPair) -> f64 {
        (self.to_host(p.gpu) as i128 - (p.host_before as i128 + p.host_after as i128) / 2).abs()
            as f64
    }

    /// Median |mapped − bracket middle| over `pairs` (e.g. pairs taken long after the fit's).
    pub fn error_on(&self, pairs: &[ClockPair]) -> f64 {
        let mut r: Vec<f64> = pairs.iter().map(|p| self.residual(p)).collect();
        r.sort_by(|a, b| a.total_cmp(b));
        r.get(r.len() / 2).copied().unwrap_or(0.0)
    }
}

/// CLOCK_REALTIME in ns.
pub fn realtime_ns() -> u64 {
    crate::cluster::realtime_ns()
}

/// A running probe kernel and its host-mapped cell.
pub struct Probe<'g> {
    g: &'g Gpu,
    stream: Stream,
    cell: Pinned,
    next: u64,
}

/// The probe kernel's argument (`ClockArgs` in gpu/smoke.cu).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ClockArgs {
    pub cell: u64,
    pub limit_ns: u64,
}

impl<'g> Probe<'g> {
    /// Launches the probe (it exits on `stop` or after `limit` without a request).
    pub fn start(g: &'g Gpu, smoke: &Module, limit: Duration) -> Result<Probe<'g>, GpuError> {
        let f: Function = g.function(smoke, "sigmatrace_clock_probe")?;
        let cell = Pinned::new(g, 4)?;
        let stream = g.stream()?;
        let args = ClockArgs {
            cell: cell.dev,
            limit_ns: limit.as_nanos() as u64,
        };
        g.launch(f, 1, 1, &stream, &args)?;
        Ok(Probe {
            g,
            stream,
            cell,
            next: 0,
        })
    }

    /// One exchange (None: no answer within `wait`).
    pub fn pair(&mut self, wait: Duration) -> Option<ClockPair> {
        self.next += 1;
        let t0 = Instant::now();
        let before = realtime_ns();
        self.cell.word(0).store(self.next, Ordering::SeqCst);
        while self.cell.word(1).load(Ordering::SeqCst) != self.next {
            if t0.elapsed() > wait {
                return None;
            }
            std::hint::spin_loop();
        }
        let after = realtime_ns();
        Some(ClockPair {
            host_before: before,
            gpu: self.cell.word(2).load(Ordering::SeqCst),
            host_after: after,
        })
    }

    /// `n` exchanges `gap` apart.
    pub fn pairs(&mut self, n: usize, gap: Duration) -> Result<Vec<ClockPair>, GpuError> {
        let mut v = Vec::with_capacity(n);
        for _ in 0..n {
            v.push(
                self.pair(Duration::from_secs(5))
                    .ok_or_else(|| GpuError::Kernel("clock probe did not answer in 5 s".into()))?,
            );
            if !gap.is_zero() {
                std::thread::sleep(gap);
            }
        }
        Ok(v)
    }

    /// Stops the kernel and waits for it.
    pub fn stop(self) -> Result<(), GpuError> {
        self.cell.word(3).store(1, Ordering::SeqCst);
        self.g.sync(&self.stream)
    }
}
