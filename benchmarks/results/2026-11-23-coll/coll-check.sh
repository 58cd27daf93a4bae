# The 15-rank correctness runs on the 16-core machine (device runner, from
# the repository root): tests/simvm/mpi_coll.c in full mode, all ranks in
# one region, then 7 + 8 ranks in two regions (two levels).
SKIP_AUTORECONF=1 . benchmarks/device-build.sh && cd "$top"
B=$top/_dev; SYS=$(ompi_info --path pkglibdir --parsable | sed 's/^path:pkglibdir://')
mpicc -O2 tests/simvm/mpi_coll.c -o /tmp/mpi_coll
for r in A B; do $B/libivshm/tools/ivshm format file:/dev/shm/civ$r --size 512M --force >/dev/null; done
common="--allow-run-as-root --bind-to core --map-by core --mca mca_base_component_path $B/mpi-plugin/.libs:$SYS --mca pml ob1 --mca btl self,vader,ivshmem --mca coll_ivshmem_stats 1"
echo "== flat, 15 ranks, one region"
timeout 200 mpirun $common -np 15 -x IVSHM_REGION=file:/dev/shm/civA /tmp/mpi_coll > $OUT/flat15.out 2>&1; echo "rc=$?"
grep "mpi_coll:" $OUT/flat15.out | tail -3; grep -c "MPI_COMM_WORLD rank .* of 15 (one region)" $OUT/flat15.out
echo "== two levels, 7 ranks in region A + 8 in region B"
timeout 200 mpirun $common -np 7 -x IVSHM_REGION=file:/dev/shm/civA /tmp/mpi_coll : -np 8 -x IVSHM_REGION=file:/dev/shm/civB /tmp/mpi_coll > $OUT/hier15.out 2>&1; echo "rc=$?"
grep "mpi_coll:" $OUT/hier15.out | tail -3; grep -c "MPI_COMM_WORLD rank .* of 15 (two levels)" $OUT/hier15.out; grep -c "MPI_COMM_WORLD/region rank" $OUT/hier15.out
grep "MPI_COMM_WORLD rank 0 of" $OUT/flat15.out $OUT/hier15.out
