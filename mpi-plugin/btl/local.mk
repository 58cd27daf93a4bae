# BTL ivshmem (mca_btl_ivshmem.so): the region route between co-resident
# VMs and the verbs route to other hosts, with libivshm linked in
# statically. Layout as in Open MPI's btl/vader: component (parameters,
# set-up, progress), module (peers, delivery), send, rdma (single copy).
BTL_IVSHMEM_SRCS = mpi-plugin/btl/btl_ivshmem.h \
	mpi-plugin/btl/btl_ivshmem_component.c \
	mpi-plugin/btl/btl_ivshmem_module.c \
	mpi-plugin/btl/btl_ivshmem_send.c \
	mpi-plugin/btl/btl_ivshmem_rdma.c \
	mpi-plugin/btl/btl_ivshmem_heap.c \
	mpi-plugin/btl/btl_ivshmem_lock.h mpi-plugin/btl/btl_ivshmem_lock.c \
	mpi-plugin/btl/btl_ivshmem_handle.h mpi-plugin/btl/btl_ivshmem_rx.h
BTL_IVSHMEM_VERBS_SRCS = mpi-plugin/btl/btl_ivshmem_verbs.h \
	mpi-plugin/btl/btl_ivshmem_credit.h \
	mpi-plugin/btl/btl_ivshmem_verbs_device.c \
	mpi-plugin/btl/btl_ivshmem_verbs.c \
	mpi-plugin/btl/btl_ivshmem_verbs_module.c
if HAVE_OMPI
noinst_LTLIBRARIES += mpi-plugin/btl/libbtl-ivshmem.la
mpi_plugin_btl_libbtl_ivshmem_la_SOURCES = $(BTL_IVSHMEM_SRCS)
mpi_plugin_btl_libbtl_ivshmem_la_CPPFLAGS = $(OMPI_COMPONENT_CPPFLAGS)
if HAVE_VERBS
mpi_plugin_btl_libbtl_ivshmem_la_SOURCES += $(BTL_IVSHMEM_VERBS_SRCS)
mpi_plugin_btl_libbtl_ivshmem_la_CPPFLAGS += -DIVSHMEM_HAVE_VERBS=1
else
EXTRA_DIST += $(BTL_IVSHMEM_VERBS_SRCS)
endif
# link-time optimisation where configure found it: the channel's send is
# inlined into sendi (docs/channels.md, "The channel inlined into the
# components")
mpi_plugin_btl_libbtl_ivshmem_la_CFLAGS = $(OMPI_COMPONENT_CFLAGS) $(IVSHM_LTO_CFLAGS)
ompicomponent_LTLIBRARIES += mpi-plugin/btl/mca_btl_ivshmem.la
mpi_plugin_btl_mca_btl_ivshmem_la_SOURCES =
# libivshm's symbols stay inside the component (as in the UCT module):
# its calls into the channel are direct, not through the PLT, and nothing
# else binds to this copy (ivshm_locate_v1 is the component's own)
mpi_plugin_btl_mca_btl_ivshmem_la_LDFLAGS = $(OMPI_COMPONENT_LDFLAGS) \
	-Wl,--exclude-libs,libivshm-core.a:libivshm-core-lto.a $(IVSHM_LTO_LDFLAGS)
mpi_plugin_btl_mca_btl_ivshmem_la_LIBADD = mpi-plugin/btl/libbtl-ivshmem.la \
	$(IVSHM_CORE_FOR_COMPONENTS) $(OPAL_LIBS) $(VERBS_LIBS) -ldl
ompihelpdir = $(OMPI_HELPDIR)
dist_ompihelp_DATA = mpi-plugin/btl/help-mpi-btl-ivshmem.txt
else
EXTRA_DIST += $(BTL_IVSHMEM_SRCS) $(BTL_IVSHMEM_VERBS_SRCS) \
	mpi-plugin/btl/help-mpi-btl-ivshmem.txt
endif
