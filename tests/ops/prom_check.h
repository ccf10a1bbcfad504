/* prom_check: a strict checker of the Prometheus text exposition format (0.0.4), written
 * from the format's description independently of ps_metrics' renderer, for tests.
 *
 * Beyond the grammar (HELP/TYPE comments, metric and label names, label value escapes,
 * float values) it checks the rules a scraper relies on: TYPE before a family's samples,
 * families contiguous, no duplicate series, counters non-negative and named *_total,
 * histogram buckets cumulative with increasing `le`, a +Inf bucket equal to _count, and a
 * _sum. It also looks up sample values for assertions. */
#ifndef PROM_CHECK_H
#define PROM_CHECK_H

#include <stdbool.h>
#include <stddef.h>

/* Returns true if `text` is valid; otherwise false with a reason (and the line) in err. */
bool prom_check(const char *text, char *err, size_t errlen);

/* The value of the sample whose name and label set (exactly as written between braces, e.g.
 * `op="pull",le="0.001"`, or "" for none) match; false if absent. */
bool prom_value(const char *text, const char *name, const char *labels, double *out);

#endif
