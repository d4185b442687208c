# The IPv6 scenarios of rxe.sh (format as scenarios.sh): each side's GID is
# the RoCE v2 GID of its IPv6 address on the link (softverbs' index 5, rxe's
# the index its init found, SV_RXE_GID6_INDEX), so every packet is a RoCEv2
# datagram over IPv6, ICRC computed with IPv6's masked fields.  The
# programs' own exchange of QPN, PSN and GID still runs over TCP on IPv4.
rc.4KiB.v6.guest-server    guest ibv_rc_pingpong -c -s 4096 -n 50
rc.4KiB.v6.host-server     host  ibv_rc_pingpong -c -s 4096 -n 50
ud.1KiB.v6.guest-server    guest ibv_ud_pingpong -c -s 1024 -n 50
ud.1KiB.v6.host-server     host  ibv_ud_pingpong -c -s 1024 -n 50
write_bw.v6.host-server    host  ib_write_bw -s 65536 -n 100 -F
read_bw.v6.guest-server    guest ib_read_bw -s 65536 -n 100 -F
atomic_bw.v6.host-server   host  ib_atomic_bw -n 100 -F
