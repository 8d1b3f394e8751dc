/* mode_compat of hw_test.c: every compat export resolved with dlvsym and called. The
 * IBVERBS_1.1 versions (what dlopen+dlvsym users such as NCCL call) are compared field by
 * field with the header's (inline) path; the IBVERBS_1.0 twins (the pre-2006 ABI, not
 * implemented) must give the not-supported result. */
#ifndef COMPAT_CALLS_H
#define COMPAT_CALLS_H

static void *h_verbs;
static void *v11(const char *n)
{
	void *p = dlvsym(h_verbs, n, "IBVERBS_1.1");
	CHECK(p, "dlvsym(%s, IBVERBS_1.1)", n);
	return p;
}
#define V11(T, n) ((T)v11(#n))

static const char *const compat10_ptr[] = { "ibv_alloc_pd", "ibv_create_ah", "ibv_create_cq", "ibv_create_qp",
					   "ibv_create_srq", "ibv_get_device_list", "ibv_get_device_name",
					   "ibv_open_device", "ibv_reg_mr" };
static const char *const compat10_int[] = {
	"ibv_attach_mcast", "ibv_close_device", "ibv_dealloc_pd",  "ibv_dereg_mr",     "ibv_destroy_ah",
	"ibv_destroy_cq",   "ibv_destroy_qp",   "ibv_destroy_srq", "ibv_detach_mcast", "ibv_get_async_event",
	"ibv_get_cq_event", "ibv_modify_qp",    "ibv_modify_srq",  "ibv_query_device", "ibv_query_gid",
	"ibv_query_pkey",   "ibv_query_port",   "ibv_query_qp",    "ibv_query_srq",    "ibv_resize_cq"
};
static const char *const compat10_void[] = { "ibv_ack_async_event", "ibv_ack_cq_events", "ibv_free_device_list",
					    "ibv_get_device_guid" };

static void compat10(void)
{
	for (size_t i = 0; i < sizeof(compat10_ptr) / sizeof(*compat10_ptr); i++) {
		void *(*f)(void *, void *, void *, void *) = dlvsym(h_verbs, compat10_ptr[i], "IBVERBS_1.0");
		CHECK(f, "dlvsym(%s, IBVERBS_1.0)", compat10_ptr[i]);
		errno = 0;
		CHECK(!f(NULL, NULL, NULL, NULL) && errno == EOPNOTSUPP, "%s@1.0: not NULL/EOPNOTSUPP",
		      compat10_ptr[i]);
	}
	for (size_t i = 0; i < sizeof(compat10_int) / sizeof(*compat10_int); i++) {
		int (*f)(void *, void *, void *, void *) = dlvsym(h_verbs, compat10_int[i], "IBVERBS_1.0");
		CHECK(f, "dlvsym(%s, IBVERBS_1.0)", compat10_int[i]);
		CHECK(f(NULL, NULL, NULL, NULL) == EOPNOTSUPP, "%s@1.0: not EOPNOTSUPP", compat10_int[i]);
	}
	for (size_t i = 0; i < sizeof(compat10_void) / sizeof(*compat10_void); i++) {
		void (*f)(void *) = dlvsym(h_verbs, compat10_void[i], "IBVERBS_1.0");
		CHECK(f, "dlvsym(%s, IBVERBS_1.0)", compat10_void[i]);
		f(NULL);
	}
}

static void compat11_device(struct ibv_context *c, struct ibv_context *c2)
{
	struct ibv_device_attr a, b;
	memset(&a, 0xa5, sizeof(a));
	memset(&b, 0x5a, sizeof(b));
	CHECK(ibv_query_device(c, &a) == 0, "query device");
	CHECK(V11(int (*)(struct ibv_context *, struct ibv_device_attr *), ibv_query_device)(c2, &b) == 0, "qd");
	CHECK(!strcmp(a.fw_ver, b.fw_ver) && a.node_guid == b.node_guid && a.vendor_id == b.vendor_id &&
		      a.vendor_part_id == b.vendor_part_id && a.max_qp == b.max_qp && a.max_qp_wr == b.max_qp_wr &&
		      a.max_sge == b.max_sge && a.max_cqe == b.max_cqe && a.max_mr_size == b.max_mr_size &&
		      a.atomic_cap == b.atomic_cap && a.phys_port_cnt == b.phys_port_cnt &&
		      a.max_qp_rd_atom == b.max_qp_rd_atom && a.max_srq_wr == b.max_srq_wr,
	      "query_device@1.1 differs");

	/* ibv_query_port: inline path (verbs_context op) vs the exported 1.1 function, which
	 * fills the 48-byte struct _compat_ibv_port_attr. */
	struct ibv_port_attr in;
	unsigned char raw[sizeof(struct ibv_port_attr)];
	memset(&in, 0xa5, sizeof(in));
	memset(raw, 0, sizeof(raw));
	CHECK(ibv_query_port(c, 1, &in) == 0, "inline query_port");
	CHECK(V11(int (*)(struct ibv_context *, uint8_t, void *), ibv_query_port)(c2, 1, raw) == 0, "qp@1.1");
	struct ibv_port_attr out;
	memcpy(&out, raw, sizeof(out));
	CHECK(out.state == IBV_PORT_ACTIVE && out.lid != 0, "query_port@1.1: state %d lid %u", out.state, out.lid);
	CHECK(out.state == in.state && out.max_mtu == in.max_mtu && out.active_mtu == in.active_mtu &&
		      out.gid_tbl_len == in.gid_tbl_len && out.port_cap_flags == in.port_cap_flags &&
		      out.max_msg_sz == in.max_msg_sz && out.pkey_tbl_len == in.pkey_tbl_len && out.lid == in.lid &&
		      out.sm_lid == in.sm_lid && out.lmc == in.lmc && out.max_vl_num == in.max_vl_num &&
		      out.subnet_timeout == in.subnet_timeout && out.active_width == in.active_width &&
		      out.active_speed == in.active_speed && out.phys_state == in.phys_state &&
		      out.link_layer == in.link_layer && out.flags == in.flags,
	      "query_port@1.1 differs from the inline path");
	CHECK(raw[48] == 0 && raw[49] == 0, "query_port@1.1 wrote past the 48-byte compat struct");

	union ibv_gid g1, g2;
	uint16_t k1, k2;
	CHECK(ibv_query_gid(c, 1, 0, &g1) == 0, "gid");
	CHECK(V11(int (*)(struct ibv_context *, uint8_t, int, union ibv_gid *), ibv_query_gid)(c2, 1, 0, &g2) == 0 &&
		      !memcmp(&g1, &g2, 16),
	      "query_gid@1.1");
	CHECK(ibv_query_pkey(c, 1, 0, &k1) == 0, "pkey");
	CHECK(V11(int (*)(struct ibv_context *, uint8_t, int, uint16_t *), ibv_query_pkey)(c2, 1, 0, &k2) == 0 &&
		      k1 == k2,
	      "query_pkey@1.1");
	struct ibv_async_event e;
	CHECK(V11(int (*)(struct ibv_context *, struct ibv_async_event *), ibv_get_async_event)(c2, &e) == 0 &&
		      e.event_type == IBV_EVENT_PORT_ACTIVE && e.element.port_num == 1,
	      "get_async_event@1.1");
	V11(void (*)(struct ibv_async_event *), ibv_ack_async_event)(&e);
}

static void compat11_objects(struct ibv_context *c2)
{
	struct ibv_pd *pd = V11(struct ibv_pd * (*)(struct ibv_context *), ibv_alloc_pd)(c2);
	CHECK(pd && pd->context == c2, "alloc_pd@1.1");
	char *buf = aligned_alloc(4096, 8192);
	struct ibv_mr *mr =
		V11(struct ibv_mr * (*)(struct ibv_pd *, void *, size_t, int), ibv_reg_mr)(pd, buf, 8192, ALL_ACCESS);
	CHECK(mr && mr->addr == buf && mr->length == 8192 && mr->pd == pd && mr->lkey, "reg_mr@1.1");
	struct ibv_cq *cq = V11(struct ibv_cq * (*)(struct ibv_context *, int, void *, void *, int), ibv_create_cq)(
		c2, 64, NULL, NULL, 0);
	struct ibv_cq *cq_in = ibv_create_cq(c2, 64, NULL, NULL, 0);
	CHECK(cq && cq_in && cq->cqe == cq_in->cqe && cq->context == c2, "create_cq@1.1");
	CHECK(V11(int (*)(struct ibv_cq *, int), ibv_resize_cq)(cq, 128) == ibv_resize_cq(cq_in, 128) &&
		      cq->cqe == cq_in->cqe,
	      "resize_cq@1.1");
	struct ibv_qp_init_attr ia = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				       .cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1 } };
	struct ibv_qp *qp = V11(struct ibv_qp * (*)(struct ibv_pd *, struct ibv_qp_init_attr *), ibv_create_qp)(pd, &ia);
	CHECK(qp && qp->qp_type == IBV_QPT_RC && qp->state == IBV_QPS_RESET, "create_qp@1.1");
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qp_access_flags = ALL_ACCESS };
	CHECK(V11(int (*)(struct ibv_qp *, struct ibv_qp_attr *, int), ibv_modify_qp)(
		      qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0,
	      "modify_qp@1.1");
	struct ibv_qp_attr q1, q2;
	struct ibv_qp_init_attr i1, i2;
	memset(&q1, 0, sizeof(q1));
	memset(&q2, 0, sizeof(q2));
	CHECK(ibv_query_qp(qp, &q1, IBV_QP_STATE | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS | IBV_QP_CAP, &i1) == 0, "qq");
	CHECK(V11(int (*)(struct ibv_qp *, struct ibv_qp_attr *, int, struct ibv_qp_init_attr *), ibv_query_qp)(
		      qp, &q2, IBV_QP_STATE | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS | IBV_QP_CAP, &i2) == 0,
	      "query_qp@1.1");
	CHECK(q1.qp_state == IBV_QPS_INIT && q2.qp_state == q1.qp_state && q2.port_num == q1.port_num &&
		      q2.qp_access_flags == q1.qp_access_flags && q2.cap.max_send_wr == q1.cap.max_send_wr &&
		      i2.cap.max_recv_wr == i1.cap.max_recv_wr && i2.qp_type == i1.qp_type,
	      "query_qp@1.1 differs");
	union ibv_gid gid;
	CHECK(ibv_query_gid(c2, 1, 0, &gid) == 0, "gid");
	union ibv_gid mgid = { .raw = { 0xff, 0x12 } };
	int r1 = V11(int (*)(struct ibv_qp *, const union ibv_gid *, uint16_t), ibv_attach_mcast)(qp, &mgid, 0xc001);
	CHECK(r1 == ibv_attach_mcast(qp, &mgid, 0xc001), "attach_mcast@1.1 differs (%d)", r1);
	int r2 = V11(int (*)(struct ibv_qp *, const union ibv_gid *, uint16_t), ibv_detach_mcast)(qp, &mgid, 0xc001);
	CHECK(r2 == ibv_detach_mcast(qp, &mgid, 0xc001), "detach_mcast@1.1 differs (%d)", r2);

	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 32, .max_sge = 1 } };
	struct ibv_srq *srq = V11(struct ibv_srq * (*)(struct ibv_pd *, struct ibv_srq_init_attr *), ibv_create_srq)(pd, &sa);
	CHECK(srq, "create_srq@1.1");
	struct ibv_srq_attr s1 = { .srq_limit = 5 }, s2, s3;
	CHECK(V11(int (*)(struct ibv_srq *, struct ibv_srq_attr *, int), ibv_modify_srq)(srq, &s1, IBV_SRQ_LIMIT) == 0,
	      "modify_srq@1.1");
	CHECK(ibv_query_srq(srq, &s2) == 0, "query srq");
	CHECK(V11(int (*)(struct ibv_srq *, struct ibv_srq_attr *), ibv_query_srq)(srq, &s3) == 0 &&
		      s3.srq_limit == 5 && s2.srq_limit == s3.srq_limit && s2.max_wr == s3.max_wr,
	      "query_srq@1.1 differs");

	struct ibv_ah_attr aa = { .dlid = 1, .port_num = 1 };
	struct ibv_ah *ah = V11(struct ibv_ah * (*)(struct ibv_pd *, struct ibv_ah_attr *), ibv_create_ah)(pd, &aa);
	CHECK(ah && ah->pd == pd && ah->context == c2, "create_ah@1.1");

	struct ibv_comp_channel *ch = ibv_create_comp_channel(c2);
	CHECK(ch, "channel");
	int fl = fcntl(ch->fd, F_GETFL);
	CHECK(fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK) == 0, "nonblock");
	struct ibv_cq *ecq;
	void *ectx;
	errno = 0;
	int g1 = ibv_get_cq_event(ch, &ecq, &ectx), e1 = errno;
	errno = 0;
	int g2 = V11(int (*)(struct ibv_comp_channel *, struct ibv_cq **, void **), ibv_get_cq_event)(ch, &ecq, &ectx);
	CHECK(g1 == -1 && g2 == g1 && errno == e1, "get_cq_event@1.1 on an empty channel: %d/%d", g2, errno);
	V11(void (*)(struct ibv_cq *, unsigned int), ibv_ack_cq_events)(cq, 0);

	CHECK(V11(int (*)(struct ibv_ah *), ibv_destroy_ah)(ah) == 0, "destroy_ah@1.1");
	CHECK(V11(int (*)(struct ibv_srq *), ibv_destroy_srq)(srq) == 0, "destroy_srq@1.1");
	CHECK(V11(int (*)(struct ibv_qp *), ibv_destroy_qp)(qp) == 0, "destroy_qp@1.1");
	CHECK(V11(int (*)(struct ibv_cq *), ibv_destroy_cq)(cq) == 0, "destroy_cq@1.1");
	CHECK(ibv_destroy_cq(cq_in) == 0 && ibv_destroy_comp_channel(ch) == 0, "destroy");
	CHECK(V11(int (*)(struct ibv_mr *), ibv_dereg_mr)(mr) == 0, "dereg_mr@1.1");
	CHECK(V11(int (*)(struct ibv_pd *), ibv_dealloc_pd)(pd) == 0, "dealloc_pd@1.1");
}

static void mode_compat(void)
{
	h_verbs = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_NOLOAD);
	CHECK(h_verbs, "libibverbs.so.1 not loaded");
	int n1 = 0, n2 = 0;
	struct ibv_device **l1 = ibv_get_device_list(&n1);
	struct ibv_device **l2 = V11(struct ibv_device * *(*)(int *), ibv_get_device_list)(&n2);
	CHECK(l1 && l2 && n1 == 1 && n2 == n1, "get_device_list@1.1");
	CHECK(!strcmp(ibv_get_device_name(l1[0]),
		      V11(const char *(*)(struct ibv_device *), ibv_get_device_name)(l2[0])),
	      "get_device_name@1.1");
	CHECK(ibv_get_device_guid(l1[0]) == V11(__be64(*)(struct ibv_device *), ibv_get_device_guid)(l2[0]),
	      "get_device_guid@1.1");
	struct ibv_context *c = ibv_open_device(l1[0]);
	struct ibv_context *c2 = V11(struct ibv_context * (*)(struct ibv_device *), ibv_open_device)(l2[0]);
	CHECK(c && c2 && c2->device == l2[0], "open_device@1.1");
	compat11_device(c, c2);
	compat11_objects(c2);
	CHECK(V11(int (*)(struct ibv_context *), ibv_close_device)(c2) == 0, "close_device@1.1");
	ibv_close_device(c);
	ibv_free_device_list(l1);
	V11(void (*)(struct ibv_device **), ibv_free_device_list)(l2);
	compat10();
}
#endif
