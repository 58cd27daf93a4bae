// SPDX-License-Identifier: GPL-2.0
/*
 * ivshmem.ko: guest driver for QEMU's inter-VM shared memory device
 * (PCI 1af4:1110, ivshmem-plain and ivshmem-doorbell), part of libivshm.
 *
 * Each device becomes /dev/ivshmemN (see ivshmem_uapi.h for the interface).
 *
 * BAR2 is deliberately not requested: on kernels with
 * CONFIG_IO_STRICT_DEVMEM a busy region cannot be mapped through sysfs
 * resource2, and libivshm's pci: provider must keep working next to this
 * driver. Only BAR0 (the registers) is requested.
 *
 * Lifetime: the per-device state is the struct device's; every open file
 * holds a reference. When the PCI device goes away (unbind, hot unplug)
 * the user mappings are zapped, waiters get -ENODEV, and the state is
 * freed with the last file. The module itself cannot be unloaded while a
 * file is open or mapped (fops->owner).
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/cdev.h>
#include <linux/fs.h>
#include <linux/idr.h>
#include <linux/interrupt.h>
#include <linux/mm.h>
#include <linux/module.h>
#include <linux/pci.h>
#include <linux/poll.h>
#include <linux/slab.h>
#include <linux/uaccess.h>
#include <linux/version.h>
#include <linux/wait.h>

#include "ivshmem_uapi.h"

#define IVSHMEM_VENDOR 0x1af4
#define IVSHMEM_DEVICE 0x1110
#define IVSHMEM_MINORS 256

/* BAR0 registers */
#define REG_INTRMASK 0x00
#define REG_INTRSTATUS 0x04
#define REG_IVPOSITION 0x08
#define REG_DOORBELL 0x0c

/* BAR2 is host RAM: write-back is what the channels' ordering assumes (a
 * release store is a plain store only on write-back or uncached memory;
 * write-combined stores may pass each other). */
static char *bar2_map = "wb";
module_param(bar2_map, charp, 0444);
MODULE_PARM_DESC(bar2_map,
                 "memory type of BAR2 mappings: wb (default, needed for the "
                 "channels' ordering), uc (ordered, slow), wc (unordered: "
                 "refused by libivshm)");
static u32 bar2_flags = IVSHMEM_F_BAR2_WB;

static unsigned int max_vectors = IVSHMEM_MAX_VECTORS;
module_param(max_vectors, uint, 0444);
MODULE_PARM_DESC(max_vectors, "MSI-X vectors to enable per device (<= 64)");

struct ivshm_dev;

struct ivshm_vec {
    struct ivshm_dev *d;
    unsigned int index;
};

struct ivshm_dev {
    struct device dev; /* owns the lifetime of this struct */
    struct cdev cdev;
    struct pci_dev *pdev;
    int minor;
    void __iomem *regs;
    resource_size_t regs_start, regs_len;
    resource_size_t shm_start, shm_len;
    u32 ivposition;
    unsigned int nvec;
    u32 flags;
    struct ivshm_vec vec[IVSHMEM_MAX_VECTORS];
    atomic64_t count[IVSHMEM_MAX_VECTORS];
    wait_queue_head_t wq;

    struct mutex lock; /* protects everything below */
    bool gone;
    u64 claimed;
    struct list_head files;
};

struct ivshm_file {
    struct ivshm_dev *d;
    struct file *filp;
    struct list_head node;
    u64 mask;
    int claimed; /* vector claimed by this file, or -1 */
    u64 seen[IVSHMEM_MAX_VECTORS];
};

static dev_t ivshm_devt;
static struct class *ivshm_class;
static DEFINE_IDA(ivshm_ida);

static struct ivshm_dev *to_ivshm(struct device *dev)
{
    return container_of(dev, struct ivshm_dev, dev);
}

/* ---- interrupts ---- */

static irqreturn_t ivshm_msix_irq(int irq, void *arg)
{
    struct ivshm_vec *v = arg;

    atomic64_inc(&v->d->count[v->index]);
    wake_up_interruptible_all(&v->d->wq);
    return IRQ_HANDLED;
}

/* Revision 0 devices without MSI-X raise INTx and latch bit 0 of the
 * status register; reading it clears it. The line may be shared. */
static irqreturn_t ivshm_intx_irq(int irq, void *arg)
{
    struct ivshm_dev *d = arg;

    if (!(ioread32(d->regs + REG_INTRSTATUS) & 1))
        return IRQ_NONE;
    atomic64_inc(&d->count[0]);
    wake_up_interruptible_all(&d->wq);
    return IRQ_HANDLED;
}

static int ivshm_setup_irqs(struct ivshm_dev *d)
{
    struct pci_dev *pdev = d->pdev;
    int want = pci_msix_vec_count(pdev);
    int n, i, err;

    if (want > 0) {
        if (want > (int)max_vectors)
            want = max_vectors;
        if (want > IVSHMEM_MAX_VECTORS)
            want = IVSHMEM_MAX_VECTORS;
        n = pci_alloc_irq_vectors(pdev, 1, want, PCI_IRQ_MSIX);
        if (n < 0)
            return n;
        for (i = 0; i < n; i++) {
            d->vec[i].d = d;
            d->vec[i].index = i;
            err = request_irq(pci_irq_vector(pdev, i), ivshm_msix_irq, 0,
                              dev_name(&d->dev), &d->vec[i]);
            if (err) {
                while (--i >= 0)
                    free_irq(pci_irq_vector(pdev, i), &d->vec[i]);
                pci_free_irq_vectors(pdev);
                return err;
            }
        }
        d->nvec = n;
        d->flags |= IVSHMEM_F_DOORBELL;
        return 0;
    }
    /* Revision 0 with a non-zero IVPosition is configured for interrupts
     * but may lack MSI-X: fall back to INTx. Revision 1 ivshmem-plain has
     * no interrupts at all. */
    if (pdev->revision == 0 && d->ivposition != 0 && pdev->irq) {
        err = request_irq(pdev->irq, ivshm_intx_irq, IRQF_SHARED,
                          dev_name(&d->dev), d);
        if (err)
            return err;
        iowrite32(1, d->regs + REG_INTRMASK);
        d->nvec = 1;
        d->flags |= IVSHMEM_F_DOORBELL | IVSHMEM_F_INTX;
    }
    return 0;
}

static void ivshm_free_irqs(struct ivshm_dev *d)
{
    unsigned int i;

    if (d->flags & IVSHMEM_F_INTX) {
        iowrite32(0, d->regs + REG_INTRMASK);
        free_irq(d->pdev->irq, d);
    } else if (d->nvec) {
        for (i = 0; i < d->nvec; i++)
            free_irq(pci_irq_vector(d->pdev, i), &d->vec[i]);
        pci_free_irq_vectors(d->pdev);
    }
    d->nvec = 0;
}

/* ---- file operations ---- */

static int ivshm_open(struct inode *inode, struct file *filp)
{
    struct ivshm_dev *d = container_of(inode->i_cdev, struct ivshm_dev, cdev);
    struct ivshm_file *f;
    unsigned int i;

    f = kzalloc(sizeof(*f), GFP_KERNEL);
    if (!f)
        return -ENOMEM;
    mutex_lock(&d->lock);
    if (d->gone) {
        mutex_unlock(&d->lock);
        kfree(f);
        return -ENODEV;
    }
    get_device(&d->dev);
    f->d = d;
    f->filp = filp;
    f->claimed = -1;
    f->mask = d->nvec >= 64 ? ~0ULL : (1ULL << d->nvec) - 1;
    for (i = 0; i < d->nvec; i++)
        f->seen[i] = atomic64_read(&d->count[i]);
    list_add(&f->node, &d->files);
    mutex_unlock(&d->lock);
    filp->private_data = f;
    return nonseekable_open(inode, filp);
}

static int ivshm_release(struct inode *inode, struct file *filp)
{
    struct ivshm_file *f = filp->private_data;
    struct ivshm_dev *d = f->d;

    mutex_lock(&d->lock);
    if (f->claimed >= 0)
        d->claimed &= ~(1ULL << f->claimed);
    list_del(&f->node);
    mutex_unlock(&d->lock);
    kfree(f);
    put_device(&d->dev);
    return 0;
}

/* Interrupts on this file's vectors since it last read; updates seen. */
static u64 ivshm_take_events(struct ivshm_file *f, bool consume)
{
    struct ivshm_dev *d = f->d;
    u64 total = 0;
    unsigned int i;

    for (i = 0; i < d->nvec; i++) {
        u64 now;

        if (!(f->mask & (1ULL << i)))
            continue;
        now = atomic64_read(&d->count[i]);
        total += now - f->seen[i];
        if (consume)
            f->seen[i] = now;
    }
    return total;
}

static ssize_t ivshm_read(struct file *filp, char __user *buf, size_t len,
                          loff_t *ppos)
{
    struct ivshm_file *f = filp->private_data;
    struct ivshm_dev *d = f->d;
    u64 n;
    int err;

    if (len < sizeof(u64))
        return -EINVAL;
    if (!d->nvec)
        return -ENXIO; /* ivshmem-plain: there are no interrupts */
    for (;;) {
        if (READ_ONCE(d->gone))
            return -ENODEV;
        n = ivshm_take_events(f, true);
        if (n)
            break;
        if (filp->f_flags & O_NONBLOCK)
            return -EAGAIN;
        err = wait_event_interruptible(
            d->wq, READ_ONCE(d->gone) || ivshm_take_events(f, false));
        if (err)
            return err;
    }
    if (copy_to_user(buf, &n, sizeof(n)))
        return -EFAULT;
    return sizeof(n);
}

static __poll_t ivshm_poll(struct file *filp, poll_table *wait)
{
    struct ivshm_file *f = filp->private_data;
    struct ivshm_dev *d = f->d;

    poll_wait(filp, &d->wq, wait);
    if (READ_ONCE(d->gone))
        return EPOLLERR | EPOLLHUP;
    if (d->nvec && ivshm_take_events(f, false))
        return EPOLLIN | EPOLLRDNORM;
    return 0;
}

static long ivshm_ioctl(struct file *filp, unsigned int cmd, unsigned long arg)
{
    struct ivshm_file *f = filp->private_data;
    struct ivshm_dev *d = f->d;
    void __user *uarg = (void __user *)arg;
    long ret = 0;

    mutex_lock(&d->lock);
    if (d->gone) {
        ret = -ENODEV;
        goto out;
    }
    switch (cmd) {
    case IVSHMEM_IOC_INFO: {
        struct ivshmem_info info = {
            .shm_size = d->shm_len,
            .regs_offset = IVSHMEM_REGS_OFFSET,
            .ivposition = d->ivposition,
            .vectors = d->nvec,
            .flags = d->flags | bar2_flags,
            .revision = d->pdev->revision,
        };
        if (copy_to_user(uarg, &info, sizeof(info)))
            ret = -EFAULT;
        break;
    }
    case IVSHMEM_IOC_RING: {
        struct ivshmem_ring r;

        if (copy_from_user(&r, uarg, sizeof(r))) {
            ret = -EFAULT;
            break;
        }
        if (!(d->flags & IVSHMEM_F_DOORBELL)) {
            ret = -ENXIO;
            break;
        }
        /* the device ignores unknown peers and vectors (spec) */
        iowrite32(((u32)r.peer << 16) | r.vector, d->regs + REG_DOORBELL);
        break;
    }
    case IVSHMEM_IOC_CLAIM_VECTOR: {
        s32 want;
        unsigned int i;

        if (get_user(want, (s32 __user *)uarg)) {
            ret = -EFAULT;
            break;
        }
        if (!d->nvec) {
            ret = -ENXIO;
            break;
        }
        if (f->claimed >= 0) {
            ret = -EALREADY;
            break;
        }
        if (want >= 0) {
            if (want >= (s32)d->nvec) {
                ret = -EINVAL;
                break;
            }
            if (d->claimed & (1ULL << want)) {
                ret = -EBUSY;
                break;
            }
            i = want;
        } else {
            for (i = 0; i < d->nvec; i++)
                if (!(d->claimed & (1ULL << i)))
                    break;
            if (i == d->nvec) {
                ret = -EBUSY;
                break;
            }
        }
        d->claimed |= 1ULL << i;
        f->claimed = i;
        f->mask = 1ULL << i;
        f->seen[i] = atomic64_read(&d->count[i]);
        if (put_user((s32)i, (s32 __user *)uarg))
            ret = -EFAULT;
        break;
    }
    case IVSHMEM_IOC_SET_MASK: {
        u64 mask;
        unsigned int i;

        if (get_user(mask, (u64 __user *)uarg)) {
            ret = -EFAULT;
            break;
        }
        if (d->nvec < 64 && (mask >> d->nvec)) {
            ret = -EINVAL;
            break;
        }
        for (i = 0; i < d->nvec; i++)
            if ((mask & ~f->mask) & (1ULL << i))
                f->seen[i] = atomic64_read(&d->count[i]);
        f->mask = mask;
        break;
    }
    default:
        ret = -ENOTTY;
    }
out:
    mutex_unlock(&d->lock);
    return ret;
}

static void ivshm_set_vm_flags(struct vm_area_struct *vma)
{
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 3, 0)
    vm_flags_set(vma, VM_IO | VM_PFNMAP | VM_DONTEXPAND | VM_DONTDUMP);
#else
    vma->vm_flags |= VM_IO | VM_PFNMAP | VM_DONTEXPAND | VM_DONTDUMP;
#endif
}

static int ivshm_mmap(struct file *filp, struct vm_area_struct *vma)
{
    struct ivshm_file *f = filp->private_data;
    struct ivshm_dev *d = f->d;
    unsigned long len = vma->vm_end - vma->vm_start;
    unsigned long off = vma->vm_pgoff << PAGE_SHIFT;
    resource_size_t start, avail;
    pgprot_t prot;
    int ret;

    if (!(vma->vm_flags & VM_SHARED))
        return -EINVAL; /* a private copy of shared memory is never wanted */
    mutex_lock(&d->lock);
    if (d->gone) {
        ret = -ENODEV;
        goto out;
    }
    if (off >= IVSHMEM_REGS_OFFSET) {
        /* BAR0 only where it fills whole pages (pci=resource_alignment):
         * otherwise the page would expose other devices' registers */
        ret = -EINVAL;
        if (!(d->flags & IVSHMEM_F_REGS_MMAP))
            goto out;
        off -= IVSHMEM_REGS_OFFSET;
        start = d->regs_start;
        avail = d->regs_len;
        prot = pgprot_noncached(vma->vm_page_prot);
    } else {
        start = d->shm_start;
        avail = d->shm_len;
        if (bar2_flags & IVSHMEM_F_BAR2_WB)
            prot = vma->vm_page_prot; /* cached: the x86 PAT keeps it WB */
        else if (bar2_flags & IVSHMEM_F_BAR2_WC)
            prot = pgprot_writecombine(vma->vm_page_prot);
        else
            prot = pgprot_noncached(vma->vm_page_prot);
    }
    ret = -EINVAL;
    if (off > avail || len > avail - off)
        goto out;
    ivshm_set_vm_flags(vma);
    vma->vm_page_prot = prot;
    ret = io_remap_pfn_range(vma, vma->vm_start, (start + off) >> PAGE_SHIFT,
                             len, vma->vm_page_prot);
out:
    mutex_unlock(&d->lock);
    return ret;
}

static const struct file_operations ivshm_fops = {
    .owner = THIS_MODULE,
    .open = ivshm_open,
    .release = ivshm_release,
    .read = ivshm_read,
    .poll = ivshm_poll,
    .unlocked_ioctl = ivshm_ioctl,
    .compat_ioctl = compat_ptr_ioctl,
    .mmap = ivshm_mmap,
    .llseek = no_llseek,
};

/* ---- sysfs attributes of /sys/class/ivshmem/ivshmemN ---- */

static ssize_t ivposition_show(struct device *dev,
                               struct device_attribute *attr, char *buf)
{
    return sysfs_emit(buf, "%u\n", to_ivshm(dev)->ivposition);
}
static DEVICE_ATTR_RO(ivposition);

static ssize_t shm_size_show(struct device *dev, struct device_attribute *attr,
                             char *buf)
{
    return sysfs_emit(buf, "%llu\n",
                      (unsigned long long)to_ivshm(dev)->shm_len);
}
static DEVICE_ATTR_RO(shm_size);

static ssize_t vectors_show(struct device *dev, struct device_attribute *attr,
                            char *buf)
{
    return sysfs_emit(buf, "%u\n", to_ivshm(dev)->nvec);
}
static DEVICE_ATTR_RO(vectors);

static ssize_t mode_show(struct device *dev, struct device_attribute *attr,
                         char *buf)
{
    return sysfs_emit(buf, "%s\n",
                      to_ivshm(dev)->flags & IVSHMEM_F_DOORBELL ? "doorbell"
                                                                : "plain");
}
static DEVICE_ATTR_RO(mode);

static struct attribute *ivshm_attrs[] = {
    &dev_attr_ivposition.attr, &dev_attr_shm_size.attr,
    &dev_attr_vectors.attr, &dev_attr_mode.attr, NULL};
ATTRIBUTE_GROUPS(ivshm);

/* ---- PCI driver ---- */

static void ivshm_dev_release(struct device *dev)
{
    struct ivshm_dev *d = to_ivshm(dev);

    ida_free(&ivshm_ida, d->minor);
    kfree(d);
}

static int ivshm_probe(struct pci_dev *pdev, const struct pci_device_id *id)
{
    struct ivshm_dev *d;
    int err, minor;

    d = kzalloc(sizeof(*d), GFP_KERNEL);
    if (!d)
        return -ENOMEM;
    minor = ida_alloc_max(&ivshm_ida, IVSHMEM_MINORS - 1, GFP_KERNEL);
    if (minor < 0) {
        kfree(d);
        return minor;
    }
    d->minor = minor;
    d->pdev = pdev;
    mutex_init(&d->lock);
    INIT_LIST_HEAD(&d->files);
    init_waitqueue_head(&d->wq);
    device_initialize(&d->dev);
    d->dev.class = ivshm_class;
    d->dev.parent = &pdev->dev;
    d->dev.devt = MKDEV(MAJOR(ivshm_devt), minor);
    d->dev.groups = ivshm_groups;
    d->dev.release = ivshm_dev_release;
    err = dev_set_name(&d->dev, "ivshmem%d", minor);
    if (err)
        goto put;

    err = pci_enable_device(pdev);
    if (err)
        goto put;
    if (!(pci_resource_flags(pdev, 0) & IORESOURCE_MEM) ||
        !(pci_resource_flags(pdev, 2) & IORESOURCE_MEM)) {
        dev_err(&pdev->dev, "BAR0 or BAR2 missing: not an ivshmem device\n");
        err = -ENODEV;
        goto disable;
    }
    err = pci_request_region(pdev, 0, KBUILD_MODNAME);
    if (err)
        goto disable;
    d->regs_start = pci_resource_start(pdev, 0);
    d->regs_len = pci_resource_len(pdev, 0);
    d->shm_start = pci_resource_start(pdev, 2);
    d->shm_len = pci_resource_len(pdev, 2);
    d->regs = pci_iomap(pdev, 0, 0);
    if (!d->regs) {
        err = -ENOMEM;
        goto release;
    }
    if (PAGE_ALIGNED(d->regs_start) && d->regs_len >= PAGE_SIZE)
        d->flags |= IVSHMEM_F_REGS_MMAP;
    d->ivposition = ioread32(d->regs + REG_IVPOSITION);
    pci_set_master(pdev); /* MSI-X writes are bus-master writes */
    err = ivshm_setup_irqs(d);
    if (err) {
        dev_err(&pdev->dev, "cannot set up interrupts: %d\n", err);
        goto unmap;
    }

    cdev_init(&d->cdev, &ivshm_fops);
    d->cdev.owner = THIS_MODULE;
    err = cdev_device_add(&d->cdev, &d->dev);
    if (err)
        goto irqs;
    pci_set_drvdata(pdev, d);
    dev_info(&d->dev, "%s, %llu MiB shared memory, IVPosition %u, %u vector(s)\n",
             d->flags & IVSHMEM_F_DOORBELL ? "doorbell" : "plain",
             (unsigned long long)d->shm_len >> 20, d->ivposition, d->nvec);
    return 0;

irqs:
    ivshm_free_irqs(d);
unmap:
    pci_clear_master(pdev);
    pci_iounmap(pdev, d->regs);
release:
    pci_release_region(pdev, 0);
disable:
    pci_disable_device(pdev);
put:
    put_device(&d->dev);
    return err;
}

static void ivshm_remove(struct pci_dev *pdev)
{
    struct ivshm_dev *d = pci_get_drvdata(pdev);
    struct ivshm_file *f;

    mutex_lock(&d->lock);
    d->gone = true;
    /* the BARs are about to vanish: no user mapping may outlive them */
    list_for_each_entry(f, &d->files, node)
        unmap_mapping_range(f->filp->f_mapping, 0, 0, 1);
    mutex_unlock(&d->lock);
    wake_up_interruptible_all(&d->wq);
    /* the node goes only now: whoever sees /dev/ivshmemN gone finds its
     * mappings revoked (before, a reader could still touch the BAR in
     * between; open, mmap and ioctl check 'gone') */
    cdev_device_del(&d->cdev, &d->dev);
    ivshm_free_irqs(d);
    pci_clear_master(pdev);
    pci_iounmap(pdev, d->regs);
    pci_release_region(pdev, 0);
    pci_disable_device(pdev);
    put_device(&d->dev);
}

static const struct pci_device_id ivshm_ids[] = {
    {PCI_DEVICE(IVSHMEM_VENDOR, IVSHMEM_DEVICE)},
    {0},
};
MODULE_DEVICE_TABLE(pci, ivshm_ids);

static struct pci_driver ivshm_driver = {
    .name = KBUILD_MODNAME,
    .id_table = ivshm_ids,
    .probe = ivshm_probe,
    .remove = ivshm_remove,
};

static int __init ivshm_init(void)
{
    int err;

    if (max_vectors > IVSHMEM_MAX_VECTORS)
        max_vectors = IVSHMEM_MAX_VECTORS;
    if (!strcmp(bar2_map, "wb")) {
        bar2_flags = IVSHMEM_F_BAR2_WB;
    } else if (!strcmp(bar2_map, "wc")) {
        bar2_flags = IVSHMEM_F_BAR2_WC;
    } else if (!strcmp(bar2_map, "uc")) {
        bar2_flags = 0;
    } else {
        pr_err("ivshmem: bar2_map=%s: use wb, uc or wc\n", bar2_map);
        return -EINVAL;
    }
    err = alloc_chrdev_region(&ivshm_devt, 0, IVSHMEM_MINORS, "ivshmem");
    if (err)
        return err;
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 4, 0)
    ivshm_class = class_create("ivshmem");
#else
    ivshm_class = class_create(THIS_MODULE, "ivshmem");
#endif
    if (IS_ERR(ivshm_class)) {
        err = PTR_ERR(ivshm_class);
        goto chrdev;
    }
    err = pci_register_driver(&ivshm_driver);
    if (err)
        goto class;
    return 0;
class:
    class_destroy(ivshm_class);
chrdev:
    unregister_chrdev_region(ivshm_devt, IVSHMEM_MINORS);
    return err;
}

static void __exit ivshm_exit(void)
{
    pci_unregister_driver(&ivshm_driver);
    class_destroy(ivshm_class);
    unregister_chrdev_region(ivshm_devt, IVSHMEM_MINORS);
    ida_destroy(&ivshm_ida);
}

module_init(ivshm_init);
module_exit(ivshm_exit);

MODULE_LICENSE("GPL");
MODULE_AUTHOR("libivshm");
MODULE_DESCRIPTION("Inter-VM shared memory (ivshmem) guest driver for libivshm");
MODULE_VERSION("1.0");
