//! The generated logs hold what a traced program's do: the hot records a tracer writes
//! compact (sends and completions without immediate data) are compact here too, so that the
//! converter benchmark reads the record sizes of real runs.

use sigmatrace_schemas::reader::LogFile;
use sigmatrace_schemas::records::{PostSend, RecordKind, WorkCompletion};
use sigmatrace_synth::{Pattern, Scenario};

/// `ibv_wr_opcode` IBV_WR_RDMA_WRITE_WITH_IMM and `ibv_wc_flags` IBV_WC_WITH_IMM.
const WRITE_WITH_IMM: u8 = 1;
const WC_WITH_IMM: u32 = 2;

#[test]
fn sends_and_completions_without_immediate_data_are_compact() {
    // Removed when the test ends, passed or failed.
    let tmp = tempfile::Builder::new()
        .prefix("synth-record-mix-")
        .tempdir()
        .expect("temp dir");
    let dir = tmp.path();
    // Writes (a WRITE_WITH_IMM every 8th: a receive completion with immediate data on the
    // peer), sends and receives, ping-pongs.
    let mut sc = Scenario::ring(3, 1, Pattern::Write { signal_every: 4 }, 400);
    sc.links[1].pattern = Pattern::SendRecv;
    sc.links[2].pattern = Pattern::PingPong;
    let truth = sigmatrace_synth::write(dir, &sc).expect("write");
    // (compact, full) per kind: sends without immediate data, with it; completions likewise.
    let mut sends = [[0u64; 2]; 2];
    let mut completions = [[0u64; 2]; 2];
    for path in &truth.files {
        let log = LogFile::open(path).expect("log");
        for chunk in log.chunks() {
            for r in log.records(chunk) {
                let r = r.expect("record");
                let full = !r.is_compact() as usize;
                if r.kind == RecordKind::PostSend as u16 {
                    let p: PostSend = bytemuck::pod_read_unaligned(r.record_bytes());
                    assert_eq!(
                        p.imm != 0,
                        p.opcode == WRITE_WITH_IMM,
                        "imm of opcode {}",
                        p.opcode
                    );
                    sends[(p.opcode == WRITE_WITH_IMM) as usize][full] += 1;
                } else if r.kind == RecordKind::WorkCompletion as u16 {
                    let c: WorkCompletion = bytemuck::pod_read_unaligned(r.record_bytes());
                    let imm = c.hdr.aux & WC_WITH_IMM != 0;
                    assert_eq!(c.imm != 0, imm, "imm of completion opcode {}", c.opcode);
                    completions[imm as usize][full] += 1;
                }
            }
        }
    }
    // Every send and completion without immediate data compact, sends with it full (the
    // compact send has no room for it); some of each.
    assert_eq!(
        sends[0][1], 0,
        "full sends without immediate data: {sends:?}"
    );
    assert_eq!(
        completions[0][1], 0,
        "full completions without it: {completions:?}"
    );
    assert_eq!(
        sends[1][0], 0,
        "compact sends with immediate data: {sends:?}"
    );
    assert!(sends[0][0] > 500 && sends[1][1] >= 40, "{sends:?}");
    assert!(
        completions[0][0] > 500 && completions[1].iter().sum::<u64>() >= 40,
        "{completions:?}"
    );
    assert_eq!(
        sends.iter().flatten().sum::<u64>(),
        truth.send_wrs + truth.failed_wrs
    );
}
