/* report_svg.h: the charts of `cohort report` drawn as inline SVG (line charts with linear or
 * log axes, grouped bar charts), each with its title, description, axis labels and a data table
 * for screen readers and paper. Internal to libcohort. */
#ifndef COHORT_REPORT_SVG_H
#define COHORT_REPORT_SVG_H

#include <stddef.h>
#include <stdio.h>

#define RSVG_COLORS 8
extern const char *const rsvg_colors[RSVG_COLORS]; /* Okabe-Ito, colour-blind safe */

/* Text with &, <, >, " and ' escaped for HTML and SVG. */
void rsvg_esc(FILE *f, const char *s);

/* v as a short label: 0.0123, 4.5k, 1.2M, 3.1G (si: powers of 1000; bytes: KiB, MiB, GiB). */
void rsvg_num(double v, char *buf, size_t cap);
void rsvg_bytes(double v, char *buf, size_t cap);

typedef struct rsvg_series {
    const char *name;
    const double *x, *y; /* n points; NAN y values are gaps */
    size_t n;
    int color;           /* index into rsvg_colors */
    int dashed, markers; /* dashed line; a dot on every point (sparse series) */
} rsvg_series;

typedef struct rsvg_chart {
    const char *id;      /* unique in the page: the figure's id, prefix of its title's id */
    const char *title, *desc, *xlabel, *ylabel;
    int logx;            /* -1: when the x values span more than two decades; 0 no; 1 yes */
    int y_from_zero;     /* the y axis starts at 0 */
    double y_scale;      /* table and ticks show y * y_scale (1 when 0), e.g. 100 for % */
} rsvg_chart;

/* A <figure> holding the SVG line chart of series[0..n) (one <g class="series"> each, a legend)
 * and a table of its points (every point, or evenly spaced ones and the last when many). */
void rsvg_line_chart(FILE *f, const rsvg_chart *c, const rsvg_series *s, size_t n);

typedef struct rsvg_bars {
    const char *id, *title, *desc, *xlabel;
    const char *const *rows;        /* nrows row labels */
    size_t nrows;
    const char *const *series;      /* nseries names (one bar per row and series) */
    size_t nseries;
    const double *values;           /* nrows x nseries, row-major; NAN: no bar, "-" in table */
    int bytes;                      /* values are bytes (axis and table in KiB/MiB/GiB) */
} rsvg_bars;

/* A <figure> with horizontal grouped bars and a table of the values. */
void rsvg_bar_chart(FILE *f, const rsvg_bars *b);

#endif
