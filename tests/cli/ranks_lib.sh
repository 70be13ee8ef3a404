# Shared by the tests of one model over mpirun's ranks (sourced after lib.sh, not run):
# mpirun on this one machine, ranks as its children.
command -v mpirun >/dev/null || { echo "skip: mpirun is not installed (make deps)"; exit 77; }
# Tests run as root in CI; shared memory between the ranks, no network.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader
# Under ASan, Open MPI's own allocations at exit are not ours to fix; its components stay
# loaded and their stacks are unwound the slow way, so that LeakSanitizer can name them.
export OMPI_MCA_mca_base_component_disable_dlclose=1 PMIX_MCA_mca_base_component_disable_dlclose=1
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}fast_unwind_on_malloc=0"
export LSAN_OPTIONS="suppressions=$K3_ROOT/tests/lsan-mpi.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"

# ranks NP CMD...: CMD on NP ranks of this machine.
ranks() {
  local np=$1; shift
  mpirun --oversubscribe -np "$np" "$@"
}

# leader_pid MPIRUN_PID: the rank-0 process mpirun started.
leader_pid() {
  local p
  for p in $(pgrep -P "$1"); do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx OMPI_COMM_WORLD_RANK=0 && { echo "$p"; return; }
  done
}
