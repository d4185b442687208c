# The scenarios of rxe.sh, one per line, read by both sides (host and guest):
#   NAME SERVER PROGRAM ARGS...
# SERVER is who listens: "guest" (rxe) or "host" (softverbs); the other side
# connects.  Both add the device, the GID index and the port (-p) of the
# scenario.  ibv_*_pingpong -c checks every buffer it receives, on both
# sides; perftest checks the count and size of what completes.
# Sizes: the link's MTU is 1500, so both sides' active MTU is 1024, and a
# UD message is at most that.
rc.4KiB.guest-server    guest ibv_rc_pingpong -c -s 4096 -n 50
rc.4KiB.host-server     host  ibv_rc_pingpong -c -s 4096 -n 50
rc.64KiB.guest-server   guest ibv_rc_pingpong -c -s 65536 -n 20
rc.64KiB.host-server    host  ibv_rc_pingpong -c -s 65536 -n 20
ud.1KiB.guest-server    guest ibv_ud_pingpong -c -s 1024 -n 50
ud.1KiB.host-server     host  ibv_ud_pingpong -c -s 1024 -n 50
write_bw.guest-server   guest ib_write_bw -s 65536 -n 100 -F
write_bw.host-server    host  ib_write_bw -s 65536 -n 100 -F
read_bw.guest-server    guest ib_read_bw -s 65536 -n 100 -F
read_bw.host-server     host  ib_read_bw -s 65536 -n 100 -F
send_bw.guest-server    guest ib_send_bw -s 65536 -n 100 -F
send_bw.host-server     host  ib_send_bw -s 65536 -n 100 -F
atomic_bw.guest-server  guest ib_atomic_bw -n 100 -F
atomic_bw.host-server   host  ib_atomic_bw -n 100 -F
