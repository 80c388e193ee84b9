/* records_dw: DistWalk's per-request record layouts (see records_dw.h). */
#include "records_dw.h"
#include "opts.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>

static int header_value(const char *v, bool *out, const char *what)
{
	static const struct {
		const char *text;
		bool value;
	} words[] = {{"true", true}, {"1", true}, {"false", false}, {"0", false}};
	for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++) {
		if (!strcmp(v, words[i].text)) {
			*out = words[i].value;
			return 0;
		}
	}
	return wl_err("%s: header= expects true, false, 1 or 0, not '%s'", what, v);
}

static int part(const char *tok, const char **path, struct wl_dw_output *out, const char *spec, const char *what)
{
	if (!strncmp(tok, "sep=", 4)) {
		const char *sep = tok + 4 + (tok[4] == '\'' || tok[4] == '"'); /* sep=';' */
		if (!*sep || *sep == '\'' || *sep == '"')
			return wl_err("%s '%s': sep= needs a separator character (quote it: sep=';')", what, spec);
		out->sep = *sep;
		out->on = true;
		return 0;
	}
	if (!strncmp(tok, "header=", 7)) {
		out->on = out->header_given = true;
		return header_value(tok + 7, &out->header, what);
	}
	if (*path)
		return wl_err("%s '%s': two file names ('%s' and '%s')", what, spec, *path, tok);
	return (*path = wl_keep(tok, strlen(tok))) ? 0 : -1;
}

int wl_dw_output_parse(const char *spec, const char **path, struct wl_dw_output *out, const char *what)
{
	char copy[512], *save, *tok;
	if (strlen(spec) >= sizeof(copy))
		return wl_err("%s: '%s' is too long", what, spec);
	strcpy(copy, spec);
	*path = NULL;
	for (tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
		if (part(tok, path, out, spec, what) < 0)
			return -1;
	if (!*path)
		return wl_err("%s '%s': no file name", what, spec);
	return 0;
}

int wl_dw_output_finish(const char *path, struct wl_dw_output *out)
{
	const char *ext = path ? strrchr(path, '.') : NULL;
	out->txt = ext && !strcmp(ext, ".txt");
	out->on |= out->txt || (path && out->nano);
	if (!out->on)
		return 0;
	if (!ext || (!out->txt && strcmp(ext, ".csv")))
		return wl_err("-o '%s': DistWalk's record layouts (sep=, header=, --nano) need a .csv or .txt file", path);
	if (out->txt && out->header_given)
		return wl_err("-o '%s': header= is for .csv files", path);
	if (!out->sep)
		out->sep = ',';
	if (out->sep == '_' || (out->txt && out->sep == ':'))
		return wl_err("-o '%s': '%c' cannot separate the fields of a .%s file", path, out->sep,
			      out->txt ? "txt" : "csv");
	return 0;
}

static void write_record(FILE *f, const struct wl_dw_output *fmt, const struct wl_record *r, uint64_t index,
			 uint64_t start_ns)
{
	/* signed: a send before the common start (a failed connect) is negative, not a wrap */
	int64_t t = (int64_t)(r->send_ns - start_ns), elapsed = (int64_t)r->latency_ns;
	if (!fmt->nano) {
		t /= 1000;
		elapsed /= 1000;
	}
	char s = fmt->sep;
	if (fmt->txt)
		fprintf(f, "t:%" PRId64 "%celapsed:%" PRId64 "%creq_id:%" PRIu64 "%cthr_id:%u%csess_id:%u\n", t, s,
			elapsed, s, index, s, r->thread, s, r->session);
	else
		fprintf(f, "%" PRId64 "%c%" PRId64 "%c%" PRIu64 "%c%u%c%u\n", t, s, elapsed, s, index, s, r->thread, s,
			r->session);
}

int wl_dw_records_write(const char *path, const struct wl_dw_output *fmt, const struct wl_record *const *recs,
			const uint64_t *counts, int nthreads, uint64_t start_ns)
{
	FILE *f = fopen(path, "w");
	if (!f)
		return wl_err("open output file %s: %s", path, strerror(errno));
	const char *unit = fmt->nano ? "ns" : "us";
	char s = fmt->sep;
	if (fmt->header && !fmt->txt)
		fprintf(f, "t(%s)%celapsed(%s)%creq_id%cthr_id%csess_id\n", unit, s, unit, s, s, s);
	for (int t = 0; t < nthreads; t++)
		for (uint64_t i = 0; i < counts[t]; i++)
			if (recs[t][i].status != WL_ST_UNSENT)
				write_record(f, fmt, &recs[t][i], i, start_ns);
	if (fclose(f) != 0)
		return wl_err("write output file %s: %s", path, strerror(errno));
	return 0;
}
