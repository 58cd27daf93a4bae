/* The lines of a fast box without the channel: how close to the raw
 * cache-line ping-pong a ping-pong of 16-byte entries packed four to a
 * line (an 8-byte word that carries the entry's number, 8 bytes of data)
 * comes, measured in the same run as the raw ping-pong (medians of 101
 * batches of 2000 round trips, one way, ns). Options add what our box
 * does to its lines: -DTERM the terminator store after the entry before
 * its publish, -DZA zeroing line starts 256-384 bytes ahead, -DTAIL the
 * receiver's tail store per entry, -DNEXT the receiver's look at the next
 * entry's word after it took one (as the usual poll's loop does). The raw
 * ping-pong is ivshm-lat's (benchmarks/ivshm_perf.c), repeated here so that
 * this file builds alone. A measuring tool of
 * benchmarks/results/2026-12-03-standing, not part of the project.
 *   gcc -O2 [-DTERM] [-DZA] [-DTAIL] [-DNEXT] minpp.c -o minpp
 *   ./minpp CPU0 CPU1      (exits if it cannot pin to both) */
#define _GNU_SOURCE
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#define RING 4096
#define ENT 16
static uint64_t now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1000000000ull+t.tv_nsec;}
static void pin(int c){cpu_set_t s;CPU_ZERO(&s);CPU_SET(c,&s);
  if(sched_setaffinity(0,sizeof s,&s)){perror("minpp: pin");exit(1);}}
struct ring { char *base; uint64_t pos; _Atomic uint64_t *tail; };
static char rbuf[64], sbuf[64];
static volatile uint64_t got;
static volatile uint64_t sink;
static inline void send1(struct ring *r, const char *p, uint32_t len){
  uint32_t off = r->pos % RING; char *at = r->base + off;
  memcpy(at + 8, p, len);
#ifdef TERM
  if (off + ENT < RING) atomic_store_explicit((_Atomic uint64_t *)(at+ENT), 0, memory_order_relaxed);
#endif
  atomic_store_explicit((_Atomic uint64_t *)at, r->pos / ENT + 1, memory_order_release);
  r->pos += ENT;
#ifdef ZA
  if (((r->pos) & 127) == 0) for (uint64_t x = r->pos + 256; x < r->pos + 384; x += 64) if ((x % RING) != 0 && (x%RING) > off) atomic_store_explicit((_Atomic uint64_t *)(r->base + x % RING), 0, memory_order_relaxed);
#endif
}
static inline int poll1(struct ring *r){
  uint32_t off = r->pos % RING; char *at = r->base + off;
  uint64_t w = atomic_load_explicit((_Atomic uint64_t *)at, memory_order_acquire);
  if (w != r->pos / ENT + 1) return 0;
  memcpy(rbuf, at + 8, 8); got++;
  r->pos += ENT;
#ifdef TAIL
  atomic_store_explicit(r->tail, r->pos, memory_order_release);
#endif
#ifdef NEXT
  { char *nx = r->base + r->pos % RING;
    uint64_t w2 = atomic_load_explicit((_Atomic uint64_t *)nx, memory_order_acquire);
    if (w2 == r->pos / ENT + 1) { sink += w2; } }
#endif
  return 1;
}
static int cmpd(const void*a,const void*b){double x=*(double*)a,y=*(double*)b;return (x>y)-(x<y);}
int main(int argc,char**argv){
  if(argc!=3){fprintf(stderr,"usage: minpp CPU0 CPU1\n");return 2;}
  int c0=atoi(argv[1]), c1=atoi(argv[2]);
  char *m = mmap(0, 3*RING+4096, PROT_READ|PROT_WRITE, MAP_SHARED|MAP_ANONYMOUS, -1, 0);
  memset(m,0,3*RING+4096);
  _Atomic uint64_t *a=(void*)(m+2*RING), *b=(void*)(m+2*RING+128);
  pid_t ch=fork(); int id = ch==0;
  pin(id?c1:c0);
  struct ring tx={m+(id?RING:0),0,0}, rx={m+(id?0:RING),0,(void*)(m+2*RING+1024+(id?0:512))};
  double v[101], vr[101];
  for (int pass=0; pass<2; pass++){
  uint64_t i=1;
  for(int bt=0;bt<101;bt++){ uint64_t t0=now();
    for(int it=0;it<2000;it++,i++){ if(!id){atomic_store_explicit(a,i,memory_order_release);while(atomic_load_explicit(b,memory_order_acquire)!=i);} else {while(atomic_load_explicit(a,memory_order_acquire)!=i);atomic_store_explicit(b,i,memory_order_release);} }
    vr[bt]=(double)(now()-t0)/4000; }
  for(int bt=0;bt<101;bt++){ uint64_t t0=now();
    for(int it=0;it<2000;it++){ if(!id){send1(&tx,sbuf,8); uint64_t w=got+1; while(got<w) poll1(&rx);} else { uint64_t w=got+1; while(got<w) poll1(&rx); send1(&tx,sbuf,8);} }
    v[bt]=(double)(now()-t0)/4000; }
  }
  if(!id){ qsort(v,101,8,cmpd); qsort(vr,101,8,cmpd); printf("raw %.1f  min-chan %.1f  x%.2f\n", vr[50], v[50], v[50]/vr[50]); wait(0);} 
  return 0;
}
