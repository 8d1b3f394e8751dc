/* softnic benchmark peer: `sn_bench MODE server|client PORT ITERS`, run by softnic-bench.
 * rate: client streams 8-byte RDMA writes (one signaled per 32, up to 240 in flight); the
 *       server stays passive (its progress thread executes the writes), then checks the data.
 * lat:  8-byte SEND ping-pong, both sides busy-poll their CQ; prints half round trip.
 * wlat: 8-byte RDMA WRITE ping-pong, each side spins on its memory (ib_write_lat's pattern). */
#include "sn_common.h"

static int server;
static struct sn S;
static struct peer_info P;

static void setup(void)
{
	sn_init(&S, 1 << 20, ALL_ACCESS);
	S.qp = make_qp(&S, IBV_QPT_RC, NULL, 0);
	P = sn_connect(&S, 5);
}

static void post_wr(enum ibv_wr_opcode op, uint64_t id, void *buf, int flags, uint64_t raddr)
{
	struct ibv_sge sge = { (uintptr_t)buf, 8, S.mr->lkey };
	struct ibv_send_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = 1, .opcode = op, .send_flags = flags }, *bad;
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = P.rkey;
	CHECK(ibv_post_send(S.qp, &wr, &bad) == 0, "post");
}

static void rate(long iters)
{
	volatile uint64_t *dst = (uint64_t *)S.buf;
	if (server) {
		rate_target(dst, iters);
		return;
	}
	uint64_t *src = (uint64_t *)(S.buf + 4096);
	sync_peer();
	long posted = 0, done = 0;
	const int sig = 32, depth = 240;
	double t0 = now_s();
	struct ibv_wc wc[16];
	while (done < iters) {
		while (posted < iters && posted - done < depth) {
			src[posted % 256] = posted + 1;
			int last = posted + 1 == iters;
			post_wr(IBV_WR_RDMA_WRITE, posted, &src[posted % 256], (posted % sig == sig - 1 || last) ? IBV_SEND_SIGNALED : 0,
				P.addr);
			posted++;
		}
		int n = ibv_poll_cq(S.cq, 16, wc);
		for (int i = 0; i < n; i++) {
			CHECK(wc[i].status == IBV_WC_SUCCESS, "status %s", ibv_wc_status_str(wc[i].status));
			done = wc[i].wr_id + 1;
		}
	}
	double dt = now_s() - t0;
	printf("rate %.0f writes/s (%ld 8-byte RDMA writes in %.3f s)\n", iters / dt, iters, dt);
	sync_peer();
}

static void lat(long iters)
{
	char *rb = S.buf, *sb = S.buf + 4096;
	for (int i = 0; i < 64; i++)
		post_recv(S.qp, NULL, i, rb, 64, S.mr->lkey);
	sync_peer();
	double t0 = now_s();
	struct ibv_wc wc;
	long recvs = 0, sends = 0;
	if (!server)
		post_wr(IBV_WR_SEND, 0, sb, IBV_SEND_SIGNALED | IBV_SEND_INLINE, 0);
	/* each side answers every message it receives; the client stops after ITERS round trips */
	while (recvs < iters || sends < iters) {
		if (ibv_poll_cq(S.cq, 1, &wc) != 1)
			continue;
		CHECK(wc.status == IBV_WC_SUCCESS, "status %s", ibv_wc_status_str(wc.status));
		if (wc.opcode == IBV_WC_RECV) {
			recvs++;
			post_recv(S.qp, NULL, 0, rb, 64, S.mr->lkey);
			if (server || recvs < iters)
				post_wr(IBV_WR_SEND, recvs, sb, IBV_SEND_SIGNALED | IBV_SEND_INLINE, 0);
		} else {
			sends++;
		}
	}
	double dt = now_s() - t0;
	if (!server)
		printf("lat %.2f us half round trip (8-byte SEND ping-pong, %ld iterations)\n", dt / iters / 2 * 1e6,
		       iters);
	sync_peer();
}

static void wlat(long iters)
{
	volatile char *poll = S.buf + 7, *post = S.buf + 4096 + 7;
	sync_peer();
	double t0 = now_s();
	struct ibv_wc wc;
	for (long i = 1; i <= iters; i++) {
		if (server || i > 1)
			while (*poll != (char)(server ? i : i - 1))
				;
		*post = (char)i;
		post_wr(IBV_WR_RDMA_WRITE, i, (void *)(S.buf + 4096), IBV_SEND_SIGNALED | IBV_SEND_INLINE, P.addr);
		while (ibv_poll_cq(S.cq, 1, &wc) == 0)
			;
		CHECK(wc.status == IBV_WC_SUCCESS, "status");
	}
	if (!server)
		while (*poll != (char)iters)
			;
	double dt = now_s() - t0;
	if (!server)
		printf("wlat %.2f us half round trip (8-byte RDMA WRITE ping-pong polling memory, %ld iterations)\n",
		       dt / iters / 2 * 1e6, iters);
	sync_peer();
}

int main(int argc, char **argv)
{
	if (argc != 5) {
		fprintf(stderr, "usage: %s rate|lat|wlat server|client PORT ITERS\n", argv[0]);
		return 2;
	}
	server = !strcmp(argv[2], "server");
	long iters = atol(argv[4]);
	tcp_connect(server, atoi(argv[3]));
	setup();
	if (!strcmp(argv[1], "rate"))
		rate(iters);
	else if (!strcmp(argv[1], "lat"))
		lat(iters);
	else if (!strcmp(argv[1], "wlat"))
		wlat(iters);
	else
		FAIL("unknown mode %s", argv[1]);
	return 0;
}
