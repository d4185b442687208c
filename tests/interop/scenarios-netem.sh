# The lossy-link scenarios of rxe.sh (format as scenarios.sh): the guest
# puts netem on its eth0 first (tc qdisc ... netem loss 1% duplicate 1%),
# so every packet rxe sends to softverbs may be lost or repeated on the
# way, as on a real lossy link.  This machine's own kernel has no
# sch_netem; the guest's (Debian's) has.  RC must still deliver every
# message, both ways: softverbs' responder under rxe's lost and repeated
# requests, and its requester under rxe's lost ACKs and READ responses.
# No reordering: rxe resends a packet that softverbs NAKs as out of
# sequence on its retransmit timer (~70 ms), not on the NAK, so with
# `reorder 5% delay 1ms` each reordered gap costs ~70 ms and an
# ib_write_bw from rxe ran past the test's limits in the ASan build.
# SENDs are shown by ib_send_bw both ways, not by ibv_rc_pingpong: a
# pingpong ends as soon as each side has its own completions, so the side
# whose last message's ACK netem drops resends it to a peer that has
# already destroyed its QP, and ends in IBV_WC_RETRY_EXC_ERR, as it would
# against any NIC (seen in 1 run of 5 with the host's cores busy: rxe the
# server, its ACK of softverbs' last SEND lost).  perftest meets its peer
# over TCP after the last completion, before either side destroys its QP.
# So the bytes are checked (-c) on the clean link only (scenarios.sh).
send_bw.netem.guest-server   guest ib_send_bw -s 65536 -n 100 -F
send_bw.netem.host-server    host  ib_send_bw -s 65536 -n 100 -F
write_bw.netem.host-server   host  ib_write_bw -s 65536 -n 100 -F
read_bw.netem.host-server    host  ib_read_bw -s 65536 -n 100 -F
read_bw.netem.guest-server   guest ib_read_bw -s 65536 -n 100 -F
