/*
 * Open MPI's ompi/op/op.h includes this header for one macro (Fortran
 * user operations' arguments), but Debian's libopenmpi-dev does not ship
 * it. The components search it last (-idirafter): an Open MPI that ships
 * the header gets its own. The value conversion is what the original does
 * in every configuration.
 */
#ifndef IVSHMEM_SHIM_FINT_2_INT_H
#define IVSHMEM_SHIM_FINT_2_INT_H
#define OMPI_INT_2_FINT(a) ((MPI_Fint)(a))
#endif
