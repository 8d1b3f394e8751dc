/*
 * flight: the flight-recorder scenarios (SIGMATRACE_MODE=ring) on fake_verbs.c's in-process
 * no-op provider (included below, its main renamed). Every WR is one signaled send, polled at
 * once; WR i has wr_id TAG | i (i counting up from 0 across phases; the tag keeps clear of
 * fake_verbs' failing wr_id), so a log's posts say exactly which it kept.
 *
 * usage: flight run N | usr2 N K [M] | abort N | segv N
 *   run N     N WRs, then exit 0
 *   usr2 N K  N WRs, raise(SIGUSR2), sleep 2 s (the tracer's background thread dumps its
 *             rings), K more WRs, exit 0 (untraced, SIGUSR2's default action ends it); with
 *             M: then a second SIGUSR2, sleep 2 s, M more WRs
 *   abort N   N WRs, then abort()
 *   segv N    N WRs, then raise(SIGSEGV)
 * Prints "posted <n>" before it ends (flushed), and fake_verbs' provider counters when it
 * exits normally.
 */
#define main fake_verbs_main
#include "fake_verbs.c"
#undef main

#define TAG (1ull << 40)

static void post_range(struct ibv_qp *qp, long from, long n)
{
	char buf[64];
	struct ibv_sge s = { (uintptr_t)buf, 64, 1 };
	struct ibv_wc wc[16];
	for (long i = from; i < from + n; i++) {
		struct ibv_send_wr w = { .wr_id = TAG | (uint64_t)i, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND,
					 .send_flags = IBV_SEND_SIGNALED },
				   *bad;
		check(ibv_post_send(qp, &w, &bad) == 0, "post");
		check(ibv_poll_cq(qp->send_cq, 16, wc) == 1 && wc[0].wr_id == (TAG | (uint64_t)i), "poll");
	}
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "";
	long a = argc > 2 ? atol(argv[2]) : 0, b = argc > 3 ? atol(argv[3]) : 0;
	long m = argc > 4 ? atol(argv[4]) : -1;
	struct ibv_context *ctx = new_ctx();
	struct ibv_qp *qp = &new_qp(ctx, IBV_QPT_RC, new_cq(ctx))->qp;
	post_range(qp, 0, a);
	if (!strcmp(mode, "run")) {
	} else if (!strcmp(mode, "usr2")) {
		raise(SIGUSR2);
		sleep(2);
		post_range(qp, a, b);
		a += b;
		if (m >= 0) {
			raise(SIGUSR2);
			sleep(2);
			post_range(qp, a, m);
			a += m;
		}
	} else if (!strcmp(mode, "abort")) {
		printf("posted %ld\n", a);
		fflush(stdout);
		abort();
	} else if (!strcmp(mode, "segv")) {
		printf("posted %ld\n", a);
		fflush(stdout);
		raise(SIGSEGV);
		return 5; /* not reached with SIGSEGV's default action */
	} else {
		fprintf(stderr, "usage: flight run N | usr2 N K [M] | abort N | segv N\n");
		return 2;
	}
	printf("posted %ld\n", a);
	printf("provider: sends=%ld completions=%ld\n", prov.sends, prov.completions);
	return 0;
}
