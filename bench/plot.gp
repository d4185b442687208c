# bench/plot.gp: draws bench/run-tcp.sh's results.csv.
#   gnuplot -e "csv='results.csv'; png='tcp.png'" bench/plot.gp
# Four panels: bandwidth and latency against message size (log-log), for the
# loopback and the veth path, softverbs (perftest) next to TCP (qperf, iperf3).
# Columns are taken by their CSV header names, so the column order may change.

if (!exists("csv")) csv = 'bench/results/results.csv'
if (!exists("png")) png = 'bench/results/tcp.png'
# the paths that results.csv has rows for (a panel with no points is an error)
if (!exists("paths")) paths = 'lo veth'

set terminal pngcairo size 1400,(500 * words(paths)) font ',10'
set output png
set datafile separator ','
set datafile columnheaders
set datafile missing 'NaN'
set logscale xy
set grid xtics ytics mxtics mytics lc rgb '#dddddd'
set key top left box opaque
set xrange [0.7:6e6]
set xtics ('1' 1, '4' 4, '16' 16, '64' 64, '256' 256, '1K' 1024, '4K' 4096, \
	'16K' 16384, '64K' 65536, '256K' 262144, '1M' 1048576, '4M' 4194304)
set xlabel 'message size (bytes, log)'

# value of column NAME on rows of path P, else undefined (not plotted)
on(p, name) = (strcol('path') eq p) ? column(name) : NaN

set multiplot layout words(paths),2 title 'softverbs over TCP vs TCP (same machine, same run)'

do for [p in paths] {
	t = (p eq 'lo') ? 'loopback 127.0.0.1' : 'veth between two namespaces'
	set title sprintf('%s: bandwidth', t)
	set ylabel 'MB/s (10^6 B/s, log)'
	set key top left
	plot csv using 'size_bytes':(on(p, 'sv_write_bw_MBps')) with linespoints lw 2 pt 7 title 'softverbs ib\_write\_bw', \
	     csv using 'size_bytes':(on(p, 'sv_send_bw_MBps')) with linespoints lw 2 pt 5 title 'softverbs ib\_send\_bw', \
	     csv using 'size_bytes':(on(p, 'qperf_tcp_bw_MBps')) with linespoints lw 2 dt 2 pt 6 title 'TCP qperf tcp\_bw', \
	     csv using 'size_bytes':(on(p, 'iperf3_bw_MBps')) with linespoints lw 2 dt 3 pt 4 title 'TCP iperf3'

	set title sprintf('%s: one-way latency', t)
	set ylabel 'microseconds (log)'
	set key top left
	plot csv using 'size_bytes':(on(p, 'sv_send_lat_avg_us')) with linespoints lw 2 pt 7 title 'softverbs ib\_send\_lat (avg)', \
	     csv using 'size_bytes':(on(p, 'sv_send_lat_ev_avg_us')) with points ps 2 pt 9 title 'softverbs ib\_send\_lat -e (avg, target sizes only)', \
	     csv using 'size_bytes':(on(p, 'sv_write_lat_avg_us')) with linespoints lw 2 pt 5 title 'softverbs ib\_write\_lat (avg)', \
	     csv using 'size_bytes':(on(p, 'qperf_tcp_lat_us')) with linespoints lw 2 dt 2 pt 6 title 'TCP qperf tcp\_lat'
}
unset multiplot
