/* dv_test modes built on devx: QPs and CQs on the program's own memory (umem), UAR pages, PRM
 * commands; malformed commands; the direct-posting benchmark. Included by dv_test.c. */

static void *devx_alloc(size_t n)
{
	void *p;
	CHECK(posix_memalign(&p, 4096, n) == 0, "alloc");
	memset(p, 0, n);
	return p;
}

static void put32(void *b, int off, uint32_t v)
{
	uint32_t *p = (uint32_t *)((char *)b + off);
	*p = htobe32(be32toh(*p) | v);
}

static void put64(void *b, int off, uint64_t v)
{
	*(uint64_t *)((char *)b + off) = htobe64(v);
}

struct devx_res {
	void *cqbuf, *dbr, *wq;
	struct mlx5dv_devx_umem *ucq, *udbr, *uwq;
	struct mlx5dv_devx_uar *uar;
	uint32_t pdn;
};

static void devx_res_init(struct devx_res *r)
{
	r->cqbuf = devx_alloc(64 * 64);
	for (int i = 0; i < 64; i++)
		((uint8_t *)r->cqbuf)[i * 64 + 63] = MLX5_CQE_INVALID << 4;
	r->dbr = devx_alloc(4096);
	r->wq = devx_alloc(16 * 32 + 64 * 64);
	r->ucq = mlx5dv_devx_umem_reg(S.ctx, r->cqbuf, 64 * 64, IBV_ACCESS_LOCAL_WRITE);
	r->udbr = mlx5dv_devx_umem_reg(S.ctx, r->dbr, 4096, IBV_ACCESS_LOCAL_WRITE);
	r->uwq = mlx5dv_devx_umem_reg(S.ctx, r->wq, 16 * 32 + 64 * 64, IBV_ACCESS_LOCAL_WRITE);
	CHECK(r->ucq && r->udbr && r->uwq, "umem_reg");
	r->uar = mlx5dv_devx_alloc_uar(S.ctx, 0);
	CHECK(r->uar && r->uar->reg_addr == (char *)r->uar->base_addr + 0x800, "alloc_uar");
	struct mlx5dv_pd dpd;
	struct mlx5dv_obj o = { .pd = { S.pd, &dpd } };
	CHECK(mlx5dv_init_obj(&o, MLX5DV_OBJ_PD) == 0, "init_obj pd");
	r->pdn = dpd.pdn;
}

static void create_cq_in(uint32_t *in, struct devx_res *r, int log_size)
{
	memset(in, 0, 256);
	put32(in, 0, 0x400u << 16);
	put32(in, 20, r->udbr->umem_id);
	put32(in, 28, ((uint32_t)log_size << 24) | r->uar->page_id);
	put64(in, 72, 0);
	put64(in, 80, 0);
	put32(in, 88, r->ucq->umem_id);
}

static void create_qp_in(uint32_t *in, struct devx_res *r, uint32_t cqn)
{
	memset(in, 0, 320);
	put32(in, 0, 0x500u << 16);
	put32(in, 28, r->pdn);
	put32(in, 32, (4u << 19) | (1u << 16) | (6u << 11)); /* RQ 16 x 32 B, SQ 64 WQEBBs */
	put32(in, 36, r->uar->page_id);
	put32(in, 148, cqn);
	put32(in, 180, cqn);
	put64(in, 184, 64);
	put32(in, 252, r->udbr->umem_id);
	put64(in, 256, 0);
	put32(in, 264, r->uwq->umem_id);
	put32(in, 268, 1u << 31);
}

static struct mlx5dv_devx_obj *cmd(const void *in, size_t inlen, uint32_t *out)
{
	memset(out, 0, 16);
	return mlx5dv_devx_obj_create(S.ctx, in, inlen, out, 16);
}

static int modify(struct mlx5dv_devx_obj *qp, uint16_t op, uint32_t qpn, uint32_t *out)
{
	uint32_t in[80] = { 0 };
	put32(in, 0, (uint32_t)op << 16);
	put32(in, 8, qpn);
	if (op == 0x502)
		put32(in, 168, (1u << 15) | (1u << 14) | (1u << 13));
	if (op == 0x503) {
		put32(in, 32, 5u << 29);
		put32(in, 44, P.qpn);
		put32(in, 52, P.lid);
		put32(in, 168, 4u << 21);
		put32(in, 172, (1u << 24) | P.psn);
	}
	if (op == 0x504) {
		put32(in, 56, 14u << 27);
		put32(in, 136, (4u << 21) | (7u << 16) | (7u << 13));
		put32(in, 144, 0x77);
	}
	memset(out, 0, 16);
	return mlx5dv_devx_obj_modify(qp, in, sizeof(in), out, 16);
}

static void mode_devx(void)
{
	struct devx_res r;
	uint32_t in[80], out[4];
	struct peer_info m;
	sn_init(&S, 1 << 20, ALL_ACCESS);
	devx_res_init(&r);
	create_cq_in(in, &r, 6);
	struct mlx5dv_devx_obj *cq = cmd(in, 256, out);
	CHECK(cq && ((uint8_t *)out)[0] == 0, "CREATE_CQ: %s status 0x%x", strerror(errno), ((uint8_t *)out)[0]);
	uint32_t cqn = be32toh(out[2]) & 0xffffff;
	create_qp_in(in, &r, cqn);
	struct mlx5dv_devx_obj *qp = cmd(in, 320, out);
	CHECK(qp && ((uint8_t *)out)[0] == 0, "CREATE_QP: %s status 0x%x", strerror(errno), ((uint8_t *)out)[0]);
	uint32_t qpn = be32toh(out[2]) & 0xffffff;
	my_info(&S, &m, 0x77);
	m.qpn = qpn;
	xfer(&m, &P, sizeof(m));
	CHECK(modify(qp, 0x502, qpn, out) == 0, "RST2INIT");
	CHECK(modify(qp, 0x503, qpn, out) == 0, "INIT2RTR");
	CHECK(modify(qp, 0x504, qpn, out) == 0, "RTR2RTS");
	memset(&D, 0, sizeof(D));
	D.qp.sq.buf = (char *)r.wq + 16 * 32;
	D.qp.sq.wqe_cnt = 64;
	D.qp.rq.buf = r.wq;
	D.qp.rq.wqe_cnt = 16;
	D.qp.rq.stride = 32;
	D.qp.dbrec = (__be32 *)((char *)r.dbr + 64);
	D.qp.bf.reg = r.uar->reg_addr;
	D.qp.bf.size = 256;
	D.cq.buf = r.cqbuf;
	D.cq.cqe_cnt = 64;
	D.cq.dbrec = (__be32 *)r.dbr;
	D.qpn = qpn;
	uint64_t *ra = (uint64_t *)(S.buf + 400000);
	if (server) {
		post_rq(S.buf + 100000, 4096, S.mr->lkey);
		fill(S.buf + 300000, 2000, 6);
		ra[0] = 40;
		sync_peer();
		struct mlx5_cqe64 *c = expect_cqe(MLX5_CQE_RESP_SEND, -1, 0);
		CHECK(be32toh(c->byte_cnt) == 300 && (be32toh(c->flags_rqpn) & 0xffffff) == P.qpn, "devx recv CQE");
		cqe_done();
		check_fill(S.buf + 100000, 300, 2, "devx send");
		sync_peer();
		check_fill(S.buf, 5000, 1, "devx write");
		CHECK(ra[0] == 43, "devx fetch_add left %llu", (unsigned long long)ra[0]);
	} else {
		fill(S.buf, 5000, 1);
		fill(S.buf + 6000, 300, 2);
		sync_peer();
		uint32_t a = post(MLX5_OPCODE_RDMA_WRITE, 1, S.buf, 5000, S.mr->lkey, P.addr, P.rkey, 0, 0, 0, 0);
		uint32_t b = post(MLX5_OPCODE_SEND, 1, S.buf + 6000, 300, S.mr->lkey, 0, 0, 0, 0, 0, 0);
		uint32_t c = post(MLX5_OPCODE_RDMA_READ, 1, S.buf + 20000, 2000, S.mr->lkey, P.addr + 300000, P.rkey, 0, 0,
				  0, 0);
		uint32_t d = post(MLX5_OPCODE_ATOMIC_FA, 1, S.buf + 30000, 8, S.mr->lkey, P.addr + 400000, P.rkey, 3, 0, 0,
				  0);
		ring_db(d, 0);
		expect_cqe(MLX5_CQE_REQ, MLX5_OPCODE_RDMA_WRITE, a);
		cqe_done();
		expect_cqe(MLX5_CQE_REQ, MLX5_OPCODE_SEND, b);
		cqe_done();
		expect_cqe(MLX5_CQE_REQ, MLX5_OPCODE_RDMA_READ, c);
		cqe_done();
		expect_cqe(MLX5_CQE_REQ, MLX5_OPCODE_ATOMIC_FA, d);
		cqe_done();
		check_fill(S.buf + 20000, 2000, 6, "devx read");
		CHECK(*(uint64_t *)(S.buf + 30000) == 40, "devx fetch_add old value");
		sync_peer();
	}
	sync_peer();
	CHECK(mlx5dv_devx_obj_destroy(qp) == 0, "destroy qp");
	CHECK(mlx5dv_devx_obj_destroy(cq) == 0, "destroy cq");
	CHECK(mlx5dv_devx_umem_dereg(r.ucq) == 0 && mlx5dv_devx_umem_dereg(r.udbr) == 0 &&
		      mlx5dv_devx_umem_dereg(r.uwq) == 0,
	      "umem_dereg");
	mlx5dv_devx_free_uar(r.uar);
}

static void expect_status(struct mlx5dv_devx_obj *o, uint32_t *out, uint8_t status, const char *what)
{
	CHECK(!o && errno == EREMOTEIO, "%s: accepted (errno %d)", what, errno);
	CHECK(((uint8_t *)out)[0] == status, "%s: status 0x%x, wanted 0x%x", what, ((uint8_t *)out)[0], status);
	CHECK(be32toh(out[1]) != 0, "%s: no syndrome", what);
}

static void mode_devx_errors(void)
{
	struct devx_res r;
	uint32_t in[80], out[4];
	sn_init(&S, 4096, ALL_ACCESS);
	devx_res_init(&r);
	memset(in, 0, sizeof(in));
	put32(in, 0, 0x999u << 16);
	expect_status(cmd(in, 256, out), out, 0x2, "unknown opcode");
	errno = 0;
	CHECK(!cmd(in, 4, out) && errno == EINVAL, "4-byte command must fail with EINVAL");
	create_cq_in(in, &r, 6);
	expect_status(cmd(in, 50, out), out, 0x50, "short CREATE_CQ");
	create_cq_in(in, &r, 6);
	in[88 / 4] = htobe32(9999);
	expect_status(cmd(in, 256, out), out, 0x3, "CREATE_CQ with unknown umem");
	create_cq_in(in, &r, 10); /* 1024 CQEs do not fit the 4 KiB umem */
	expect_status(cmd(in, 256, out), out, 0x3, "CREATE_CQ beyond umem");
	create_cq_in(in, &r, 6);
	put32(in, 16, 1u << 21); /* 128-byte CQEs */
	expect_status(cmd(in, 256, out), out, 0x3, "CREATE_CQ with cqe_sz 128");
	create_cq_in(in, &r, 6);
	struct mlx5dv_devx_obj *cq = cmd(in, 256, out);
	CHECK(cq, "valid CREATE_CQ");
	uint32_t cqn = be32toh(out[2]) & 0xffffff;
	create_qp_in(in, &r, cqn);
	((uint8_t *)in)[25] = 0x2; /* UD */
	expect_status(cmd(in, 320, out), out, 0x3, "CREATE_QP of a UD QP");
	create_qp_in(in, &r, cqn + 1000);
	expect_status(cmd(in, 320, out), out, 0x3, "CREATE_QP with unknown CQ");
	create_qp_in(in, &r, cqn);
	struct mlx5dv_devx_obj *qp = cmd(in, 320, out);
	CHECK(qp, "valid CREATE_QP");
	uint32_t qpn = be32toh(out[2]) & 0xffffff;
	CHECK(modify(qp, 0x502, qpn + 1, out) == EREMOTEIO && ((uint8_t *)out)[0] == 0x3, "RST2INIT with wrong qpn");
	CHECK(modify(qp, 0x504, qpn, out) == EREMOTEIO && ((uint8_t *)out)[0] == 0x10, "RTR2RTS from RESET");
	struct mlx5dv_devx_umem_in ui = { .addr = r.wq, .size = 4096, .comp_mask = MLX5DV_UMEM_MASK_DMABUF,
					  .dmabuf_fd = 0 };
	CHECK(!mlx5dv_devx_umem_reg_ex(S.ctx, &ui) && errno == EOPNOTSUPP, "dma-buf umem must be unsupported");
	CHECK(mlx5dv_devx_obj_destroy(cq) == EBUSY, "destroying a CQ in use must fail");
	CHECK(mlx5dv_devx_obj_destroy(qp) == 0 && mlx5dv_devx_obj_destroy(cq) == 0, "destroy");
	sync_peer();
}

/* Direct-posting rate: 8-byte RDMA writes, one CQE per 64, doorbell every `per` WQEs. */
static void mode_bench(long iters, int per)
{
	verbs_setup(256, 256);
	uint64_t *dst = (uint64_t *)S.buf;
	if (server) {
		rate_target(dst, iters);
		return;
	}
	uint64_t *src = (uint64_t *)(S.buf + 4096);
	sync_peer();
	long posted = 0, retired = 0;
	double t0 = now_s();
	while (retired < iters) {
		int n = 0;
		uint32_t last = 0;
		while (posted < iters && posted - retired < (long)D.qp.sq.wqe_cnt - 64 && n < per) {
			src[posted % 512] = posted + 1;
			int sig = posted % 64 == 63 || posted + 1 == iters;
			last = post(MLX5_OPCODE_RDMA_WRITE, sig, &src[posted % 512], 8, S.mr->lkey, P.addr, P.rkey, 0, 0,
				    0, 0);
			posted++;
			n++;
		}
		if (n)
			ring_db(last, 0);
		struct mlx5_cqe64 *c = (void *)((char *)D.cq.buf + (D.cq_ci & (D.cq.cqe_cnt - 1)) * 64);
		if (mlx5dv_get_cqe_opcode(c) != MLX5_CQE_INVALID && mlx5dv_get_cqe_owner(c) == !!(D.cq_ci & D.cq.cqe_cnt)) {
			__sync_synchronize();
			CHECK(mlx5dv_get_cqe_opcode(c) == MLX5_CQE_REQ, "bench CQE opcode %u", mlx5dv_get_cqe_opcode(c));
			uint16_t wc = be16toh(c->wqe_counter);
			retired += (uint16_t)(wc - (uint16_t)retired) + 1;
			cqe_done();
		}
	}
	double dt = now_s() - t0;
	printf("dvrate%d %.0f writes/s (%ld 8-byte RDMA writes posted directly, doorbell per %d)\n", per, iters / dt,
	       iters, per);
	sync_peer();
}
