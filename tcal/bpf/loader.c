// SPDX-License-Identifier: GPL-2.0
/* User side of the per-destination counters: loads counters.bpf.o through its
 * generated skeleton, attaches it at clsact egress inside a network namespace,
 * sums the per-CPU values on read, and removes exactly what it added.
 * Nothing is pinned: the tc filter holds the program and this process holds
 * the map, so no bpffs is needed (`ip netns exec` remounts /sys) and nothing
 * outlives the interface if the process dies. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <net/if.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <linux/netlink.h>
#include <linux/pkt_sched.h>
#include <linux/rtnetlink.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include "loader.h"
#include "counters.skel.h"

#include "internal.h"

static __thread char cx_err[1024];
static __thread int cx_err_no;
static __thread int cx_err_stage;
__thread char cx_libbpf_msg[256];

const char *cx_last_error(void) { return cx_err; }
int cx_last_errno(void) { return cx_err_no; }
int cx_last_stage(void) { return cx_err_stage; }

/* Record "function: what (value): strerror" and return -1 for tail calls. */
int cx_fail(int stage, int err, const char *func, const char *fmt, ...)
{
	char what[320];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	cx_err_no = err < 0 ? -err : err;
	cx_err_stage = stage;
	snprintf(cx_err, sizeof(cx_err), "%s: %s: %s%s%s", func, what,
		 strerror(cx_err_no), cx_libbpf_msg[0] ? "; libbpf: " : "",
		 cx_libbpf_msg);
	return -1;
}

/* Keep libbpf's last warning for the error message instead of stderr noise;
 * COLLAPSAR_BPF_DEBUG=1 shows everything (verifier log included). */
static int cx_libbpf_print(enum libbpf_print_level level, const char *fmt, va_list ap)
{
	size_t n;

	if (getenv("COLLAPSAR_BPF_DEBUG"))
		return vfprintf(stderr, fmt, ap);
	if (level != LIBBPF_WARN)
		return 0;
	vsnprintf(cx_libbpf_msg, sizeof(cx_libbpf_msg), fmt, ap);
	/* libbpf prefixes most messages itself; ours adds "libbpf: " already. */
	if (!strncmp(cx_libbpf_msg, "libbpf: ", 8))
		memmove(cx_libbpf_msg, cx_libbpf_msg + 8, strlen(cx_libbpf_msg + 8) + 1);
	n = strlen(cx_libbpf_msg);
	if (n && cx_libbpf_msg[n - 1] == '\n')
		cx_libbpf_msg[n - 1] = '\0';
	return 0;
}

/* Move this thread into netns; *saved gets our own namespace to come back to. */
static int cx_netns_enter(const char *netns, int *saved)
{
	char path[PATH_MAX];
	int target;

	*saved = -1;
	if (!netns[0])
		return 0;
	if (strchr(netns, '/'))
		snprintf(path, sizeof(path), "%s", netns);
	else
		snprintf(path, sizeof(path), "/var/run/netns/%s", netns);
	target = open(path, O_RDONLY | O_CLOEXEC);
	if (target < 0)
		return cx_fail(CX_STAGE_NETNS, errno, __func__, "open network namespace %s", path);
	*saved = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
	if (*saved < 0) {
		cx_fail(CX_STAGE_NETNS, errno, __func__, "open /proc/thread-self/ns/net");
		goto cleanup;
	}
	if (setns(target, CLONE_NEWNET)) {
		cx_fail(CX_STAGE_NETNS, errno, __func__, "setns into %s", path);
		close(*saved);
		*saved = -1;
		goto cleanup;
	}
	close(target);
	return 0;
cleanup:
	close(target);
	return -1;
}

/* Return to the namespace saved by cx_netns_enter; failing here would leave the
 * caller's thread in the instance's namespace, so it is reported, never hidden. */
static int cx_netns_leave(int saved)
{
	int err = 0;

	if (saved < 0)
		return 0;
	if (setns(saved, CLONE_NEWNET))
		err = cx_fail(CX_STAGE_NETNS, errno, __func__, "setns back to own namespace");
	close(saved);
	return err;
}

static int cx_load(struct cx_counters *cx, __u32 max_entries, __u32 overhead)
{
	int err;

	cx->skel = cx_counters_bpf__open();
	if (!cx->skel)
		return cx_fail(CX_STAGE_LOAD, errno, __func__, "open BPF object");
	cx->skel->rodata->wire_overhead_bytes = overhead;
	err = bpf_map__set_max_entries(cx->skel->maps.cx_dest, max_entries);
	if (err)
		return cx_fail(CX_STAGE_LOAD, err, __func__, "max_entries %u", max_entries);
	err = cx_counters_bpf__load(cx->skel);
	if (err)
		return cx_fail(CX_STAGE_LOAD, err, __func__, "load and verify counters.bpf.o");
	return 0;
}

/* Create clsact if absent (remembering that we did) and add our filter. */
static int cx_attach_here(struct cx_counters *cx)
{
	int ifindex, err;

	ifindex = if_nametoindex(cx->ifname);
	if (!ifindex)
		return cx_fail(CX_STAGE_IFACE, errno, __func__, "interface %s", cx->ifname);
	cx->hook.sz = sizeof(cx->hook);
	cx->hook.ifindex = ifindex;
	cx->hook.attach_point = BPF_TC_EGRESS;
	err = bpf_tc_hook_create(&cx->hook);
	if (err && err != -EEXIST)
		return cx_fail(CX_STAGE_ATTACH, err, __func__, "create clsact on %s", cx->ifname);
	cx->hook_created = !err;
	/* handle and priority 0: the kernel picks free ones, so we never
	 * replace a filter someone else put there; libbpf reports the choice. */
	cx->opts.sz = sizeof(cx->opts);
	cx->opts.prog_fd = bpf_program__fd(cx->skel->progs.cx_count_egress);
	err = bpf_tc_attach(&cx->hook, &cx->opts);
	if (err) {
		cx_fail(CX_STAGE_ATTACH, err, __func__, "tc filter on %s egress", cx->ifname);
		goto cleanup;
	}
	cx->attached = true;
	return 0;
cleanup:
	if (cx->hook_created) {
		cx->hook.attach_point = BPF_TC_INGRESS | BPF_TC_EGRESS;
		bpf_tc_hook_destroy(&cx->hook);
		cx->hook_created = false;
	}
	return -1;
}

struct cx_counters *cx_counters_attach(const char *ifname, const char *netns,
				       __u32 max_entries, __u32 wire_overhead_bytes)
{
	struct cx_counters *cx;
	int saved = -1;

	cx_err[0] = cx_libbpf_msg[0] = '\0';
	libbpf_set_print(cx_libbpf_print);
	if (!ifname || !ifname[0] || strlen(ifname) >= IF_NAMESIZE || !max_entries) {
		cx_fail(CX_STAGE_ARG, EINVAL, __func__, "ifname '%s', max_entries %u",
			ifname ? ifname : "(null)", max_entries);
		return NULL;
	}
	cx = calloc(1, sizeof(*cx));
	if (!cx) {
		cx_fail(CX_STAGE_ARG, errno, __func__, "calloc");
		return NULL;
	}
	snprintf(cx->ifname, sizeof(cx->ifname), "%s", ifname);
	snprintf(cx->netns, sizeof(cx->netns), "%s", netns ? netns : "");
	cx->capacity = max_entries;
	cx->use_batch = true;
	cx->ncpus = libbpf_num_possible_cpus();
	if (cx->ncpus <= 0) {
		cx_fail(CX_STAGE_LOAD, cx->ncpus, __func__, "count possible CPUs");
		goto cleanup;
	}
	cx->keys = calloc(max_entries, sizeof(*cx->keys));
	cx->pcpu = calloc((size_t)max_entries * cx->ncpus, CX_PCPU_STRIDE);
	if (!cx->keys || !cx->pcpu) {
		cx_fail(CX_STAGE_ARG, ENOMEM, __func__, "buffers for %u entries", max_entries);
		goto cleanup;
	}
	/* Namespace first: a missing one is the likeliest mistake, and cheap. */
	if (cx_netns_enter(cx->netns, &saved))
		goto cleanup;
	if (cx_load(cx, max_entries, wire_overhead_bytes) || cx_attach_here(cx)) {
		cx_netns_leave(saved);
		goto cleanup;
	}
	if (cx_netns_leave(saved))
		goto cleanup;
	return cx;
cleanup:
	cx_counters_free(cx);
	return NULL;
}

/* Our filter died with its interface if the index no longer names it. */
static bool cx_iface_gone(const struct cx_counters *cx)
{
	char name[IF_NAMESIZE];

	return !if_indextoname(cx->hook.ifindex, name) || strcmp(name, cx->ifname);
}

/* Is any filter (ours is gone by now) left on the clsact of ifindex?  A
 * clsact we created may since have gained someone else's filters, and
 * removing the qdisc would silently take theirs with it. */
static int cx_clsact_busy(int ifindex, bool *busy)
{
	static const __u32 parents[] = {
		TC_H_MAKE(TC_H_CLSACT, TC_H_MIN_INGRESS),
		TC_H_MAKE(TC_H_CLSACT, TC_H_MIN_EGRESS),
	};
	struct { struct nlmsghdr nh; struct tcmsg tc; } req;
	char buf[16384];
	struct nlmsghdr *nh;
	int fd, i, n, err = -1;
	bool done;

	*busy = false;
	fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
	if (fd < 0)
		return cx_fail(CX_STAGE_DETACH, errno, __func__, "netlink socket");
	for (i = 0; i < 2; i++) {
		memset(&req, 0, sizeof(req));
		req.nh.nlmsg_len = NLMSG_LENGTH(sizeof(req.tc));
		req.nh.nlmsg_type = RTM_GETTFILTER;
		req.nh.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
		req.nh.nlmsg_seq = i + 1;
		req.tc.tcm_family = AF_UNSPEC;
		req.tc.tcm_ifindex = ifindex;
		req.tc.tcm_parent = parents[i];
		if (send(fd, &req, req.nh.nlmsg_len, 0) < 0) {
			cx_fail(CX_STAGE_DETACH, errno, __func__, "dump filters of ifindex %d", ifindex);
			goto cleanup;
		}
		/* Read the whole dump even once busy, so no reply is left unread. */
		for (done = false; !done;) {
			n = recv(fd, buf, sizeof(buf), 0);
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0) {
				cx_fail(CX_STAGE_DETACH, n < 0 ? errno : EIO, __func__, "read filter dump");
				goto cleanup;
			}
			for (nh = (struct nlmsghdr *)buf; NLMSG_OK(nh, (unsigned)n); nh = NLMSG_NEXT(nh, n)) {
				if (nh->nlmsg_type == NLMSG_DONE) {
					done = true;
				} else if (nh->nlmsg_type == NLMSG_ERROR) {
					struct nlmsgerr *e = NLMSG_DATA(nh);

					cx_fail(CX_STAGE_DETACH, e->error, __func__, "filter dump");
					goto cleanup;
				} else if (nh->nlmsg_type == RTM_NEWTFILTER) {
					*busy = true;
				}
			}
		}
	}
	err = 0;
cleanup:
	close(fd);
	return err;
}

int cx_counters_detach(struct cx_counters *cx)
{
	struct bpf_tc_opts del = { .sz = sizeof(del) };
	int saved, err = 0;
	bool busy;

	if (!cx || !cx->attached)
		return 0;
	cx_libbpf_msg[0] = '\0';
	if (cx_netns_enter(cx->netns, &saved)) {
		/* A deleted namespace took the interface and our filter with it. */
		if (cx_err_no == ENOENT) {
			cx->attached = false;
			return 0;
		}
		return -1;
	}
	if (cx_iface_gone(cx))
		goto done;
	del.handle = cx->opts.handle;
	del.priority = cx->opts.priority;
	cx->hook.attach_point = BPF_TC_EGRESS;
	err = bpf_tc_detach(&cx->hook, &del);
	if (err && err != -ENOENT) {
		err = cx_fail(CX_STAGE_DETACH, err, __func__, "tc filter %u:%u on %s",
			      del.priority, del.handle, cx->ifname);
		goto leave;
	}
	err = 0;
	if (cx->hook_created) {
		if (cx_clsact_busy(cx->hook.ifindex, &busy)) {
			err = -1;
			goto leave;
		}
		if (busy)
			goto done;	/* someone else's filters live there now */
		cx->hook.attach_point = BPF_TC_INGRESS | BPF_TC_EGRESS;
		err = bpf_tc_hook_destroy(&cx->hook);
		if (err && err != -ENOENT) {
			err = cx_fail(CX_STAGE_DETACH, err, __func__, "clsact on %s", cx->ifname);
			goto leave;
		}
		err = 0;
	}
done:
	cx->attached = false;
	cx->hook_created = false;
leave:
	if (cx_netns_leave(saved))
		err = -1;
	return err;
}

void cx_counters_free(struct cx_counters *cx)
{
	if (!cx)
		return;
	cx_counters_detach(cx);
	cx_counters_bpf__destroy(cx->skel);
	free(cx->pcpu);
	free(cx->keys);
	free(cx);
}
