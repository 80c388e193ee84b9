/* output: summary and per-request files. */
#include "output.h"
#include "wire.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>

void wl_summary_init(struct wl_summary *s)
{
	memset(s, 0, sizeof(*s));
	wl_hist_init(&s->hist);
	wl_hist_init(&s->late);
	s->first_send_ns = UINT64_MAX;
}

void wl_summary_merge(struct wl_summary *into, const struct wl_summary *from)
{
	wl_hist_merge(&into->hist, &from->hist);
	wl_hist_merge(&into->late, &from->late);
	into->ok += from->ok;
	into->timeout += from->timeout;
	into->err += from->err;
	into->unsent += from->unsent;
	if (from->first_send_ns < into->first_send_ns)
		into->first_send_ns = from->first_send_ns;
	if (from->last_done_ns > into->last_done_ns)
		into->last_done_ns = from->last_done_ns;
}

/* The figures both summaries give, in microseconds. */
struct figures {
	uint64_t total;
	double secs, tput, mean, min, max, q[4]; /* p50, p90, p99, p99.9 */
};

static void figures(const struct wl_summary *s, struct figures *f)
{
	static const double q[] = {0.5, 0.9, 0.99, 0.999};
	const struct wl_hist *h = &s->hist;
	f->total = s->ok + s->timeout + s->err;
	f->secs = s->last_done_ns > s->first_send_ns ? (double)(s->last_done_ns - s->first_send_ns) / 1e9 : 0;
	f->tput = f->secs > 0 ? (double)f->total / f->secs : 0;
	for (int i = 0; i < 4; i++)
		f->q[i] = (double)wl_hist_quantile(h, q[i]) / 1e3;
	f->mean = wl_hist_mean(h) / 1e3;
	f->max = h->count ? (double)h->max / 1e3 : 0;
	f->min = h->count ? (double)h->min / 1e3 : 0;
}

void wl_summary_json(FILE *out, const struct wl_summary *s, const char *extra)
{
	struct figures f;
	figures(s, &f);
	fprintf(out,
		"{\"requests\":%" PRIu64 ",\"ok\":%" PRIu64 ",\"timeout\":%" PRIu64 ",\"err\":%" PRIu64
		",\"unsent\":%" PRIu64 ",\"duration_s\":%.6f,\"throughput_rps\":%.3f,\"latency_us\":{\"count\":%" PRIu64
		",\"mean\":%.3f,\"min\":%.3f,\"p50\":%.3f,\"p90\":%.3f,\"p99\":%.3f,\"p99_9\":%.3f,\"max\":%.3f}",
		f.total, s->ok, s->timeout, s->err, s->unsent, f.secs, f.tput, s->hist.count, f.mean, f.min, f.q[0], f.q[1],
		f.q[2], f.q[3], f.max);
	if (s->late.count)
		fprintf(out, ",\"send_lateness_us\":{\"p50\":%.3f,\"p99\":%.3f,\"max\":%.3f}",
			(double)wl_hist_quantile(&s->late, 0.5) / 1e3, (double)wl_hist_quantile(&s->late, 0.99) / 1e3,
			(double)s->late.max / 1e3);
	if (extra)
		fprintf(out, ",%s", extra);
	fputs("}\n", out);
}

void wl_summary_print(FILE *out, const struct wl_summary *s, bool json)
{
	if (json) {
		wl_summary_json(out, s, NULL);
		return;
	}
	struct figures f;
	figures(s, &f);
	fprintf(out, "requests %" PRIu64 ": ok %" PRIu64 ", timeout %" PRIu64 ", err %" PRIu64 ", unsent %" PRIu64 "\n",
		f.total, s->ok, s->timeout, s->err, s->unsent);
	fprintf(out, "throughput %.1f req/s over %.3f s\n", f.tput, f.secs);
	fprintf(out, "latency (us): mean %.1f  p50 %.1f  p90 %.1f  p99 %.1f  p99.9 %.1f  max %.1f\n", f.mean, f.q[0],
		f.q[1], f.q[2], f.q[3], f.max);
	/* Latency runs from the actual send: a sender that woke late delays its
	 * requests without lengthening their latency, so say how late it was. */
	if (s->late.count)
		fprintf(out, "send lateness (us): p50 %.1f  p99 %.1f  max %.1f\n",
			(double)wl_hist_quantile(&s->late, 0.5) / 1e3, (double)wl_hist_quantile(&s->late, 0.99) / 1e3,
			(double)s->late.max / 1e3);
}

int wl_record_line(char line[WL_RECORD_LINE], const struct wl_record *r, bool json, uint64_t start_ns)
{
	static const char *const names[] = {"OK", "TIMEOUT", "ERR"};
	/* signed: a send before the common start (a failed connect) is negative, not a wrap */
	double send_us = (double)(int64_t)(r->send_ns - start_ns) / 1e3, lat_us = (double)r->latency_ns / 1e3;
	const char *st = r->status <= WL_ST_ERR ? names[r->status] : "?";
	int n = json ? snprintf(line, WL_RECORD_LINE,
				"{\"send_us\":%.3f,\"latency_us\":%.3f,\"status\":\"%s\",\"thread\":%u,\"session\":%u}\n",
				send_us, lat_us, st, r->thread, r->session)
		     : snprintf(line, WL_RECORD_LINE, "%.3f,%.3f,%s,%u,%u\n", send_us, lat_us, st, r->thread, r->session);
	return n < 0 || n >= WL_RECORD_LINE ? 0 : n;
}

int wl_records_write(const char *path, bool json, const struct wl_record *const *recs, const uint64_t *counts,
		     int nthreads, uint64_t start_ns)
{
	FILE *f = fopen(path, "w");
	if (!f)
		return wl_err("open output file %s: %s", path, strerror(errno));
	if (!json)
		fputs(WL_RECORDS_CSV_HEADER, f);
	for (int t = 0; t < nthreads; t++) {
		for (uint64_t i = 0; i < counts[t]; i++) {
			char line[WL_RECORD_LINE];
			if (recs[t][i].status != WL_ST_UNSENT)
				fwrite(line, 1, (size_t)wl_record_line(line, &recs[t][i], json, start_ns), f);
		}
	}
	bool failed = ferror(f) != 0; /* a write that failed before the last one */
	if (fclose(f) != 0 || failed)
		return wl_err("write output file %s: %s", path, strerror(errno));
	return 0;
}
