/* softnic semantics tests: `verbs_test MODE server|client PORT`, run as two processes on two
 * simulated nodes (softnic-run --node). Each mode checks the bytes that arrived and every
 * completion field it relies on; prints "OK MODE ROLE" and exits 0 on success. */
#include "sn_common.h"
#include <dirent.h>
#include <signal.h>
#include <sys/syscall.h>

static int server;
static struct sn S;
static struct peer_info P;

static void rc_pair(enum ibv_qp_type t, int access, int sig_all, int rnr_retry, int min_rnr)
{
	struct peer_info m;
	sn_init(&S, 1 << 20, access);
	S.qp = make_qp(&S, t, NULL, sig_all);
	qp_init(S.qp, 0);
	uint32_t psn = server ? 0x100 : 0xabcde;
	my_info(&S, &m, psn);
	xfer(&m, &P, sizeof(m));
	CHECK(P.lid != m.lid, "both processes are on the same simulated node (LID %u)", m.lid);
	qp_rtr_rts(S.qp, &P, P.qpn, psn, rnr_retry, min_rnr);
}

static int post_send(uint64_t id, enum ibv_wr_opcode op, void *addr, uint32_t len, uint32_t lkey, int flags,
		     uint64_t raddr, uint32_t rkey, uint32_t imm)
{
	struct ibv_sge sge = { .addr = (uintptr_t)addr, .length = len, .lkey = lkey };
	struct ibv_send_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = 1, .opcode = op, .send_flags = flags }, *bad;
	wr.imm_data = htonl(imm);
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	return ibv_post_send(S.qp, &wr, &bad);
}

static struct ibv_wc expect_wc(uint64_t id, enum ibv_wc_status st)
{
	struct ibv_wc wc = poll1(S.cq);
	CHECK(wc.wr_id == id && wc.status == st, "wc wr_id=%llu status=%s (%d), wanted wr_id=%llu status=%s",
	      (unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status), wc.status, (unsigned long long)id,
	      ibv_wc_status_str(st));
	return wc;
}

static void mode_send(void)
{
	rc_pair(IBV_QPT_RC, ALL_ACCESS, 0, 7, 1);
	if (server) {
		for (int i = 0; i < 4; i++)
			post_recv(S.qp, NULL, 10 + i, S.buf + i * 65536, 65536, S.mr->lkey);
		sync_peer();
		uint32_t lens[4] = { 100, 20000, 64, 0 };
		for (int i = 0; i < 4; i++) {
			struct ibv_wc wc = expect_wc(10 + i, IBV_WC_SUCCESS);
			CHECK(wc.opcode == IBV_WC_RECV, "opcode %d", wc.opcode);
			CHECK(wc.byte_len == lens[i], "msg %d byte_len %u", i, wc.byte_len);
			CHECK(wc.qp_num == S.qp->qp_num && wc.src_qp == P.qpn, "qp numbers");
			CHECK(wc.slid == P.lid, "slid %u", wc.slid);
			CHECK(!!(wc.wc_flags & IBV_WC_WITH_IMM) == (i == 1), "imm flag on msg %d", i);
			if (i == 1)
				CHECK(ntohl(wc.imm_data) == 0x12345678, "imm %x", ntohl(wc.imm_data));
			check_fill(S.buf + i * 65536, lens[i], i, "send payload");
		}
	} else {
		for (int i = 0; i < 4; i++)
			fill(S.buf + i * 65536, 65536, i);
		sync_peer();
		CHECK(post_send(1, IBV_WR_SEND, S.buf, 100, S.mr->lkey, IBV_SEND_SIGNALED, 0, 0, 0) == 0, "post");
		/* 20000 bytes gathered from three SGEs */
		struct ibv_sge sg[3] = { { (uintptr_t)S.buf + 65536, 5000, S.mr->lkey },
					 { (uintptr_t)S.buf + 65536 + 5000, 10000, S.mr->lkey },
					 { (uintptr_t)S.buf + 65536 + 15000, 5000, S.mr->lkey } };
		struct ibv_send_wr wr = { .wr_id = 2, .sg_list = sg, .num_sge = 3, .opcode = IBV_WR_SEND_WITH_IMM,
					  .send_flags = IBV_SEND_SIGNALED }, *bad;
		wr.imm_data = htonl(0x12345678);
		CHECK(ibv_post_send(S.qp, &wr, &bad) == 0, "post sge list");
		CHECK(post_send(3, IBV_WR_SEND, S.buf + 2 * 65536, 64, 0, IBV_SEND_SIGNALED | IBV_SEND_INLINE, 0, 0, 0) ==
			      0,
		      "post inline");
		CHECK(post_send(4, IBV_WR_SEND, S.buf, 0, S.mr->lkey, IBV_SEND_SIGNALED, 0, 0, 0) == 0, "post 0");
		for (int i = 1; i <= 4; i++) {
			struct ibv_wc wc = expect_wc(i, IBV_WC_SUCCESS);
			CHECK(wc.opcode == IBV_WC_SEND, "send opcode %d", wc.opcode);
		}
	}
	sync_peer();
}

static void mode_write(void)
{
	rc_pair(IBV_QPT_RC, ALL_ACCESS, 0, 7, 1);
	if (server) {
		post_recv(S.qp, NULL, 77, S.buf, 0, S.mr->lkey);
		sync_peer();
		struct ibv_wc wc = expect_wc(77, IBV_WC_SUCCESS);
		CHECK(wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM, "opcode %d", wc.opcode);
		CHECK(ntohl(wc.imm_data) == 0xabcdef01 && (wc.wc_flags & IBV_WC_WITH_IMM), "imm");
		CHECK(wc.byte_len == 16, "write-with-imm byte_len %u", wc.byte_len);
		sync_peer();
		check_fill(S.buf, 100000, 3, "100 KB write");
		check_fill(S.buf + 200000, 32, 4, "inline write");
		check_fill(S.buf + 300000, 16, 5, "write with imm");
		CHECK(S.buf[100000] == 0 && S.buf[200032] == 0, "bytes beyond the writes changed");
	} else {
		fill(S.buf, 100000, 3);
		fill(S.buf + 200000, 32, 4);
		fill(S.buf + 300000, 16, 5);
		sync_peer();
		CHECK(post_send(1, IBV_WR_RDMA_WRITE, S.buf, 100000, S.mr->lkey, IBV_SEND_SIGNALED, P.addr, P.rkey, 0) ==
			      0,
		      "post");
		CHECK(post_send(2, IBV_WR_RDMA_WRITE, S.buf + 200000, 32, 0, IBV_SEND_SIGNALED | IBV_SEND_INLINE,
				P.addr + 200000, P.rkey, 0) == 0,
		      "post inline");
		CHECK(post_send(3, IBV_WR_RDMA_WRITE_WITH_IMM, S.buf + 300000, 16, S.mr->lkey, IBV_SEND_SIGNALED,
				P.addr + 300000, P.rkey, 0xabcdef01) == 0,
		      "post imm");
		for (int i = 1; i <= 3; i++)
			CHECK(expect_wc(i, IBV_WC_SUCCESS).opcode == IBV_WC_RDMA_WRITE, "opcode");
		sync_peer();
	}
	sync_peer();
}

static void mode_read(void)
{
	rc_pair(IBV_QPT_RC, ALL_ACCESS, 0, 7, 1);
	if (server) {
		fill(S.buf, 200000, 9);
		sync_peer();
	} else {
		sync_peer();
		struct ibv_sge sg[2] = { { (uintptr_t)S.buf, 30000, S.mr->lkey },
					 { (uintptr_t)S.buf + 500000, 40000, S.mr->lkey } };
		struct ibv_send_wr wr = { .wr_id = 1, .sg_list = sg, .num_sge = 2, .opcode = IBV_WR_RDMA_READ,
					  .send_flags = IBV_SEND_SIGNALED }, *bad;
		wr.wr.rdma.remote_addr = P.addr;
		wr.wr.rdma.rkey = P.rkey;
		CHECK(ibv_post_send(S.qp, &wr, &bad) == 0, "post read");
		struct ibv_wc wc = expect_wc(1, IBV_WC_SUCCESS);
		CHECK(wc.opcode == IBV_WC_RDMA_READ && wc.byte_len == 70000, "read wc opcode %d len %u", wc.opcode,
		      wc.byte_len);
		check_fill(S.buf, 30000, 9, "read part 1");
		for (int i = 0; i < 40000; i++)
			CHECK(S.buf[500000 + i] == (char)(9 + (30000 + i) * 7 + ((30000 + i) >> 8)), "read part 2 @%d", i);
		/* 32 outstanding 4 KB reads (more than max_rd_atomic: the QP queues them) */
		for (int i = 0; i < 32; i++)
			CHECK(post_send(100 + i, IBV_WR_RDMA_READ, S.buf + 600000 + i * 4096, 4096, S.mr->lkey,
					IBV_SEND_SIGNALED, P.addr + i * 4096, P.rkey, 0) == 0,
			      "post read %d", i);
		for (int i = 0; i < 32; i++)
			expect_wc(100 + i, IBV_WC_SUCCESS);
		check_fill(S.buf + 600000, 32 * 4096, 9, "32 reads");
	}
	sync_peer();
}

static void mode_atomic(void)
{
	rc_pair(IBV_QPT_RC, ALL_ACCESS, 0, 7, 1);
	uint64_t *r = (uint64_t *)S.buf;
	if (server) {
		r[0] = 100;
		r[1] = 5;
		sync_peer();
		sync_peer();
		CHECK(r[0] == 107 && r[1] == 9, "remote values %llu %llu", (unsigned long long)r[0],
		      (unsigned long long)r[1]);
	} else {
		sync_peer();
		struct ibv_sge sge = { (uintptr_t)(r + 100), 8, S.mr->lkey };
		struct ibv_send_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_ATOMIC_FETCH_AND_ADD,
					  .send_flags = IBV_SEND_SIGNALED }, *bad;
		wr.wr.atomic.remote_addr = P.addr;
		wr.wr.atomic.rkey = P.rkey;
		wr.wr.atomic.compare_add = 7;
		CHECK(ibv_post_send(S.qp, &wr, &bad) == 0, "post faa");
		struct ibv_wc wc = expect_wc(1, IBV_WC_SUCCESS);
		CHECK(wc.opcode == IBV_WC_FETCH_ADD && r[100] == 100, "fetch_add returned %llu",
		      (unsigned long long)r[100]);
		wr.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
		wr.wr_id = 2;
		wr.wr.atomic.remote_addr = P.addr + 8;
		wr.wr.atomic.compare_add = 5;
		wr.wr.atomic.swap = 9;
		CHECK(ibv_post_send(S.qp, &wr, &bad) == 0, "post cas");
		wc = expect_wc(2, IBV_WC_SUCCESS);
		CHECK(wc.opcode == IBV_WC_COMP_SWAP && r[100] == 5, "cas returned %llu", (unsigned long long)r[100]);
		wr.wr_id = 3;
		wr.wr.atomic.swap = 11; /* compare 5 fails now: value stays 9 */
		CHECK(ibv_post_send(S.qp, &wr, &bad) == 0, "post cas 2");
		expect_wc(3, IBV_WC_SUCCESS);
		CHECK(r[100] == 9, "failed cas returned %llu", (unsigned long long)r[100]);
		/* misaligned atomic: invalid request */
		wr.wr_id = 4;
		wr.wr.atomic.remote_addr = P.addr + 4;
		CHECK(ibv_post_send(S.qp, &wr, &bad) == 0, "post misaligned");
		expect_wc(4, IBV_WC_REM_INV_REQ_ERR);
		sync_peer();
	}
	sync_peer();
}

static void mode_unsignaled(void)
{
	rc_pair(IBV_QPT_RC, ALL_ACCESS, 0, 7, 1);
	if (server) {
		sync_peer();
		sync_peer();
		for (int i = 0; i < 51; i++)
			CHECK(S.buf[i * 8] == (char)(i + 1), "write %d missing", i);
	} else {
		sync_peer();
		for (int i = 0; i < 51; i++) {
			S.buf[i * 8] = (char)(i + 1);
			CHECK(post_send(i, IBV_WR_RDMA_WRITE, S.buf + i * 8, 8, S.mr->lkey, i == 50 ? IBV_SEND_SIGNALED : 0,
					P.addr + i * 8, P.rkey, 0) == 0,
			      "post %d", i);
		}
		expect_wc(50, IBV_WC_SUCCESS);
		expect_none(S.cq, 100);
		sync_peer();
	}
	sync_peer();
}

static enum ibv_qp_state qp_state(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr i;
	CHECK(ibv_query_qp(qp, &a, IBV_QP_STATE, &i) == 0, "query qp");
	return a.qp_state;
}

/* Remote errors: bad rkey, missing access right, bad lkey, length error. */
static void mode_error(const char *which)
{
	int access = ALL_ACCESS;
	if (server && !strcmp(which, "access"))
		access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ;
	rc_pair(IBV_QPT_RC, access, 0, 7, 1);
	if (server) {
		post_recv(S.qp, NULL, 50, S.buf, 16, S.mr->lkey);
		post_recv(S.qp, NULL, 51, S.buf, 16, S.mr->lkey);
		sync_peer();
		if (!strcmp(which, "len")) {
			expect_wc(50, IBV_WC_LOC_LEN_ERR);
			expect_wc(51, IBV_WC_WR_FLUSH_ERR);
			CHECK(qp_state(S.qp) == IBV_QPS_ERR, "responder QP not in error");
		} else if (strcmp(which, "lkey")) {
			/* remote access error: responder QP goes to error, its receives flush */
			expect_wc(50, IBV_WC_WR_FLUSH_ERR);
			expect_wc(51, IBV_WC_WR_FLUSH_ERR);
			CHECK(qp_state(S.qp) == IBV_QPS_ERR, "responder QP not in error");
		}
		sync_peer();
	} else {
		sync_peer();
		if (!strcmp(which, "len")) {
			CHECK(post_send(1, IBV_WR_SEND, S.buf, 100, S.mr->lkey, IBV_SEND_SIGNALED, 0, 0, 0) == 0, "post");
			CHECK(post_send(2, IBV_WR_SEND, S.buf, 8, S.mr->lkey, 0, 0, 0, 0) == 0, "post");
			expect_wc(1, IBV_WC_REM_INV_REQ_ERR);
		} else if (!strcmp(which, "lkey")) {
			CHECK(post_send(1, IBV_WR_RDMA_WRITE, S.buf, 100, S.mr->lkey + 1, IBV_SEND_SIGNALED, P.addr, P.rkey,
					0) == 0,
			      "post");
			CHECK(post_send(2, IBV_WR_SEND, S.buf, 8, S.mr->lkey, 0, 0, 0, 0) == 0, "post");
			expect_wc(1, IBV_WC_LOC_PROT_ERR);
		} else {
			uint32_t rkey = !strcmp(which, "rkey") ? P.rkey ^ 0x5500 : P.rkey;
			uint64_t addr = !strcmp(which, "bounds") ? P.addr + (1 << 20) - 50 : P.addr;
			CHECK(post_send(1, IBV_WR_RDMA_WRITE, S.buf, 100, S.mr->lkey, IBV_SEND_SIGNALED, addr, rkey, 0) ==
				      0,
			      "post");
			CHECK(post_send(2, IBV_WR_SEND, S.buf, 8, S.mr->lkey, 0, 0, 0, 0) == 0, "post");
			expect_wc(1, IBV_WC_REM_ACCESS_ERR);
		}
		/* the queued unsignaled WR is flushed, the QP is in error, new WRs flush too */
		expect_wc(2, IBV_WC_WR_FLUSH_ERR);
		CHECK(qp_state(S.qp) == IBV_QPS_ERR, "requester QP not in error");
		CHECK(post_send(3, IBV_WR_SEND, S.buf, 8, S.mr->lkey, IBV_SEND_SIGNALED, 0, 0, 0) == 0, "post in ERR");
		expect_wc(3, IBV_WC_WR_FLUSH_ERR);
		sync_peer();
	}
	sync_peer();
}

static void mode_rnr(int recover)
{
	rc_pair(IBV_QPT_RC, ALL_ACCESS, 0, recover ? 7 : 2, 1);
	if (server) {
		sync_peer();
		if (recover) {
			usleep(30000); /* the client's SEND meets RNR NAKs meanwhile */
			post_recv(S.qp, NULL, 9, S.buf, 4096, S.mr->lkey);
			struct ibv_wc wc = expect_wc(9, IBV_WC_SUCCESS);
			CHECK(wc.byte_len == 300, "len");
			check_fill(S.buf, 300, 1, "after RNR");
		}
		sync_peer();
	} else {
		fill(S.buf, 300, 1);
		sync_peer();
		CHECK(post_send(1, IBV_WR_SEND, S.buf, 300, S.mr->lkey, IBV_SEND_SIGNALED, 0, 0, 0) == 0, "post");
		CHECK(post_send(2, IBV_WR_RDMA_WRITE, S.buf, 300, S.mr->lkey, IBV_SEND_SIGNALED, P.addr + 8192, P.rkey,
				0) == 0,
		      "post");
		if (recover) {
			expect_wc(1, IBV_WC_SUCCESS);
			expect_wc(2, IBV_WC_SUCCESS);
		} else {
			expect_wc(1, IBV_WC_RNR_RETRY_EXC_ERR);
			expect_wc(2, IBV_WC_WR_FLUSH_ERR);
		}
		sync_peer();
	}
	sync_peer();
	if (recover && server)
		check_fill(S.buf + 8192, 300, 1, "write after RNR");
}

#include "modes_more.h"

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: %s MODE server|client PORT\n", argv[0]);
		return 2;
	}
	const char *mode = argv[1];
	server = !strcmp(argv[2], "server");
	tcp_connect(server, atoi(argv[3]));
	if (!strcmp(mode, "send"))
		mode_send();
	else if (!strcmp(mode, "write"))
		mode_write();
	else if (!strcmp(mode, "read"))
		mode_read();
	else if (!strcmp(mode, "atomic"))
		mode_atomic();
	else if (!strcmp(mode, "unsignaled"))
		mode_unsignaled();
	else if (!strcmp(mode, "rkey") || !strcmp(mode, "access") || !strcmp(mode, "bounds") ||
		 !strcmp(mode, "lkey") || !strcmp(mode, "len"))
		mode_error(mode);
	else if (!strcmp(mode, "rnr"))
		mode_rnr(0);
	else if (!strcmp(mode, "rnr_recover"))
		mode_rnr(1);
	else {
		if (!more_modes(mode))
			FAIL("unknown mode %s", mode);
	}
	printf("OK %s %s\n", mode, argv[2]);
	return 0;
}
