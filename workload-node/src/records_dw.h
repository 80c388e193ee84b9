/* records_dw: per-request records in DistWalk's layouts, for scripts that
 * read them: CSV "t,elapsed,req_id,thr_id,sess_id" (header optional) or TXT
 * "t:T|elapsed:E|req_id:R|thr_id:P|sess_id:S", times in us (ns with --nano).
 * Used when -o names a .txt file or carries sep=/header=, or with --nano;
 * a plain "-o FILE" writes wl-client's own records (output.c). */
#pragma once
#include "output.h"

struct wl_dw_output {
	bool on, txt, header, header_given, nano;
	char sep;
};

/* "-o FILE[,sep=C][,header=true|false|1|0]" (--nano given before or after):
 * sets *path and out; what names the option in messages. */
int wl_dw_output_parse(const char *spec, const char **path, struct wl_dw_output *out, const char *what);
/* After the whole command line: decide the layout and check it. */
int wl_dw_output_finish(const char *path, struct wl_dw_output *out);
int wl_dw_records_write(const char *path, const struct wl_dw_output *fmt, const struct wl_record *const *recs,
			const uint64_t *counts, int nthreads, uint64_t start_ns);
