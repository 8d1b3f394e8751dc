/* Connection-manager semantics on softnic's librdmacm, without QPs on the ids:
 *   server ADDR PORT: listens; rejects the first request (private data "nope"), migrates the
 *     second request's id to a new channel and accepts it (private data "welcome"); waits
 *     for ESTABLISHED and DISCONNECTED on the new channel.
 *   client ADDR PORT: connects to PORT+1 (nobody there: REJECTED, status 8), to PORT
 *     (REJECTED, status 28, the server's private data), and again (CONNECT_RESPONSE with
 *     the server's private data, rdma_establish, rdma_disconnect, DISCONNECTED on a second
 *     thread that holds the event 300 ms: rdma_destroy_id must wait for its ack, as
 *     librdmacm's does).
 *     The server's accepted id then reports TIMEWAIT_EXIT, not before 1 s after DISCONNECTED
 *     (the IB CM's time wait: about 2 s for the path's packet lifetime).
 *   server-vanish / client-vanish ADDR PORT: the client exits right after establishing,
 *     without disconnecting; the server must see DISCONNECTED.
 *   server6 / client6 ADDR PORT: IPv6 addressing of softnic's IPv4 nodes, as tgtd's iSER
 *     portals use it: [::]:PORT with RDMA_OPTION_ID_AFONLY beside 0.0.0.0:PORT, and [::]:PORT+2
 *     without it; an IPv4 request to PORT reaches the IPv4 listener, an IPv6 one (the
 *     v4-mapped ADDR) the IPv6-only listener, an IPv4 one to PORT+2 the dual-stack listener
 *     (its id's addresses IPv4); ids report their addresses in the family they were given.
 * The listener's channel fd is non-blocking and waited on with poll(). Prints "ok: ..." per
 * checked step; exits 0 only if every check held. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <time.h>
#include <stdatomic.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
    fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); exit(1); } } while (0)

static struct rdma_cm_event *next(struct rdma_event_channel *ch, enum rdma_cm_event_type want)
{
	struct rdma_cm_event *ev;
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	for (;;) {
		int r = rdma_get_cm_event(ch, &ev);
		if (r == 0)
			break;
		CHECK(errno == EAGAIN, "rdma_get_cm_event: %s", strerror(errno));
		CHECK(poll(&p, 1, 20000) == 1, "no event within 20 s (want %s)", rdma_event_str(want));
	}
	CHECK(ev->event == want, "got %s (status %d), want %s", rdma_event_str(ev->event),
	      ev->status, rdma_event_str(want));
	return ev;
}

static void addr_of(struct sockaddr_in *a, const char *ip, int port)
{
	memset(a, 0, sizeof(*a));
	a->sin_family = AF_INET;
	a->sin_port = htons(port);
	CHECK(inet_pton(AF_INET, ip, &a->sin_addr) == 1, "bad address %s", ip);
}

static void server(const char *ip, int port)
{
	struct rdma_event_channel *ch = rdma_create_event_channel(), *ch2;
	struct rdma_cm_id *listen;
	struct rdma_cm_event *ev;
	struct rdma_conn_param p = { 0 };
	struct sockaddr_in a;
	CHECK(ch, "channel");
	fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK);
	CHECK(rdma_create_id(ch, &listen, NULL, RDMA_PS_TCP) == 0, "create_id");
	addr_of(&a, ip, port);
	CHECK(rdma_bind_addr(listen, (struct sockaddr *)&a) == 0, "bind: %s", strerror(errno));
	CHECK(rdma_bind_addr(listen, (struct sockaddr *)&a) == -1 && errno == EINVAL, "rebind");
	CHECK(rdma_listen(listen, 4) == 0, "listen");
	CHECK(ntohs(rdma_get_src_port(listen)) == port, "src port");
	printf("ok: listening\n");
	fflush(stdout);

	ev = next(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
	CHECK(ev->listen_id == listen && ev->id != listen, "request ids");
	CHECK(ev->param.conn.private_data_len == 56, "REQ private length %d", ev->param.conn.private_data_len);
	CHECK(!strcmp(ev->param.conn.private_data, "hello-1"), "REQ private data");
	CHECK(ev->param.conn.responder_resources == 3 && ev->param.conn.initiator_depth == 2,
	      "swapped depths %d %d", ev->param.conn.responder_resources, ev->param.conn.initiator_depth);
	CHECK(rdma_reject(ev->id, "nope", 5) == 0, "reject");
	CHECK(rdma_destroy_id(ev->id) == 0, "destroy rejected id");
	rdma_ack_cm_event(ev);
	printf("ok: first request rejected\n");

	ev = next(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
	struct rdma_cm_id *id = ev->id;
	CHECK(!strcmp(ev->param.conn.private_data, "hello-2"), "second REQ private data");
	CHECK(id->context == NULL && id->verbs != NULL && id->port_num == 1, "new id fields");
	struct sockaddr_in *peer = (struct sockaddr_in *)rdma_get_peer_addr(id);
	CHECK(peer->sin_addr.s_addr != 0 && peer->sin_port != 0, "peer address");
	rdma_ack_cm_event(ev);
	ch2 = rdma_create_event_channel();
	CHECK(rdma_migrate_id(id, ch2) == 0 && id->channel == ch2, "migrate");
	p.private_data = "welcome";
	p.private_data_len = 8;
	p.responder_resources = 1;
	p.initiator_depth = 1;
	CHECK(rdma_accept(id, &p) == 0, "accept: %s", strerror(errno));
	rdma_ack_cm_event(next(ch2, RDMA_CM_EVENT_ESTABLISHED));
	printf("ok: established on the migrated channel\n");
	rdma_ack_cm_event(next(ch2, RDMA_CM_EVENT_DISCONNECTED));
	printf("ok: disconnected\n");
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	rdma_ack_cm_event(next(ch2, RDMA_CM_EVENT_TIMEWAIT_EXIT));
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double waited = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
	CHECK(waited >= 1.0, "TIMEWAIT_EXIT %.3f s after DISCONNECTED", waited);
	printf("ok: time wait exit\n");
	CHECK(rdma_get_cm_event(ch, &ev) == -1 && errno == EAGAIN, "listener channel drained");
	rdma_destroy_id(id);
	rdma_destroy_id(listen);
	rdma_destroy_event_channel(ch2);
	rdma_destroy_event_channel(ch);
}

static struct rdma_cm_event *connect_to(struct rdma_event_channel *ch, struct rdma_cm_id **id,
					const char *ip, int port, const char *private)
{
	struct sockaddr_in a;
	struct rdma_conn_param p = { 0 };
	CHECK(rdma_create_id(ch, id, (void *)0x1234, RDMA_PS_TCP) == 0, "create_id");
	addr_of(&a, ip, port);
	CHECK(rdma_resolve_addr(*id, NULL, (struct sockaddr *)&a, 2000) == 0, "resolve_addr");
	rdma_ack_cm_event(next(ch, RDMA_CM_EVENT_ADDR_RESOLVED));
	CHECK(rdma_resolve_route(*id, 2000) == 0, "resolve_route");
	rdma_ack_cm_event(next(ch, RDMA_CM_EVENT_ROUTE_RESOLVED));
	p.private_data = private;
	p.private_data_len = strlen(private) + 1;
	p.responder_resources = 2;
	p.initiator_depth = 3;
	p.retry_count = 7;
	p.rnr_retry_count = 7;
	p.qp_num = 0x4242;
	CHECK(rdma_connect(*id, &p) == 0, "connect: %s", strerror(errno));
	struct rdma_cm_event *ev;
	CHECK(rdma_get_cm_event(ch, &ev) == 0, "get event");
	return ev;
}

static atomic_int disconnected_seen, disconnected_acked;

/* Takes the DISCONNECTED event, holds it 300 ms, then acks it. */
static void *hold_disconnected(void *ch)
{
	struct rdma_cm_event *ev = next(ch, RDMA_CM_EVENT_DISCONNECTED);
	atomic_store(&disconnected_seen, 1);
	usleep(300 * 1000);
	atomic_store(&disconnected_acked, 1);
	rdma_ack_cm_event(ev);
	return NULL;
}

static void client(const char *ip, int port)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id;
	struct rdma_cm_event *ev = connect_to(ch, &id, ip, port + 1, "nobody");
	CHECK(ev->event == RDMA_CM_EVENT_REJECTED && ev->status == 8, "no listener: %s %d",
	      rdma_event_str(ev->event), ev->status);
	rdma_ack_cm_event(ev);
	rdma_destroy_id(id);
	printf("ok: no listener\n");

	ev = connect_to(ch, &id, ip, port, "hello-1");
	CHECK(ev->event == RDMA_CM_EVENT_REJECTED && ev->status == 28, "reject: %s %d",
	      rdma_event_str(ev->event), ev->status);
	CHECK(ev->id == id && id->context == (void *)0x1234, "event id");
	CHECK(ev->param.conn.private_data_len == 148 && !strcmp(ev->param.conn.private_data, "nope"),
	      "REJ private data");
	rdma_ack_cm_event(ev);
	rdma_destroy_id(id);
	printf("ok: rejected with private data\n");

	ev = connect_to(ch, &id, ip, port, "hello-2");
	CHECK(ev->event == RDMA_CM_EVENT_CONNECT_RESPONSE, "got %s", rdma_event_str(ev->event));
	CHECK(ev->param.conn.private_data_len == 196 && !strcmp(ev->param.conn.private_data, "welcome"),
	      "REP private data");
	rdma_ack_cm_event(ev);
	CHECK(rdma_establish(id) == 0, "establish");
	printf("ok: connect response, established\n");
	pthread_t holder;
	CHECK(pthread_create(&holder, NULL, hold_disconnected, ch) == 0, "thread");
	CHECK(rdma_disconnect(id) == 0, "disconnect");
	while (!atomic_load(&disconnected_seen))
		usleep(1000);
	printf("ok: disconnected\n");
	CHECK(rdma_destroy_id(id) == 0, "destroy");
	CHECK(atomic_load(&disconnected_acked), "rdma_destroy_id returned before the event was acked");
	printf("ok: destroy waited for the ack\n");
	pthread_join(holder, NULL);
	rdma_destroy_event_channel(ch);
}

static void server_vanish(const char *ip, int port)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *listen;
	struct sockaddr_in a;
	CHECK(rdma_create_id(ch, &listen, NULL, RDMA_PS_TCP) == 0, "create_id");
	addr_of(&a, ip, port);
	CHECK(rdma_bind_addr(listen, (struct sockaddr *)&a) == 0, "bind: %s", strerror(errno));
	CHECK(rdma_listen(listen, 1) == 0, "listen");
	struct rdma_cm_event *ev = next(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
	struct rdma_cm_id *id = ev->id;
	rdma_ack_cm_event(ev);
	CHECK(rdma_accept(id, NULL) == 0, "accept");
	rdma_ack_cm_event(next(ch, RDMA_CM_EVENT_ESTABLISHED));
	rdma_ack_cm_event(next(ch, RDMA_CM_EVENT_DISCONNECTED));
	printf("ok: peer exit reported as DISCONNECTED\n");
	rdma_destroy_id(id);
	rdma_destroy_id(listen);
	rdma_destroy_event_channel(ch);
}

static void client_vanish(const char *ip, int port)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id;
	struct rdma_cm_event *ev = connect_to(ch, &id, ip, port, "bye");
	CHECK(ev->event == RDMA_CM_EVENT_CONNECT_RESPONSE, "got %s", rdma_event_str(ev->event));
	rdma_ack_cm_event(ev);
	CHECK(rdma_establish(id) == 0, "establish");
	printf("ok: established, exiting without disconnect\n");
	fflush(stdout);
	_exit(0);
}

static struct rdma_cm_id *listener(struct rdma_event_channel *ch, struct sockaddr *a, int afonly)
{
	struct rdma_cm_id *id;
	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "create_id");
	if (afonly >= 0)
		CHECK(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &afonly,
				      sizeof(afonly)) == 0, "AFONLY");
	CHECK(rdma_bind_addr(id, a) == 0, "bind (family %d): %s", a->sa_family, strerror(errno));
	CHECK(rdma_listen(id, 4) == 0, "listen");
	return id;
}

static void any6(struct sockaddr_in6 *a, int port)
{
	memset(a, 0, sizeof(*a));
	a->sin6_family = AF_INET6;
	a->sin6_port = htons(port);
	a->sin6_addr = in6addr_any;
}

static void server6(const char *ip, int port)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct sockaddr_in6 a6;
	struct sockaddr_in a4;
	(void)ip;
	CHECK(ch, "channel");
	any6(&a6, port);
	struct rdma_cm_id *v6only = listener(ch, (struct sockaddr *)&a6, 1);
	addr_of(&a4, "0.0.0.0", port);
	struct rdma_cm_id *v4 = listener(ch, (struct sockaddr *)&a4, -1);
	any6(&a6, port + 2);
	struct rdma_cm_id *dual = listener(ch, (struct sockaddr *)&a6, 0);
	struct sockaddr_in6 *l6 = (struct sockaddr_in6 *)rdma_get_local_addr(v6only);
	CHECK(l6->sin6_family == AF_INET6 && ntohs(l6->sin6_port) == port &&
	      IN6_IS_ADDR_UNSPECIFIED(&l6->sin6_addr), "IPv6 listener's own address");
	CHECK(rdma_get_local_addr(v4)->sa_family == AF_INET, "IPv4 listener's own address");
	printf("ok: IPv4 and IPv6-only listeners share a port\n");
	struct rdma_cm_id *want[3] = { v4, v6only, dual };
	for (int i = 0; i < 3; i++) {
		struct rdma_cm_event *ev = next(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
		CHECK(ev->listen_id == want[i], "request %d reached the wrong listener", i);
		CHECK(rdma_get_peer_addr(ev->id)->sa_family == AF_INET, "request %d: peer family", i);
		CHECK(rdma_reject(ev->id, NULL, 0) == 0, "reject");
		CHECK(rdma_destroy_id(ev->id) == 0, "destroy");
		rdma_ack_cm_event(ev);
	}
	printf("ok: each request reached its listener\n");
	rdma_destroy_id(dual);
	rdma_destroy_id(v4);
	rdma_destroy_id(v6only);
	rdma_destroy_event_channel(ch);
}

/* Connects to a (IPv4 or IPv6) and expects REJECTED; returns the id's own address family. */
static int rejected(struct rdma_event_channel *ch, struct sockaddr *a)
{
	struct rdma_cm_id *id;
	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "create_id");
	CHECK(rdma_resolve_addr(id, NULL, a, 2000) == 0, "resolve_addr: %s", strerror(errno));
	rdma_ack_cm_event(next(ch, RDMA_CM_EVENT_ADDR_RESOLVED));
	int family = rdma_get_local_addr(id)->sa_family;
	CHECK(rdma_get_peer_addr(id)->sa_family == family, "peer family");
	CHECK(rdma_resolve_route(id, 2000) == 0, "resolve_route");
	rdma_ack_cm_event(next(ch, RDMA_CM_EVENT_ROUTE_RESOLVED));
	struct rdma_conn_param p = { 0 };
	CHECK(rdma_connect(id, &p) == 0, "connect: %s", strerror(errno));
	rdma_ack_cm_event(next(ch, RDMA_CM_EVENT_REJECTED));
	rdma_destroy_id(id);
	return family;
}

static void client6(const char *ip, int port)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct sockaddr_in a4;
	struct sockaddr_in6 a6 = { .sin6_family = AF_INET6, .sin6_port = htons(port) };
	char mapped[64];
	snprintf(mapped, sizeof(mapped), "::ffff:%s", ip);
	CHECK(inet_pton(AF_INET6, mapped, &a6.sin6_addr) == 1, "bad address %s", mapped);
	addr_of(&a4, ip, port);
	CHECK(rejected(ch, (struct sockaddr *)&a4) == AF_INET, "IPv4 id's family");
	CHECK(rejected(ch, (struct sockaddr *)&a6) == AF_INET6, "IPv6 id's family");
	addr_of(&a4, ip, port + 2);
	CHECK(rejected(ch, (struct sockaddr *)&a4) == AF_INET, "IPv4 id's family");
	printf("ok: IPv4, IPv6 and dual-stack requests answered\n");
	rdma_destroy_event_channel(ch);
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	CHECK(argc == 4, "usage: cm_test server|client ADDR PORT");
	if (!strcmp(argv[1], "server"))
		server(argv[2], atoi(argv[3]));
	else if (!strcmp(argv[1], "server-vanish"))
		server_vanish(argv[2], atoi(argv[3]));
	else if (!strcmp(argv[1], "client-vanish"))
		client_vanish(argv[2], atoi(argv[3]));
	else if (!strcmp(argv[1], "server6"))
		server6(argv[2], atoi(argv[3]));
	else if (!strcmp(argv[1], "client6"))
		client6(argv[2], atoi(argv[3]));
	else
		client(argv[2], atoi(argv[3]));
	return 0;
}
