/* Hardware semantics and the compat ABI in one process (two loopback QPs where a peer is
 * needed). Modes: compat, cq, async, qp_event, srq_limit, rereg, odp, dm, order, dereg_race.
 * Prints "OK <mode>". */
#include "sn_common.h"
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/mman.h>

/* Two RC QPs of one context connected to each other. */
struct pair {
	struct sn s;
	struct ibv_qp *a, *b;
};

static void pair_init(struct pair *p, struct ibv_srq *srq)
{
	sn_init(&p->s, 1 << 16, ALL_ACCESS);
	p->a = make_qp(&p->s, IBV_QPT_RC, NULL, 1);
	p->b = make_qp(&p->s, IBV_QPT_RC, srq, 1);
	struct peer_info i = { .lid = p->s.port.lid, .psn = 0 };
	qp_init(p->a, 0);
	qp_init(p->b, 0);
	qp_rtr_rts(p->a, &i, p->b->qp_num, 0, 7, 1);
	qp_rtr_rts(p->b, &i, p->a->qp_num, 0, 7, 1);
}

static struct ibv_wc write_to(struct pair *p, uint64_t raddr, uint32_t rkey)
{
	struct ibv_sge sge = { .addr = (uintptr_t)p->s.buf, .length = 64, .lkey = p->s.mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 7, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	CHECK(ibv_post_send(p->a, &wr, &bad) == 0, "post write");
	return poll1(p->s.cq);
}

/* Waits up to 5 s for the next async event (through a non-blocking poll of async_fd). */
static struct ibv_async_event next_event(struct ibv_context *c)
{
	struct pollfd pfd = { .fd = c->async_fd, .events = POLLIN };
	CHECK(poll(&pfd, 1, 5000) == 1, "no async event within 5 s");
	struct ibv_async_event e;
	CHECK(ibv_get_async_event(c, &e) == 0, "get async event");
	ibv_ack_async_event(&e);
	return e;
}

static void mode_cq(void)
{
	struct ibv_context *c = open_dev();
	CHECK(c->num_comp_vectors >= 1, "comp vectors");
	errno = 0;
	CHECK(!ibv_create_cq(c, 16, NULL, NULL, c->num_comp_vectors), "comp_vector == num accepted");
	CHECK(errno == EINVAL, "comp_vector: errno %d", errno);
	struct ibv_cq *ok = ibv_create_cq(c, 16, NULL, NULL, c->num_comp_vectors - 1);
	CHECK(ok, "last comp vector");
	ibv_destroy_cq(ok);
	uint64_t bad[] = { IBV_WC_EX_WITH_CVLAN, IBV_WC_EX_WITH_FLOW_TAG, IBV_WC_EX_WITH_TM_INFO };
	for (int i = 0; i < 3; i++) {
		struct ibv_cq_init_attr_ex a = { .cqe = 16, .wc_flags = IBV_WC_EX_WITH_BYTE_LEN | bad[i] };
		errno = 0;
		CHECK(!ibv_create_cq_ex(c, &a), "wc_flags %llx accepted", (unsigned long long)bad[i]);
		CHECK(errno == EOPNOTSUPP, "wc_flags %llx: errno %d", (unsigned long long)bad[i], errno);
	}
	struct ibv_cq_init_attr_ex a = { .cqe = 16, .comp_vector = 5, .wc_flags = IBV_WC_EX_WITH_BYTE_LEN };
	errno = 0;
	CHECK(!ibv_create_cq_ex(c, &a) && errno == EINVAL, "cq_ex comp_vector: errno %d", errno);
	ibv_close_device(c);
}

static void mode_async(void)
{
	struct ibv_context *c = open_dev();
	struct ibv_async_event e = next_event(c);
	CHECK(e.event_type == IBV_EVENT_PORT_ACTIVE && e.element.port_num == 1, "first event %d port %d",
	      e.event_type, e.element.port_num);
	struct pollfd pfd = { .fd = c->async_fd, .events = POLLIN };
	CHECK(poll(&pfd, 1, 100) == 0, "a second event without cause");
	struct ibv_device_attr d;
	CHECK(ibv_query_device(c, &d) == 0, "query device");
	CHECK(d.vendor_id == 0x02c9 && d.vendor_part_id == 4123, "identity %x/%u", d.vendor_id, d.vendor_part_id);
	struct ibv_port_attr pa;
	CHECK(ibv_query_port(c, 1, &pa) == 0, "query port");
	CHECK(pa.link_layer == IBV_LINK_LAYER_INFINIBAND && pa.state == IBV_PORT_ACTIVE, "port");
	ibv_close_device(c);
}

static void mode_qp_event(void)
{
	struct pair p;
	pair_init(&p, NULL);
	CHECK(next_event(p.s.ctx).event_type == IBV_EVENT_PORT_ACTIVE, "port active first");
	struct ibv_wc wc = write_to(&p, (uintptr_t)p.s.buf, p.s.mr->rkey + 1);
	CHECK(wc.status == IBV_WC_REM_ACCESS_ERR, "bad rkey: %s", ibv_wc_status_str(wc.status));
	struct ibv_async_event e = next_event(p.s.ctx);
	CHECK(e.event_type == IBV_EVENT_QP_ACCESS_ERR && e.element.qp == p.b, "event %s qp %p (b %p)",
	      ibv_event_type_str(e.event_type), (void *)e.element.qp, (void *)p.b);
	CHECK(p.b->events_completed == 1, "ack counted on the QP");
}

static void mode_srq_limit(void)
{
	struct sn tmp;
	(void)tmp;
	struct pair p;
	sn_init(&p.s, 1 << 16, ALL_ACCESS);
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 64, .max_sge = 1 } };
	struct ibv_srq *srq = ibv_create_srq(p.s.pd, &sa);
	CHECK(srq, "srq");
	p.a = make_qp(&p.s, IBV_QPT_RC, NULL, 1);
	p.b = make_qp(&p.s, IBV_QPT_RC, srq, 1);
	struct peer_info i = { .lid = p.s.port.lid };
	qp_init(p.a, 0);
	qp_init(p.b, 0);
	qp_rtr_rts(p.a, &i, p.b->qp_num, 0, 7, 1);
	qp_rtr_rts(p.b, &i, p.a->qp_num, 0, 7, 1);
	CHECK(next_event(p.s.ctx).event_type == IBV_EVENT_PORT_ACTIVE, "port active first");
	for (int k = 0; k < 4; k++)
		post_recv(NULL, srq, 100 + k, p.s.buf + 4096 + 256 * k, 256, p.s.mr->lkey);
	struct ibv_srq_attr lim = { .srq_limit = 3 };
	CHECK(ibv_modify_srq(srq, &lim, IBV_SRQ_LIMIT) == 0, "arm limit");
	for (int k = 0; k < 2; k++) {
		struct ibv_sge sge = { .addr = (uintptr_t)p.s.buf, .length = 8, .lkey = p.s.mr->lkey };
		struct ibv_send_wr wr = { .wr_id = k, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
					  .send_flags = IBV_SEND_SIGNALED }, *bad;
		CHECK(ibv_post_send(p.a, &wr, &bad) == 0, "send");
		struct ibv_wc w1 = poll1(p.s.cq), w2 = poll1(p.s.cq);
		CHECK(w1.status == IBV_WC_SUCCESS && w2.status == IBV_WC_SUCCESS, "send/recv");
		if (k == 0) {
			/* 3 left, not fewer than the limit: no event yet. */
			struct pollfd pfd = { .fd = p.s.ctx->async_fd, .events = POLLIN };
			CHECK(poll(&pfd, 1, 100) == 0, "limit event too early");
		}
	}
	struct ibv_async_event e = next_event(p.s.ctx);
	CHECK(e.event_type == IBV_EVENT_SRQ_LIMIT_REACHED && e.element.srq == srq, "event %s",
	      ibv_event_type_str(e.event_type));
	CHECK(ibv_query_srq(srq, &lim) == 0 && lim.srq_limit == 0, "limit disarmed: %u", lim.srq_limit);
	/* A QP on an SRQ entering ERR: last WQE reached. */
	struct ibv_qp_attr ea = { .qp_state = IBV_QPS_ERR };
	CHECK(ibv_modify_qp(p.b, &ea, IBV_QP_STATE) == 0, "to ERR");
	e = next_event(p.s.ctx);
	CHECK(e.event_type == IBV_EVENT_QP_LAST_WQE_REACHED && e.element.qp == p.b, "event %s",
	      ibv_event_type_str(e.event_type));
}

static void mode_rereg(void)
{
	struct pair p;
	pair_init(&p, NULL);
	/* Target MR registered by B's side, then moved to another PD / address. */
	char *t1 = aligned_alloc(4096, 8192), *t2 = aligned_alloc(4096, 8192);
	struct ibv_mr *mr = ibv_reg_mr(p.s.pd, t1, 8192, ALL_ACCESS);
	CHECK(mr, "reg");
	struct ibv_wc wc = write_to(&p, (uintptr_t)t1, mr->rkey);
	CHECK(wc.status == IBV_WC_SUCCESS, "write before rereg: %s", ibv_wc_status_str(wc.status));
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, t2, 8192, 0) == 0, "rereg addr");
	wc = write_to(&p, (uintptr_t)t1, mr->rkey);
	CHECK(wc.status == IBV_WC_REM_ACCESS_ERR, "old address after rereg: %s", ibv_wc_status_str(wc.status));

	struct pair q;
	pair_init(&q, NULL);
	struct ibv_pd *pd2 = ibv_alloc_pd(q.s.ctx);
	struct ibv_mr *mr2 = ibv_reg_mr(q.s.pd, t1, 8192, ALL_ACCESS);
	CHECK(ibv_rereg_mr(mr2, IBV_REREG_MR_CHANGE_PD, pd2, NULL, 0, 0) == 0, "rereg pd");
	wc = write_to(&q, (uintptr_t)t1, mr2->rkey);
	CHECK(wc.status == IBV_WC_REM_ACCESS_ERR, "other PD after rereg: %s", ibv_wc_status_str(wc.status));
}

/* On-demand paging: the device reports it for RC; an ODP region whose pages were never
 * touched takes an RDMA WRITE; ibv_advise_mr prefetches ODP ranges and refuses the rest as the
 * kernel does (ENOENT: not ODP, other PD, outside, read-only for PREFETCH_WRITE; EOPNOTSUPP:
 * unknown advice or flag; EINVAL: no SGE). */
static void mode_odp(void)
{
	struct pair p;
	pair_init(&p, NULL);
	struct ibv_device_attr_ex a;
	CHECK(ibv_query_device_ex(p.s.ctx, NULL, &a) == 0, "query_device_ex");
	CHECK(a.odp_caps.general_caps & IBV_ODP_SUPPORT, "general ODP caps %#llx",
	      (unsigned long long)a.odp_caps.general_caps);
	uint32_t rc = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE |
		      IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_ATOMIC | IBV_ODP_SUPPORT_SRQ_RECV;
	CHECK((a.odp_caps.per_transport_caps.rc_odp_caps & rc) == rc, "RC ODP caps %#x",
	      a.odp_caps.per_transport_caps.rc_odp_caps);
	CHECK(!(a.odp_caps.general_caps & IBV_ODP_SUPPORT_IMPLICIT), "implicit ODP not offered");

	size_t len = 1 << 20;
	char *t = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(t != MAP_FAILED, "mmap");
	struct ibv_mr *odp = ibv_reg_mr(p.s.pd, t, len, ALL_ACCESS | IBV_ACCESS_ON_DEMAND);
	CHECK(odp, "reg ODP: %s", strerror(errno));
	struct ibv_sge sge = { .addr = (uintptr_t)t, .length = 8192, .lkey = odp->lkey };
	CHECK(ibv_advise_mr(p.s.pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, IBV_ADVISE_MR_FLAG_FLUSH,
			    &sge, 1) == 0, "prefetch write");
	CHECK(ibv_advise_mr(p.s.pd, IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT, 0, &sge, 1) == 0,
	      "prefetch no fault");
	struct ibv_wc wc = write_to(&p, (uintptr_t)t + 512 * 1024, odp->rkey);
	CHECK(wc.status == IBV_WC_SUCCESS, "write into untouched ODP pages: %s",
	      ibv_wc_status_str(wc.status));
	CHECK(!memcmp(t + 512 * 1024, p.s.buf, 64), "written bytes");

	CHECK(ibv_advise_mr(p.s.pd, 7, 0, &sge, 1) == EOPNOTSUPP, "unknown advice");
	CHECK(ibv_advise_mr(p.s.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 2, &sge, 1) == EOPNOTSUPP,
	      "unknown flag");
	CHECK(ibv_advise_mr(p.s.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &sge, 0) == EINVAL, "no SGE");
	struct ibv_sge outside = { .addr = (uintptr_t)t + len - 4096, .length = 8192, .lkey = odp->lkey };
	CHECK(ibv_advise_mr(p.s.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &outside, 1) == ENOENT,
	      "range outside");
	struct ibv_sge plain = { .addr = (uintptr_t)p.s.buf, .length = 64, .lkey = p.s.mr->lkey };
	CHECK(ibv_advise_mr(p.s.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &plain, 1) == ENOENT,
	      "not an ODP region");
	struct ibv_pd *pd2 = ibv_alloc_pd(p.s.ctx);
	CHECK(ibv_advise_mr(pd2, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &sge, 1) == ENOENT, "other PD");
	struct ibv_mr *ro = ibv_reg_mr(p.s.pd, t, 4096, IBV_ACCESS_ON_DEMAND);
	struct ibv_sge rsge = { .addr = (uintptr_t)t, .length = 4096, .lkey = ro->lkey };
	CHECK(ibv_advise_mr(p.s.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &rsge, 1) == 0, "read-only read");
	CHECK(ibv_advise_mr(p.s.pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, 0, &rsge, 1) == ENOENT,
	      "read-only write");
}

/* Device memory: the device offers max_dm_size bytes; copies in and out, bounds (EFAULT);
 * a zero-based region on it (required: EINVAL without IBV_ACCESS_ZERO_BASED) takes an RDMA
 * WRITE at offset 64 and is the source of an RDMA READ into host memory; allocations beyond
 * the size fail with ENOMEM until freed. */
static void mode_dm(void)
{
	struct pair p;
	pair_init(&p, NULL);
	struct ibv_device_attr_ex a;
	CHECK(ibv_query_device_ex(p.s.ctx, NULL, &a) == 0, "query_device_ex");
	CHECK(a.max_dm_size >= 8192, "max_dm_size %llu", (unsigned long long)a.max_dm_size);
	struct ibv_alloc_dm_attr da = { .length = 4096 };
	struct ibv_dm *dm = ibv_alloc_dm(p.s.ctx, &da);
	CHECK(dm, "alloc_dm: %s", strerror(errno));
	char in[256], out[256];
	for (int i = 0; i < 256; i++)
		in[i] = (char)(i * 7 + 1);
	CHECK(ibv_memcpy_to_dm(dm, 1024, in, sizeof in) == 0, "memcpy_to_dm");
	CHECK(ibv_memcpy_from_dm(out, dm, 1024, sizeof out) == 0 && !memcmp(in, out, sizeof in),
	      "round trip");
	CHECK(ibv_memcpy_to_dm(dm, 4000, in, 200) == EFAULT, "past the end");
	CHECK(!ibv_reg_dm_mr(p.s.pd, dm, 0, 4096, ALL_ACCESS) && errno == EINVAL, "not zero-based");
	struct ibv_mr *mr = ibv_reg_dm_mr(p.s.pd, dm, 0, 4096, ALL_ACCESS | IBV_ACCESS_ZERO_BASED);
	CHECK(mr, "reg_dm_mr: %s", strerror(errno));

	memset(p.s.buf, 0x5a, 64);
	struct ibv_wc wc = write_to(&p, 64, mr->rkey);
	CHECK(wc.status == IBV_WC_SUCCESS, "write into dm: %s", ibv_wc_status_str(wc.status));
	CHECK(ibv_memcpy_from_dm(out, dm, 64, 64) == 0, "read back");
	for (int i = 0; i < 64; i++)
		CHECK(out[i] == 0x5a, "dm byte %d = %#x", i, out[i]);

	struct ibv_sge sge = { .addr = (uintptr_t)p.s.buf + 4096, .length = 256, .lkey = p.s.mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 8, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_READ,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;
	wr.wr.rdma.remote_addr = 1024;
	wr.wr.rdma.rkey = mr->rkey;
	CHECK(ibv_post_send(p.a, &wr, &bad) == 0, "post read");
	wc = poll1(p.s.cq);
	CHECK(wc.status == IBV_WC_SUCCESS, "read from dm: %s", ibv_wc_status_str(wc.status));
	CHECK(!memcmp(p.s.buf + 4096, in, 256), "bytes read from dm");

	struct ibv_alloc_dm_attr big = { .length = a.max_dm_size };
	CHECK(!ibv_alloc_dm(p.s.ctx, &big) && errno == ENOMEM, "beyond the device memory");
	CHECK(ibv_dereg_mr(mr) == 0 && ibv_free_dm(dm) == 0, "free");
	struct ibv_dm *all = ibv_alloc_dm(p.s.ctx, &big);
	CHECK(all, "all of it once freed: %s", strerror(errno));
	CHECK(ibv_free_dm(all) == 0, "free all");
}

/* Completion order across a QP's two directions: A SENDs to B, B answers as soon as its
 * receive completes; A's send completion must come before the receive of the answer (B
 * acknowledged A's message on receipt, before its program could answer, and a NIC meets the
 * ACK first). Many round trips, the process's progress thread and the polling thread both
 * driving the QPs. */
static void mode_order(void)
{
	struct pair p;
	pair_init(&p, NULL);
	struct ibv_sge sa = { .addr = (uintptr_t)p.s.buf, .length = 8, .lkey = p.s.mr->lkey };
	struct ibv_sge sb = { .addr = (uintptr_t)p.s.buf + 64, .length = 8, .lkey = p.s.mr->lkey };
	char *rbuf = (char *)p.s.buf + 4096;
	for (int i = 0; i < 20000; i++) {
		post_recv(p.a, NULL, 1, rbuf, 64, p.s.mr->lkey);
		post_recv(p.b, NULL, 2, rbuf + 64, 64, p.s.mr->lkey);
		struct ibv_send_wr wa = { .wr_id = 10, .sg_list = &sa, .num_sge = 1,
					  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *bad;
		struct ibv_send_wr wb = wa;
		wb.wr_id = 20;
		wb.sg_list = &sb;
		CHECK(ibv_post_send(p.a, &wa, &bad) == 0, "post A");
		int a_sent = 0, a_recv = 0, b_recv = 0, b_sent = 0;
		while (!(a_sent && a_recv && b_sent)) {
			struct ibv_wc wc = poll1(p.s.cq);
			CHECK(wc.status == IBV_WC_SUCCESS, "round %d: status %d", i, wc.status);
			if (wc.qp_num == p.a->qp_num && wc.opcode == IBV_WC_SEND) {
				a_sent = 1;
			} else if (wc.qp_num == p.a->qp_num) {
				CHECK(a_sent, "round %d: the answer's receive before the send it answers", i);
				a_recv = 1;
			} else if (wc.opcode == IBV_WC_SEND) {
				b_sent = 1;
			} else {
				CHECK(!b_recv, "round %d: two receives on B", i);
				b_recv = 1;
				CHECK(ibv_post_send(p.b, &wb, &bad) == 0, "post B");
			}
		}
	}
}

/* ibv_dereg_mr while a peer's 1 MiB RDMA WRITE into the region is in flight, then munmap: as on
 * a NIC, bytes that began landing before the call finish before it returns and none land
 * after, so the program survives its munmap; the write completes either successfully or
 * with a remote access error. Many rounds, a new QP pair for each. */
static void mode_dereg_race(void)
{
	size_t len = 1 << 20;
	int done = 0, refused = 0;
	for (int i = 0; i < 40; i++) {
		struct pair p;
		pair_init(&p, NULL);
		char *src = malloc(len);
		memset(src, i, len);
		struct ibv_mr *smr = ibv_reg_mr(p.s.pd, src, len, IBV_ACCESS_LOCAL_WRITE);
		char *dst = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		CHECK(smr && dst != MAP_FAILED, "buffers");
		struct ibv_mr *dmr = ibv_reg_mr(p.s.pd, dst, len,
						IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
		CHECK(dmr, "reg dst");
		struct ibv_sge sge = { .addr = (uintptr_t)src, .length = len, .lkey = smr->lkey };
		struct ibv_send_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1,
					  .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED }, *bad;
		wr.wr.rdma.remote_addr = (uintptr_t)dst;
		wr.wr.rdma.rkey = dmr->rkey;
		CHECK(ibv_post_send(p.a, &wr, &bad) == 0, "post write");
		/* Let some of it land (round-dependent), then take the region away. */
		for (volatile int k = 0; k < i * 2000; k++)
			;
		CHECK(ibv_dereg_mr(dmr) == 0, "dereg");
		CHECK(munmap(dst, len) == 0, "munmap");
		struct ibv_wc wc = poll1(p.s.cq);
		CHECK(wc.wr_id == 1, "the write's completion");
		if (wc.status == IBV_WC_SUCCESS) {
			done++;
		} else {
			CHECK(wc.status == IBV_WC_REM_ACCESS_ERR, "round %d: status %d", i, wc.status);
			refused++;
		}
		ibv_destroy_qp(p.a);
		ibv_destroy_qp(p.b);
		ibv_dereg_mr(smr);
		free(src);
	}
	printf("dereg_race: %d completed, %d refused\n", done, refused);
}

#include "compat_calls.h"

int main(int argc, char **argv)
{
	CHECK(argc == 2, "usage: hw_test MODE");
	const char *m = argv[1];
	if (!strcmp(m, "cq"))
		mode_cq();
	else if (!strcmp(m, "async"))
		mode_async();
	else if (!strcmp(m, "qp_event"))
		mode_qp_event();
	else if (!strcmp(m, "srq_limit"))
		mode_srq_limit();
	else if (!strcmp(m, "rereg"))
		mode_rereg();
	else if (!strcmp(m, "odp"))
		mode_odp();
	else if (!strcmp(m, "dm"))
		mode_dm();
	else if (!strcmp(m, "compat"))
		mode_compat();
	else if (!strcmp(m, "order"))
		mode_order();
	else if (!strcmp(m, "dereg_race"))
		mode_dereg_race();
	else
		FAIL("unknown mode %s", m);
	printf("OK %s\n", m);
	return 0;
}
