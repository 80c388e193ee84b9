// SPDX-License-Identifier: GPL-2.0
/* One tc filter of ours at clsact egress of an interface inside a network
 * namespace: entering the namespace, attaching the program, and removing
 * exactly what we added (the clsact too, when we made it and nobody else's
 * filter lives there).  Shared by the counters (loader.c) and the
 * duplicator (duplicator.c). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <linux/netlink.h>
#include <linux/pkt_sched.h>
#include <linux/rtnetlink.h>
#include "internal.h"

int cx_filter_init(struct cx_filter *f, const char *ifname, const char *netns)
{
	memset(f, 0, sizeof(*f));
	if (!ifname || !ifname[0] || strlen(ifname) >= IF_NAMESIZE)
		return cx_fail(CX_STAGE_ARG, EINVAL, __func__, "ifname '%s'", ifname ? ifname : "(null)");
	snprintf(f->ifname, sizeof(f->ifname), "%s", ifname);
	snprintf(f->netns, sizeof(f->netns), "%s", netns ? netns : "");
	return 0;
}

int cx_netns_enter(const char *netns, int *saved)
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

int cx_netns_leave(int saved)
{
	int err = 0;

	if (saved < 0)
		return 0;
	if (setns(saved, CLONE_NEWNET))
		err = cx_fail(CX_STAGE_NETNS, errno, __func__, "setns back to own namespace");
	close(saved);
	return err;
}

int cx_filter_attach_here(struct cx_filter *f, int prog_fd, __u32 priority)
{
	int ifindex, err;

	ifindex = if_nametoindex(f->ifname);
	if (!ifindex)
		return cx_fail(CX_STAGE_IFACE, errno, __func__, "interface %s", f->ifname);
	f->hook.sz = sizeof(f->hook);
	f->hook.ifindex = ifindex;
	f->hook.attach_point = BPF_TC_EGRESS;
	err = bpf_tc_hook_create(&f->hook);
	if (err && err != -EEXIST)
		return cx_fail(CX_STAGE_ATTACH, err, __func__, "create clsact on %s", f->ifname);
	f->hook_created = !err;
	/* handle 0: the kernel picks a free one, so we never replace a filter
	 * someone else put there; libbpf reports the choice. */
	f->opts.sz = sizeof(f->opts);
	f->opts.prog_fd = prog_fd;
	f->opts.priority = priority;
	err = bpf_tc_attach(&f->hook, &f->opts);
	if (err) {
		cx_fail(CX_STAGE_ATTACH, err, __func__, "tc filter on %s egress (priority %u)", f->ifname, priority);
		goto cleanup;
	}
	f->attached = true;
	return 0;
cleanup:
	if (f->hook_created) {
		f->hook.attach_point = BPF_TC_INGRESS | BPF_TC_EGRESS;
		bpf_tc_hook_destroy(&f->hook);
		f->hook_created = false;
	}
	return -1;
}

/* Our filter died with its interface if the index no longer names it. */
static bool cx_iface_gone(const struct cx_filter *f)
{
	char name[IF_NAMESIZE];

	return !if_indextoname(f->hook.ifindex, name) || strcmp(name, f->ifname);
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

int cx_filter_detach(struct cx_filter *f)
{
	struct bpf_tc_opts del = { .sz = sizeof(del) };
	int saved, err = 0;
	bool busy;

	if (!f->attached)
		return 0;
	cx_libbpf_msg[0] = '\0';
	if (cx_netns_enter(f->netns, &saved)) {
		/* A deleted namespace took the interface and our filter with it. */
		if (cx_last_errno() == ENOENT) {
			f->attached = false;
			return 0;
		}
		return -1;
	}
	if (cx_iface_gone(f))
		goto done;
	del.handle = f->opts.handle;
	del.priority = f->opts.priority;
	f->hook.attach_point = BPF_TC_EGRESS;
	err = bpf_tc_detach(&f->hook, &del);
	if (err && err != -ENOENT) {
		err = cx_fail(CX_STAGE_DETACH, err, __func__, "tc filter %u:%u on %s",
			      del.priority, del.handle, f->ifname);
		goto leave;
	}
	err = 0;
	if (f->hook_created) {
		if (cx_clsact_busy(f->hook.ifindex, &busy)) {
			err = -1;
			goto leave;
		}
		if (busy)
			goto done;	/* someone else's filters live there now */
		f->hook.attach_point = BPF_TC_INGRESS | BPF_TC_EGRESS;
		err = bpf_tc_hook_destroy(&f->hook);
		if (err && err != -ENOENT) {
			err = cx_fail(CX_STAGE_DETACH, err, __func__, "clsact on %s", f->ifname);
			goto leave;
		}
		err = 0;
	}
done:
	f->attached = false;
	f->hook_created = false;
leave:
	if (cx_netns_leave(saved))
		err = -1;
	return err;
}

int cx_filter_id(const struct cx_filter *f, __u32 *handle, __u32 *priority, __u32 *prog_id)
{
	if (!f->attached)
		return cx_fail(CX_STAGE_ARG, ENOENT, __func__, "not attached");
	*handle = f->opts.handle;
	*priority = f->opts.priority;
	*prog_id = f->opts.prog_id;
	return 0;
}
