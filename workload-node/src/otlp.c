/* otlp: one span as OTLP/JSON, built on the caller's stack. The mapping's
 * rules that matter here: ids are lowercase hex (not base64), 64-bit
 * integers (times, intValue) are decimal strings, enums are numbers, and
 * a root span has no parentSpanId. Formatting is by hand, not printf: a
 * node writes several spans per request. */
#include "trace.h"

#include <string.h>

static void put(struct wl_span *s, const char *src, size_t n)
{
	if (s->overflow || n > sizeof(s->text) - s->len) {
		s->overflow = true;
		return;
	}
	memcpy(s->text + s->len, src, n);
	s->len += n;
}

/* lit must be a string literal: sizeof of anything else is a pointer's. */
#define PUT_LIT(s, lit) put((s), "" lit, sizeof(lit) - 1)

static void put_u64(struct wl_span *s, uint64_t v)
{
	char digits[20];
	size_t n = 0;
	do {
		digits[sizeof(digits) - 1 - n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	put(s, digits + sizeof(digits) - n, n);
}

static void put_hex(struct wl_span *s, const uint8_t *src, size_t n)
{
	static const char digits[] = "0123456789abcdef";
	char out[32];
	for (size_t i = 0; i < n; i++) {
		out[2 * i] = digits[src[i] >> 4];
		out[2 * i + 1] = digits[src[i] & 15];
	}
	put(s, out, 2 * n);
}

static void put_escaped(struct wl_span *s, const char *v)
{
	int n = s->overflow ? -1 : wl_json_escape(s->text + s->len, sizeof(s->text) - s->len, v);
	if (n < 0)
		s->overflow = true;
	else
		s->len += (size_t)n;
}

void wl_span_begin(struct wl_span *s, const uint8_t trace_id[16], const uint8_t span_id[8],
		   const uint8_t parent[8], const char *name, enum wl_span_kind kind, uint64_t start_rt_ns,
		   uint64_t end_rt_ns)
{
	s->len = 0;
	s->has_attr = s->overflow = false;
	PUT_LIT(s, "{\"traceId\":\"");
	put_hex(s, trace_id, 16);
	PUT_LIT(s, "\",\"spanId\":\"");
	put_hex(s, span_id, 8);
	if (parent && !wl_trace_id_is_zero(parent, 8)) {
		PUT_LIT(s, "\",\"parentSpanId\":\"");
		put_hex(s, parent, 8);
	}
	PUT_LIT(s, "\",\"name\":\"");
	put(s, name, strlen(name));
	PUT_LIT(s, "\",\"kind\":");
	put_u64(s, (uint64_t)kind);
	PUT_LIT(s, ",\"startTimeUnixNano\":\"");
	put_u64(s, start_rt_ns);
	PUT_LIT(s, "\",\"endTimeUnixNano\":\"");
	/* A span never ends before it starts (the clock may step in between). */
	put_u64(s, end_rt_ns < start_rt_ns ? start_rt_ns : end_rt_ns);
	PUT_LIT(s, "\",\"attributes\":[");
}

static void attr_key(struct wl_span *s, const char *key)
{
	if (s->has_attr)
		PUT_LIT(s, ",");
	s->has_attr = true;
	PUT_LIT(s, "{\"key\":\"");
	put(s, key, strlen(key));
	PUT_LIT(s, "\",\"value\":{");
}

void wl_span_int(struct wl_span *s, const char *key, int64_t value)
{
	attr_key(s, key);
	PUT_LIT(s, "\"intValue\":\"");
	if (value < 0)
		PUT_LIT(s, "-");
	put_u64(s, value < 0 ? 0 - (uint64_t)value : (uint64_t)value);
	PUT_LIT(s, "\"}}");
}

void wl_span_str(struct wl_span *s, const char *key, const char *value)
{
	attr_key(s, key);
	PUT_LIT(s, "\"stringValue\":\"");
	put_escaped(s, value);
	PUT_LIT(s, "\"}}");
}

void wl_span_strs(struct wl_span *s, const char *key, const char *const *values, size_t n)
{
	attr_key(s, key);
	PUT_LIT(s, "\"arrayValue\":{\"values\":[");
	for (size_t i = 0; i < n; i++) {
		if (i)
			PUT_LIT(s, ",");
		PUT_LIT(s, "{\"stringValue\":\"");
		put_escaped(s, values[i]);
		PUT_LIT(s, "\"}");
	}
	PUT_LIT(s, "]}}}");
}

void wl_span_close(struct wl_span *s, int status)
{
	static const char *const names[] = {"ok", "timeout", "error", "abandoned"};
	wl_span_str(s, "wl.status", status >= 0 && status <= WL_SPAN_ABANDONED ? names[status] : "error");
	/* OTLP status codes: 0 unset, 1 ok, 2 error. An abandoned send did not
	 * fail, nor did it complete: unset. */
	PUT_LIT(s, "],\"status\":{\"code\":");
	put(s, status == 0 ? "1}}" : status == WL_SPAN_ABANDONED ? "0}}" : "2}}", 3);
}

/* Length of the valid UTF-8 sequence at p (RFC 3629: no overlongs, no
 * surrogates, nothing above U+10FFFF), or 0. */
static size_t utf8_len(const unsigned char *p)
{
	unsigned char c = p[0];
	size_t n;
	unsigned char lo = 0x80, hi = 0xbf;
	if (c >= 0xc2 && c <= 0xdf)
		n = 2;
	else if (c >= 0xe0 && c <= 0xef)
		n = 3, lo = c == 0xe0 ? 0xa0 : 0x80, hi = c == 0xed ? 0x9f : 0xbf;
	else if (c >= 0xf0 && c <= 0xf4)
		n = 4, lo = c == 0xf0 ? 0x90 : 0x80, hi = c == 0xf4 ? 0x8f : 0xbf;
	else
		return 0;
	if (p[1] < lo || p[1] > hi)
		return 0;
	for (size_t i = 2; i < n; i++)
		if (p[i] < 0x80 || p[i] > 0xbf)
			return 0;
	return n;
}

int wl_json_escape(char *dst, size_t cap, const char *src)
{
	static const char digits[] = "0123456789abcdef";
	const unsigned char *p = (const unsigned char *)src;
	size_t n = 0;
	while (*p) {
		char esc[8];
		size_t k = 0, take = 1;
		const char *from = esc;
		if (*p == '"' || *p == '\\') {
			esc[k++] = '\\';
			esc[k++] = (char)*p;
		} else if (*p < 0x20 || *p == 0x7f) {
			memcpy(esc, "\\u00", 4);
			esc[4] = digits[*p >> 4];
			esc[5] = digits[*p & 15];
			k = 6;
		} else if (*p < 0x80) {
			esc[k++] = (char)*p;
		} else if ((take = utf8_len(p)) != 0) {
			from = (const char *)p;
			k = take;
		} else {
			from = "\xef\xbf\xbd"; /* U+FFFD for a byte that is not UTF-8 */
			k = 3;
			take = 1;
		}
		if (k > cap - n)
			return -1;
		memcpy(dst + n, from, k);
		n += k;
		p += take;
	}
	if (n >= cap)
		return -1;
	dst[n] = '\0';
	return (int)n;
}
