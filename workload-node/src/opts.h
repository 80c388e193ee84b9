/* opts: command-line options from tables, for wl-client and wl-node. A row
 * names an option (short letter, long names and aliases, argument kind), the
 * function that takes its value, its help text and where the value goes (a
 * field of the program's settings); the same rows drive parsing, --help and
 * --usage. Long names may be abbreviated while unique; "-f FILE" splices a
 * script file's options in where it stands. client_args.c and node_args.c
 * hold the tables; this calls only the rows' handlers. */
#pragma once
#include "util.h"

#include <stddef.h>
#include <stdio.h>

enum wl_arg { WL_ARG_NONE, WL_ARG_REQUIRED, WL_ARG_OPTIONAL };
/* What a program does after reading its command line: run, exit 0 (--help,
 * --check done), or exit 2 (a bad command line, said in one line). */
enum wl_args_result { WL_ARGS_RUN, WL_ARGS_EXIT, WL_ARGS_BAD };

struct wl_parser;
struct wl_opt;
typedef int (*wl_opt_fn)(struct wl_parser *ps, const struct wl_opt *opt, const char *arg);

/* The type of the field a row's value goes to. */
enum wl_field {
	WL_FIELD_NONE,
	WL_FIELD_BOOL,
	WL_FIELD_INT,
	WL_FIELD_U32,
	WL_FIELD_U64,
	WL_FIELD_DOUBLE,
	WL_FIELD_TEXT, /* const char *: the value as written, which lives as long as the program */
};

struct wl_dest {
	enum wl_field type; /* WL_FIELD_NONE: the handler keeps the value itself */
	size_t offset;      /* of the field in the parser's settings */
};
#define WL_DEST(type, settings, field) {type, offsetof(settings, field)}
#define WL_NO_DEST {WL_FIELD_NONE, 0}

struct wl_opt {
	char short_name;     /* 0: none */
	const char *names;   /* long names, '|' between aliases ("rate-step-secs|rss"); NULL: a heading */
	enum wl_arg arg;
	const char *metavar; /* what the value is, for help and errors ("N", "TIME") */
	wl_opt_fn fn;
	int key;             /* lets one handler serve several rows (a range, a unit, a variant) */
	const char *help;    /* NULL: not listed in --help */
	struct wl_dest dest; /* where the handler puts the value */
};

#define WL_OPT_HEADING(text) {0, NULL, WL_ARG_NONE, NULL, NULL, 0, text, WL_NO_DEST}
#define WL_OPT_END {0, NULL, WL_ARG_NONE, NULL, NULL, 0, NULL, WL_NO_DEST}
#define WL_MAX_SCRIPT_DEPTH 4

struct wl_tokens {
	char **v;
	int n, i;
};

struct wl_parser {
	const char *prog, *synopsis;        /* "wl-client", "[options] [operations]" */
	const struct wl_opt *const *tables; /* NULL-terminated list of tables */
	void *settings;                     /* the program's settings: where the rows' dest point */
	void *ctx;                          /* the handlers' own state while parsing */
	char opt[72];                       /* the option being handled, as written: "-n", "--rate" */
	bool stop;                          /* a handler is done with the command line (--help) */
	struct wl_tokens src[WL_MAX_SCRIPT_DEPTH + 1]; /* argv, then the -f files being read */
	int depth;
};

/* Parse argv[1..] with ps's tables; 0, or -1 after one line on stderr. */
int wl_parse(struct wl_parser *ps, int argc, char **argv);
/* -f FILE: its options follow as though written in place of "-f FILE"
 * (whitespace-separated words, '#' to the end of a line is a comment). */
int wl_parser_include(struct wl_parser *ps, const char *path);
void wl_parser_help(const struct wl_parser *ps, FILE *out);
void wl_parser_usage(const struct wl_parser *ps, FILE *out);
/* Handlers for --help and --usage: print to stdout and stop parsing. */
int wl_opt_help(struct wl_parser *ps, const struct wl_opt *opt, const char *arg);
int wl_opt_usage(struct wl_parser *ps, const struct wl_opt *opt, const char *arg);
/* Handlers that put the value where the row's dest says: true (a flag), the
 * text as written, 0 or 1 (as false or true); and one for options accepted
 * for compatibility that change nothing. */
int wl_opt_true(struct wl_parser *ps, const struct wl_opt *opt, const char *arg);
int wl_opt_text(struct wl_parser *ps, const struct wl_opt *opt, const char *arg);
int wl_opt_01(struct wl_parser *ps, const struct wl_opt *opt, const char *arg);
int wl_opt_ignore(struct wl_parser *ps, const struct wl_opt *opt, const char *arg);
/* Store a handler's value in the field the row's dest names (a number,
 * converted to that field's type, or text for WL_FIELD_TEXT). */
void wl_opt_store(const struct wl_parser *ps, const struct wl_opt *opt, double value, const char *text);
/* A copy of s[0..n) that lives as long as the program (option values keep pointers to it). */
const char *wl_keep(const char *s, size_t n);
