#!/bin/sh
# mpirun's remote-shell agent for hosts that are network namespaces:
# "AGENT HOST COMMAND..." runs COMMAND in namespace HOST, the way ssh would
# run it on another machine, with this environment (softverbs run's
# LD_PRELOAD and LD_LIBRARY_PATH included).  Used by middleware.sh (mpi,
# netns) as --mca plm_rsh_agent.
host=$1
shift
exec ip netns exec "$host" /bin/sh -c "$*"
