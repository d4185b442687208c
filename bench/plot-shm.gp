# bench/plot-shm.gp: draws bench/run-shm.sh's shm.csv.
#   gnuplot -e "csv='shm.csv'; png='shm.png'" bench/plot-shm.gp
# Three panels against message size (log-log): bandwidth (softverbs with the
# default transport and with SOFTVERBS_TRANSPORT=tcp, UCX ucp_put_bw, memcpy
# rotating and hot), message rate, and one-way latency (medians).  Columns are
# taken by their CSV header names, so the column order may change.

if (!exists("csv")) csv = 'bench/results/shm.csv'
if (!exists("png")) png = 'bench/results/shm.png'

set terminal pngcairo size 1800,560 font ',10'
set output png
set datafile separator ','
set datafile columnheaders
set datafile missing 'NaN'
set logscale xy
set grid xtics ytics mxtics mytics lc rgb '#dddddd'
set key top left box opaque
set xrange [5:6e6]
set xtics ('8' 8, '64' 64, '512' 512, '4K' 4096, '32K' 32768, '256K' 262144, \
	'1M' 1048576, '4M' 4194304)
set xlabel 'message size (bytes, log)'

set multiplot layout 1,3 title 'intra-host: softverbs (perftest over sv\_lo; auto = default transport, tcp = SOFTVERBS\_TRANSPORT=tcp) vs UCX ucx\_perftest vs memcpy, same machine, same run'

set title 'bandwidth'
set ylabel 'MB/s (10^6 B/s, log)'
set key bottom right
plot csv using 'size_bytes':'sv_auto_write_bw_MBps' with linespoints lw 2 pt 7 lc rgb '#7b2cbf' title 'softverbs ib\_write\_bw (auto)', \
     csv using 'size_bytes':'sv_tcp_write_bw_MBps' with linespoints lw 2 pt 5 lc rgb '#2a9d8f' title 'softverbs ib\_write\_bw (tcp)', \
     csv using 'size_bytes':'ucx_put_bw_MBps' with linespoints lw 2 dt 2 pt 6 lc rgb '#1d4ed8' title 'UCX ucp\_put\_bw', \
     csv using 'size_bytes':'memcpy_MBps' with linespoints lw 2 dt 3 pt 4 lc rgb '#e76f51' title 'memcpy (rotating buffers)', \
     csv using 'size_bytes':'memcpy_hot_MBps' with linespoints lw 1 dt 4 pt 3 lc rgb '#9b2226' title 'memcpy (one buffer pair, hot)'

set title 'message rate'
set ylabel '10^6 messages/s (log)'
set key top right
plot csv using 'size_bytes':'sv_auto_write_mr_Mmsgs' with linespoints lw 2 pt 7 lc rgb '#7b2cbf' title 'softverbs ib\_write\_bw (auto)', \
     csv using 'size_bytes':'sv_tcp_write_mr_Mmsgs' with linespoints lw 2 pt 5 lc rgb '#2a9d8f' title 'softverbs ib\_write\_bw (tcp)', \
     csv using 'size_bytes':'ucx_put_bw_Mmsgs' with linespoints lw 2 dt 2 pt 6 lc rgb '#1d4ed8' title 'UCX ucp\_put\_bw'

set title 'one-way latency (median)'
set ylabel 'microseconds (log)'
set key top left
plot csv using 'size_bytes':'sv_auto_write_lat_typical_us' with linespoints lw 2 pt 7 lc rgb '#7b2cbf' title 'softverbs ib\_write\_lat (auto)', \
     csv using 'size_bytes':'sv_tcp_write_lat_typical_us' with linespoints lw 2 pt 5 lc rgb '#2a9d8f' title 'softverbs ib\_write\_lat (tcp)', \
     csv using 'size_bytes':'sv_auto_send_lat_typical_us' with linespoints lw 2 dt 4 pt 9 lc rgb '#7b2cbf' title 'softverbs ib\_send\_lat (auto)', \
     csv using 'size_bytes':'sv_tcp_send_lat_typical_us' with linespoints lw 2 dt 4 pt 11 lc rgb '#2a9d8f' title 'softverbs ib\_send\_lat (tcp)', \
     csv using 'size_bytes':'ucx_put_lat_typical_us' with linespoints lw 2 dt 2 pt 6 lc rgb '#1d4ed8' title 'UCX ucp\_put\_lat', \
     csv using 'size_bytes':'ucx_am_lat_typical_us' with linespoints lw 2 dt 2 pt 8 lc rgb '#60a5fa' title 'UCX ucp\_am\_lat'
unset multiplot
