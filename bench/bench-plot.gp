# SPDX-License-Identifier: LGPL-2.1-or-later
# bench-plot.gp: the README's chart (`make bench-plot`): one horizontal bar per headline
# figure of a bench run, from 1 (its baseline, measured in the same run) to its ratio,
# on a logarithmic axis so that 2x slower and 2x faster are bars of one length. Times
# and rates point opposite ways (a time under 1 is better, a rate over 1 is), so they
# get two colours. Reads the lines of bench-plot.py from `datafile` and writes an SVG
# to `outfile`; the one line of `titlefile` (bench-plot.py --subtitle) names the run.

if (!exists("datafile")) datafile = "bench-plot.dat"
if (!exists("outfile")) outfile = "bench.svg"
subtitle = exists("titlefile") ? system("cat '".titlefile."'") : ""

set terminal svg size 900,460 dynamic enhanced font "sans,12" background rgb "white"
set output outfile
set datafile separator "\t"

stats datafile using 2 nooutput
n = STATS_records
xmin = (STATS_min < 0.5) ? STATS_min / 1.5 : 1.0 / 3
xmax = (STATS_max > 4) ? STATS_max * 1.8 : 8

set title "redislock against a baseline measured in the same run\n{/*0.8 ".subtitle."}"
set logscale x 2
set xrange [xmin:xmax]
set yrange [-0.7:n - 0.3]
set xlabel "ratio to the baseline (log scale; 1 = the baseline)"
set format x "%gx"
set ytics nomirror
set xtics nomirror
set grid xtics lc rgb "#dddddd"
set border 3
set key below horizontal
set arrow from 1, graph 0 to 1, graph 1 nohead lc rgb "#444444" dt 2
set lmargin 44

plot datafile using (1):(n - 1 - $0):(($2 < 1) ? $2 : 1):(($2 < 1) ? 1 : $2):(n - 1 - $0 - 0.35):(n - 1 - $0 + 0.35):ytic(1) \
       every ::0 with boxxyerror fs solid 0.8 noborder lc rgb "#4477aa" \
       title "time: lower is better", \
     '' using (($3 == 1) ? 1 : NaN):(n - 1 - $0):(($2 < 1) ? $2 : 1):(($2 < 1) ? 1 : $2):(n - 1 - $0 - 0.35):(n - 1 - $0 + 0.35) \
       with boxxyerror fs solid 0.8 noborder lc rgb "#ee7733" title "rate: higher is better", \
     '' using (($2 < 1 ? 1 : $2) * 1.08):(n - 1 - $0):(sprintf("%.2fx", $2)) with labels left notitle
