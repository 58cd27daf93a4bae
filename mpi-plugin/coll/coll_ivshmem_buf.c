/*
 * coll ivshmem: user buffers as runs of packed bytes. A contiguous layout
 * is used in place; any other is staged: packed whole into private memory
 * (an input), or unpacked whole from it at the end (an output), through an
 * Open MPI convertor. Steps then cut the packed bytes anywhere, also in
 * the middle of an element, alike on every rank (ranks may describe the
 * same bytes with different datatypes).
 */
#include "coll_ivshmem.h"

#include "ompi/datatype/ompi_datatype.h"
#include "ompi/constants.h"
#include "opal/datatype/opal_convertor.h"

#include <stdlib.h>
#include <string.h>

void civ_buf_init(civ_buf_t *b, const void *buf, size_t count,
                  ompi_datatype_t *dt)
{
    size_t sz = 0;
    ptrdiff_t lb = 0, ext = 0;
    ompi_datatype_type_size(dt, &sz);
    ompi_datatype_get_true_extent(dt, &lb, &ext);
    b->user = buf;
    b->base = (char *)buf + lb;
    b->dt = dt;
    b->count = count;
    b->bytes = sz * count;
    b->contig = ompi_datatype_is_contiguous_memory_layout(dt, (int32_t)count);
    b->staged = NULL;
}

/* the whole buffer to or from its packed bytes */
static void convert(const civ_buf_t *b, void *mem, bool pack)
{
    opal_convertor_t conv;
    OBJ_CONSTRUCT(&conv, opal_convertor_t);
    if (pack)
        opal_convertor_copy_and_prepare_for_send(ompi_mpi_local_convertor,
                                                 &b->dt->super, b->count,
                                                 b->user, 0, &conv);
    else
        opal_convertor_copy_and_prepare_for_recv(ompi_mpi_local_convertor,
                                                 &b->dt->super, b->count,
                                                 b->user, 0, &conv);
    size_t max = b->bytes;
    struct iovec iov = {mem, b->bytes};
    uint32_t n = 1;
    if (pack)
        opal_convertor_pack(&conv, &iov, &n, &max);
    else
        opal_convertor_unpack(&conv, &iov, &n, &max);
    OBJ_DESTRUCT(&conv);
}

int civ_buf_stage(civ_buf_t *b, bool fill)
{
    b->staged = NULL;
    if (b->contig)
        return OMPI_SUCCESS;
    b->staged = malloc(b->bytes ? b->bytes : 1);
    if (!b->staged)
        return OMPI_ERR_OUT_OF_RESOURCE;
    if (fill)
        convert(b, b->staged, true);
    b->base = b->staged;
    return OMPI_SUCCESS;
}

void civ_buf_unstage(civ_buf_t *b, bool write_back)
{
    if (!b->staged)
        return;
    if (write_back)
        convert(b, b->staged, false);
    free(b->staged);
    b->staged = NULL;
}

int civ_buf_stage_io(civ_buf_t *in, const void *sbuf, size_t scount,
                     ompi_datatype_t *sdt, civ_buf_t *out, bool in_place)
{
    int rc = civ_buf_stage(out, in_place); /* in place: its bytes are input */
    if (rc != OMPI_SUCCESS || in_place)
        return rc;
    civ_buf_init(in, sbuf, scount, sdt);
    rc = civ_buf_stage(in, true);
    if (rc != OMPI_SUCCESS)
        civ_buf_unstage(out, false);
    return rc;
}

void civ_buf_unstage_io(civ_buf_t *in, civ_buf_t *out, bool in_place, bool ok)
{
    if (!in_place)
        civ_buf_unstage(in, false);
    civ_buf_unstage(out, ok);
}
