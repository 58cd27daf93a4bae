# mpool ivshmem (mca_mpool_ivshmem.so): MPI_Alloc_mem in the region. It
# asks the BTL for the memory, so it links no libivshm of its own.
MPOOL_IVSHMEM_SRCS = mpi-plugin/mpool/mpool_ivshmem_component.c
if HAVE_OMPI
noinst_LTLIBRARIES += mpi-plugin/mpool/libmpool-ivshmem.la
mpi_plugin_mpool_libmpool_ivshmem_la_SOURCES = $(MPOOL_IVSHMEM_SRCS)
mpi_plugin_mpool_libmpool_ivshmem_la_CPPFLAGS = $(OMPI_COMPONENT_CPPFLAGS)
mpi_plugin_mpool_libmpool_ivshmem_la_CFLAGS = $(OMPI_COMPONENT_CFLAGS)
ompicomponent_LTLIBRARIES += mpi-plugin/mpool/mca_mpool_ivshmem.la
mpi_plugin_mpool_mca_mpool_ivshmem_la_SOURCES =
mpi_plugin_mpool_mca_mpool_ivshmem_la_LDFLAGS = $(OMPI_COMPONENT_LDFLAGS)
mpi_plugin_mpool_mca_mpool_ivshmem_la_LIBADD = \
	mpi-plugin/mpool/libmpool-ivshmem.la $(OPAL_LIBS)
else
EXTRA_DIST += $(MPOOL_IVSHMEM_SRCS)
endif
