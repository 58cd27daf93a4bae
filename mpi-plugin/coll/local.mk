# coll ivshmem (mca_coll_ivshmem.so): collectives through the region
# (docs/collectives.md). The region is the BTL's, so it links no libivshm
# of its own; libmpi for communicators. shim/ stands in for the one
# Open MPI header that Debian's libopenmpi-dev leaves out.
COLL_IVSHMEM_SRCS = mpi-plugin/coll/coll_ivshmem.h \
	mpi-plugin/coll/coll_ivshmem_component.c \
	mpi-plugin/coll/shim/ompi/mpi/fortran/base/fint_2_int.h \
	mpi-plugin/coll/coll_ivshmem_area.c mpi-plugin/coll/coll_ivshmem_buf.c \
	mpi-plugin/coll/coll_ivshmem_ops.c mpi-plugin/coll/coll_ivshmem_hier.c \
	mpi-plugin/coll/coll_ivshmem_read.h mpi-plugin/coll/coll_ivshmem_hold.h \
	mpi-plugin/coll/coll_ivshmem_verdict.h \
	mpi-plugin/coll/coll_ivshmem_agree.c
if HAVE_OMPI_COLL
noinst_LTLIBRARIES += mpi-plugin/coll/libcoll-ivshmem.la
mpi_plugin_coll_libcoll_ivshmem_la_SOURCES = $(COLL_IVSHMEM_SRCS)
mpi_plugin_coll_libcoll_ivshmem_la_CPPFLAGS = $(OMPI_COMPONENT_CPPFLAGS) \
	-idirafter $(top_srcdir)/mpi-plugin/coll/shim
mpi_plugin_coll_libcoll_ivshmem_la_CFLAGS = $(OMPI_COMPONENT_CFLAGS)
ompicomponent_LTLIBRARIES += mpi-plugin/coll/mca_coll_ivshmem.la
mpi_plugin_coll_mca_coll_ivshmem_la_SOURCES =
mpi_plugin_coll_mca_coll_ivshmem_la_LDFLAGS = $(OMPI_COMPONENT_LDFLAGS)
mpi_plugin_coll_mca_coll_ivshmem_la_LIBADD = \
	mpi-plugin/coll/libcoll-ivshmem.la $(MPILIB_LIBS) $(OPAL_LIBS)
else
EXTRA_DIST += $(COLL_IVSHMEM_SRCS)
endif
