/* inbox: what other threads hand a worker. The storage thread (storage.c)
 * posts jobs whose LOAD or STORE is done, the acceptor thread (accept.c,
 * parent accept mode) the connections it accepted, and main (node.c)
 * wakes the worker to stop; an eventfd in the worker's poller wakes its
 * loop (worker.c), which takes them. Calls nothing of wl-node's. */
#pragma once
#include "util.h"

#include <pthread.h>

struct wl_job;

struct wl_inbox {
	int worker; /* the owner's index, for messages */
	int fd;     /* eventfd: readable while something was posted */
	pthread_mutex_t lock;
	struct wl_job *done_head, *done_tail; /* linked through next */
	int *handoff;                         /* accepted sockets */
	size_t nhandoff, handoff_cap;
};

int wl_inbox_init(struct wl_inbox *box, int worker);
void wl_inbox_post_job(struct wl_inbox *box, struct wl_job *job); /* wakes the loop */
int wl_inbox_post_fd(struct wl_inbox *box, int fd); /* -1: out of memory, fd not taken; no wake-up */
int wl_inbox_wake(struct wl_inbox *box);            /* -1 with errno when the eventfd write failed */
/* The loop's side: the jobs posted (a list through next), and up to max
 * sockets into fds (*nfds of them); with more waiting, the loop is woken again. */
struct wl_job *wl_inbox_take(struct wl_inbox *box, int *fds, size_t max, size_t *nfds);
