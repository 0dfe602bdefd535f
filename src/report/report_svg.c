/* report_svg.c: SVG line and bar charts for `cohort report`: nice ticks on linear and log axes,
 * series with gaps, legends, and the data table behind every chart. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "report/report_svg.h"

const char *const rsvg_colors[RSVG_COLORS] = {"#0072b2", "#d55e00", "#009e73", "#cc79a7",
                                              "#e69f00", "#56b4e9", "#000000", "#8c6d31"};

/* the plot area inside the SVG's viewBox */
enum { W = 760, H = 350, LEFT = 78, RIGHT = 20, TOP = 54, BOTTOM = 58 };
#define MAX_TABLE_ROWS 16

void rsvg_esc(FILE *f, const char *s)
{
    for (; s && *s; s++) {
        switch (*s) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&#39;", f); break;
        default: fputc(*s, f);
        }
    }
}

void rsvg_num(double v, char *buf, size_t cap)
{
    double a = fabs(v);
    if (!isfinite(v))
        snprintf(buf, cap, "-");
    else if (a >= 1e9)
        snprintf(buf, cap, "%.3gG", v / 1e9);
    else if (a >= 1e6)
        snprintf(buf, cap, "%.3gM", v / 1e6);
    else if (a >= 1e4)
        snprintf(buf, cap, "%.3gk", v / 1e3);
    else
        snprintf(buf, cap, "%.4g", v);
}

void rsvg_bytes(double v, char *buf, size_t cap)
{
    static const char *const U[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    if (!isfinite(v)) {
        snprintf(buf, cap, "-");
        return;
    }
    while (fabs(v) >= 1024 && u < 4) {
        v /= 1024;
        u++;
    }
    snprintf(buf, cap, u ? "%.3g %s" : "%.0f %s", v, U[u]);
}

/* ---- axes ------------------------------------------------------------------------------------ */

typedef struct axis {
    double lo, hi;  /* data range shown (log10 of it when log) */
    int log;
    double ticks[24];
    int nticks;
} axis;

static double nice_step(double range, int target)
{
    double raw = range / target, mag = pow(10, floor(log10(raw))), f = raw / mag;
    return (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * mag;
}

static void axis_linear(axis *a, double lo, double hi, int from_zero)
{
    if (from_zero && lo > 0)
        lo = 0;
    if (!(hi > lo)) {
        double d = fabs(lo) > 0 ? fabs(lo) * 0.1 : 1;
        lo -= d;
        hi += d;
    }
    double step = nice_step(hi - lo, 5);
    a->log = 0;
    a->lo = floor(lo / step) * step;
    a->hi = ceil(hi / step) * step;
    a->nticks = 0;
    for (double t = a->lo; t <= a->hi + step * 1e-6 && a->nticks < 24; t += step)
        a->ticks[a->nticks++] = fabs(t) < step * 1e-9 ? 0 : t;
}

static void axis_log(axis *a, double lo, double hi)
{
    a->log = 1;
    a->lo = floor(log10(lo));
    a->hi = ceil(log10(hi));
    if (a->hi <= a->lo)
        a->hi = a->lo + 1;
    a->nticks = 0;
    int decades = (int)(a->hi - a->lo);
    for (int d = 0; d <= decades && a->nticks < 24; d++)
        for (int m = 1; m <= 5 && a->nticks < 24; m++) {
            if (m == 1 || (decades <= 2 && (m == 2 || m == 5))) {
                double t = log10(m) + a->lo + d;
                if (t <= a->hi + 1e-9)
                    a->ticks[a->nticks++] = pow(10, t);
            }
        }
}

/* data value -> position in [0, 1] */
static double frac(const axis *a, double v)
{
    double t = a->log ? log10(v) : v;
    return (t - a->lo) / (a->hi - a->lo);
}

static double px(const axis *a, double v)
{
    return LEFT + frac(a, v) * (W - LEFT - RIGHT);
}

static double py(const axis *a, double v)
{
    return H - BOTTOM - frac(a, v) * (H - TOP - BOTTOM);
}

static void figure_begin(FILE *f, const char *id, const char *title, const char *desc)
{
    fprintf(f, "<figure class=\"chart\" id=\"");
    rsvg_esc(f, id);
    fprintf(f, "\">\n<svg class=\"plot\" viewBox=\"0 0 %d %d\" width=\"%d\" height=\"%d\" "
               "role=\"img\" aria-labelledby=\"", W, H, W, H);
    rsvg_esc(f, id);
    fprintf(f, "-title ");
    rsvg_esc(f, id);
    fprintf(f, "-desc\" xmlns=\"http://www.w3.org/2000/svg\">\n<title id=\"");
    rsvg_esc(f, id);
    fprintf(f, "-title\">");
    rsvg_esc(f, title);
    fprintf(f, "</title>\n<desc id=\"");
    rsvg_esc(f, id);
    fprintf(f, "-desc\">");
    rsvg_esc(f, desc);
    fprintf(f, "</desc>\n<text class=\"chart-title\" x=\"%d\" y=\"20\">", LEFT);
    rsvg_esc(f, title);
    fprintf(f, "</text>\n");
}

static void axes(FILE *f, const axis *x, const axis *y, const char *xl, const char *yl,
                 double yscale)
{
    char b[32];
    fprintf(f, "<g class=\"grid\">");
    for (int i = 0; i < y->nticks; i++)
        fprintf(f, "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\"/>", LEFT, W - RIGHT,
                py(y, y->ticks[i]), py(y, y->ticks[i]));
    for (int i = 0; i < x->nticks; i++)
        fprintf(f, "<line y1=\"%d\" y2=\"%d\" x1=\"%.1f\" x2=\"%.1f\"/>", TOP, H - BOTTOM,
                px(x, x->ticks[i]), px(x, x->ticks[i]));
    fprintf(f, "</g>\n<g class=\"axis x-axis\"><line x1=\"%d\" x2=\"%d\" y1=\"%d\" y2=\"%d\"/>",
            LEFT, W - RIGHT, H - BOTTOM, H - BOTTOM);
    for (int i = 0; i < x->nticks; i++) {
        rsvg_num(x->ticks[i], b, sizeof b);
        fprintf(f, "<text class=\"tick\" x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%s</text>",
                px(x, x->ticks[i]), H - BOTTOM + 16, b);
    }
    fprintf(f, "<text class=\"axis-label\" x=\"%d\" y=\"%d\" text-anchor=\"middle\">",
            (LEFT + W - RIGHT) / 2, H - 14);
    rsvg_esc(f, xl);
    fprintf(f, "%s</text></g>\n", x->log ? " (log scale)" : "");
    fprintf(f, "<g class=\"axis y-axis\"><line x1=\"%d\" x2=\"%d\" y1=\"%d\" y2=\"%d\"/>", LEFT,
            LEFT, TOP, H - BOTTOM);
    for (int i = 0; i < y->nticks; i++) {
        rsvg_num(y->ticks[i] * yscale, b, sizeof b);
        fprintf(f, "<text class=\"tick\" x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%s</text>",
                LEFT - 6, py(y, y->ticks[i]) + 4, b);
    }
    fprintf(f, "<text class=\"axis-label\" transform=\"translate(18 %d) rotate(-90)\" "
               "text-anchor=\"middle\">", (TOP + H - BOTTOM) / 2);
    rsvg_esc(f, yl);
    fprintf(f, "</text></g>\n");
}

static void legend(FILE *f, const rsvg_series *s, size_t n)
{
    fprintf(f, "<g class=\"legend\">");
    double x = LEFT + 10;
    for (size_t i = 0; i < n; i++) {
        const char *c = rsvg_colors[s[i].color % RSVG_COLORS];
        fprintf(f, "<line x1=\"%.0f\" x2=\"%.0f\" y1=\"%d\" y2=\"%d\" stroke=\"%s\" "
                   "stroke-width=\"3\"%s/><text x=\"%.0f\" y=\"%d\">", x, x + 18, TOP - 16,
                TOP - 16, c, s[i].dashed ? " stroke-dasharray=\"6 4\"" : "", x + 22, TOP - 12);
        rsvg_esc(f, s[i].name);
        fprintf(f, "</text>");
        x += 34 + 7.0 * (double)strlen(s[i].name ? s[i].name : "");
    }
    fprintf(f, "</g>\n");
}

/* ---- line chart ------------------------------------------------------------------------------ */

static void table_rows(FILE *f, const rsvg_chart *c, const rsvg_series *s)
{
    double ys = c->y_scale ? c->y_scale : 1;
    size_t pts[MAX_TABLE_ROWS], np = 0, valid = 0;
    for (size_t i = 0; i < s->n; i++)
        valid += isfinite(s->y[i]) && isfinite(s->x[i]);
    /* evenly spaced valid points, the first and the last among them */
    for (size_t i = 0, k = 0; i < s->n && np < MAX_TABLE_ROWS; i++) {
        if (!isfinite(s->y[i]) || !isfinite(s->x[i]))
            continue;
        if (valid <= MAX_TABLE_ROWS || k * (MAX_TABLE_ROWS - 1) / (valid - 1) >= np ||
            k == valid - 1)
            pts[np++] = i;
        k++;
    }
    for (size_t j = 0; j < np; j++) {
        char bx[32], by[32];
        rsvg_num(s->x[pts[j]], bx, sizeof bx);
        double y = s->y[pts[j]] * ys;
        snprintf(by, sizeof by, fabs(y) >= 1e5 ? "%.0f" : "%.5g", y);
        fprintf(f, "<tr><th scope=\"row\">");
        rsvg_esc(f, s->name);
        fprintf(f, "</th><td>%s</td><td>%s</td></tr>\n", bx, by);
    }
}

void rsvg_line_chart(FILE *f, const rsvg_chart *c, const rsvg_series *s, size_t n)
{
    double xlo = INFINITY, xhi = -INFINITY, ylo = INFINITY, yhi = -INFINITY;
    for (size_t k = 0; k < n; k++)
        for (size_t i = 0; i < s[k].n; i++) {
            double x = s[k].x[i], y = s[k].y[i];
            if (!isfinite(x) || !isfinite(y))
                continue;
            xlo = fmin(xlo, x);
            xhi = fmax(xhi, x);
            ylo = fmin(ylo, y);
            yhi = fmax(yhi, y);
        }
    figure_begin(f, c->id, c->title, c->desc);
    if (!(xlo <= xhi)) {
        fprintf(f, "<text class=\"empty\" x=\"%d\" y=\"%d\">no data</text></svg>\n"
                   "<p class=\"note\">No data for this chart.</p></figure>\n", LEFT + 20, H / 2);
        return;
    }
    int logx = c->logx < 0 ? xlo > 0 && xhi / xlo > 100 : c->logx && xlo > 0;
    axis ax, ay;
    if (logx)
        axis_log(&ax, xlo, xhi);
    else
        axis_linear(&ax, xlo, xhi, 0);
    axis_linear(&ay, ylo, yhi, c->y_from_zero);
    axes(f, &ax, &ay, c->xlabel, c->ylabel, c->y_scale ? c->y_scale : 1);
    for (size_t k = 0; k < n; k++) {
        const char *col = rsvg_colors[s[k].color % RSVG_COLORS];
        fprintf(f, "<g class=\"series\" data-name=\"");
        rsvg_esc(f, s[k].name);
        fprintf(f, "\" fill=\"%s\" stroke=\"%s\"><title>", col, col);
        rsvg_esc(f, s[k].name);
        fprintf(f, "</title>");
        int open = 0;
        for (size_t i = 0; i < s[k].n; i++) {
            double x = s[k].x[i], y = s[k].y[i];
            if (!isfinite(x) || !isfinite(y) || (logx && x <= 0)) {
                if (open)
                    fprintf(f, "\"/>");
                open = 0;
                continue;
            }
            if (!open)
                fprintf(f, "<polyline fill=\"none\" stroke-width=\"2\"%s points=\"",
                        s[k].dashed ? " stroke-dasharray=\"6 4\"" : "");
            fprintf(f, "%s%.1f,%.1f", open ? " " : "", px(&ax, x), py(&ay, y));
            open = 1;
        }
        if (open)
            fprintf(f, "\"/>");
        if (s[k].markers)
            for (size_t i = 0; i < s[k].n; i++)
                if (isfinite(s[k].x[i]) && isfinite(s[k].y[i]) && (!logx || s[k].x[i] > 0))
                    fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4.5\" fill=\"#fff\" "
                               "stroke-width=\"2.5\"/>",
                            px(&ax, s[k].x[i]), py(&ay, s[k].y[i]));
        fprintf(f, "</g>\n");
    }
    legend(f, s, n);
    fprintf(f, "</svg>\n<div class=\"table-wrap\"><table class=\"data\"><caption>");
    rsvg_esc(f, c->title);
    fprintf(f, " (data; at most %d points per series)</caption>\n<thead><tr><th scope=\"col\">"
               "series</th><th scope=\"col\">", MAX_TABLE_ROWS);
    rsvg_esc(f, c->xlabel);
    fprintf(f, "</th><th scope=\"col\">");
    rsvg_esc(f, c->ylabel);
    fprintf(f, "</th></tr></thead><tbody>\n");
    for (size_t k = 0; k < n; k++)
        table_rows(f, c, &s[k]);
    fprintf(f, "</tbody></table></div>\n</figure>\n");
}

/* ---- bar chart ------------------------------------------------------------------------------- */

void rsvg_bar_chart(FILE *f, const rsvg_bars *b)
{
    enum { ROW_H = 26, LABEL_W = 250 };
    int h = 50 + (int)b->nrows * ROW_H + BOTTOM;
    double hi = 0;
    for (size_t i = 0; i < b->nrows * b->nseries; i++)
        if (isfinite(b->values[i]))
            hi = fmax(hi, b->values[i]);
    axis ax;
    double unit = 1; /* bytes: ticks nice in KiB, MiB or GiB */
    while (b->bytes && hi / unit >= 1024 && unit < 1099511627776.0)
        unit *= 1024;
    axis_linear(&ax, 0, hi > 0 ? hi / unit : 1, 1);
    ax.hi *= unit;
    for (int i = 0; i < ax.nticks; i++)
        ax.ticks[i] *= unit;
    fprintf(f, "<figure class=\"chart\" id=\"");
    rsvg_esc(f, b->id);
    fprintf(f, "\">\n<svg class=\"bars\" viewBox=\"0 0 %d %d\" width=\"%d\" height=\"%d\" "
               "role=\"img\" aria-labelledby=\"", W, h, W, h);
    rsvg_esc(f, b->id);
    fprintf(f, "-title ");
    rsvg_esc(f, b->id);
    fprintf(f, "-desc\" xmlns=\"http://www.w3.org/2000/svg\">\n<title id=\"");
    rsvg_esc(f, b->id);
    fprintf(f, "-title\">");
    rsvg_esc(f, b->title);
    fprintf(f, "</title><desc id=\"");
    rsvg_esc(f, b->id);
    fprintf(f, "-desc\">");
    rsvg_esc(f, b->desc);
    fprintf(f, "</desc>\n<text class=\"chart-title\" x=\"%d\" y=\"20\">", 10);
    rsvg_esc(f, b->title);
    fprintf(f, "</text>\n");
    double x0 = LABEL_W, x1 = W - RIGHT - 70, y0 = 50;
#define BX(v) (x0 + (v) / ax.hi * (x1 - x0))
    char t[32];
    fprintf(f, "<g class=\"grid\">");
    for (int i = 0; i < ax.nticks; i++)
        fprintf(f, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.0f\" y2=\"%.0f\"/>", BX(ax.ticks[i]),
                BX(ax.ticks[i]), y0, y0 + b->nrows * ROW_H);
    fprintf(f, "</g>\n<g class=\"axis x-axis\">");
    for (int i = 0; i < ax.nticks; i++) {
        if (b->bytes)
            rsvg_bytes(ax.ticks[i], t, sizeof t);
        else
            rsvg_num(ax.ticks[i], t, sizeof t);
        fprintf(f, "<text class=\"tick\" x=\"%.1f\" y=\"%.0f\" text-anchor=\"middle\">%s</text>",
                BX(ax.ticks[i]), y0 + b->nrows * ROW_H + 16, t);
    }
    fprintf(f, "<text class=\"axis-label\" x=\"%.0f\" y=\"%d\" text-anchor=\"middle\">",
            (x0 + x1) / 2, h - 14);
    rsvg_esc(f, b->xlabel);
    fprintf(f, "</text></g>\n<g class=\"axis y-axis\">");
    for (size_t r = 0; r < b->nrows; r++) {
        fprintf(f, "<text class=\"tick\" x=\"%.0f\" y=\"%.0f\" text-anchor=\"end\">", x0 - 8,
                y0 + r * ROW_H + ROW_H / 2 + 4);
        rsvg_esc(f, b->rows[r]);
        fprintf(f, "</text>");
    }
    fprintf(f, "</g>\n");
    double bh = (ROW_H - 6.0) / (double)(b->nseries ? b->nseries : 1);
    for (size_t s = 0; s < b->nseries; s++) {
        const char *col = rsvg_colors[s % RSVG_COLORS];
        fprintf(f, "<g class=\"series\" data-name=\"");
        rsvg_esc(f, b->series[s]);
        fprintf(f, "\" fill=\"%s\"><title>", col);
        rsvg_esc(f, b->series[s]);
        fprintf(f, "</title>");
        for (size_t r = 0; r < b->nrows; r++) {
            double v = b->values[r * b->nseries + s];
            if (!isfinite(v))
                continue;
            fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\"/>", x0,
                    y0 + r * ROW_H + 3 + s * bh, BX(v) - x0, bh - 1);
        }
        fprintf(f, "</g>\n");
    }
    fprintf(f, "<g class=\"legend\">");
    for (size_t s = 0; s < b->nseries; s++) {
        fprintf(f, "<rect x=\"%.0f\" y=\"%d\" width=\"14\" height=\"10\" fill=\"%s\"/>"
                   "<text x=\"%.0f\" y=\"%d\">", x0 + s * 200.0, 28, rsvg_colors[s % RSVG_COLORS],
                x0 + s * 200.0 + 20, 38);
        rsvg_esc(f, b->series[s]);
        fprintf(f, "</text>");
    }
    fprintf(f, "</g>\n</svg>\n");
#undef BX
    fprintf(f, "<div class=\"table-wrap\"><table class=\"data\"><caption>");
    rsvg_esc(f, b->title);
    fprintf(f, " (data)</caption>\n<thead><tr><th scope=\"col\"></th>");
    for (size_t s = 0; s < b->nseries; s++) {
        fprintf(f, "<th scope=\"col\">");
        rsvg_esc(f, b->series[s]);
        fprintf(f, "</th>");
    }
    fprintf(f, "</tr></thead><tbody>\n");
    for (size_t r = 0; r < b->nrows; r++) {
        fprintf(f, "<tr><th scope=\"row\">");
        rsvg_esc(f, b->rows[r]);
        fprintf(f, "</th>");
        for (size_t s = 0; s < b->nseries; s++) {
            double v = b->values[r * b->nseries + s];
            if (b->bytes)
                rsvg_bytes(v, t, sizeof t);
            else
                rsvg_num(v, t, sizeof t);
            fprintf(f, "<td>%s</td>", t);
        }
        fprintf(f, "</tr>\n");
    }
    fprintf(f, "</tbody></table></div>\n</figure>\n");
}
