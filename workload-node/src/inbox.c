/* inbox: hand-overs to a worker from other threads (see inbox.h). */
#include "inbox.h"
#include "job.h"

#include <errno.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

int wl_inbox_init(struct wl_inbox *box, int worker)
{
	*box = (struct wl_inbox){.worker = worker, .fd = -1};
	pthread_mutex_init(&box->lock, NULL);
	box->fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (box->fd < 0)
		return wl_err("worker %d: eventfd: %s", worker, strerror(errno));
	return 0;
}

int wl_inbox_wake(struct wl_inbox *box)
{
	uint64_t one = 1;
	return write(box->fd, &one, sizeof(one)) < 0 ? -1 : 0;
}

void wl_inbox_post_job(struct wl_inbox *box, struct wl_job *job)
{
	pthread_mutex_lock(&box->lock);
	job->next = NULL;
	if (box->done_tail)
		box->done_tail->next = job;
	else
		box->done_head = job;
	box->done_tail = job;
	pthread_mutex_unlock(&box->lock);
	if (wl_inbox_wake(box) < 0 && errno != EAGAIN)
		wl_err("worker %d: eventfd write: %s", box->worker, strerror(errno));
}

int wl_inbox_post_fd(struct wl_inbox *box, int fd)
{
	pthread_mutex_lock(&box->lock);
	int rc = wl_grow(&box->handoff, &box->handoff_cap, box->nhandoff, sizeof(*box->handoff), 16);
	if (rc == 0)
		box->handoff[box->nhandoff++] = fd;
	pthread_mutex_unlock(&box->lock);
	return rc;
}

struct wl_job *wl_inbox_take(struct wl_inbox *box, int *fds, size_t max, size_t *nfds)
{
	uint64_t v;
	if (read(box->fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
		wl_err("worker %d: eventfd read: %s", box->worker, strerror(errno));
	pthread_mutex_lock(&box->lock);
	struct wl_job *jobs = box->done_head;
	box->done_head = box->done_tail = NULL;
	size_t n = 0;
	while (box->nhandoff > 0 && n < max)
		fds[n++] = box->handoff[--box->nhandoff];
	pthread_mutex_unlock(&box->lock);
	if (n == max && wl_inbox_wake(box) < 0)
		wl_err("worker %d: eventfd rewake: %s", box->worker, strerror(errno));
	*nfds = n;
	return jobs;
}
