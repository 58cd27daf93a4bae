/*
 * The build configuration of the UCX this transport is compiled against,
 * as UCX's own config.h would give it: UCX's internal headers change their
 * structures and inline code with these macros, so they must say what the
 * installed libuct/libucs were built with. These are Debian 12's
 * (debian/rules of ucx 1.13.1: --enable-mt --disable-logging, assertions
 * and parameter checks at their defaults, no statistics, no debug data).
 * Included ahead of every unit of mpi-plugin/ucx (and by configure's test
 * compile); configure refuses sources of another version than the
 * installed UCX.
 */
#ifndef UCT_IVSHMEM_BUILD_H
#define UCT_IVSHMEM_BUILD_H

#define ENABLE_MT 1
#define ENABLE_ASSERT 1
#define ENABLE_PARAMS_CHECK 1
#define ENABLE_DEBUG_DATA 0
/* --disable-logging keeps messages up to debug level (src/ucs/configure.m4) */
#define UCS_MAX_LOG_LEVEL UCS_LOG_LEVEL_DEBUG
/* ENABLE_STATS stays undefined: statistics are off in Debian's build */

#endif
