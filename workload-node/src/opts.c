/* opts: the table-driven command-line parser (see opts.h). */
#include "opts.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define HELP_COLUMN 32

/* Everything wl_keep copies: reachable until exit, like argv. */
static char **kept;
static size_t nkept, kept_cap;

static int keep_block(void *p)
{
	if (!p || wl_grow(&kept, &kept_cap, nkept, sizeof(*kept), 64) < 0) {
		free(p);
		return wl_err("out of memory for the command line");
	}
	kept[nkept++] = p;
	return 0;
}

const char *wl_keep(const char *s, size_t n)
{
	char *copy = strndup(s, n);
	return keep_block(copy) < 0 ? NULL : copy;
}

/* Does a row carry the long name (exactly, or starting with it when prefix)? */
static bool row_has_name(const struct wl_opt *o, const char *name, size_t len, bool prefix)
{
	for (const char *p = o->names; p && *p;) {
		size_t n = strcspn(p, "|");
		if (prefix ? n >= len && !strncmp(p, name, len) : n == len && !strncmp(p, name, len))
			return true;
		p += n + (p[n] == '|');
	}
	return false;
}

/* The row of "--name": an exact name, else an unambiguous prefix. */
static const struct wl_opt *find_long(const struct wl_parser *ps, const char *name, size_t len)
{
	const struct wl_opt *found = NULL;
	int matches = 0;
	for (int pass = 0; pass < 2 && !found; pass++)
		for (const struct wl_opt *const *t = ps->tables; *t; t++)
			for (const struct wl_opt *o = *t; o->names || o->help; o++)
				if (o->names && row_has_name(o, name, len, pass == 1) && o != found) {
					found = o;
					matches++;
				}
	if (matches > 1) {
		wl_err("option '--%.*s' is ambiguous (see --help)", (int)len, name);
		return NULL;
	}
	if (!found)
		wl_err("unknown option '--%.*s' (see --help)", (int)len, name);
	return found;
}

static const struct wl_opt *find_short(const struct wl_parser *ps, char c)
{
	for (const struct wl_opt *const *t = ps->tables; *t; t++)
		for (const struct wl_opt *o = *t; o->names || o->help; o++)
			if (o->short_name == c)
				return o;
	wl_err("unknown option '-%c' (see --help)", c);
	return NULL;
}

/* The next word of the current source (argv or the -f file being read), or NULL. */
static const char *peek(const struct wl_parser *ps)
{
	const struct wl_tokens *s = &ps->src[ps->depth];
	return s->i < s->n ? s->v[s->i] : NULL;
}

static const char *next_word(struct wl_parser *ps)
{
	while (ps->depth > 0 && !peek(ps))
		ps->depth--; /* a finished script: back to what included it */
	const char *w = peek(ps);
	if (w)
		ps->src[ps->depth].i++;
	return w;
}

/* The value of an option whose name was written without one attached. */
static int detached_value(struct wl_parser *ps, const struct wl_opt *o, const char **value)
{
	const char *w = peek(ps);
	*value = NULL;
	if (o->arg == WL_ARG_OPTIONAL) {
		if (w && w[0] != '-' && w[0]) /* "-R -F ..." has none; "--rs 10k" has one */
			*value = next_word(ps);
		return 0;
	}
	if (!w)
		return wl_err("option '%s' needs a value (%s)", ps->opt, o->metavar ? o->metavar : "see --help");
	*value = next_word(ps);
	return 0;
}

static int take(struct wl_parser *ps, const struct wl_opt *o, const char *value)
{
	if (o->arg == WL_ARG_NONE && value)
		return wl_err("option '%s' takes no value, not '%s'", ps->opt, value);
	return o->fn(ps, o, value);
}

static int long_option(struct wl_parser *ps, const char *word)
{
	const char *name = word + 2, *eq = strchr(name, '=');
	size_t len = eq ? (size_t)(eq - name) : strlen(name);
	const struct wl_opt *o = find_long(ps, name, len);
	if (!o)
		return -1;
	snprintf(ps->opt, sizeof(ps->opt), "--%.*s", (int)len, name);
	const char *value = eq ? eq + 1 : NULL;
	if (!eq && o->arg != WL_ARG_NONE && detached_value(ps, o, &value) < 0)
		return -1;
	return take(ps, o, value);
}

/* "-n 10", "-n10", "-F:7893", "-Rsendfile,16k", and flags grouped: "-ih". */
static int short_options(struct wl_parser *ps, const char *word)
{
	for (const char *c = word + 1; *c; c++) {
		const struct wl_opt *o = find_short(ps, *c);
		if (!o)
			return -1;
		snprintf(ps->opt, sizeof(ps->opt), "-%c", *c);
		if (o->arg == WL_ARG_NONE) {
			if (take(ps, o, NULL) < 0)
				return -1;
			continue;
		}
		const char *value = c[1] ? c + 1 : NULL;
		if (!value && detached_value(ps, o, &value) < 0)
			return -1;
		return take(ps, o, value);
	}
	return 0;
}

int wl_parse(struct wl_parser *ps, int argc, char **argv)
{
	ps->src[0] = (struct wl_tokens){.v = argv + 1, .n = argc - 1};
	ps->depth = 0;
	const char *w;
	while (!ps->stop && (w = next_word(ps))) {
		int rc;
		if (w[0] == '-' && w[1] == '-' && w[2])
			rc = long_option(ps, w);
		else if (w[0] == '-' && w[1] && w[1] != '-')
			rc = short_options(ps, w);
		else
			rc = wl_err("unexpected argument '%s' (options start with '-'; see --help)", w);
		if (rc < 0)
			return -1;
	}
	return 0;
}

/* The words of a script file, each kept for the program's lifetime. */
static int read_words(FILE *f, const char *path, struct wl_tokens *out)
{
	char line[4096];
	size_t cap = 0;
	int lineno = 0;
	while (fgets(line, sizeof(line), f)) {
		lineno++;
		if (!strchr(line, '\n') && !feof(f))
			return wl_err("-f %s:%d: line longer than %zu characters", path, lineno, sizeof(line) - 2);
		for (char *p = line + strspn(line, " \t\r\n"); *p && *p != '#'; p += strspn(p, " \t\r\n")) {
			size_t n = strcspn(p, " \t\r\n");
			const char *word = wl_keep(p, n);
			if (!word || wl_grow(&out->v, &cap, (size_t)out->n, sizeof(*out->v), 16) < 0)
				return wl_err("-f %s: out of memory", path);
			out->v[out->n++] = (char *)word;
			p += n;
		}
	}
	if (ferror(f))
		return wl_err("-f %s: read: %s", path, strerror(errno));
	return 0;
}

int wl_parser_include(struct wl_parser *ps, const char *path)
{
	if (ps->depth == WL_MAX_SCRIPT_DEPTH)
		return wl_err("-f %s: script files nest more than %d deep", path, WL_MAX_SCRIPT_DEPTH);
	FILE *f = fopen(path, "r");
	if (!f)
		return wl_err("-f %s: %s", path, strerror(errno));
	struct wl_tokens words = {0};
	int rc = read_words(f, path, &words);
	if (fclose(f) != 0 && rc == 0)
		rc = wl_err("-f %s: close: %s", path, strerror(errno));
	if (rc < 0) {
		free(words.v);
		return -1;
	}
	if (words.v && keep_block(words.v) < 0)
		return -1;
	ps->src[++ps->depth] = words;
	return 0;
}

/* "-n, --num-pkts N|auto" */
static int left_column(const struct wl_opt *o, char *out, size_t cap)
{
	int n = o->short_name ? snprintf(out, cap, "  -%c, ", o->short_name) : snprintf(out, cap, "      ");
	for (const char *p = o->names; *p && (size_t)n < cap;) {
		size_t len = strcspn(p, "|");
		n += snprintf(out + n, cap - (size_t)n, "%s--%.*s", p == o->names ? "" : ", ", (int)len, p);
		p += len + (p[len] == '|');
	}
	if (o->metavar && (size_t)n < cap)
		n += snprintf(out + n, cap - (size_t)n, o->arg == WL_ARG_OPTIONAL ? "[=%s]" : " %s", o->metavar);
	return n;
}

static void help_text(FILE *out, const char *help)
{
	for (const char *p = help; *p;) {
		size_t n = strcspn(p, "\n");
		fprintf(out, "%.*s\n", (int)n, p);
		p += n;
		if (*p == '\n' && *++p)
			fprintf(out, "%*s", HELP_COLUMN, "");
	}
}

void wl_parser_help(const struct wl_parser *ps, FILE *out)
{
	fprintf(out, "usage: %s %s\n", ps->prog, ps->synopsis);
	for (const struct wl_opt *const *t = ps->tables; *t; t++) {
		for (const struct wl_opt *o = *t; o->names || o->help; o++) {
			if (!o->help)
				continue;
			if (!o->names) {
				fprintf(out, "%s\n", o->help);
				continue;
			}
			char left[160];
			int n = left_column(o, left, sizeof(left));
			if (n < HELP_COLUMN - 1)
				fprintf(out, "%-*s", HELP_COLUMN, left);
			else
				fprintf(out, "%s\n%*s", left, HELP_COLUMN, "");
			help_text(out, o->help);
		}
	}
}

void wl_parser_usage(const struct wl_parser *ps, FILE *out)
{
	int col = fprintf(out, "usage: %s", ps->prog);
	for (const struct wl_opt *const *t = ps->tables; *t; t++) {
		for (const struct wl_opt *o = *t; o->names || o->help; o++) {
			if (!o->names || !o->help)
				continue;
			char item[96];
			size_t len = strcspn(o->names, "|");
			if (o->short_name)
				snprintf(item, sizeof(item), " [-%c%s%s]", o->short_name, o->metavar ? " " : "",
					 o->metavar ? o->metavar : "");
			else
				snprintf(item, sizeof(item), " [--%.*s%s%s]", (int)len, o->names, o->metavar ? " " : "",
					 o->metavar ? o->metavar : "");
			if (col + (int)strlen(item) > 79)
				col = fprintf(out, "\n%*s", (int)strlen(ps->prog) + 7, "") - 1;
			col += fprintf(out, "%s", item);
		}
	}
	fputc('\n', out);
}

int wl_opt_help(struct wl_parser *ps, const struct wl_opt *opt, const char *arg)
{
	wl_parser_help(ps, stdout);
	ps->stop = true;
	return 0;
}

int wl_opt_usage(struct wl_parser *ps, const struct wl_opt *opt, const char *arg)
{
	wl_parser_usage(ps, stdout);
	ps->stop = true;
	return 0;
}

void wl_opt_store(const struct wl_parser *ps, const struct wl_opt *opt, double value, const char *text)
{
	void *field = (char *)ps->settings + opt->dest.offset;
	switch (opt->dest.type) {
	case WL_FIELD_NONE: break;
	case WL_FIELD_BOOL: *(bool *)field = value != 0; break;
	case WL_FIELD_INT: *(int *)field = (int)value; break;
	case WL_FIELD_U32: *(uint32_t *)field = (uint32_t)value; break;
	case WL_FIELD_U64: *(uint64_t *)field = (uint64_t)value; break;
	case WL_FIELD_DOUBLE: *(double *)field = value; break;
	case WL_FIELD_TEXT: *(const char **)field = text; break;
	}
}

int wl_opt_true(struct wl_parser *ps, const struct wl_opt *opt, const char *arg)
{
	wl_opt_store(ps, opt, 1, NULL);
	return 0;
}

int wl_opt_text(struct wl_parser *ps, const struct wl_opt *opt, const char *arg)
{
	wl_opt_store(ps, opt, 0, arg);
	return 0;
}

int wl_opt_01(struct wl_parser *ps, const struct wl_opt *opt, const char *arg)
{
	if (strcmp(arg, "0") && strcmp(arg, "1"))
		return wl_err("%s: expected 0 or 1, not '%s'", ps->opt, arg);
	wl_opt_store(ps, opt, arg[0] == '1', NULL);
	return 0;
}

int wl_opt_ignore(struct wl_parser *ps, const struct wl_opt *opt, const char *arg) { return 0; }
