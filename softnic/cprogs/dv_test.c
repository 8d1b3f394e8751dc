/* softnic mlx5 direct-queue tests: `dv_test MODE server|client PORT`. The client writes mlx5
 * WQEs straight into the send ring, publishes the doorbell record and rings the doorbell (8-byte
 * store or BlueFlame copy), then reads CQE64s straight from the completion ring; the server
 * posts receive WQEs into its receive ring and polls its CQ ring. Every byte and CQE field the
 * test relies on is checked. Modes: ops, selective, errors, mixed, srq, devx, devx_errors, and the
 * benchmark modes bench1 / bench16 (8-byte writes, doorbell per 1 or 16 WQEs). */
#include "sn_common.h"
#include <infiniband/mlx5dv.h>

static int server;
static struct sn S;
static struct peer_info P;

struct dvq {
	struct mlx5dv_qp qp;
	struct mlx5dv_cq cq;
	uint32_t qpn, sq_pi, cq_ci, rq_head, bf_off;
};
static struct dvq D;

static void *wqe_at(uint32_t idx, int unit)
{
	size_t ring = (size_t)D.qp.sq.wqe_cnt * 64;
	size_t off = (((idx & (D.qp.sq.wqe_cnt - 1)) * 64) + unit * 16) % ring;
	return (char *)D.qp.sq.buf + off;
}

/* Builds one WQE at sq_pi; returns its index. */
static uint32_t post(uint8_t op, int sig, void *laddr, uint32_t len, uint32_t lkey, uint64_t raddr, uint32_t rkey,
		     uint64_t a, uint64_t b, uint32_t imm, int inl)
{
	uint32_t idx = D.sq_pi;
	int u = 1;
	if (op == MLX5_OPCODE_RDMA_WRITE || op == MLX5_OPCODE_RDMA_WRITE_IMM || op == MLX5_OPCODE_RDMA_READ ||
	    op == MLX5_OPCODE_ATOMIC_CS || op == MLX5_OPCODE_ATOMIC_FA) {
		struct mlx5_wqe_raddr_seg *r = wqe_at(idx, u++);
		r->raddr = htobe64(raddr);
		r->rkey = htobe32(rkey);
		r->reserved = 0;
	}
	if (op == MLX5_OPCODE_ATOMIC_CS || op == MLX5_OPCODE_ATOMIC_FA) {
		struct mlx5_wqe_atomic_seg *at = wqe_at(idx, u++);
		at->swap_add = htobe64(a);
		at->compare = htobe64(b);
	}
	if (len && inl) {
		struct mlx5_wqe_inl_data_seg *s = wqe_at(idx, u);
		s->byte_count = htobe32(len | MLX5_INLINE_SEG);
		for (uint32_t i = 0; i < len; i++)
			*((char *)wqe_at(idx, u + (4 + i) / 16) + (4 + i) % 16) = ((char *)laddr)[i];
		u += (4 + len + 15) / 16;
	} else if (len || op == MLX5_OPCODE_RDMA_READ) {
		mlx5dv_set_data_seg(wqe_at(idx, u++), len, lkey, (uintptr_t)laddr);
	}
	mlx5dv_set_ctrl_seg(wqe_at(idx, 0), idx & 0xffff, op, 0, D.qpn, sig ? MLX5_WQE_CTRL_CQ_UPDATE : 0, u, 0,
			    imm);
	D.sq_pi += (u + 3) / 4;
	return idx;
}

/* Doorbell record, then the doorbell: 8-byte ctrl store, or a BlueFlame copy of the WQE. */
static void ring_db(uint32_t last_idx, int bf)
{
	__sync_synchronize();
	D.qp.dbrec[MLX5_SND_DBR] = htobe32(D.sq_pi & 0xffff);
	__sync_synchronize();
	char *reg = (char *)D.qp.bf.reg + D.bf_off;
	if (bf)
		memcpy(reg, wqe_at(last_idx, 0), 64);
	else
		*(volatile uint64_t *)reg = *(uint64_t *)wqe_at(last_idx, 0);
	D.bf_off ^= D.qp.bf.size;
}

static struct mlx5_cqe64 *cqe_wait(void)
{
	double t0 = now_s();
	for (;;) {
		struct mlx5_cqe64 *c = (void *)((char *)D.cq.buf + (D.cq_ci & (D.cq.cqe_cnt - 1)) * 64);
		uint8_t op = mlx5dv_get_cqe_opcode(c);
		if (op != MLX5_CQE_INVALID && mlx5dv_get_cqe_owner(c) == !!(D.cq_ci & D.cq.cqe_cnt)) {
			__sync_synchronize();
			return c;
		}
		CHECK(now_s() - t0 < 10, "no CQE at ci %u within 10 s", D.cq_ci);
	}
}

static void cqe_done(void)
{
	D.cq_ci++;
	D.cq.dbrec[0] = htobe32(D.cq_ci & 0xffffff);
}

/* Checks the next CQE: opcode, (requester) send opcode, wqe_counter; returns it. */
static struct mlx5_cqe64 *expect_cqe(uint8_t op, int sop, uint16_t counter)
{
	struct mlx5_cqe64 *c = cqe_wait();
	uint8_t got = mlx5dv_get_cqe_opcode(c);
	if (got == MLX5_CQE_REQ_ERR || got == MLX5_CQE_RESP_ERR) {
		struct mlx5_err_cqe *e = (void *)c;
		CHECK(got == op, "error CQE (syndrome 0x%x, counter %u) where opcode %u was expected", e->syndrome,
		      be16toh(c->wqe_counter), op);
	}
	CHECK(got == op, "CQE opcode %u, wanted %u", got, op);
	CHECK((be32toh(c->sop_drop_qpn) & 0xffffff) == D.qpn, "CQE qpn 0x%x", be32toh(c->sop_drop_qpn) & 0xffffff);
	if (sop >= 0)
		CHECK((be32toh(c->sop_drop_qpn) >> 24) == (uint32_t)sop, "CQE send opcode 0x%x, wanted 0x%x",
		      be32toh(c->sop_drop_qpn) >> 24, sop);
	CHECK(be16toh(c->wqe_counter) == counter, "wqe_counter %u, wanted %u", be16toh(c->wqe_counter), counter);
	return c;
}

static void post_rq(void *addr, uint32_t len, uint32_t lkey)
{
	struct mlx5_wqe_data_seg *s = (void *)((char *)D.qp.rq.buf + (D.rq_head & (D.qp.rq.wqe_cnt - 1)) * D.qp.rq.stride);
	mlx5dv_set_data_seg(s, len, lkey, (uintptr_t)addr);
	if (D.qp.rq.stride > 16)
		mlx5dv_set_data_seg(s + 1, 0, MLX5_INVALID_LKEY, 0);
	D.rq_head++;
	__sync_synchronize();
	D.qp.dbrec[MLX5_RCV_DBR] = htobe32(D.rq_head & 0xffff);
}

static void verbs_setup(int sq_depth, int cqe)
{
	sn_init(&S, 1 << 20, ALL_ACCESS);
	CHECK(mlx5dv_is_supported(S.ctx->device), "mlx5dv_is_supported");
	struct mlx5dv_context dc = { 0 };
	CHECK(mlx5dv_query_device(S.ctx, &dc) == 0 && dc.version >= 1, "mlx5dv_query_device");
	ibv_destroy_cq(S.cq);
	S.cq = ibv_create_cq(S.ctx, cqe, NULL, NULL, 0);
	struct ibv_qp_init_attr a = { .send_cq = S.cq, .recv_cq = S.cq, .qp_type = IBV_QPT_RC,
				      .cap = { .max_send_wr = sq_depth, .max_recv_wr = 16, .max_send_sge = 1,
					       .max_recv_sge = 2, .max_inline_data = 64 } };
	S.qp = ibv_create_qp(S.pd, &a);
	CHECK(S.qp, "create qp");
	P = sn_connect(&S, 9);
	struct mlx5dv_pd dpd;
	struct mlx5dv_obj o = { .qp = { S.qp, &D.qp }, .cq = { S.cq, &D.cq }, .pd = { S.pd, &dpd } };
	CHECK(mlx5dv_init_obj(&o, MLX5DV_OBJ_QP | MLX5DV_OBJ_CQ | MLX5DV_OBJ_PD) == 0, "mlx5dv_init_obj");
	CHECK(D.qp.sq.stride == 64 && D.qp.sq.wqe_cnt >= (uint32_t)sq_depth && D.qp.bf.size > 0 && D.qp.bf.reg,
	      "mlx5dv_qp rings");
	CHECK(D.cq.cqe_size == 64 && D.cq.cqe_cnt > (uint32_t)cqe && D.cq.cqn, "mlx5dv_cq ring");
	for (uint32_t i = 0; i < D.cq.cqe_cnt; i++)
		CHECK(mlx5dv_get_cqe_opcode((void *)((char *)D.cq.buf + i * 64)) == MLX5_CQE_INVALID,
		      "fresh CQE %u not invalid", i);
	D.qpn = S.qp->qp_num;
	struct ibv_sge sge = { (uintptr_t)S.buf, 8, S.mr->lkey };
	struct ibv_send_wr wr = { .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND }, *bad;
	CHECK(ibv_post_send(S.qp, &wr, &bad) == EINVAL, "ibv_post_send on an exposed SQ must be rejected");
}

static void mode_ops(void)
{
	verbs_setup(64, 64);
	uint64_t *ra = (uint64_t *)(S.buf + 400000);
	if (server) {
		post_rq(S.buf + 100000, 4096, S.mr->lkey);
		post_rq(S.buf + 110000, 4096, S.mr->lkey);
		post_rq(S.buf + 120000, 64, S.mr->lkey);
		fill(S.buf + 300000, 3000, 8);
		ra[0] = 10;
		ra[1] = 15;
		sync_peer();
		struct mlx5_cqe64 *c = expect_cqe(MLX5_CQE_RESP_SEND, -1, 0);
		CHECK(be32toh(c->byte_cnt) == 100 && (be32toh(c->flags_rqpn) & 0xffffff) == P.qpn, "send CQE");
		cqe_done();
		c = expect_cqe(MLX5_CQE_RESP_SEND_IMM, -1, 1);
		CHECK(be32toh(c->byte_cnt) == 200 && be32toh(c->imm_inval_pkey) == 0x1234, "send_imm CQE");
		cqe_done();
		c = expect_cqe(MLX5_CQE_RESP_WR_IMM, -1, 2);
		CHECK(be32toh(c->byte_cnt) == 16 && be32toh(c->imm_inval_pkey) == 0x5678, "write_imm CQE");
		cqe_done();
		check_fill(S.buf + 100000, 100, 3, "send payload");
		check_fill(S.buf + 110000, 200, 4, "send_imm payload");
		sync_peer();
		check_fill(S.buf, 4000, 1, "rdma write");
		check_fill(S.buf + 5000, 40, 2, "inline write");
		check_fill(S.buf + 200000, 16, 5, "write_imm data");
		CHECK(ra[0] == 15 && ra[1] == 99, "atomics left %llu %llu", (unsigned long long)ra[0],
		      (unsigned long long)ra[1]);
	} else {
		fill(S.buf, 4000, 1);
		fill(S.buf + 5000, 40, 2);
		fill(S.buf + 6000, 100, 3);
		fill(S.buf + 7000, 200, 4);
		fill(S.buf + 8000, 16, 5);
		sync_peer();
		uint32_t ix[10];
		uint8_t ops[10] = { MLX5_OPCODE_RDMA_WRITE, MLX5_OPCODE_RDMA_WRITE, MLX5_OPCODE_SEND,
				    MLX5_OPCODE_SEND_IMM,   MLX5_OPCODE_RDMA_WRITE_IMM, MLX5_OPCODE_RDMA_READ,
				    MLX5_OPCODE_ATOMIC_FA,  MLX5_OPCODE_ATOMIC_CS, MLX5_OPCODE_NOP,
				    MLX5_OPCODE_RDMA_WRITE };
		ix[0] = post(ops[0], 1, S.buf, 4000, S.mr->lkey, P.addr, P.rkey, 0, 0, 0, 0);
		ring_db(ix[0], 0);
		ix[1] = post(ops[1], 1, S.buf + 5000, 40, 0, P.addr + 5000, P.rkey, 0, 0, 0, 1);
		ring_db(ix[1], 1);
		ix[2] = post(ops[2], 1, S.buf + 6000, 100, S.mr->lkey, 0, 0, 0, 0, 0, 0);
		ix[3] = post(ops[3], 1, S.buf + 7000, 200, S.mr->lkey, 0, 0, 0, 0, htobe32(0x1234), 0);
		ix[4] = post(ops[4], 1, S.buf + 8000, 16, S.mr->lkey, P.addr + 200000, P.rkey, 0, 0, htobe32(0x5678), 0);
		ring_db(ix[4], 0);
		ix[5] = post(ops[5], 1, S.buf + 20000, 3000, S.mr->lkey, P.addr + 300000, P.rkey, 0, 0, 0, 0);
		ix[6] = post(ops[6], 1, S.buf + 30000, 8, S.mr->lkey, P.addr + 400000, P.rkey, 5, 0, 0, 0);
		ix[7] = post(ops[7], 1, S.buf + 30008, 8, S.mr->lkey, P.addr + 400008, P.rkey, 99, 15, 0, 0);
		ix[8] = post(ops[8], 1, NULL, 0, 0, 0, 0, 0, 0, 0, 0);
		ring_db(ix[8], 0);
		/* A WQE after a NOP must still execute (a NOP puts nothing on the wire). */
		ix[9] = post(ops[9], 1, S.buf, 64, S.mr->lkey, P.addr + 500000, P.rkey, 0, 0, 0, 0);
		ring_db(ix[9], 0);
		CHECK(ix[1] == 1 && ix[2] == 3, "inline write spans two WQEBBs");
		for (int i = 0; i < 10; i++) {
			struct mlx5_cqe64 *c = expect_cqe(MLX5_CQE_REQ, ops[i], ix[i]);
			if (i == 5)
				CHECK(be32toh(c->byte_cnt) == 3000, "read byte_cnt %u", be32toh(c->byte_cnt));
			if (i == 6 || i == 7)
				CHECK(be32toh(c->byte_cnt) == 8, "atomic byte_cnt");
			CHECK(be64toh(c->timestamp) != 0, "timestamp");
			cqe_done();
		}
		check_fill(S.buf + 20000, 3000, 8, "rdma read");
		CHECK(*(uint64_t *)(S.buf + 30000) == 10 && *(uint64_t *)(S.buf + 30008) == 15, "atomic results");
		sync_peer();
	}
	sync_peer();
}

/* Selective signalling and ring wrap-around: many times the SQ and CQ depth. */
static void mode_selective(void)
{
	verbs_setup(16, 8);
	const uint32_t total = 50 * D.qp.sq.wqe_cnt;
	uint64_t *dst = (uint64_t *)S.buf;
	if (server) {
		sync_peer();
		sync_peer();
		for (uint32_t i = total - 64; i < total; i++)
			CHECK(dst[i % 64] == i + 1, "slot %u holds %llu", i % 64, (unsigned long long)dst[i % 64]);
	} else {
		uint64_t *src = (uint64_t *)(S.buf + 65536);
		sync_peer();
		uint32_t posted = 0, retired = 0, cqes = 0;
		while (retired < total) {
			uint32_t last = 0;
			int n = 0;
			while (posted < total && posted - retired + 1 <= D.qp.sq.wqe_cnt && n < 4) {
				src[posted % 1024] = posted + 1;
				int sig = posted % 8 == 7;
				last = post(MLX5_OPCODE_RDMA_WRITE, sig, &src[posted % 1024], 8, S.mr->lkey,
					    P.addr + (posted % 64) * 8, P.rkey, 0, 0, 0, 0);
				posted++;
				n++;
			}
			if (n)
				ring_db(last, n == 1);
			if (retired + 8 <= posted) {
				/* one CQE covers the 7 unsignaled WQEs before it */
				struct mlx5_cqe64 *c = expect_cqe(MLX5_CQE_REQ, MLX5_OPCODE_RDMA_WRITE, (retired + 7) & 0xffff);
				(void)c;
				cqe_done();
				cqes++;
				retired += 8;
			}
		}
		CHECK(cqes == total / 8 && D.cq_ci > 4 * D.cq.cqe_cnt && D.sq_pi > 16 * D.qp.sq.wqe_cnt,
		      "wrap-around not exercised");
		sync_peer();
	}
	sync_peer();
}

static void mode_errors(void)
{
	verbs_setup(16, 16);
	if (server) {
		sync_peer();
	} else {
		sync_peer();
		uint32_t a = post(MLX5_OPCODE_RDMA_WRITE, 0, S.buf, 64, S.mr->lkey, P.addr, P.rkey ^ 0x7700, 0, 0, 0, 0);
		uint32_t b = post(MLX5_OPCODE_RDMA_WRITE, 0, S.buf, 64, S.mr->lkey, P.addr, P.rkey, 0, 0, 0, 0);
		ring_db(b, 0);
		struct mlx5_cqe64 *c = expect_cqe(MLX5_CQE_REQ_ERR, -1, a);
		CHECK(((struct mlx5_err_cqe *)c)->syndrome == MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR, "syndrome 0x%x",
		      ((struct mlx5_err_cqe *)c)->syndrome);
		cqe_done();
		c = expect_cqe(MLX5_CQE_REQ_ERR, -1, b);
		CHECK(((struct mlx5_err_cqe *)c)->syndrome == MLX5_CQE_SYNDROME_WR_FLUSH_ERR, "flush syndrome 0x%x",
		      ((struct mlx5_err_cqe *)c)->syndrome);
		cqe_done();
		struct ibv_qp_attr qa;
		struct ibv_qp_init_attr qi;
		CHECK(ibv_query_qp(S.qp, &qa, IBV_QP_STATE, &qi) == 0 && qa.qp_state == IBV_QPS_ERR, "QP not in error");
	}
	sync_peer();
}

/* Mixing allowed by the rule: ibv_post_recv into an exposed RQ, ibv_poll_cq on an exposed CQ
 * (user wr_ids come back), flush of ring receives when the QP enters the error state. */
static void mode_mixed(void)
{
	verbs_setup(16, 16);
	if (server) {
		for (int i = 0; i < 2; i++) {
			struct ibv_sge sge = { (uintptr_t)S.buf + i * 4096, 4096, S.mr->lkey };
			struct ibv_recv_wr wr = { .wr_id = 0xaaa1 + i, .sg_list = &sge, .num_sge = 1 }, *bad;
			CHECK(ibv_post_recv(S.qp, &wr, &bad) == 0, "ibv_post_recv into the exposed RQ");
		}
		sync_peer();
		for (int i = 0; i < 2; i++) {
			struct ibv_wc wc = poll1(S.cq);
			CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 0xaaa1u + i && wc.opcode == IBV_WC_RECV &&
				      wc.byte_len == 100u + i && wc.src_qp == P.qpn && wc.qp_num == D.qpn,
			      "ibv_poll_cq on the exposed CQ: wr_id %llx status %d len %u", (unsigned long long)wc.wr_id,
			      wc.status, wc.byte_len);
			check_fill(S.buf + i * 4096, 100 + i, 20 + i, "mixed payload");
		}
		struct ibv_sge sge = { (uintptr_t)S.buf, 64, S.mr->lkey };
		struct ibv_recv_wr wr = { .wr_id = 0xaaa3, .sg_list = &sge, .num_sge = 1 }, *bad;
		CHECK(ibv_post_recv(S.qp, &wr, &bad) == 0, "post");
		struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };
		CHECK(ibv_modify_qp(S.qp, &a, IBV_QP_STATE) == 0, "to ERR");
		struct ibv_wc wc = poll1(S.cq);
		CHECK(wc.status == IBV_WC_WR_FLUSH_ERR && wc.wr_id == 0xaaa3, "ring receive flushed: %s %llx",
		      ibv_wc_status_str(wc.status), (unsigned long long)wc.wr_id);
	} else {
		fill(S.buf, 100, 20);
		fill(S.buf + 4096, 101, 21);
		sync_peer();
		post(MLX5_OPCODE_SEND, 0, S.buf, 100, S.mr->lkey, 0, 0, 0, 0, 0, 0);
		uint32_t b = post(MLX5_OPCODE_SEND, 1, S.buf + 4096, 101, S.mr->lkey, 0, 0, 0, 0, 0, 0);
		ring_db(b, 0);
		expect_cqe(MLX5_CQE_REQ, MLX5_OPCODE_SEND, b);
		cqe_done();
	}
	sync_peer();
}

/* SRQ ring: receive WQEs linked by next_wqe_index, consumed in list order, recycled at the tail. */
static void mode_srq(void)
{
	struct mlx5dv_srq ds;
	struct ibv_srq *srq = NULL;
	sn_init(&S, 1 << 20, ALL_ACCESS);
	if (server) {
		struct ibv_srq_init_attr sa = { .attr = { .max_wr = 16, .max_sge = 1 } };
		srq = ibv_create_srq(S.pd, &sa);
		CHECK(srq, "create srq");
	}
	struct ibv_qp_init_attr a = { .send_cq = S.cq, .recv_cq = S.cq, .srq = srq, .qp_type = IBV_QPT_RC,
				      .cap = { .max_send_wr = 64, .max_recv_wr = srq ? 0 : 16, .max_send_sge = 1,
					       .max_recv_sge = 1 } };
	S.qp = ibv_create_qp(S.pd, &a);
	CHECK(S.qp, "create qp");
	P = sn_connect(&S, 3);
	struct mlx5dv_obj o = { .qp = { S.qp, &D.qp }, .cq = { S.cq, &D.cq }, .srq = { srq, &ds } };
	CHECK(mlx5dv_init_obj(&o, MLX5DV_OBJ_QP | MLX5DV_OBJ_CQ | (server ? MLX5DV_OBJ_SRQ : 0)) == 0, "init_obj");
	D.qpn = S.qp->qp_num;
	if (server) {
		CHECK(ds.stride >= 32 && ds.head == 0 && ds.srqn, "mlx5dv_srq");
		uint32_t head = ds.head, tail = ds.tail, counter = 0;
		for (int round = 0; round < 2; round++) {
			for (int i = 0; i < 8; i++) {
				char *w = (char *)ds.buf + head * ds.stride;
				mlx5dv_set_data_seg((void *)(w + 16), 4096, S.mr->lkey, (uintptr_t)(S.buf + head * 4096));
				if (ds.stride > 32)
					mlx5dv_set_data_seg((void *)(w + 32), 0, MLX5_INVALID_LKEY, 0);
				head = be16toh(*(uint16_t *)(w + 2));
				counter++;
			}
			__sync_synchronize();
			ds.dbrec[0] = htobe32(counter & 0xffff);
			sync_peer();
			for (int i = 0; i < 8; i++) {
				uint16_t want = (uint16_t)(round * 8 + i);
				struct mlx5_cqe64 *c = expect_cqe(MLX5_CQE_RESP_SEND, -1, want);
				CHECK((be32toh(c->srqn_uidx) & 0xffffff) == ds.srqn, "CQE srqn 0x%x", be32toh(c->srqn_uidx));
				CHECK(be32toh(c->byte_cnt) == 500, "srq byte_cnt");
				check_fill(S.buf + want * 4096, 500, round * 8 + i, "srq payload");
				cqe_done();
				/* give the WQE back: link it after the tail */
				*(uint16_t *)((char *)ds.buf + tail * ds.stride + 2) = htobe16(want);
				tail = want;
			}
		}
	} else {
		for (int round = 0; round < 2; round++) {
			sync_peer();
			uint32_t last = 0;
			for (int i = 0; i < 8; i++) {
				char *b = S.buf + (round * 8 + i) * 4096;
				fill(b, 500, round * 8 + i);
				last = post(MLX5_OPCODE_SEND, i == 7, b, 500, S.mr->lkey, 0, 0, 0, 0, 0, 0);
			}
			ring_db(last, 0);
			expect_cqe(MLX5_CQE_REQ, MLX5_OPCODE_SEND, last);
			cqe_done();
		}
	}
	sync_peer();
}

#include "dv_devx.h"

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: %s MODE server|client PORT [ITERS]\n", argv[0]);
		return 2;
	}
	const char *mode = argv[1];
	server = !strcmp(argv[2], "server");
	tcp_connect(server, atoi(argv[3]));
	long iters = argc > 4 ? atol(argv[4]) : 0;
	if (!strcmp(mode, "ops"))
		mode_ops();
	else if (!strcmp(mode, "selective"))
		mode_selective();
	else if (!strcmp(mode, "errors"))
		mode_errors();
	else if (!strcmp(mode, "mixed"))
		mode_mixed();
	else if (!strcmp(mode, "srq"))
		mode_srq();
	else if (!strcmp(mode, "devx"))
		mode_devx();
	else if (!strcmp(mode, "devx_errors"))
		mode_devx_errors();
	else if (!strcmp(mode, "bench1"))
		mode_bench(iters, 1);
	else if (!strcmp(mode, "bench16"))
		mode_bench(iters, 16);
	else
		FAIL("unknown mode %s", mode);
	printf("OK %s %s\n", mode, argv[2]);
	return 0;
}
