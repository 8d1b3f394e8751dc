/* ibgda.c, devx construction path (NVSHMEM IBGDA / DOCA GPUNetIO style): the program owns the
 * ring memory, registers it as umems, allocates a UAR and creates the CQ and QP with raw PRM
 * commands (byte offsets: mlx5/README.md, PRM commands), then drives the QP through
 * RST2INIT / INIT2RTR / RTR2RTS with devx modify commands. With `gpu`, the ring memory comes
 * from cuMemAlloc of the libcuda.so.1 found on the loader path (dlopen + cuGetProcAddress,
 * the CUDA-runtime way) and the UAR page is registered with cuMemHostRegister(IOMEMORY) and
 * mapped with cuMemHostGetDevicePointer, as GPU-initiated stacks do. In CI that libcuda is
 * the TEST DOUBLE, whose device memory is host memory: this CPU thread can write the rings
 * and softnic can execute them. */

typedef int (*gpa_fn)(const char *, void **, int, uint64_t, int *);

struct cuda {
	void *h;
	int (*mem_alloc)(uint64_t *, size_t);
	int (*mem_free)(uint64_t);
	int (*host_register)(void *, size_t, unsigned);
	int (*host_unregister)(void *);
	int (*host_dev_ptr)(uint64_t *, void *, unsigned);
};

static void *cu_get(gpa_fn gpa, const char *name)
{
	void *p = NULL;
	int status = 0;
	if (gpa(name, &p, 12000, 0, &status) || !p)
		die(name, 0);
	return p;
}

static void cuda_open(struct cuda *c)
{
	c->h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!c->h)
		die("dlopen libcuda.so.1", 0);
	gpa_fn gpa = (gpa_fn)dlsym(c->h, "cuGetProcAddress_v2");
	if (!gpa)
		die("dlsym cuGetProcAddress_v2", 0);
	int (*init)(unsigned) = cu_get(gpa, "cuInit");
	int (*dev_get)(int *, int) = cu_get(gpa, "cuDeviceGet");
	int (*retain)(void **, int) = cu_get(gpa, "cuDevicePrimaryCtxRetain");
	int (*set_cur)(void *) = cu_get(gpa, "cuCtxSetCurrent");
	c->mem_alloc = cu_get(gpa, "cuMemAlloc");
	c->mem_free = cu_get(gpa, "cuMemFree");
	c->host_register = cu_get(gpa, "cuMemHostRegister");
	c->host_unregister = cu_get(gpa, "cuMemHostUnregister");
	c->host_dev_ptr = cu_get(gpa, "cuMemHostGetDevicePointer");
	int dev = -1;
	void *cctx = NULL;
	if (init(0) || dev_get(&dev, 0) || retain(&cctx, dev) || set_cur(cctx))
		die("CUDA initialisation", 0);
}

struct devx_a {
	int gpu;
	struct cuda cu;
	uint8_t *cqbuf, *dbr, *wq;
	size_t cq_bytes, wq_bytes;
	struct mlx5dv_devx_umem *ucq, *udbr, *uwq;
	struct mlx5dv_devx_uar *uar;
	struct mlx5dv_devx_obj *cq, *qp;
};

static void *devx_mem(struct devx_a *a, size_t n)
{
	void *p = NULL;
	if (a->gpu) {
		uint64_t d = 0;
		if (a->cu.mem_alloc(&d, n))
			die("cuMemAlloc", (long)n);
		p = (void *)(uintptr_t)d;
	} else if (posix_memalign(&p, 4096, n)) {
		die("posix_memalign", (long)n);
	}
	memset(p, 0, n);
	return p;
}

static void devx_free(struct devx_a *a, void *p)
{
	if (a->gpu) {
		if (a->cu.mem_free((uintptr_t)p))
			die("cuMemFree", 0);
	} else {
		free(p);
	}
}

/* OR `v` into the big-endian dword at byte `off` / store a big-endian qword. */
static void prm32(void *b, int off, uint32_t v)
{
	uint32_t *p = (uint32_t *)((char *)b + off);
	*p = htobe32(be32toh(*p) | v);
}

static void prm64(void *b, int off, uint64_t v)
{
	uint64_t x = htobe64(v);
	memcpy((char *)b + off, &x, 8);
}

static unsigned log2u(uint32_t v)
{
	unsigned l = 0;
	while ((1u << l) < v)
		l++;
	return l;
}

static int devx_modify(struct devx_a *a, uint16_t op, uint32_t qpn, uint32_t dest)
{
	uint32_t in[128] = { 0 }, out[4] = { 0 };
	prm32(in, 0, (uint32_t)op << 16);
	prm32(in, 8, qpn);
	if (op == 0x502) /* RST2INIT: remote read / write / atomic */
		prm32(in, 168, (1u << 15) | (1u << 14) | (1u << 13));
	if (op == 0x503) { /* INIT2RTR: MTU 1024, remote QPN, primary path, RRA, RNR, PSN */
		prm32(in, 32, 3u << 29);
		prm32(in, 44, dest);
		prm32(in, 52, lid);
		prm32(in, 168, 4u << 21);
		prm32(in, 172, (1u << 24) | 0x77);
	}
	if (op == 0x504) { /* RTR2RTS: ack timeout, SRA, retry, RNR retry, PSN */
		prm32(in, 56, 14u << 27);
		prm32(in, 136, (4u << 21) | (7u << 16) | (7u << 13));
		prm32(in, 144, 0x77);
	}
	return mlx5dv_devx_obj_modify(a->qp, in, sizeof(in), out, sizeof(out));
}

static void devx_setup(struct devx_a *a, struct ring *r, uint32_t depth, int gpu)
{
	memset(a, 0, sizeof(*a));
	a->gpu = gpu;
	if (gpu)
		cuda_open(&a->cu);
	a->cq_bytes = (size_t)depth * 64;
	a->wq_bytes = (size_t)depth * 64;
	a->cqbuf = devx_mem(a, a->cq_bytes);
	for (uint32_t k = 0; k < depth; k++)
		a->cqbuf[k * 64 + 63] = MLX5_CQE_INVALID << 4;
	a->dbr = devx_mem(a, 4096);
	a->wq = devx_mem(a, a->wq_bytes);
	a->ucq = mlx5dv_devx_umem_reg(ctx, a->cqbuf, a->cq_bytes, IBV_ACCESS_LOCAL_WRITE);
	a->udbr = mlx5dv_devx_umem_reg(ctx, a->dbr, 4096, IBV_ACCESS_LOCAL_WRITE);
	struct mlx5dv_devx_umem_in uin = { .addr = a->wq, .size = a->wq_bytes, .access = IBV_ACCESS_LOCAL_WRITE,
					   .pgsz_bitmap = 4096 };
	a->uwq = mlx5dv_devx_umem_reg_ex(ctx, &uin);
	if (!a->ucq || !a->udbr || !a->uwq)
		die("mlx5dv_devx_umem_reg", 0);
	a->uar = mlx5dv_devx_alloc_uar(ctx, MLX5DV_UAR_ALLOC_TYPE_NC);
	if (!a->uar)
		die("mlx5dv_devx_alloc_uar", 0);
	if (gpu) {
		uint64_t dptr = 0;
		if (a->cu.host_register(a->uar->base_addr, 4096, 0x1 | 0x2 | 0x4) ||
		    a->cu.host_dev_ptr(&dptr, a->uar->reg_addr, 0))
			die("cuMemHostRegister(IOMEMORY) of the UAR", 0);
		printf("uar reg=%p device=0x%llx\n", a->uar->reg_addr, (unsigned long long)dptr);
	}
	struct mlx5dv_pd dpd;
	struct mlx5dv_obj o = { .pd = { pd, &dpd } };
	if (mlx5dv_init_obj(&o, MLX5DV_OBJ_PD))
		die("mlx5dv_init_obj(PD)", 0);

	uint32_t in[128] = { 0 }, out[4] = { 0 };
	prm32(in, 0, 0x400u << 16);                               /* CREATE_CQ */
	prm32(in, 16, 1u << 25);                                  /* cqc.dbr_umem_valid */
	prm32(in, 20, a->udbr->umem_id);                          /* cqc.dbr_umem_id */
	prm32(in, 28, log2u(depth) << 24 | a->uar->page_id);      /* log_cq_size, uar_page */
	prm64(in, 72, 0);                                         /* cqc.dbr_addr */
	prm64(in, 80, 0);                                         /* cq_umem_offset */
	prm32(in, 88, a->ucq->umem_id);                           /* cq_umem_id */
	prm32(in, 92, 1u << 31);                                  /* cq_umem_valid */
	a->cq = mlx5dv_devx_obj_create(ctx, in, 256, out, sizeof(out));
	if (!a->cq || ((uint8_t *)out)[0])
		die("CREATE_CQ", ((uint8_t *)out)[0]);
	uint32_t cqn = be32toh(out[2]) & 0xffffff;

	memset(in, 0, sizeof(in));
	memset(out, 0, sizeof(out));
	prm32(in, 0, 0x500u << 16);                               /* CREATE_QP */
	prm32(in, 28, dpd.pdn);                                   /* qpc.st = RC (0), pd */
	prm32(in, 32, log2u(depth) << 11);                        /* log_sq_size; RQ empty */
	prm32(in, 36, a->uar->page_id);
	prm32(in, 148, cqn);                                      /* cqn_snd */
	prm32(in, 180, cqn);                                      /* cqn_rcv */
	prm64(in, 184, 64);                                       /* dbr_addr in the DBR umem */
	prm32(in, 196, 3u << 24);                                 /* rq_type: zero-length RQ */
	prm32(in, 232, 1u << 28);                                 /* qpc.dbr_umem_valid */
	prm32(in, 252, a->udbr->umem_id);
	prm64(in, 256, 0);                                        /* wq_umem_offset */
	prm32(in, 264, a->uwq->umem_id);
	prm32(in, 268, 1u << 31);                                 /* wq_umem_valid */
	a->qp = mlx5dv_devx_obj_create(ctx, in, 320, out, sizeof(out));
	if (!a->qp || ((uint8_t *)out)[0])
		die("CREATE_QP", ((uint8_t *)out)[0]);
	uint32_t qpn = be32toh(out[2]) & 0xffffff;
	if (devx_modify(a, 0x502, qpn, 0) || devx_modify(a, 0x503, qpn, qp_b->qp_num) ||
	    devx_modify(a, 0x504, qpn, 0))
		die("devx QP transitions", 0);
	*r = (struct ring){ .qpn = qpn, .wqebbs = depth, .sq = a->wq, .dbrec = (__be32 *)(a->dbr + 64),
			    .bf = a->uar->reg_addr, .bf_size = 256, .cqn = cqn, .cqe_cnt = depth, .cq = a->cqbuf,
			    .cq_dbrec = (__be32 *)a->dbr };
	printf("A qpn=%u sq=%p wqebbs=%u dbrec=%p cqn=%u cq=%p cqes=%u\n", r->qpn, (void *)r->sq, r->wqebbs,
	       (void *)r->dbrec, r->cqn, (void *)r->cq, r->cqe_cnt);
}

/* Waits (bounded) for the tracer's device poller to show up as a launch in the libcuda test
 * double, and prints it. Nothing to do untraced or on a real driver. */
static void devx_wait_device_poller(struct devx_a *a)
{
	uint64_t (*count)(void) = (uint64_t (*)(void))dlsym(a->cu.h, "sigmatrace_cuda_double_launch_count");
	struct launch {
		uint32_t api, grid[3], block[3], shm;
		uint64_t function, stream, params, first;
	} l;
	int (*get)(uint64_t, struct launch *) = (int (*)(uint64_t, struct launch *))dlsym(
		a->cu.h, "sigmatrace_cuda_double_launch");
	if (!count || !get || !poller_sync)
		return;
	double t0 = now_s();
	while (count() == 0 && now_s() - t0 < 20) {
		struct timespec ts = { 0, 1000000 };
		nanosleep(&ts, NULL);
	}
	for (uint64_t k = 0; k < count(); k++)
		if (!get(k, &l))
			printf("launch api=%u grid=%u,%u,%u block=%u,%u,%u\n", l.api, l.grid[0], l.grid[1], l.grid[2],
			       l.block[0], l.block[1], l.block[2]);
}

static void devx_teardown(struct devx_a *a)
{
	if (a->gpu)
		devx_wait_device_poller(a);
	if (mlx5dv_devx_obj_destroy(a->qp) || mlx5dv_devx_obj_destroy(a->cq))
		die("devx destroy", 0);
	if (mlx5dv_devx_umem_dereg(a->ucq) || mlx5dv_devx_umem_dereg(a->udbr) || mlx5dv_devx_umem_dereg(a->uwq))
		die("mlx5dv_devx_umem_dereg", 0);
	if (a->gpu && a->cu.host_unregister(a->uar->base_addr))
		die("cuMemHostUnregister", 0);
	mlx5dv_devx_free_uar(a->uar);
	devx_free(a, a->cqbuf);
	devx_free(a, a->dbr);
	devx_free(a, a->wq);
}
