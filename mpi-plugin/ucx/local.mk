# UCT transport ivshmem (libuct_ivshmem.so): UCX's active messages between
# co-resident VMs through the region, for every UCX user (Open MPI's pml
# ucx, MPICH ch4:ucx, OpenSHMEM). Built against the installed UCX's public
# headers and the internal ones of its own source tree ($(UCX_SRC), which
# configure checks is the installed version; uct_ivshmem_compat.h says how
# that UCX was configured and holds what differs between UCX 1.13 and
# 1.18), with libivshm linked in statically and hidden.
# UCX 1.13 opens no module it was not built with: the library registers
# itself when loaded (LD_PRELOAD=libuct_ivshmem.so, docs/ucx.md).
# Layout as in UCX's src/uct/sm/: md (component, region, registration),
# iface (receive side, progress, reachability), ep (send side, pending),
# event (the doorbell as UCT's event fd),
# mem (allocation in the region, registration, remote keys), rma (put, get,
# atomics on a peer's region memory).
UCT_IVSHMEM_SRCS = mpi-plugin/ucx/uct_ivshmem.h \
	mpi-plugin/ucx/uct_ivshmem_compat.h \
	mpi-plugin/ucx/uct_ivshmem_md.c \
	mpi-plugin/ucx/uct_ivshmem_iface.c \
	mpi-plugin/ucx/uct_ivshmem_ep.c \
	mpi-plugin/ucx/uct_ivshmem_event.c \
	mpi-plugin/ucx/uct_ivshmem_mem.c \
	mpi-plugin/ucx/uct_ivshmem_rma.c
if HAVE_UCX
lib_LTLIBRARIES += mpi-plugin/ucx/libuct_ivshmem.la
mpi_plugin_ucx_libuct_ivshmem_la_SOURCES = $(UCT_IVSHMEM_SRCS)
# UCX's headers are not -Wextra clean: read them as system headers
mpi_plugin_ucx_libuct_ivshmem_la_CPPFLAGS = -I$(top_srcdir)/libivshm/include \
	-isystem $(UCX_SRC)/src
mpi_plugin_ucx_libuct_ivshmem_la_CFLAGS = $(AM_CFLAGS) -pthread $(IVSHM_LTO_CFLAGS)
mpi_plugin_ucx_libuct_ivshmem_la_LDFLAGS = -module -avoid-version -shared \
	-Wl,-z,defs -Wl,--exclude-libs,ALL -pthread $(IVSHM_LTO_LDFLAGS)
mpi_plugin_ucx_libuct_ivshmem_la_LIBADD = $(IVSHM_CORE_FOR_COMPONENTS) \
	-luct -lucs -ldl
else
EXTRA_DIST += $(UCT_IVSHMEM_SRCS)
endif
