/* Ring over RC QPs on N simulated nodes (one process each), the traffic shape of a ring
 * all-reduce: every rank has two RC QPs sharing one CQ, "right" (to rank r+1's "left") and
 * "left" (to rank r-1's "right").
 *
 *   ring_test RANK RANKS DIR [STEPS]
 *
 * Step s: rank r RDMA_WRITE_WITH_IMMs chunk s (multi-packet) into its right neighbour's staging
 * slot s (immediate = s, consuming a zero-length receive posted there up front); the chunk for
 * s > 0 is the one received from the left in slot s-1 plus the rank's own pattern, so ranks
 * depend on their left neighbour only and a rank may run several steps ahead of its right
 * neighbour. After checking slot s the rank SENDs a 4-byte acknowledgement (value s) back to its
 * left on the same QP, so both QPs carry traffic both ways.
 *
 * Rank 1 does not touch the device until rank 0 reports (file "gate") that its first write to
 * rank 1 completed: that write must be executed and acknowledged by rank 1's progress thread
 * alone, and rank 1 then finds the left neighbour's completions already waiting in its CQ.
 *
 * Every completion is checked (status, opcode, QP, wr_id order, byte_len, immediate, source QP)
 * and counted exactly once; slot contents are checked word by word. Rendezvous through files
 * in DIR. Prints "OK ring rank R" on success.
 */
#include "sn_common.h"
#include <sys/stat.h>

#define CHUNK_WORDS 1561 /* 12488 bytes: 4 packets of the 4096-byte internal MTU */
#define CHUNK_BYTES (CHUNK_WORDS * 8)
#define MAX_STEPS 64
#define WR_WRITE 0x10000u
#define WR_ACK_SEND 0x20000u
#define WR_ACK_RECV 0x30000u
#define WR_SLOT_RECV 0x40000u

struct addr_info {
	uint32_t lid, qpn_left, qpn_right, rkey;
	uint64_t staging;
	uint8_t gid[16];
};

static char *dir;

static void publish(const char *name, const void *data, size_t n)
{
	char tmp[4096], path[4096];
	snprintf(tmp, sizeof(tmp), "%s/.%s.tmp", dir, name);
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	FILE *f = fopen(tmp, "wb");
	CHECK(f, "create %s: %s", tmp, strerror(errno));
	CHECK(fwrite(data, 1, n, f) == n && fclose(f) == 0, "write %s", tmp);
	CHECK(rename(tmp, path) == 0, "rename %s", path);
}

/* Waits (up to 60 s) for a published file and reads it. */
static void fetch(const char *name, void *data, size_t n)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	double t0 = now_s();
	FILE *f;
	while (!(f = fopen(path, "rb"))) {
		CHECK(now_s() - t0 < 60, "%s did not appear", path);
		usleep(2000);
	}
	CHECK(fread(data, 1, n, f) == n, "read %s", path);
	fclose(f);
}

static void barrier(const char *what, int rank, int ranks)
{
	char name[64];
	int one = 1;
	snprintf(name, sizeof(name), "%s-%d", what, rank);
	publish(name, &one, sizeof(one));
	for (int r = 0; r < ranks; r++) {
		snprintf(name, sizeof(name), "%s-%d", what, r);
		fetch(name, &one, sizeof(one));
	}
}

static uint64_t pat(int rank, int step, int k)
{
	return (uint64_t)(rank + 1) * 1000003u + (uint64_t)step * 7919u + (uint64_t)k;
}

/* Word k of the chunk rank r writes at step s: sum over j <= s of pat(r - (s - j), j, k). */
static uint64_t chunk_word(int r, int ranks, int s, int k)
{
	uint64_t v = 0;
	for (int j = 0; j <= s; j++)
		v += pat(((r - (s - j)) % ranks + ranks) % ranks, j, k);
	return v;
}

static void connect_rc(struct ibv_qp *qp, const struct addr_info *peer, uint32_t remote_qpn)
{
	struct peer_info p = { .lid = peer->lid, .psn = 0 };
	qp_init(qp, 0);
	qp_rtr_rts(qp, &p, remote_qpn, 0, 7, 12);
}

/* One rank: its two QPs on one CQ, its buffers, its neighbours' addresses, what it counted. */
struct ring {
	int rank, ranks, steps, left, right;
	struct ibv_cq *cq;
	struct ibv_qp *qp_right, *qp_left;
	uint64_t *src, *staging;
	uint32_t *acks;
	struct ibv_mr *src_mr, *st_mr, *ack_mr;
	struct addr_info ra, la; /* right and left neighbours */
	int writes_done, sends_done, acks_got, slot_recvs;
	int arrived[MAX_STEPS];
	int next_write; /* the write of step next_write is not posted yet */
};

/* Device, CQ, the two QPs and the registered buffers. */
static void setup(struct ring *r, struct ibv_context *ctx)
{
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	CHECK(pd, "alloc pd");
	r->cq = ibv_create_cq(ctx, 4 * MAX_STEPS + 16, NULL, NULL, 0);
	CHECK(r->cq, "create cq");
	struct ibv_qp_init_attr qa = {
		.send_cq = r->cq, .recv_cq = r->cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 2 * MAX_STEPS, .max_recv_wr = 2 * MAX_STEPS, .max_send_sge = 1,
			 .max_recv_sge = 1, .max_inline_data = 16 },
	};
	r->qp_right = ibv_create_qp(pd, &qa);
	r->qp_left = ibv_create_qp(pd, &qa);
	CHECK(r->qp_right && r->qp_left, "create qps: %s", strerror(errno));

	size_t bytes = (size_t)r->steps * CHUNK_BYTES, ack_bytes = r->steps * sizeof(uint32_t);
	CHECK(posix_memalign((void **)&r->src, 4096, bytes) == 0, "alloc");
	CHECK(posix_memalign((void **)&r->staging, 4096, bytes) == 0, "alloc");
	CHECK(posix_memalign((void **)&r->acks, 4096, ack_bytes) == 0, "alloc");
	memset(r->staging, 0, bytes);
	memset(r->acks, 0xff, ack_bytes);
	r->src_mr = ibv_reg_mr(pd, r->src, bytes, IBV_ACCESS_LOCAL_WRITE);
	r->st_mr = ibv_reg_mr(pd, r->staging, bytes, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	r->ack_mr = ibv_reg_mr(pd, r->acks, ack_bytes, IBV_ACCESS_LOCAL_WRITE);
	CHECK(r->src_mr && r->st_mr && r->ack_mr, "reg mr");
}

/* Publishes this rank's address, reads both neighbours' and connects the two QPs. */
static void connect_neighbours(struct ring *r, struct ibv_context *ctx)
{
	struct ibv_port_attr port;
	union ibv_gid gid;
	CHECK(ibv_query_port(ctx, 1, &port) == 0 && ibv_query_gid(ctx, 1, 0, &gid) == 0, "query port");
	struct addr_info me = { .lid = port.lid, .qpn_left = r->qp_left->qp_num,
				.qpn_right = r->qp_right->qp_num, .rkey = r->st_mr->rkey,
				.staging = (uintptr_t)r->staging };
	memcpy(me.gid, gid.raw, 16);
	char name[64];
	snprintf(name, sizeof(name), "addr-%d", r->rank);
	publish(name, &me, sizeof(me));
	snprintf(name, sizeof(name), "addr-%d", r->right);
	fetch(name, &r->ra, sizeof(r->ra));
	snprintf(name, sizeof(name), "addr-%d", r->left);
	fetch(name, &r->la, sizeof(r->la));
	connect_rc(r->qp_right, &r->ra, r->ra.qpn_left);
	connect_rc(r->qp_left, &r->la, r->la.qpn_right);
}

/* Every receive up front: slot writes on the left QP, acknowledgements on the right QP. */
static void post_receives(struct ring *r)
{
	for (int s = 0; s < r->steps; s++) {
		struct ibv_recv_wr wr = { .wr_id = WR_SLOT_RECV + s, .num_sge = 0 }, *bad;
		CHECK(ibv_post_recv(r->qp_left, &wr, &bad) == 0, "post slot recv");
		post_recv(r->qp_right, NULL, WR_ACK_RECV + s, &r->acks[s], 4, r->ack_mr->lkey);
	}
}

/* Posts the write of the next step once its input (slot s-1 from the left) is here. */
static void post_next_write(struct ring *r)
{
	if (r->next_write >= r->steps || (r->next_write > 0 && !r->arrived[r->next_write - 1]))
		return;
	int s = r->next_write++;
	uint64_t *c = r->src + (size_t)s * CHUNK_WORDS;
	for (int k = 0; k < CHUNK_WORDS; k++)
		c[k] = (s ? r->staging[(size_t)(s - 1) * CHUNK_WORDS + k] : 0) + pat(r->rank, s, k);
	struct ibv_sge sge = { .addr = (uintptr_t)c, .length = CHUNK_BYTES, .lkey = r->src_mr->lkey };
	struct ibv_send_wr wr = { .wr_id = WR_WRITE + s, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_RDMA_WRITE_WITH_IMM, .send_flags = IBV_SEND_SIGNALED,
				  .imm_data = htonl(s) }, *bad;
	wr.wr.rdma.remote_addr = r->ra.staging + (uint64_t)s * CHUNK_BYTES;
	wr.wr.rdma.rkey = r->ra.rkey;
	CHECK(ibv_post_send(r->qp_right, &wr, &bad) == 0, "post write %d", s);
}

/* Slot idx arrived from the left: check it word by word and acknowledge it. */
static void on_slot(struct ring *r, const struct ibv_wc *w, uint64_t idx)
{
	uint32_t s = ntohl(w->imm_data);
	CHECK(w->opcode == IBV_WC_RECV_RDMA_WITH_IMM && w->qp_num == r->qp_left->qp_num &&
		      (w->wc_flags & IBV_WC_WITH_IMM) && w->src_qp == r->la.qpn_right &&
		      w->byte_len == CHUNK_BYTES,
	      "slot recv fields (opcode %d qp %u byte_len %u)", w->opcode, w->qp_num, w->byte_len);
	/* Receives are consumed in order and the left writes its steps in order. */
	CHECK(idx == (uint64_t)r->slot_recvs && s == idx, "slot recv %llu carries imm %u, expected %d",
	      (unsigned long long)idx, s, r->slot_recvs);
	CHECK(!r->arrived[s], "slot %u arrived twice", s);
	const uint64_t *got = r->staging + (size_t)s * CHUNK_WORDS;
	for (int k = 0; k < CHUNK_WORDS; k++)
		CHECK(got[k] == chunk_word(r->left, r->ranks, s, k), "slot %u word %d: %llu, expected %llu",
		      s, k, (unsigned long long)got[k],
		      (unsigned long long)chunk_word(r->left, r->ranks, s, k));
	r->arrived[s] = 1;
	r->slot_recvs++;
	uint32_t v = s;
	struct ibv_sge sge = { .addr = (uintptr_t)&v, .length = 4 };
	struct ibv_send_wr wr = { .wr_id = WR_ACK_SEND + s, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE }, *bad;
	CHECK(ibv_post_send(r->qp_left, &wr, &bad) == 0, "post ack %u", s);
}

/* Checks one completion and counts it exactly once. */
static void on_completion(struct ring *r, const struct ibv_wc *w)
{
	CHECK(w->status == IBV_WC_SUCCESS, "rank %d: wr_id %#llx status %s", r->rank,
	      (unsigned long long)w->wr_id, ibv_wc_status_str(w->status));
	uint64_t kind = w->wr_id & ~0xffffull, idx = w->wr_id & 0xffff;
	if (kind == WR_WRITE) {
		CHECK(w->opcode == IBV_WC_RDMA_WRITE && w->qp_num == r->qp_right->qp_num,
		      "write completion fields");
		CHECK(idx == (uint64_t)r->writes_done, "write %llu completed, expected %d",
		      (unsigned long long)idx, r->writes_done);
		r->writes_done++;
		if (r->rank == 0 && idx == 0) {
			int one = 1;
			publish("gate", &one, sizeof(one));
		}
	} else if (kind == WR_ACK_SEND) {
		CHECK(w->opcode == IBV_WC_SEND && w->qp_num == r->qp_left->qp_num, "ack send fields");
		CHECK(idx == (uint64_t)r->sends_done, "ack send %llu out of order", (unsigned long long)idx);
		r->sends_done++;
	} else if (kind == WR_ACK_RECV) {
		CHECK(w->opcode == IBV_WC_RECV && w->qp_num == r->qp_right->qp_num && w->byte_len == 4 &&
			      w->src_qp == r->ra.qpn_left && !(w->wc_flags & IBV_WC_WITH_IMM),
		      "ack recv fields");
		CHECK(idx == (uint64_t)r->acks_got && r->acks[idx] == idx, "ack %llu carries %u, expected %d",
		      (unsigned long long)idx, r->acks[idx], r->acks_got);
		r->acks_got++;
	} else if (kind == WR_SLOT_RECV) {
		on_slot(r, w, idx);
	} else {
		FAIL("unknown wr_id %#llx", (unsigned long long)w->wr_id);
	}
}

int main(int argc, char **argv)
{
	CHECK(argc >= 4, "usage: ring_test RANK RANKS DIR [STEPS]");
	static struct ring ring;
	struct ring *r = &ring;
	r->rank = atoi(argv[1]);
	r->ranks = atoi(argv[2]);
	r->steps = argc > 4 ? atoi(argv[4]) : 24;
	dir = argv[3];
	CHECK(r->ranks >= 2 && r->rank >= 0 && r->rank < r->ranks && r->steps > 0 && r->steps <= MAX_STEPS,
	      "bad arguments");
	r->right = (r->rank + 1) % r->ranks;
	r->left = (r->rank + r->ranks - 1) % r->ranks;

	struct ibv_context *ctx = open_dev();
	setup(r, ctx);
	connect_neighbours(r, ctx);
	post_receives(r);
	barrier("ready", r->rank, r->ranks);
	if (r->rank == 1) {
		/* Stay away from the device until rank 0's first write to us completed. */
		int one;
		fetch("gate", &one, sizeof(one));
	}

	int steps = r->steps;
	double t0 = now_s();
	while (r->writes_done < steps || r->sends_done < steps || r->acks_got < steps || r->slot_recvs < steps) {
		CHECK(now_s() - t0 < 60, "rank %d stuck: %d/%d writes completed, %d slots arrived, %d acks sent, %d received",
		      r->rank, r->writes_done, steps, r->slot_recvs, r->sends_done, r->acks_got);
		post_next_write(r);
		struct ibv_wc wc[16];
		int n = ibv_poll_cq(r->cq, 16, wc);
		CHECK(n >= 0, "poll cq");
		for (int i = 0; i < n; i++)
			on_completion(r, &wc[i]);
	}
	/* Nobody leaves while a peer may still need this process to acknowledge its requests. */
	barrier("done", r->rank, r->ranks);
	struct ibv_wc extra;
	CHECK(ibv_poll_cq(r->cq, 1, &extra) == 0, "extra completion wr_id %#llx", (unsigned long long)extra.wr_id);
	CHECK(ibv_destroy_qp(r->qp_right) == 0 && ibv_destroy_qp(r->qp_left) == 0, "destroy qps");
	printf("OK ring rank %d\n", r->rank);
	return 0;
}
