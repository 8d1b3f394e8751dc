/* Shared helpers of softnic's C test programs: TCP rendezvous, QP setup, polling. */
#ifndef SN_COMMON_H
#define SN_COMMON_H

#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <netdb.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define FAIL(...)                                                                 \
	do {                                                                      \
		fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);              \
		fprintf(stderr, __VA_ARGS__);                                     \
		fprintf(stderr, "\n");                                            \
		exit(1);                                                          \
	} while (0)
#define CHECK(c, ...)                                                             \
	do {                                                                      \
		if (!(c))                                                         \
			FAIL(__VA_ARGS__);                                        \
	} while (0)

struct peer_info {
	uint32_t lid, qpn, psn, rkey;
	uint64_t addr;
	uint8_t gid[16];
	uint32_t qpn2, rkey2;
};

static int sn_sock = -1;

static inline double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static inline void tcp_connect(int server, int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (server) {
		int l = socket(AF_INET, SOCK_STREAM, 0), one = 1;
		setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		CHECK(bind(l, (struct sockaddr *)&a, sizeof(a)) == 0, "bind %d: %s", port, strerror(errno));
		CHECK(listen(l, 1) == 0, "listen");
		sn_sock = accept(l, NULL, NULL);
		CHECK(sn_sock >= 0, "accept");
		close(l);
	} else {
		double t0 = now_s();
		for (;;) {
			sn_sock = socket(AF_INET, SOCK_STREAM, 0);
			if (connect(sn_sock, (struct sockaddr *)&a, sizeof(a)) == 0)
				break;
			close(sn_sock);
			CHECK(now_s() - t0 < 20, "connect to port %d timed out", port);
			usleep(20000);
		}
	}
}

static inline void xfer(void *mine, void *theirs, size_t n)
{
	CHECK(write(sn_sock, mine, n) == (ssize_t)n, "tcp write");
	size_t got = 0;
	while (got < n) {
		ssize_t r = read(sn_sock, (char *)theirs + got, n - got);
		CHECK(r > 0, "tcp read");
		got += r;
	}
}

/* Barrier between the two processes. */
static inline void sync_peer(void)
{
	char a = 's', b;
	xfer(&a, &b, 1);
}

/* The target of a write-rate run: waits for the start and the end; the last write the
 * initiator made must be `iters`. */
static inline void rate_target(volatile uint64_t *dst, long iters)
{
	sync_peer();
	sync_peer();
	CHECK(*dst == (uint64_t)iters, "last write %llu", (unsigned long long)*dst);
}

struct sn {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	char *buf;
	size_t size;
	struct ibv_port_attr port;
	union ibv_gid gid;
};

static inline struct ibv_context *open_dev(void)
{
	int n = 0;
	struct ibv_device **l = ibv_get_device_list(&n);
	CHECK(l && n == 1, "device list");
	CHECK(strcmp(ibv_get_device_name(l[0]), "softnic0") == 0, "device name %s", ibv_get_device_name(l[0]));
	struct ibv_context *c = ibv_open_device(l[0]);
	CHECK(c, "open device");
	ibv_free_device_list(l);
	return c;
}

static inline void sn_init(struct sn *s, size_t size, int access)
{
	memset(s, 0, sizeof(*s));
	s->ctx = open_dev();
	s->pd = ibv_alloc_pd(s->ctx);
	CHECK(s->pd, "alloc pd");
	s->cq = ibv_create_cq(s->ctx, 1024, NULL, NULL, 0);
	CHECK(s->cq, "create cq");
	s->size = size;
	CHECK(posix_memalign((void **)&s->buf, 4096, size) == 0, "alloc");
	memset(s->buf, 0, size);
	s->mr = ibv_reg_mr(s->pd, s->buf, size, access);
	CHECK(s->mr, "reg mr: %s", strerror(errno));
	CHECK(ibv_query_port(s->ctx, 1, &s->port) == 0, "query port");
	CHECK(ibv_query_gid(s->ctx, 1, 0, &s->gid) == 0, "query gid");
}

static inline struct ibv_qp *make_qp(struct sn *s, enum ibv_qp_type t, struct ibv_srq *srq, int sig_all)
{
	struct ibv_qp_init_attr a = {
		.send_cq = s->cq, .recv_cq = s->cq, .srq = srq, .qp_type = t, .sq_sig_all = sig_all,
		.cap = { .max_send_wr = 256, .max_recv_wr = srq ? 0 : 256, .max_send_sge = 4, .max_recv_sge = 4,
			 .max_inline_data = 64 },
	};
	struct ibv_qp *qp = ibv_create_qp(s->pd, &a);
	CHECK(qp, "create qp: %s", strerror(errno));
	return qp;
}

#define ALL_ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)

static inline void qp_init(struct ibv_qp *qp, uint32_t qkey)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1,
				 .qp_access_flags = ALL_ACCESS, .qkey = qkey };
	int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
	mask |= qp->qp_type == IBV_QPT_UD ? IBV_QP_QKEY : IBV_QP_ACCESS_FLAGS;
	CHECK(ibv_modify_qp(qp, &a, mask) == 0, "to INIT");
}

static inline void qp_rtr_rts(struct ibv_qp *qp, struct peer_info *p, uint32_t remote_qpn, uint32_t my_psn,
		       int rnr_retry, int min_rnr)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024, .dest_qp_num = remote_qpn,
				 .rq_psn = p->psn, .max_dest_rd_atomic = 16, .min_rnr_timer = min_rnr };
	a.ah_attr.dlid = p->lid;
	a.ah_attr.port_num = 1;
	int mask = IBV_QP_STATE;
	if (qp->qp_type == IBV_QPT_RC)
		mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
			IBV_QP_MIN_RNR_TIMER;
	else if (qp->qp_type == IBV_QPT_UC)
		mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
	CHECK(ibv_modify_qp(qp, &a, mask) == 0, "to RTR");
	struct ibv_qp_attr b = { .qp_state = IBV_QPS_RTS, .sq_psn = my_psn, .timeout = 14, .retry_cnt = 7,
				 .rnr_retry = rnr_retry, .max_rd_atomic = 16 };
	mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
	if (qp->qp_type == IBV_QPT_RC)
		mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
	CHECK(ibv_modify_qp(qp, &b, mask) == 0, "to RTS");
}

static inline void my_info(struct sn *s, struct peer_info *m, uint32_t psn)
{
	memset(m, 0, sizeof(*m));
	m->lid = s->port.lid;
	m->qpn = s->qp ? s->qp->qp_num : 0;
	m->psn = psn;
	m->rkey = s->mr->rkey;
	m->addr = (uintptr_t)s->buf;
	memcpy(m->gid, s->gid.raw, 16);
}

/* Takes `s->qp` to INIT, swaps addresses with the peer (start PSN `psn` both ways), connects
 * it to the peer's QP (RNR retry 7, minimum RNR timer 1) and returns the peer's address. */
static inline struct peer_info sn_connect(struct sn *s, uint32_t psn)
{
	struct peer_info m, peer;
	qp_init(s->qp, 0);
	my_info(s, &m, psn);
	xfer(&m, &peer, sizeof(m));
	qp_rtr_rts(s->qp, &peer, peer.qpn, psn, 7, 1);
	return peer;
}

/* Polls one completion (fails after 10 s). */
static inline struct ibv_wc poll1(struct ibv_cq *cq)
{
	struct ibv_wc wc;
	double t0 = now_s();
	for (;;) {
		int n = ibv_poll_cq(cq, 1, &wc);
		CHECK(n >= 0, "poll_cq");
		if (n == 1)
			return wc;
		CHECK(now_s() - t0 < 10, "no completion within 10 s");
	}
}

/* Asserts that no completion arrives for `ms` milliseconds. */
static inline void expect_none(struct ibv_cq *cq, int ms)
{
	struct ibv_wc wc;
	double t0 = now_s();
	while (now_s() - t0 < ms / 1000.0)
		CHECK(ibv_poll_cq(cq, 1, &wc) == 0, "unexpected completion wr_id=%llu status=%s",
		      (unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status));
}

static inline void post_recv(struct ibv_qp *qp, struct ibv_srq *srq, uint64_t id, void *addr, uint32_t len, uint32_t lkey)
{
	struct ibv_sge sge = { .addr = (uintptr_t)addr, .length = len, .lkey = lkey };
	struct ibv_recv_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = 1 }, *bad;
	int r = srq ? ibv_post_srq_recv(srq, &wr, &bad) : ibv_post_recv(qp, &wr, &bad);
	CHECK(r == 0, "post recv: %d", r);
}

static inline void fill(char *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (char)(seed + i * 7 + (i >> 8));
}

static inline void check_fill(const char *p, size_t n, unsigned seed, const char *what)
{
	for (size_t i = 0; i < n; i++)
		CHECK(p[i] == (char)(seed + i * 7 + (i >> 8)), "%s: byte %zu differs", what, i);
}

#endif
