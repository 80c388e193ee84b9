/* storage: the storage thread, which does every LOAD and STORE of the node
 * (storage.c says how). node.c opens and closes it, job.c submits a job
 * whose op is a LOAD or a STORE; when the I/O is done, the job goes back
 * to its worker's loop through the worker's inbox (inbox.h). Calls
 * storage_file.c and inbox.c. */
#pragma once
#include <stdint.h>

struct wl_node;
struct wl_job;
struct wl_storage;

int wl_storage_open(struct wl_node *node);
void wl_storage_submit(struct wl_storage *st, struct wl_job *job);
void wl_storage_close(struct wl_storage *st);
void wl_storage_counters(struct wl_storage *st, uint64_t *fsyncs, uint64_t *errors);
