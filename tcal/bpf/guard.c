// SPDX-License-Identifier: GPL-2.0
/* The guard's program, built from two instructions here rather than a BPF
 * object: it reads nothing and calls no helper, so it needs neither BTF nor
 * relocations, and loads wherever tc's BPF classifier does. */
#include <errno.h>
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include "guard.h"
#include "internal.h"

int cx_guard_load(void)
{
	const struct bpf_insn drop[] = {
		/* r0 = TC_ACT_SHOT */
		{ .code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_0, .imm = TC_ACT_SHOT },
		/* return r0 */
		{ .code = BPF_JMP | BPF_EXIT },
	};
	int fd;

	cx_error_reset();
	fd = bpf_prog_load(BPF_PROG_TYPE_SCHED_CLS, "cx_guard", "GPL", drop,
			   sizeof(drop) / sizeof(drop[0]), NULL);
	if (fd < 0)
		return cx_fail(CX_STAGE_LOAD, fd, __func__, "load the guard's drop program");
	return fd;
}
