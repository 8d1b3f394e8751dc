/*
 * ibgda: GPU-initiated RDMA posting as NVSHMEM IBGDA does it, with a CPU thread standing in for
 * the GPU threads: WQEs are built in the send ring, the doorbell record is updated, the 8-byte
 * doorbell is rung, and CQEs are polled straight from the completion ring (owner bit,
 * consumer index in the CQ doorbell record). Nothing goes through ibv_post_send/ibv_poll_cq on
 * the posting QP. One process, two RC QPs connected to each other on softnic: A (direct
 * rings) posts to B (plain verbs QP, receives posted with ibv_post_recv).
 *
 * usage: ibgda MODE N [DEPTH [DB_BATCH]]
 *   initobj   A from mlx5dv_create_qp/cq, rings from mlx5dv_init_obj
 *   devx      A from devx CREATE_CQ/CREATE_QP on umem-registered host memory, UAR from
 *             mlx5dv_devx_alloc_uar, connected with devx RST2INIT/INIT2RTR/RTR2RTS
 *   devx-gpu  as devx, with the rings in "device memory" from cuMemAlloc of the libcuda.so.1
 *             on the loader path (the test double in CI), the UAR registered with
 *             cuMemHostRegister(IOMEMORY) and mapped with cuMemHostGetDevicePointer; waits
 *             until a kernel launch by the tracer's device poller shows up in the double
 *   overrun   initobj, single-WQEBB writes; with the tracer's poller paused posts 4 x DEPTH
 *             WQEs (every one signaled), then resumes it
 *   rate      initobj, N 8-byte RDMA writes flat out, one doorbell per DB_BATCH WQEs, one in
 *             32 signaled; prints the rate (benchmark)
 *   idle      initobj; sleeps N ms with the rings registered and idle (poller idle cost)
 *   fork      initobj; N/2 WQEs, fork, N/2 more in the parent; the child calls mlx5dv_init_obj
 *             on its copy of QP A and writes 50 WQEs into its copy of the ring (no NIC serves
 *             a fork child: nothing executes them), printed as "W …" lines on stderr, then
 *             _exit()s
 *
 * Bookkeeping on stdout, one line per WQE posted and per CQE consumed (not in rate mode):
 *   W qpn wqe_index opcode ds fm_ce_se bytes remote_addr rkey imm compare_add
 *   C cqn index wqe_counter opcode byte_cnt qpn
 * and a final "done wqes=… wqebbs=… cqes=…" and "libcuda loaded|absent". When preloaded, libsigmatrace's
 * sigmatrace_poller_sync() is called before ring slots are reused, so a traced run observes
 * every WQE (untraced, the symbol is absent and nothing waits).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <endian.h>
#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MEM_BYTES (1 << 20)

static void die(const char *what, long v)
{
	fprintf(stderr, "ibgda: %s (%ld)\n", what, v);
	exit(1);
}

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

/* The posting side's view of QP A: what IBGDA keeps in its device state. */
struct ring {
	uint32_t qpn, wqebbs, cqn, cqe_cnt;
	uint8_t *sq, *cq;
	volatile __be32 *dbrec, *cq_dbrec;
	uint8_t *bf;
	uint32_t bf_size, bf_off;
	uint16_t pi;
	uint32_t ci;
};

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_mr *mr;
static uint8_t *mem;
static struct ibv_qp *qp_b;
static struct ibv_cq *cq_b;
static uint16_t lid;
static int quiet;
static int (*poller_sync)(void);
static int (*poller_pause)(int);

#include "ibgda_devx.h"

/* 16-byte unit `k` of the WQE starting at WQEBB index `pi` (wraps at the ring end). */
static uint8_t *unit(struct ring *r, uint16_t pi, unsigned k)
{
	return r->sq + ((uint32_t)(pi + k / 4) & (r->wqebbs - 1)) * 64 + (k % 4) * 16;
}

static void put_be32(uint8_t *p, uint32_t v)
{
	v = htobe32(v);
	memcpy(p, &v, 4);
}

static void put_be64(uint8_t *p, uint64_t v)
{
	v = htobe64(v);
	memcpy(p, &v, 8);
}

/* Opcodes cycled through. (No NOP: on softnic a WQE after a NOP is never executed.) */
enum { K_WRITE, K_WRITE_IMM, K_SEND, K_READ, K_FA, K_CS, K_INLINE, K_SEND_IMM, K_KINDS };

/* Builds WQE `i` of kind `kind` at the producer index; returns its WQEBB count. */
static unsigned build(struct ring *r, int kind, long i, int signaled)
{
	uint16_t idx = r->pi;
	uint8_t opcode = 0, fm = signaled ? MLX5_WQE_CTRL_CQ_UPDATE : 0;
	uint32_t bytes = 0, rkey = 0, imm = 0;
	uint64_t raddr = 0, cmp = 0;
	unsigned u = 1;
	uint8_t *local = mem + 4096 + (i % 64) * 128;
	switch (kind) {
	case K_WRITE:
	case K_WRITE_IMM:
		opcode = kind == K_WRITE ? MLX5_OPCODE_RDMA_WRITE : MLX5_OPCODE_RDMA_WRITE_IMM;
		bytes = 8 + (i % 7) * 8;
		raddr = (uintptr_t)mem + 256 * 1024 + (i % 64) * 64;
		imm = kind == K_WRITE_IMM ? 0x1000000u + (uint32_t)i : 0;
		break;
	case K_SEND:
	case K_SEND_IMM:
		opcode = kind == K_SEND ? MLX5_OPCODE_SEND : MLX5_OPCODE_SEND_IMM;
		bytes = 32;
		imm = kind == K_SEND_IMM ? 0x2000000u + (uint32_t)i : 0;
		fm |= MLX5_WQE_CTRL_SOLICITED;
		break;
	case K_READ:
		opcode = MLX5_OPCODE_RDMA_READ;
		bytes = 16;
		raddr = (uintptr_t)mem + 384 * 1024 + (i % 64) * 64;
		local = mem + 128 * 1024 + (i % 64) * 64;
		break;
	case K_FA:
	case K_CS:
		opcode = kind == K_FA ? MLX5_OPCODE_ATOMIC_FA : MLX5_OPCODE_ATOMIC_CS;
		bytes = 8;
		raddr = (uintptr_t)mem + 512 * 1024 + (i % 16) * 8;
		local = mem + 600 * 1024 + (i % 16) * 8;
		cmp = kind == K_FA ? (uint64_t)i + 1 : 0x5a5a0000u + (uint64_t)i;
		if (kind == K_CS)
			fm |= MLX5_WQE_CTRL_FENCE;
		break;
	case K_INLINE:
		opcode = MLX5_OPCODE_RDMA_WRITE;
		bytes = 100;
		raddr = (uintptr_t)mem + 700 * 1024 + (i % 16) * 128;
		break;
	}
	if (raddr) {
		rkey = mr->rkey;
		uint8_t *s = unit(r, idx, u++);
		put_be64(s, raddr);
		put_be32(s + 8, rkey);
		put_be32(s + 12, 0);
	}
	if (kind == K_FA || kind == K_CS) {
		uint8_t *s = unit(r, idx, u++);
		put_be64(s, kind == K_FA ? cmp : 0xabc0000u + (uint64_t)i); /* swap_add */
		put_be64(s + 8, kind == K_FA ? 0 : cmp);                      /* compare */
	}
	if (kind == K_INLINE) {
		uint8_t *s = unit(r, idx, u);
		put_be32(s, bytes | MLX5_INLINE_SEG);
		for (uint32_t k = 0; k < bytes; k++)
			unit(r, idx, u + (4 + k) / 16)[(4 + k) % 16] = (uint8_t)(i + k);
		u += (4 + bytes + 15) / 16;
	} else if (bytes) {
		mlx5dv_set_data_seg((struct mlx5_wqe_data_seg *)unit(r, idx, u++), bytes, mr->lkey, (uintptr_t)local);
	}
	/* Ctrl last (the NIC may fetch once the doorbell record moves; it does not move yet). */
	uint8_t *c = unit(r, idx, 0);
	put_be32(c, (uint32_t)idx << 8 | opcode);
	put_be32(c + 4, r->qpn << 8 | u);
	c[8] = 0;
	c[9] = c[10] = 0;
	c[11] = fm;
	memcpy(c + 12, &(uint32_t){ htobe32(imm) }, 4);
	unsigned wqebbs = (u + 3) / 4;
	if (!quiet)
		printf("W %u %u %u %u %u %u %llu %u %u %llu\n", r->qpn, idx, opcode, u, fm, bytes,
		       (unsigned long long)raddr, rkey, imm, (unsigned long long)cmp);
	r->pi += wqebbs;
	return wqebbs;
}

/* IBGDA post: barrier, doorbell record = PI, barrier, 8-byte doorbell with the last ctrl. */
static void ring_doorbell(struct ring *r, uint16_t last)
{
	__atomic_thread_fence(__ATOMIC_RELEASE);
	r->dbrec[MLX5_SND_DBR] = htobe32(r->pi);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	uint64_t word;
	memcpy(&word, unit(r, last, 0), 8);
	__atomic_store_n((uint64_t *)(r->bf + r->bf_off), word, __ATOMIC_RELEASE);
	if (r->bf_size)
		r->bf_off ^= r->bf_size;
}

/* Next CQE of A's CQ if valid (owner bit of the free-running index), else NULL. */
static struct mlx5_cqe64 *cqe_peek(struct ring *r)
{
	struct mlx5_cqe64 *c = (void *)(r->cq + (r->ci & (r->cqe_cnt - 1)) * 64);
	uint8_t op_own = __atomic_load_n(&c->op_own, __ATOMIC_ACQUIRE);
	if ((op_own >> 4) == MLX5_CQE_INVALID || (op_own & 1) != !!(r->ci & r->cqe_cnt))
		return NULL;
	return c;
}

static void cqe_consume(struct ring *r, struct mlx5_cqe64 *c)
{
	uint8_t op = c->op_own >> 4;
	if (op == MLX5_CQE_REQ_ERR || op == MLX5_CQE_RESP_ERR)
		die("error CQE, syndrome", ((struct mlx5_err_cqe *)c)->syndrome);
	if (!quiet)
		printf("C %u %u %u %u %u %u\n", r->cqn, r->ci, be16toh(c->wqe_counter), op, be32toh(c->byte_cnt),
		       be32toh(c->sop_drop_qpn) & 0xffffff);
	r->ci++;
	r->cq_dbrec[0] = htobe32(r->ci & 0xffffff);
}

/* Consumes CQEs until the one completing WQE `idx`. Returns CQEs consumed. */
static long wait_cqe(struct ring *r, uint16_t idx)
{
	double t0 = now_s();
	long n = 0;
	for (;;) {
		struct mlx5_cqe64 *c = cqe_peek(r);
		if (!c) {
			if (now_s() - t0 > 20)
				die("no CQE for WQE", idx);
			continue;
		}
		uint16_t wc = be16toh(c->wqe_counter);
		cqe_consume(r, c);
		n++;
		if (wc == idx)
			return n;
	}
}

static void post_recvs(int n)
{
	for (int k = 0; k < n; k++) {
		struct ibv_sge s = { (uintptr_t)(mem + 800 * 1024 + (k % 32) * 64), 64, mr->lkey };
		struct ibv_recv_wr w = { .wr_id = (uint64_t)k, .sg_list = &s, .num_sge = 1 }, *bad;
		if (ibv_post_recv(qp_b, &w, &bad))
			die("ibv_post_recv", k);
	}
}

static void drain_b(int n)
{
	double t0 = now_s();
	while (n > 0) {
		struct ibv_wc wc[16];
		int got = ibv_poll_cq(cq_b, 16, wc);
		if (got < 0)
			die("ibv_poll_cq", got);
		for (int k = 0; k < got; k++)
			if (wc[k].status != IBV_WC_SUCCESS)
				die("B completion status", wc[k].status);
		n -= got;
		if (now_s() - t0 > 20)
			die("B completions missing", n);
	}
}

static void sync_poller(void)
{
	if (poller_sync && poller_sync() != 0)
		die("sigmatrace_poller_sync failed", 0);
}

/* The mixed workload: batches of at most DEPTH/2 WQEBBs, the last WQE of each signaled. */
static void run_mixed(struct ring *r, long n, unsigned db_batch)
{
	long i = 0, cqes = 0, wqebbs = 0;
	while (i < n) {
		unsigned used = 0, since_db = 0;
		int recvs = 0;
		uint16_t last = 0;
		/* Receives B needs for this batch, posted first. */
		for (long j = i; j < n && (j - i) < (long)r->wqebbs / 6; j++)
			recvs += (j % K_KINDS == K_SEND || j % K_KINDS == K_WRITE_IMM || j % K_KINDS == K_SEND_IMM);
		post_recvs(recvs);
		long start = i;
		while (i < n && (i - start) < (long)r->wqebbs / 6) {
			int kind = (int)(i % K_KINDS);
			int sig = (i % 4 == 3) || i == n - 1 || (i - start) == (long)r->wqebbs / 6 - 1;
			last = r->pi;
			used += build(r, kind, i, sig);
			i++;
			if (++since_db >= db_batch) {
				ring_doorbell(r, last);
				since_db = 0;
			}
		}
		if (since_db)
			ring_doorbell(r, last);
		wqebbs += used;
		cqes += wait_cqe(r, last);
		drain_b(recvs);
		sync_poller();
	}
	printf("done wqes=%ld wqebbs=%ld cqes=%ld\n", n, wqebbs, cqes);
}

/* With the poller paused, laps the ring and the CQ four times (every WQE signaled). */
static void run_overrun(struct ring *r)
{
	if (!poller_pause)
		die("overrun mode needs the tracer (sigmatrace_poller_pause)", 0);
	sync_poller();
	if (poller_pause(1))
		die("sigmatrace_poller_pause", 1);
	long n = 4L * r->wqebbs, cqes = 0;
	for (long i = 0; i < n; i++) {
		uint16_t idx = r->pi;
		build(r, K_WRITE, i * K_KINDS, 1);
		ring_doorbell(r, idx);
		cqes += wait_cqe(r, idx);
	}
	if (poller_pause(0))
		die("sigmatrace_poller_pause", 0);
	sync_poller();
	printf("done wqes=%ld wqebbs=%ld cqes=%ld\n", n, n, cqes);
}

/* Benchmark: 8-byte writes flat out, one doorbell per db_batch WQEs, one in 32 signaled. */
static void run_rate(struct ring *r, long n, unsigned db_batch)
{
	const long sig = 32;
	long posted = 0, completed = 0, cqes = 0;
	long in_flight_max = (long)r->wqebbs - sig;
	uint8_t *local = mem + 4096;
	double t0 = now_s();
	while (completed < n) {
		unsigned since_db = 0;
		uint16_t last = 0;
		while (posted < n && posted - completed < in_flight_max && since_db < db_batch) {
			uint16_t idx = r->pi;
			int s = (posted % sig == sig - 1) || posted == n - 1;
			uint8_t *c = unit(r, idx, 0);
			put_be32(c, (uint32_t)idx << 8 | MLX5_OPCODE_RDMA_WRITE);
			put_be32(c + 4, r->qpn << 8 | 3);
			memset(c + 8, 0, 8);
			c[11] = s ? MLX5_WQE_CTRL_CQ_UPDATE : 0;
			put_be64(c + 16, (uintptr_t)mem + 256 * 1024);
			put_be32(c + 24, mr->rkey);
			put_be32(c + 28, 0);
			mlx5dv_set_data_seg((struct mlx5_wqe_data_seg *)(c + 32), 8, mr->lkey, (uintptr_t)local);
			r->pi++;
			last = idx;
			posted++;
			since_db++;
		}
		if (since_db)
			ring_doorbell(r, last);
		struct mlx5_cqe64 *c;
		while ((c = cqe_peek(r))) {
			uint16_t wc = be16toh(c->wqe_counter);
			cqe_consume(r, c);
			cqes++;
			/* wqe_counter retires every WQE up to it (indices = post order here). */
			long done = posted - (uint16_t)(r->pi - 1 - wc);
			if (done > completed)
				completed = done;
		}
	}
	double dt = now_s() - t0;
	printf("rate: %ld wqes in %.3f s = %.0f wqe/s (doorbell per %u)\n", n, dt, n / dt, db_batch);
	printf("done wqes=%ld wqebbs=%ld cqes=%ld\n", n, n, cqes);
}

/* Fork mode: the child writes WQEs into its copy of A's ring after its own mlx5dv_init_obj. */
static void run_fork(struct ring *r, struct ibv_qp *qp, struct ibv_cq *cq, long n)
{
	run_mixed(r, n / 2, 1);
	fflush(stdout);
	pid_t pid = fork();
	if (pid < 0)
		die("fork", 0);
	if (pid == 0) {
		/* The child's bookkeeping goes to stderr, apart from the parent's. */
		if (dup2(2, 1) < 0)
			die("dup2", 0);
		struct mlx5dv_qp dq = { 0 };
		struct mlx5dv_cq dc = { 0 };
		struct mlx5dv_obj o = { .qp = { qp, &dq }, .cq = { cq, &dc } };
		if (mlx5dv_init_obj(&o, MLX5DV_OBJ_QP | MLX5DV_OBJ_CQ))
			die("child mlx5dv_init_obj", 0);
		printf("child pid=%d\n", (int)getpid());
		for (long i = 0; i < 50; i++) {
			uint16_t idx = r->pi;
			build(r, K_WRITE, i * K_KINDS, 0);
			ring_doorbell(r, idx);
		}
		sync_poller();
		fflush(stdout);
		/* _exit: softnic's exit-time cleanup in a child would tear down the parent's QPs
		 * (shared fabric files). Every record the child's tracer committed stays. */
		_exit(0);
	}
	int status = 0;
	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status))
		die("child failed", status);
	run_mixed(r, n - n / 2, 1);
}

/* INIT -> RTR -> RTS towards QP `dest` on port 1 of this device (PSNs 0x77, 16 reads and
 * atomics outstanding each way, `access` granted to the peer); `who` names the QP in the
 * failure message. */
static void connect_qp(struct ibv_qp *qp, uint32_t dest, unsigned int access, const char *who)
{
	char what[32];
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qp_access_flags = access };
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) {
		snprintf(what, sizeof(what), "%s INIT", who);
		die(what, 0);
	}
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = dest;
	a.rq_psn = 0x77;
	a.max_dest_rd_atomic = 16;
	a.min_rnr_timer = 1;
	a.ah_attr.dlid = lid;
	a.ah_attr.port_num = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
				     IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) {
		snprintf(what, sizeof(what), "%s RTR", who);
		die(what, 0);
	}
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = 0x77;
	a.max_rd_atomic = 16;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
				     IBV_QP_MAX_QP_RD_ATOMIC)) {
		snprintf(what, sizeof(what), "%s RTS", who);
		die(what, 0);
	}
}

static void connect_b(uint32_t dest)
{
	connect_qp(qp_b, dest,
		   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC,
		   "B");
}

/* QP A through verbs + mlx5dv_create_qp/cq, rings from mlx5dv_init_obj. */
static struct ibv_qp *setup_initobj(struct ring *r, uint32_t depth, struct ibv_cq **cq_out)
{
	struct ibv_cq_init_attr_ex ca = { .cqe = depth, .wc_flags = IBV_WC_STANDARD_FLAGS };
	struct mlx5dv_cq_init_attr dca = { 0 };
	struct ibv_cq_ex *cqx = mlx5dv_create_cq(ctx, &ca, &dca);
	if (!cqx)
		die("mlx5dv_create_cq", 0);
	struct ibv_cq *cq = ibv_cq_ex_to_cq(cqx);
	struct ibv_qp_init_attr_ex qa = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC, .pd = pd,
					  .comp_mask = IBV_QP_INIT_ATTR_PD,
					  .cap = { .max_send_wr = depth, .max_recv_wr = 1, .max_send_sge = 1,
						   .max_recv_sge = 1, .max_inline_data = 128 } };
	struct mlx5dv_qp_init_attr dqa = { 0 };
	struct ibv_qp *qp = mlx5dv_create_qp(ctx, &qa, &dqa);
	if (!qp)
		die("mlx5dv_create_qp", 0);
	struct mlx5dv_qp dq = { 0 };
	struct mlx5dv_cq dc = { 0 };
	struct mlx5dv_obj o = { .qp = { qp, &dq }, .cq = { cq, &dc } };
	if (mlx5dv_init_obj(&o, MLX5DV_OBJ_QP | MLX5DV_OBJ_CQ))
		die("mlx5dv_init_obj", 0);
	*r = (struct ring){ .qpn = qp->qp_num, .wqebbs = dq.sq.wqe_cnt, .sq = dq.sq.buf, .dbrec = dq.dbrec,
			    .bf = dq.bf.reg, .bf_size = dq.bf.size, .cqn = dc.cqn, .cqe_cnt = dc.cqe_cnt, .cq = dc.buf,
			    .cq_dbrec = dc.dbrec };
	printf("A qpn=%u sq=%p wqebbs=%u dbrec=%p cqn=%u cq=%p cqes=%u\n", r->qpn, (void *)r->sq, r->wqebbs,
	       (void *)r->dbrec, r->cqn, (void *)r->cq, r->cqe_cnt);
	connect_qp(qp, qp_b->qp_num, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, "A");
	connect_b(qp->qp_num);
	*cq_out = cq;
	return qp;
}

int main(int argc, char **argv)
{
	if (argc < 3)
		die("usage: ibgda initobj|devx|devx-gpu|overrun|rate N [DEPTH [DB_BATCH]]", argc);
	const char *mode = argv[1];
	long n = atol(argv[2]);
	uint32_t depth = argc > 3 ? (uint32_t)atol(argv[3]) : 64;
	unsigned db_batch = argc > 4 ? (unsigned)atol(argv[4]) : 1;
	quiet = !strcmp(mode, "rate") || !strcmp(mode, "idle");
	poller_sync = (int (*)(void))dlsym(RTLD_DEFAULT, "sigmatrace_poller_sync");
	poller_pause = (int (*)(int))dlsym(RTLD_DEFAULT, "sigmatrace_poller_pause");
	setvbuf(stdout, NULL, _IOFBF, 1 << 20);

	struct ibv_device **list = ibv_get_device_list(NULL);
	if (!list || !list[0])
		die("ibv_get_device_list", 0);
	ctx = ibv_open_device(list[0]);
	if (!ctx)
		die("ibv_open_device", 0);
	struct ibv_port_attr port;
	if (ibv_query_port(ctx, 1, &port))
		die("ibv_query_port", 0);
	lid = port.lid;
	pd = ibv_alloc_pd(ctx);
	if (posix_memalign((void **)&mem, 4096, MEM_BYTES))
		die("alloc", 0);
	memset(mem, 0, MEM_BYTES);
	mr = ibv_reg_mr(pd, mem, MEM_BYTES,
			IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
				IBV_ACCESS_REMOTE_ATOMIC);
	cq_b = ibv_create_cq(ctx, 4096, NULL, NULL, 0);
	struct ibv_qp_init_attr ba = { .send_cq = cq_b, .recv_cq = cq_b, .qp_type = IBV_QPT_RC,
				       .cap = { .max_send_wr = 1, .max_recv_wr = 2048, .max_send_sge = 1,
						.max_recv_sge = 1 } };
	if (!pd || !mr || !cq_b)
		die("pd/mr/cq", 0);
	qp_b = ibv_create_qp(pd, &ba);
	if (!qp_b)
		die("ibv_create_qp B", 0);

	struct ring r;
	if (!strcmp(mode, "devx") || !strcmp(mode, "devx-gpu")) {
		struct devx_a a;
		devx_setup(&a, &r, depth, !strcmp(mode, "devx-gpu"));
		connect_b(r.qpn);
		run_mixed(&r, n, db_batch);
		devx_teardown(&a);
	} else {
		struct ibv_cq *cq_a;
		struct ibv_qp *qp_a = setup_initobj(&r, depth, &cq_a);
		if (!strcmp(mode, "initobj"))
			run_mixed(&r, n, db_batch);
		else if (!strcmp(mode, "overrun"))
			run_overrun(&r);
		else if (!strcmp(mode, "rate"))
			run_rate(&r, n, db_batch);
		else if (!strcmp(mode, "fork"))
			run_fork(&r, qp_a, cq_a, n);
		else if (!strcmp(mode, "idle")) {
			struct timespec ts = { n / 1000, (n % 1000) * 1000000L };
			nanosleep(&ts, NULL);
		}
		else
			die("unknown mode", 0);
		if (ibv_destroy_qp(qp_a) || ibv_destroy_cq(cq_a))
			die("destroy A", 0);
	}
	if (ibv_destroy_qp(qp_b) || ibv_destroy_cq(cq_b) || ibv_dereg_mr(mr) || ibv_dealloc_pd(pd) ||
	    ibv_close_device(ctx))
		die("teardown", 0);
	ibv_free_device_list(list);
	free(mem);
	/* A tracer must never load libcuda into a process that did not. */
	printf("libcuda %s\n", dlopen("libcuda.so.1", RTLD_NOLOAD | RTLD_LAZY) ? "loaded" : "absent");
	return 0;
}
