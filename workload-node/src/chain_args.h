/* chain_args: the client's operation options (-C, -L, -S, -F, -R, --skip and
 * their companions) turned into the chain templates of ops.h, in command-line
 * order. Both DistWalk's syntax and ours are read (README, "Operations").
 * Target addresses are resolved once the whole command line is known
 * (wl_chain_finish), so --resolve, --names and --check may come anywhere. */
#pragma once
#include "ops.h"

/* What parsing needs to remember about a FORWARD op. */
struct wl_fwd_state {
	struct wl_op_tmpl *op;
	struct wl_chain_tmpl *parent; /* the chain it is in: where closing it returns */
	const char *spec;      /* the first -F's argument, for messages */
	int ngroups;           /* -F options joined into it (DistWalk: one -F ...,branch per branch) */
	bool nack_set, timeout_set, retries_set;
	const char *reply_text; /* -R SIZE given for it */
};

struct wl_chain_args {
	struct wl_workload *wk;
	struct wl_fwd_state *fwds;
	size_t nfwds, cap;
};

void wl_chain_args_init(struct wl_chain_args *ca, struct wl_workload *wk);
/* Each takes the option's argument as written (it must outlive the chain)
 * and what names the option in messages. */
int wl_chain_compute(struct wl_chain_args *ca, const char *spec, const char *what);
int wl_chain_io(struct wl_chain_args *ca, uint8_t kind, const char *spec, const char *what);
int wl_chain_offset(struct wl_chain_args *ca, uint8_t kind, const char *spec, const char *what);
int wl_chain_skip(struct wl_chain_args *ca, const char *spec, const char *what);
int wl_chain_forward(struct wl_chain_args *ca, const char *spec, const char *what);
int wl_chain_reply(struct wl_chain_args *ca, const char *spec, const char *what); /* spec may be NULL */
int wl_chain_end_forward(struct wl_chain_args *ca, const char *what);
int wl_chain_next_branch(struct wl_chain_args *ca, const char *what);
int wl_chain_request_size(struct wl_chain_args *ca, const char *spec, const char *what);
/* After the last option: resolve targets, default quorums, trailing offsets. */
int wl_chain_finish(struct wl_chain_args *ca);

/* Shared by chain_args.c (the ops) and chain_fwd.c (FORWARD, branches, -R). */
struct wl_joined { /* a value assembled from the parts of a spec that are not keys or flags */
	char text[512];
	size_t len;
};
/* The next comma-separated part at *p, a bracketed value kept whole; NULL at the end. */
const char *wl_spec_part(const char **p, size_t *len);
bool wl_spec_is(const char *part, size_t n, const char *word);
/* part is "key=value" or "key=[value]": 1 and the value, 0 for another part, -1 (said) if malformed. */
int wl_spec_keyed(const char *part, size_t n, const char *key, const char **value, size_t *vlen, const char *what);
int wl_spec_join(struct wl_joined *j, const char *part, size_t n, const char *what);
/* The assembled value as a string that lives as long as the chain; NULL (said) when empty. */
const char *wl_spec_kept(const struct wl_joined *j, const char *spec, const char *what, const char *needed);
struct wl_op_tmpl *wl_chain_append(struct wl_chain_args *ca, uint8_t kind);
struct wl_chain_tmpl *wl_chain_new(struct wl_op_tmpl *owner);
struct wl_fwd_state *wl_chain_fwd_state(struct wl_chain_args *ca, const struct wl_op_tmpl *op);
