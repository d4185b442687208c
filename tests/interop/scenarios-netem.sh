# The lossy-link scenarios of rxe.sh (format as scenarios.sh): the guest
# puts netem on its eth0 first (tc qdisc ... netem loss 1% duplicate 1%),
# so every packet rxe sends to softverbs may be lost or repeated on the
# way, as on a real lossy link.  This machine's own kernel has no
# sch_netem; the guest's (Debian's) has.  RC must still deliver every
# byte, checked (-c), both ways: softverbs' responder under rxe's lost and
# repeated requests, and its requester under rxe's lost ACKs and READ
# responses.  (With `reorder 5% delay 1ms` as well, an ib_write_bw from
# rxe into softverbs' ASan build stalled once: rxe stopped sending with
# softverbs' responder waiting for a PSN; not understood yet, so not here.)
rc.64KiB.netem.guest-server  guest ibv_rc_pingpong -c -s 65536 -n 50
rc.64KiB.netem.host-server   host  ibv_rc_pingpong -c -s 65536 -n 50
write_bw.netem.host-server   host  ib_write_bw -s 65536 -n 100 -F
read_bw.netem.host-server    host  ib_read_bw -s 65536 -n 100 -F
read_bw.netem.guest-server   guest ib_read_bw -s 65536 -n 100 -F
