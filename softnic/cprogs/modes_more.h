/* More verbs_test modes: UD, UC, SRQ, completion events, the ibv_wr_* / ibv_cq_ex API, queries
 * and the QP state machine, flushing. Included by verbs_test.c. */

static void ud_setup(uint32_t qkey)
{
	struct peer_info m;
	sn_init(&S, 1 << 20, ALL_ACCESS);
	S.qp = make_qp(&S, IBV_QPT_UD, NULL, 1);
	qp_init(S.qp, qkey);
	my_info(&S, &m, 0);
	xfer(&m, &P, sizeof(m));
	qp_rtr_rts(S.qp, &P, 0, 0, 0, 0);
}

static void mode_ud(void)
{
	ud_setup(0x11111111);
	if (server) {
		for (int i = 0; i < 3; i++)
			post_recv(S.qp, NULL, 20 + i, S.buf + i * 8192, 4096 + 40, S.mr->lkey);
		sync_peer();
		struct ibv_wc wc = expect_wc(20, IBV_WC_SUCCESS);
		CHECK(wc.byte_len == 100 + 40 && wc.src_qp == P.qpn && wc.slid == P.lid, "ud wc len %u src %u slid %u",
		      wc.byte_len, wc.src_qp, wc.slid);
		CHECK(!(wc.wc_flags & IBV_WC_GRH), "GRH flag without GRH");
		check_fill(S.buf + 40, 100, 2, "ud message B (message A had a wrong Q_Key)");
		wc = expect_wc(21, IBV_WC_SUCCESS);
		CHECK(wc.wc_flags & IBV_WC_GRH, "GRH flag missing");
		CHECK(!memcmp(S.buf + 8192 + 8, P.gid, 16), "GRH source GID");
		check_fill(S.buf + 8192 + 40, 200, 3, "ud message C");
		expect_none(S.cq, 50);
		sync_peer();
	} else {
		fill(S.buf, 100, 1);
		fill(S.buf + 4096, 100, 2);
		fill(S.buf + 8192, 200, 3);
		sync_peer();
		struct ibv_ah_attr aa = { .dlid = P.lid, .port_num = 1 };
		struct ibv_ah *ah = ibv_create_ah(S.pd, &aa);
		CHECK(ah, "create ah");
		struct ibv_ah_attr ga = { .is_global = 1, .port_num = 1 };
		memcpy(ga.grh.dgid.raw, P.gid, 16);
		struct ibv_ah *gah = ibv_create_ah(S.pd, &ga);
		CHECK(gah, "create global ah");
		uint32_t qkeys[3] = { 0x2222, 0x11111111, 0x80000000 };
		struct ibv_ah *ahs[3] = { ah, ah, gah };
		uint32_t lens[3] = { 100, 100, 200 };
		for (int i = 0; i < 3; i++) {
			struct ibv_sge sge = { (uintptr_t)S.buf + i * 4096, lens[i], S.mr->lkey };
			struct ibv_send_wr wr = { .wr_id = i, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND }, *bad;
			wr.wr.ud.ah = ahs[i];
			wr.wr.ud.remote_qpn = P.qpn;
			wr.wr.ud.remote_qkey = qkeys[i];
			CHECK(ibv_post_send(S.qp, &wr, &bad) == 0, "post ud");
		}
		for (int i = 0; i < 3; i++)
			expect_wc(i, IBV_WC_SUCCESS);
		sync_peer();
		ibv_destroy_ah(ah);
		ibv_destroy_ah(gah);
	}
	sync_peer();
}

static void mode_uc(void)
{
	rc_pair(IBV_QPT_UC, ALL_ACCESS, 1, 0, 0);
	if (server) {
		sync_peer(); /* client sent message 1 with no receive posted: dropped */
		expect_none(S.cq, 50);
		post_recv(S.qp, NULL, 30, S.buf, 4096, S.mr->lkey);
		sync_peer();
		struct ibv_wc wc = expect_wc(30, IBV_WC_SUCCESS);
		CHECK(wc.byte_len == 500, "uc len %u", wc.byte_len);
		check_fill(S.buf, 500, 2, "uc message 2");
		check_fill(S.buf + 100000, 9000, 3, "uc write");
		sync_peer();
	} else {
		fill(S.buf, 500, 1);
		CHECK(post_send(1, IBV_WR_SEND, S.buf, 500, S.mr->lkey, 0, 0, 0, 0) == 0, "post");
		expect_wc(1, IBV_WC_SUCCESS);
		sync_peer();
		sync_peer();
		fill(S.buf, 500, 2);
		fill(S.buf + 100000, 9000, 3);
		/* the write goes first: UC delivers in order, so it has landed once the SEND has
		 * (a UC sender's completion says nothing about remote placement) */
		CHECK(post_send(3, IBV_WR_RDMA_WRITE, S.buf + 100000, 9000, S.mr->lkey, 0, P.addr + 100000, P.rkey, 0) ==
			      0,
		      "post write");
		CHECK(post_send(2, IBV_WR_SEND, S.buf, 500, S.mr->lkey, 0, 0, 0, 0) == 0, "post");
		expect_wc(3, IBV_WC_SUCCESS);
		expect_wc(2, IBV_WC_SUCCESS);
		sync_peer();
	}
	sync_peer();
}

static void mode_srq(void)
{
	struct peer_info m;
	struct ibv_srq *srq = NULL;
	sn_init(&S, 1 << 20, ALL_ACCESS);
	if (server) {
		struct ibv_srq_init_attr sa = { .attr = { .max_wr = 64, .max_sge = 1 } };
		srq = ibv_create_srq(S.pd, &sa);
		CHECK(srq, "create srq");
	}
	struct ibv_qp *q[2] = { make_qp(&S, IBV_QPT_RC, srq, 1), make_qp(&S, IBV_QPT_RC, srq, 1) };
	S.qp = q[0];
	qp_init(q[0], 0);
	qp_init(q[1], 0);
	my_info(&S, &m, 7);
	m.qpn2 = q[1]->qp_num;
	xfer(&m, &P, sizeof(m));
	qp_rtr_rts(q[0], &P, P.qpn, 7, 7, 1);
	qp_rtr_rts(q[1], &P, P.qpn2, 7, 7, 1);
	if (server) {
		for (int i = 0; i < 8; i++)
			post_recv(NULL, srq, 40 + i, S.buf + i * 4096, 4096, S.mr->lkey);
		sync_peer();
		int per_qp[2] = { 0, 0 };
		for (int i = 0; i < 8; i++) {
			struct ibv_wc wc = poll1(S.cq);
			CHECK(wc.status == IBV_WC_SUCCESS && wc.byte_len == 1000, "srq wc %s len %u",
			      ibv_wc_status_str(wc.status), wc.byte_len);
			int k = wc.qp_num == q[0]->qp_num ? 0 : wc.qp_num == q[1]->qp_num ? 1 : -1;
			CHECK(k >= 0, "qp_num %u", wc.qp_num);
			per_qp[k]++;
			char *b = S.buf + (wc.wr_id - 40) * 4096;
			uint32_t seed;
			memcpy(&seed, b, 4);
			CHECK(seed / 10 == (uint32_t)k, "message for QP %u arrived via the other QP", seed / 10);
			check_fill(b + 4, 996, seed, "srq payload");
		}
		CHECK(per_qp[0] == 4 && per_qp[1] == 4, "per-QP counts %d %d", per_qp[0], per_qp[1]);
		struct ibv_srq_attr qa;
		CHECK(ibv_query_srq(srq, &qa) == 0 && qa.max_wr == 64, "query srq");
		CHECK(ibv_destroy_srq(srq) == EBUSY, "destroying an SRQ in use must fail");
	} else {
		sync_peer();
		for (int k = 0; k < 2; k++)
			for (int i = 0; i < 4; i++) {
				uint32_t seed = k * 10 + i;
				char *b = S.buf + (k * 4 + i) * 4096;
				memcpy(b, &seed, 4);
				fill(b + 4, 996, seed);
				S.qp = q[k];
				CHECK(post_send(k * 4 + i, IBV_WR_SEND, b, 1000, S.mr->lkey, 0, 0, 0, 0) == 0, "post");
			}
		for (int i = 0; i < 8; i++)
			CHECK(poll1(S.cq).status == IBV_WC_SUCCESS, "send status");
	}
	sync_peer();
}

static int use_channel;
static struct ibv_comp_channel *chan;

static void mode_events(void)
{
	sn_init(&S, 1 << 20, ALL_ACCESS);
	chan = ibv_create_comp_channel(S.ctx);
	CHECK(chan, "create channel");
	ibv_destroy_cq(S.cq);
	S.cq = ibv_create_cq(S.ctx, 64, (void *)0x5eed, chan, 0);
	CHECK(S.cq, "create cq with channel");
	S.qp = make_qp(&S, IBV_QPT_RC, NULL, 1);
	P = sn_connect(&S, 1);
	if (server) {
		for (int i = 0; i < 3; i++)
			post_recv(S.qp, NULL, 60 + i, S.buf + i * 4096, 4096, S.mr->lkey);
		CHECK(ibv_req_notify_cq(S.cq, 0) == 0, "arm");
		sync_peer();
		struct pollfd pfd = { .fd = chan->fd, .events = POLLIN };
		CHECK(poll(&pfd, 1, 10000) == 1, "no completion event within 10 s");
		struct ibv_cq *ev_cq;
		void *ev_ctx;
		CHECK(ibv_get_cq_event(chan, &ev_cq, &ev_ctx) == 0, "get_cq_event");
		CHECK(ev_cq == S.cq && ev_ctx == (void *)0x5eed, "event names the wrong CQ");
		ibv_ack_cq_events(ev_cq, 1);
		expect_wc(60, IBV_WC_SUCCESS);
		/* solicited-only: an unsolicited message raises no event, a solicited one does */
		CHECK(ibv_req_notify_cq(S.cq, 1) == 0, "arm solicited");
		sync_peer();
		CHECK(poll(&pfd, 1, 10000) == 1, "no solicited event");
		CHECK(ibv_get_cq_event(chan, &ev_cq, &ev_ctx) == 0, "get_cq_event 2");
		ibv_ack_cq_events(ev_cq, 1);
		expect_wc(61, IBV_WC_SUCCESS);
		struct ibv_wc wc = expect_wc(62, IBV_WC_SUCCESS);
		CHECK(wc.byte_len == 30, "solicited message length");
		CHECK(poll(&pfd, 1, 0) == 0, "spurious event");
		CHECK(S.cq->comp_events_completed == 2, "acked events %u", S.cq->comp_events_completed);
	} else {
		sync_peer();
		CHECK(post_send(1, IBV_WR_SEND, S.buf, 10, S.mr->lkey, 0, 0, 0, 0) == 0, "post");
		expect_wc(1, IBV_WC_SUCCESS);
		sync_peer();
		CHECK(post_send(2, IBV_WR_SEND, S.buf, 20, S.mr->lkey, 0, 0, 0, 0) == 0, "post");
		usleep(20000);
		CHECK(post_send(3, IBV_WR_SEND, S.buf, 30, S.mr->lkey, IBV_SEND_SOLICITED, 0, 0, 0) == 0, "post");
		expect_wc(2, IBV_WC_SUCCESS);
		expect_wc(3, IBV_WC_SUCCESS);
	}
	sync_peer();
}

static int poll_ex(struct ibv_cq_ex *cq, int n, uint64_t *ids, enum ibv_wc_opcode *ops, uint64_t *ts)
{
	struct ibv_poll_cq_attr pa = { 0 };
	double t0 = now_s();
	int ret;
	while ((ret = ibv_start_poll(cq, &pa)) == ENOENT)
		CHECK(now_s() - t0 < 10, "no ex completion");
	CHECK(ret == 0, "start_poll %d", ret);
	int got = 0;
	for (;;) {
		CHECK(cq->status == IBV_WC_SUCCESS, "ex status %s", ibv_wc_status_str(cq->status));
		ids[got] = cq->wr_id;
		ops[got] = ibv_wc_read_opcode(cq);
		ts[got] = ibv_wc_read_completion_ts(cq);
		got++;
		if (got == n)
			break;
		while ((ret = ibv_next_poll(cq)) == ENOENT)
			CHECK(now_s() - t0 < 10, "no ex completion");
	}
	ibv_end_poll(cq);
	return got;
}

static void mode_wrapi(void)
{
	sn_init(&S, 1 << 20, ALL_ACCESS);
	struct ibv_device_attr_ex dx;
	CHECK(ibv_query_device_ex(S.ctx, NULL, &dx) == 0, "query_device_ex");
	CHECK(dx.completion_timestamp_mask && dx.hca_core_clock, "no timestamp support");
	struct ibv_cq_init_attr_ex ca = { .cqe = 64,
					  .wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM |
						      IBV_WC_EX_WITH_QP_NUM | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP };
	struct ibv_cq_ex *cqx = ibv_create_cq_ex(S.ctx, &ca);
	CHECK(cqx, "create_cq_ex");
	S.cq = ibv_cq_ex_to_cq(cqx);
	struct ibv_qp_init_attr_ex qa = {
		.send_cq = S.cq, .recv_cq = S.cq, .qp_type = IBV_QPT_RC, .pd = S.pd,
		.cap = { .max_send_wr = 64, .max_recv_wr = 64, .max_send_sge = 2, .max_recv_sge = 2,
			 .max_inline_data = 64 },
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ |
				  IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD,
	};
	S.qp = ibv_create_qp_ex(S.ctx, &qa);
	CHECK(S.qp, "create_qp_ex: %s", strerror(errno));
	struct ibv_qp_ex *qx = ibv_qp_to_qp_ex(S.qp);
	CHECK(qx, "qp_to_qp_ex");
	P = sn_connect(&S, 3);
	uint64_t ids[8], ts[8];
	enum ibv_wc_opcode ops[8];
	if (server) {
		fill(S.buf + 500000, 4096, 6);
		*(uint64_t *)(S.buf + 600000) = 40;
		post_recv(S.qp, NULL, 70, S.buf + 300000, 4096, S.mr->lkey);
		sync_peer();
		struct ibv_poll_cq_attr pa = { 0 };
		double t0 = now_s();
		int r;
		while ((r = ibv_start_poll(cqx, &pa)) == ENOENT)
			CHECK(now_s() - t0 < 10, "no recv completion");
		CHECK(r == 0 && cqx->wr_id == 70 && cqx->status == IBV_WC_SUCCESS, "recv ex");
		CHECK(ibv_wc_read_opcode(cqx) == IBV_WC_RECV && ibv_wc_read_byte_len(cqx) == 256 &&
			      ntohl(ibv_wc_read_imm_data(cqx)) == 99 && ibv_wc_read_qp_num(cqx) == S.qp->qp_num,
		      "recv ex fields");
		CHECK(ibv_wc_read_completion_ts(cqx) != 0, "timestamp");
		ibv_end_poll(cqx);
		sync_peer();
		check_fill(S.buf, 1000, 4, "wr_rdma_write");
		check_fill(S.buf + 2000, 48, 5, "inline write");
		check_fill(S.buf + 300000, 256, 7, "send_imm");
		CHECK(*(uint64_t *)(S.buf + 600000) == 45, "fetch_add result");
	} else {
		fill(S.buf, 1000, 4);
		fill(S.buf + 2000, 48, 5);
		fill(S.buf + 3000, 256, 7);
		sync_peer();
		ibv_wr_start(qx);
		qx->wr_id = 99;
		ibv_wr_send(qx);
		ibv_wr_abort(qx);
		expect_none(S.cq, 20);
		ibv_wr_start(qx);
		qx->wr_id = 1;
		qx->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_rdma_write(qx, P.rkey, P.addr);
		ibv_wr_set_sge(qx, S.mr->lkey, (uintptr_t)S.buf, 1000);
		qx->wr_id = 2;
		ibv_wr_rdma_write(qx, P.rkey, P.addr + 2000);
		ibv_wr_set_inline_data(qx, S.buf + 2000, 48);
		qx->wr_id = 3;
		ibv_wr_send_imm(qx, htonl(99));
		ibv_wr_set_sge(qx, S.mr->lkey, (uintptr_t)S.buf + 3000, 256);
		qx->wr_id = 4;
		ibv_wr_rdma_read(qx, P.rkey, P.addr + 500000);
		ibv_wr_set_sge(qx, S.mr->lkey, (uintptr_t)S.buf + 100000, 4096);
		qx->wr_id = 5;
		ibv_wr_atomic_fetch_add(qx, P.rkey, P.addr + 600000, 5);
		ibv_wr_set_sge(qx, S.mr->lkey, (uintptr_t)S.buf + 200000, 8);
		CHECK(ibv_wr_complete(qx) == 0, "wr_complete");
		int n = poll_ex(cqx, 5, ids, ops, ts);
		enum ibv_wc_opcode want[5] = { IBV_WC_RDMA_WRITE, IBV_WC_RDMA_WRITE, IBV_WC_SEND, IBV_WC_RDMA_READ,
					       IBV_WC_FETCH_ADD };
		for (int i = 0; i < n; i++) {
			CHECK(ids[i] == (uint64_t)i + 1 && ops[i] == want[i], "completion %d: id %llu op %d", i,
			      (unsigned long long)ids[i], ops[i]);
			CHECK(ts[i] != 0 && (i == 0 || ts[i] >= ts[i - 1]), "timestamps not monotonic");
		}
		check_fill(S.buf + 100000, 4096, 6, "wr_rdma_read");
		CHECK(*(uint64_t *)(S.buf + 200000) == 40, "fetch_add old value");
		sync_peer();
	}
	sync_peer();
}

static void mode_query(void)
{
	struct peer_info m;
	sn_init(&S, 4096, ALL_ACCESS);
	struct ibv_device_attr_ex dx;
	CHECK(ibv_query_device_ex(S.ctx, NULL, &dx) == 0, "query_device_ex");
	CHECK(dx.orig_attr.phys_port_cnt == 1 && dx.orig_attr.atomic_cap == IBV_ATOMIC_HCA &&
		      dx.orig_attr.max_qp_wr >= 1024 && dx.orig_attr.max_sge >= 4,
	      "device attributes");
	CHECK(S.port.state == IBV_PORT_ACTIVE && S.port.lid != 0 && S.port.link_layer == IBV_LINK_LAYER_INFINIBAND &&
		      S.port.active_mtu == IBV_MTU_4096,
	      "port attributes");
	CHECK(S.gid.raw[0] == 0xfe && S.gid.raw[1] == 0x80, "gid prefix");
	struct ibv_gid_entry ge;
	CHECK(ibv_query_gid_ex(S.ctx, 1, 0, &ge, 0) == 0, "query_gid_ex");
	CHECK(!memcmp(ge.gid.raw, S.gid.raw, 16) && ge.gid_type == IBV_GID_TYPE_IB, "gid entry");
	union ibv_gid g;
	CHECK(ibv_query_gid(S.ctx, 1, 5, &g) != 0, "gid index 5 must not exist");
	uint16_t pkey;
	CHECK(ibv_query_pkey(S.ctx, 1, 0, &pkey) == 0 && pkey == 0xffff, "pkey");
	my_info(&S, &m, 0);
	xfer(&m, &P, sizeof(m));
	CHECK(P.lid != m.lid && memcmp(P.gid, m.gid, 16), "peer has the same LID/GID: not two nodes");

	struct ibv_qp *qp = make_qp(&S, IBV_QPT_RC, NULL, 0);
	CHECK(qp->state == IBV_QPS_RESET, "new QP state");
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RTR };
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE) == EINVAL, "RESET->RTR must fail");
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qp_access_flags = IBV_ACCESS_REMOTE_READ;
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == EINVAL,
	      "INIT without PKEY_INDEX must fail");
	a.port_num = 2;
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX) == EINVAL,
	      "port 2 must fail");
	a.port_num = 1;
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX) == 0,
	      "RESET->INIT");
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	CHECK(ibv_query_qp(qp, &qa, IBV_QP_STATE, &qi) == 0, "query_qp");
	CHECK(qa.qp_state == IBV_QPS_INIT && qa.port_num == 1 && qa.qp_access_flags == IBV_ACCESS_REMOTE_READ &&
		      qi.qp_type == IBV_QPT_RC && qi.cap.max_send_wr == 256,
	      "query_qp attributes");
	struct ibv_sge sge = { (uintptr_t)S.buf, 8, S.mr->lkey };
	struct ibv_send_wr wr = { .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND }, *bad = NULL;
	CHECK(ibv_post_send(qp, &wr, &bad) != 0 && bad == &wr, "post_send in INIT must fail");
	a.qp_state = IBV_QPS_RTS;
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE) == EINVAL, "INIT->RTS must fail");
	a.qp_state = IBV_QPS_ERR;
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE) == 0 && qp->state == IBV_QPS_ERR, "->ERR");
	a.qp_state = IBV_QPS_RESET;
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE) == 0 && qp->state == IBV_QPS_RESET, "ERR->RESET");
	CHECK(ibv_destroy_cq(S.cq) == EBUSY, "destroying a CQ in use must fail");
	CHECK(ibv_destroy_qp(qp) == 0, "destroy qp");
	struct ibv_mr *bad_mr = ibv_reg_mr(S.pd, S.buf, 4096, IBV_ACCESS_REMOTE_WRITE);
	CHECK(!bad_mr, "REMOTE_WRITE without LOCAL_WRITE must fail");
	sync_peer();
}

static void mode_flush(void)
{
	rc_pair(IBV_QPT_RC, ALL_ACCESS, 1, 7, 1);
	if (server) {
		for (int i = 0; i < 5; i++)
			post_recv(S.qp, NULL, 80 + i, S.buf, 64, S.mr->lkey);
		struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };
		CHECK(ibv_modify_qp(S.qp, &a, IBV_QP_STATE) == 0, "->ERR");
		for (int i = 0; i < 5; i++)
			expect_wc(80 + i, IBV_WC_WR_FLUSH_ERR);
		post_recv(S.qp, NULL, 90, S.buf, 64, S.mr->lkey);
		expect_wc(90, IBV_WC_WR_FLUSH_ERR);
		sync_peer();
	} else {
		sync_peer();
		/* the responder is in the error state: the request is never acknowledged */
		CHECK(post_send(1, IBV_WR_SEND, S.buf, 8, S.mr->lkey, 0, 0, 0, 0) == 0, "post");
		expect_wc(1, IBV_WC_RETRY_EXC_ERR);
	}
	sync_peer();
}

/* Sleeps in the thread it interrupts (the progress thread, below). */
static void sleep_handler(int sig)
{
	(void)sig;
	struct timespec t = { 0, 300000000 };
	nanosleep(&t, NULL);
}

/* The thread id of softnic's progress thread ("softnic-engine"), 0 if none. */
static pid_t engine_tid(void)
{
	pid_t tid = 0;
	DIR *d = opendir("/proc/self/task");
	for (struct dirent *e; d && (e = readdir(d));) {
		char path[320], comm[32] = { 0 };
		snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
		FILE *f = fopen(path, "r");
		if (!f)
			continue;
		if (fgets(comm, sizeof comm, f) && !strncmp(comm, "softnic-engine", 14))
			tid = atoi(e->d_name);
		fclose(f);
	}
	if (d)
		closedir(d);
	return tid;
}

/* WRs the responder received and acknowledged before the requester's QP moved to the error
 * state complete successfully, as on a NIC (which applies each ACK as it arrives), even when
 * softnic's progress thread has not looked at the ACKs yet: the client puts its progress
 * thread to sleep right after posting (its sends are transmitted by the post itself), lets the
 * server receive everything, then moves its QP to ERR before polling. */
static void mode_acked_error(void)
{
	enum { N = 8 };
	rc_pair(IBV_QPT_RC, ALL_ACCESS, 1, 7, 1);
	if (server) {
		for (int i = 0; i < N; i++)
			post_recv(S.qp, NULL, 40 + i, S.buf + 64 * i, 64, S.mr->lkey);
		sync_peer();
		for (int i = 0; i < N; i++)
			expect_wc(40 + i, IBV_WC_SUCCESS);
		usleep(20000); /* the pass that delivered them ends by sending the ACK */
		sync_peer();
	} else {
		pid_t tid = engine_tid();
		CHECK(tid > 0, "no softnic-engine thread");
		struct sigaction sa = { .sa_handler = sleep_handler };
		CHECK(sigaction(SIGUSR1, &sa, NULL) == 0, "sigaction");
		sync_peer();
		for (int i = 0; i < N; i++)
			CHECK(post_send(1 + i, IBV_WR_SEND, S.buf, 64, S.mr->lkey, IBV_SEND_SIGNALED, 0, 0, 0) == 0,
			      "post");
		CHECK(syscall(SYS_tgkill, getpid(), tid, SIGUSR1) == 0, "tgkill");
		sync_peer(); /* everything arrived and was acknowledged */
		struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };
		CHECK(ibv_modify_qp(S.qp, &a, IBV_QP_STATE) == 0, "->ERR");
		for (int i = 0; i < N; i++)
			expect_wc(1 + i, IBV_WC_SUCCESS);
	}
	sync_peer();
}

/* rc_pair's retry_cnt 7 and timeout 14: 8 tries of 4.096 us << 14 (67.1 ms) each. */
#define TRANSPORT_TIMEOUT_S (8 * 4.096e-6 * (1 << 14))

/* The responder's process exits while the requester retries RNR forever (rnr_retry 7): the
 * requester completes with IBV_WC_RETRY_EXC_ERR instead of hanging. */
static void mode_peer_exit(void)
{
	rc_pair(IBV_QPT_RC, ALL_ACCESS, 1, 7, 1);
	if (server) {
		sync_peer();
		printf("OK peer_exit server\n");
		fflush(stdout);
		_exit(0); /* no receive posted, QP never destroyed: the process just ends */
	}
	sync_peer();
	double t0 = now_s();
	CHECK(post_send(1, IBV_WR_SEND, S.buf, 64, S.mr->lkey, 0, 0, 0, 0) == 0, "post");
	expect_wc(1, IBV_WC_RETRY_EXC_ERR);
	CHECK(now_s() - t0 >= TRANSPORT_TIMEOUT_S, "retry counter exceeded before the transport timeout");
}

/* The responder receives one send, destroys its QP and exits; the requester's send after that
 * finds nobody. As on a NIC it completes with IBV_WC_RETRY_EXC_ERR only once the transport
 * timeout (retry_cnt 7 + 1 tries of 4.096 us << timeout 14) has passed, so a program posting
 * past its peer's exit (ibv_srq_pingpong does) collects its other completions first. */
static void mode_peer_gone(void)
{
	rc_pair(IBV_QPT_RC, ALL_ACCESS, 1, 7, 1);
	if (server) {
		post_recv(S.qp, NULL, 70, S.buf, 64, S.mr->lkey);
		sync_peer();
		expect_wc(70, IBV_WC_SUCCESS);
		CHECK(ibv_destroy_qp(S.qp) == 0, "destroy qp");
		sync_peer();
		printf("OK peer_gone server\n");
		fflush(stdout);
		_exit(0);
	}
	sync_peer();
	CHECK(post_send(1, IBV_WR_SEND, S.buf, 64, S.mr->lkey, 0, 0, 0, 0) == 0, "post");
	expect_wc(1, IBV_WC_SUCCESS);
	sync_peer();
	double t0 = now_s();
	CHECK(post_send(2, IBV_WR_SEND, S.buf, 64, S.mr->lkey, 0, 0, 0, 0) == 0, "post");
	expect_wc(2, IBV_WC_RETRY_EXC_ERR);
	CHECK(now_s() - t0 >= TRANSPORT_TIMEOUT_S, "retry counter exceeded before the transport timeout");
}

static int more_modes(const char *mode)
{
	if (!strcmp(mode, "ud"))
		mode_ud();
	else if (!strcmp(mode, "uc"))
		mode_uc();
	else if (!strcmp(mode, "srq"))
		mode_srq();
	else if (!strcmp(mode, "events"))
		mode_events();
	else if (!strcmp(mode, "wrapi"))
		mode_wrapi();
	else if (!strcmp(mode, "query"))
		mode_query();
	else if (!strcmp(mode, "flush"))
		mode_flush();
	else if (!strcmp(mode, "acked_error"))
		mode_acked_error();
	else if (!strcmp(mode, "peer_exit"))
		mode_peer_exit();
	else if (!strcmp(mode, "peer_gone"))
		mode_peer_gone();
	else
		return 0;
	(void)use_channel;
	return 1;
}
