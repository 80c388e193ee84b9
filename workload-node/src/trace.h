/* trace: OpenTelemetry spans as OTLP/JSON, one ExportTraceServiceRequest
 * object per line (the file exporter's format), so that a request's spans
 * from the client and every node join into one trace by trace id. */
#pragma once
#include "util.h"

struct wl_trace;

struct wl_trace *wl_trace_open(const char *path, const char *service_name);
void wl_trace_close(struct wl_trace *trace);
/* Fresh random ids (from a per-process counter hashed with the pid and time). */
void wl_trace_new_id(uint8_t *out, size_t n);
/* attrs: NULL or a JSON array body of OTLP attributes, e.g. {"key":..,"value":{..}}. */
void wl_trace_span(struct wl_trace *trace, const uint8_t trace_id[16], const uint8_t span_id[8],
		   const uint8_t parent_span[8], const char *name, uint64_t start_rt_ns, uint64_t end_rt_ns,
		   int status, const char *attrs);
bool wl_trace_id_is_zero(const uint8_t *id, size_t n);
