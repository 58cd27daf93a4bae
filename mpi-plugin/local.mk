# The Open MPI components (included by the top Makefile.am): one folder and
# one fragment per component, as in Open MPI's own tree. Each is built
# against the installed Open MPI's devel headers (opal.pc), with no project
# config.h in its units. Their sources are compiled into convenience
# libraries first: Open MPI tries to open every file of a component
# directory named like a component (mca_btl_*), and the objects of a
# target mca_btl_ivshmem.la would be.
#
#   btl/    the BTL ivshmem: the region route and the verbs route
#   mpool/  the mpool ivshmem: MPI_Alloc_mem in the region
#   coll/   the coll ivshmem: collectives in the region
#   ucx/    the UCT transport ivshmem, for MPIs over UCX (no Open MPI
#           headers: built against UCX's own sources)
#
# ompi_compat.h (shared by all three) keeps what differs between Open MPI
# 4.1 and 5.x; amca-param-sets/ivshmem is the one switch, --tune ivshmem
# (ivshmem-heap: the same with the region heap preloaded); ivshmem-ucx the
# switch for pml ucx (docs/ucx.md).
OMPI_COMPONENT_CPPFLAGS = $(OPAL_CFLAGS) -I$(top_srcdir)/libivshm/include \
	-I$(top_srcdir)/mpi-plugin -I$(top_srcdir)/mpi-plugin/btl
OMPI_COMPONENT_CFLAGS = $(AM_CFLAGS) -mcx16 -pthread
OMPI_COMPONENT_LDFLAGS = -module -avoid-version -shared -Wl,-z,defs -pthread
EXTRA_DIST += mpi-plugin/ompi_compat.h
ompicomponentdir = $(OMPI_PKGLIBDIR)
ompicomponent_LTLIBRARIES =
AMCA_SETS = mpi-plugin/amca-param-sets/ivshmem \
	mpi-plugin/amca-param-sets/ivshmem-heap
# pml ucx with the UCT transport (ivshmem-ucx-heap: and the region heap)
AMCA_UCX_SETS = mpi-plugin/amca-param-sets/ivshmem-ucx \
	mpi-plugin/amca-param-sets/ivshmem-ucx-heap
EXTRA_DIST += $(AMCA_SETS) $(AMCA_UCX_SETS)
if HAVE_OMPI
# mpirun --tune ivshmem: Open MPI 4.1 looks in its pkgdatadir/
# amca-param-sets, 5.x's PRRTE in its own (configure's OMPI_AMCADIR)
ompiamcadir = $(OMPI_AMCADIR)
ompiamca_DATA = $(AMCA_SETS)
if HAVE_UCX
ompiamca_DATA += $(AMCA_UCX_SETS)
endif
endif
include $(top_srcdir)/mpi-plugin/btl/local.mk
include $(top_srcdir)/mpi-plugin/mpool/local.mk
include $(top_srcdir)/mpi-plugin/coll/local.mk
include $(top_srcdir)/mpi-plugin/ucx/local.mk
