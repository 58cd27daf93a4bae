/*
 * coll ivshmem: user buffers as runs of packed bytes. Contiguous layouts
 * are copied with memcpy; any other layout through an Open MPI convertor
 * positioned at the byte offset, so that a step can take any slice.
 */
#include "coll_ivshmem.h"

#include "ompi/datatype/ompi_datatype.h"
#include "opal/datatype/opal_convertor.h"

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
}

/* the non-contiguous case: a convertor positioned at byte off */
static void convert(const civ_buf_t *b, size_t off, void *mem, size_t len,
                    bool pack)
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
    size_t pos = off, max = len;
    opal_convertor_set_position(&conv, &pos);
    struct iovec iov = {mem, len};
    uint32_t n = 1;
    if (pack)
        opal_convertor_pack(&conv, &iov, &n, &max);
    else
        opal_convertor_unpack(&conv, &iov, &n, &max);
    OBJ_DESTRUCT(&conv);
}

void civ_buf_block(civ_buf_t *b, const void *buf, int count,
                   ompi_datatype_t *dt, uint32_t i)
{
    ptrdiff_t lb, ext;
    ompi_datatype_get_extent(dt, &lb, &ext);
    civ_buf_init(b, (const char *)buf + (ptrdiff_t)i * count * ext,
                 (size_t)count, dt);
}

void civ_buf_get(const civ_buf_t *b, size_t off, void *dst, size_t len)
{
    if (b->contig)
        memcpy(dst, b->base + off, len);
    else
        convert(b, off, dst, len, true);
}

void civ_buf_put(const civ_buf_t *b, size_t off, const void *src, size_t len)
{
    if (b->contig)
        memcpy(b->base + off, src, len);
    else
        convert(b, off, (void *)src, len, false);
}
