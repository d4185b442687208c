# The lossy-link scenarios of rxe.sh (format as scenarios.sh): the guest
# puts netem on its eth0 first (tc qdisc ... netem loss 1% duplicate 1%),
# so every packet rxe sends to softverbs may be lost or repeated on the
# way, as on a real lossy link.  This machine's own kernel has no
# sch_netem; the guest's (Debian's) has.  RC must still deliver every
# byte, checked (-c), both ways: softverbs' responder under rxe's lost and
# repeated requests, and its requester under rxe's lost ACKs and READ
# responses.  No reordering: rxe resends a packet that softverbs NAKs as
# out of sequence on its retransmit timer (~70 ms), not on the NAK, so
# with `reorder 5% delay 1ms` each reordered gap costs ~70 ms and an
# ib_write_bw from rxe ran past the test's limits in the ASan build.
rc.64KiB.netem.guest-server  guest ibv_rc_pingpong -c -s 65536 -n 50
rc.64KiB.netem.host-server   host  ibv_rc_pingpong -c -s 65536 -n 50
write_bw.netem.host-server   host  ib_write_bw -s 65536 -n 100 -F
read_bw.netem.host-server    host  ib_read_bw -s 65536 -n 100 -F
read_bw.netem.guest-server   guest ib_read_bw -s 65536 -n 100 -F
