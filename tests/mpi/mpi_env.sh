# tests/mpi/mpi_env.sh, sourced by the MPI test scripts: Open MPI allowed to run as root and
# oversubscribed (CI runs as root on 2 cores), one thread per process, a work folder $work
# removed at exit (kept with KEEP=1), and fail.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export SHARDLAB_NUM_THREADS=1
work=$(mktemp -d)
trap '[[ -n ${KEEP:-} ]] || rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
