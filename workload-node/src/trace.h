/* trace: OpenTelemetry spans as OTLP/JSON (the protocol's JSON mapping).
 * Every line of the file is one ExportTraceServiceRequest, the format of
 * the OpenTelemetry file exporter: the resource (who wrote it, rundir.h),
 * the scope "collapsar-workload" and a batch of spans. A request's spans
 * from the client and every node join into one trace by trace id, and
 * link across processes through the trace context the request carries.
 *
 * Spans are built on the caller's stack (struct wl_span), then appended to
 * the open line under a lock; a line is written when it is full, every
 * second, and at close, so a crash loses at most a second of spans. */
#pragma once
#include "rundir.h"

struct wl_trace;

/* The process's span file: PATH when given (--trace), else
 * $COLLAPSAR_TRACE_DIR/INSTANCE.spans.jsonl when that is set, else none
 * (*out NULL). 0, or the exit status after saying why: 2 for an instance
 * name the run directory refuses, 1 for any other failure. */
int wl_trace_setup(const char *path, const char *default_service, struct wl_trace **out);
void wl_trace_close(struct wl_trace *trace); /* writes what is buffered */
const struct wl_identity *wl_trace_identity(const struct wl_trace *trace);

/* Fresh random ids (never all zero: OTLP's "no id"). */
void wl_trace_new_id(uint8_t *out, size_t n);
bool wl_trace_id_is_zero(const uint8_t *id, size_t n);

enum wl_span_kind { WL_SPAN_INTERNAL = 1, WL_SPAN_SERVER = 2, WL_SPAN_CLIENT = 3 };
/* wl.status: enum wl_status (ok, timeout, error) and one more, for a
 * forward.send whose forward settled before its reply came. */
#define WL_SPAN_ABANDONED 3

#define WL_SPAN_TEXT 4096 /* one span's JSON; a span that does not fit is dropped, counted */

struct wl_span {
	size_t len;
	bool has_attr, overflow;
	char text[WL_SPAN_TEXT];
};

/* parent NULL or all zero: a root span. Times are CLOCK_REALTIME ns. */
void wl_span_begin(struct wl_span *s, const uint8_t trace_id[16], const uint8_t span_id[8],
		   const uint8_t parent[8], const char *name, enum wl_span_kind kind, uint64_t start_rt_ns,
		   uint64_t end_rt_ns);
/* Attributes; keys are literals (not escaped), values are escaped. */
void wl_span_int(struct wl_span *s, const char *key, int64_t value);
void wl_span_str(struct wl_span *s, const char *key, const char *value);
void wl_span_strs(struct wl_span *s, const char *key, const char *const *values, size_t n);
/* Closes the span's JSON: wl.status and the OTLP status code (ok: 1,
 * timeout and error: 2, abandoned: 0, unset). wl_trace_emit calls it. */
void wl_span_close(struct wl_span *s, int status);
/* Close the span and queue it for the file. */
void wl_trace_emit(struct wl_trace *trace, struct wl_span *s, int status);

/* src as a JSON string body (quotes, backslashes and control characters
 * escaped, invalid UTF-8 replaced by U+FFFD) into dst; the length written,
 * or -1 if it does not fit in cap (dst is then not terminated). */
int wl_json_escape(char *dst, size_t cap, const char *src);
