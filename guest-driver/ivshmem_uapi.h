/* SPDX-License-Identifier: (GPL-2.0 WITH Linux-syscall-note) OR MIT */
/*
 * User-space interface of the libivshm guest driver (ivshmem.ko).
 *
 * One character device per ivshmem PCI device (1af4:1110): /dev/ivshmemN.
 *
 *   mmap(offset 0)                     BAR2, the shared memory
 *   mmap(offset IVSHMEM_REGS_OFFSET)   BAR0 register page, only where
 *                                      info.flags has IVSHMEM_F_REGS_MMAP
 *   read(8 bytes)                      blocks until a doorbell interrupt
 *                                      arrived on one of this file's
 *                                      vectors; returns the number of
 *                                      interrupts since the last read
 *   poll()                             POLLIN when read would not block,
 *                                      POLLERR|POLLHUP once the device is gone
 *   ioctl(IVSHMEM_IOC_INFO)            size, IVPosition, vectors, flags
 *   ioctl(IVSHMEM_IOC_RING)            interrupt vector V of peer P
 *   ioctl(IVSHMEM_IOC_CLAIM_VECTOR)    take one vector for this file alone
 *                                      (released on close)
 *   ioctl(IVSHMEM_IOC_SET_MASK)        listen to a set of vectors
 */
#ifndef IVSHMEM_UAPI_H
#define IVSHMEM_UAPI_H

#include <linux/ioctl.h>
#include <linux/types.h>

#define IVSHMEM_MAX_VECTORS 64
/* mmap offset that selects the register page (BAR0) */
#define IVSHMEM_REGS_OFFSET (1ULL << 40)

/* info.flags */
#define IVSHMEM_F_DOORBELL 0x1u   /* configured for interrupts (MSI-X) */
#define IVSHMEM_F_INTX 0x2u       /* legacy INTx (revision 0, no MSI-X) */
#define IVSHMEM_F_REGS_MMAP 0x4u  /* BAR0 fills whole pages: mmap allowed */
/* BAR2's memory type for mmap (module parameter bar2_map); neither bit:
 * uncached. The channels need write-back or uncached (ordered) memory. */
#define IVSHMEM_F_BAR2_WB 0x8u
#define IVSHMEM_F_BAR2_WC 0x10u

struct ivshmem_info {
    __u64 shm_size;    /* bytes of BAR2 */
    __u64 regs_offset; /* mmap offset of BAR0 (IVSHMEM_REGS_OFFSET) */
    __u32 ivposition;  /* this VM's peer id (0 without interrupts) */
    __u32 vectors;     /* interrupt vectors enabled */
    __u32 flags;
    __u32 revision;    /* PCI revision */
    __u32 reserved[4];
};

struct ivshmem_ring {
    __u16 peer;   /* IVPosition of the VM to interrupt */
    __u16 vector; /* its vector */
    __u32 reserved;
};

#define IVSHMEM_IOC_MAGIC 'v'
#define IVSHMEM_IOC_INFO _IOR(IVSHMEM_IOC_MAGIC, 1, struct ivshmem_info)
#define IVSHMEM_IOC_RING _IOW(IVSHMEM_IOC_MAGIC, 2, struct ivshmem_ring)
/* in: the vector wanted, or -1 for any free one; out: the vector */
#define IVSHMEM_IOC_CLAIM_VECTOR _IOWR(IVSHMEM_IOC_MAGIC, 3, __s32)
#define IVSHMEM_IOC_SET_MASK _IOW(IVSHMEM_IOC_MAGIC, 4, __u64)

#endif
