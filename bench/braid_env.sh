# Sourced by bench scripts: how braid's side runs (as a user runs it, none
# of the settings a rival may be tuned with) and how they read its logs.
#   "${clean_env[@]}" braid …     braid with the library path and the OpenMP
#                                  and BLAS thread settings of the shell unset
#   done_field FILE KEY           a field of a JSON log's done record (JSON)
clean_env=(env -u LD_LIBRARY_PATH -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT -u OMP_PROC_BIND -u OMP_PLACES
           -u GOMP_CPU_AFFINITY -u OMP_NUM_THREADS -u OPENBLAS_NUM_THREADS)
done_field() {
  python3 -c "import json,sys
for l in open(sys.argv[1]):
    r=json.loads(l)
    if r.get('event')=='done': print(json.dumps(r.get(sys.argv[2])))" "$1" "$2"
}
