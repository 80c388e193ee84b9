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

void wl_summary_print(FILE *f, const struct wl_summary *s, bool json)
{
	uint64_t total = s->ok + s->timeout + s->err;
	double secs = s->last_done_ns > s->first_send_ns ? (double)(s->last_done_ns - s->first_send_ns) / 1e9 : 0;
	double tput = secs > 0 ? (double)total / secs : 0;
	const struct wl_hist *h = &s->hist;
	double q[] = {0.5, 0.9, 0.99, 0.999};
	double v[4];
	for (int i = 0; i < 4; i++)
		v[i] = (double)wl_hist_quantile(h, q[i]) / 1e3;
	double mean = wl_hist_mean(h) / 1e3, max = h->count ? (double)h->max / 1e3 : 0;
	double min = h->count ? (double)h->min / 1e3 : 0;
	if (json) {
		fprintf(f,
			"{\"requests\":%" PRIu64 ",\"ok\":%" PRIu64 ",\"timeout\":%" PRIu64 ",\"err\":%" PRIu64
			",\"unsent\":%" PRIu64 ",\"duration_s\":%.6f,\"throughput_rps\":%.3f,\"latency_us\":{\"count\":%" PRIu64
			",\"mean\":%.3f,\"min\":%.3f,\"p50\":%.3f,\"p90\":%.3f,\"p99\":%.3f,\"p99_9\":%.3f,\"max\":%.3f}",
			total, s->ok, s->timeout, s->err, s->unsent, secs, tput, h->count, mean, min, v[0], v[1], v[2], v[3],
			max);
		if (s->late.count)
			fprintf(f, ",\"send_lateness_us\":{\"p50\":%.3f,\"p99\":%.3f,\"max\":%.3f}",
				(double)wl_hist_quantile(&s->late, 0.5) / 1e3, (double)wl_hist_quantile(&s->late, 0.99) / 1e3,
				(double)s->late.max / 1e3);
		fputs("}\n", f);
		return;
	}
	fprintf(f, "requests %" PRIu64 ": ok %" PRIu64 ", timeout %" PRIu64 ", err %" PRIu64 ", unsent %" PRIu64 "\n",
		total, s->ok, s->timeout, s->err, s->unsent);
	fprintf(f, "throughput %.1f req/s over %.3f s\n", tput, secs);
	fprintf(f, "latency (us): mean %.1f  p50 %.1f  p90 %.1f  p99 %.1f  p99.9 %.1f  max %.1f\n", mean, v[0], v[1],
		v[2], v[3], max);
	/* Latency runs from the actual send: a sender that woke late delays its
	 * requests without lengthening their latency, so say how late it was. */
	if (s->late.count)
		fprintf(f, "send lateness (us): p50 %.1f  p99 %.1f  max %.1f\n",
			(double)wl_hist_quantile(&s->late, 0.5) / 1e3, (double)wl_hist_quantile(&s->late, 0.99) / 1e3,
			(double)s->late.max / 1e3);
}

int wl_records_write(const char *path, bool json, const struct wl_record *const *recs, const uint64_t *counts,
		     int nthreads, uint64_t start_ns)
{
	static const char *const names[] = {"OK", "TIMEOUT", "ERR"};
	FILE *f = fopen(path, "w");
	if (!f)
		return wl_err("open output file %s: %s", path, strerror(errno));
	if (!json)
		fprintf(f, "send_us,latency_us,status,thread,session\n");
	for (int t = 0; t < nthreads; t++) {
		for (uint64_t i = 0; i < counts[t]; i++) {
			const struct wl_record *r = &recs[t][i];
			if (r->status == WL_ST_UNSENT)
				continue;
			/* signed: a send before the common start (a failed connect) is negative, not a wrap */
			double send_us = (double)(int64_t)(r->send_ns - start_ns) / 1e3, lat_us = (double)r->latency_ns / 1e3;
			const char *st = r->status <= WL_ST_ERR ? names[r->status] : "?";
			if (json)
				fprintf(f, "{\"send_us\":%.3f,\"latency_us\":%.3f,\"status\":\"%s\",\"thread\":%u,\"session\":%u}\n",
					send_us, lat_us, st, r->thread, r->session);
			else
				fprintf(f, "%.3f,%.3f,%s,%u,%u\n", send_us, lat_us, st, r->thread, r->session);
		}
	}
	if (fclose(f) != 0)
		return wl_err("write output file %s: %s", path, strerror(errno));
	return 0;
}
