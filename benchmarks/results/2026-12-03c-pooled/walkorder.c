/* walkorder: the raw ping-pong of ivshm-lat in six variants, interleaved
 * per round (written by the review of 7eacb91): one pair with and without
 * a division on the path, a walk of 64 pairs 256 bytes apart in ascending
 * order with and without it, the same pairs in a scrambled order (step 37),
 * and linepp.c's layout (pairs 64 KiB apart). Median of 101 batches, ns.
 *   gcc -O2 -o walkorder walkorder.c && ./walkorder CPU_A CPU_B [rounds]
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
static uint64_t now_ns(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return (uint64_t)t.tv_sec*1000000000u+(uint64_t)t.tv_nsec;}
static int cmpd(const void*a,const void*b){double x=*(const double*)a,y=*(const double*)b;return (x>y)-(x<y);}
#define NB 101
#define BT 200
static uint64_t seq; static int id;
static char *offs[64];
/* mode 0: div like the commit; 1: pointer table, no div */
__attribute__((noinline)) static double run(int pairs, int mode)
{
    double v[NB];
    for (int bt=0;bt<NB;bt++){
        uint64_t t0=now_ns();
        for(int it=0;it<BT;it++){
            uint64_t i=++seq; char *p;
            if(mode==0) p=offs[0]+(size_t)(i%(uint64_t)pairs)*256; else p=offs[i&(uint64_t)(pairs-1)];
            _Atomic uint64_t *a=(_Atomic uint64_t*)p,*b=(_Atomic uint64_t*)(p+128);
            if(id==0){atomic_store_explicit(a,i,memory_order_release);while(atomic_load_explicit(b,memory_order_acquire)!=i);}
            else{while(atomic_load_explicit(a,memory_order_acquire)!=i);atomic_store_explicit(b,i,memory_order_release);}
        }
        v[bt]=(double)(now_ns()-t0)/BT/2;
    }
    qsort(v,NB,sizeof v[0],cmpd); return v[NB/2];
}
static void pin(int c){cpu_set_t s;CPU_ZERO(&s);CPU_SET(c,&s);sched_setaffinity(0,sizeof s,&s);}
int main(int argc,char**argv){
    int rounds=argc>3?atoi(argv[3]):3;
    char *base=mmap(NULL,65*65536,PROT_READ|PROT_WRITE,MAP_SHARED|MAP_ANONYMOUS,-1,0);
    pid_t c=fork(); id=c==0; pin(atoi(argv[1+id]));
    const char *name[]={"1pair div(commit)","1pair nodiv(old)","walk256 div(commit)","walk256 nodiv","walk256 shuffled nodiv","walk linepp-layout nodiv"};
    double r[6][16];
    for(int rd=0;rd<rounds;rd++){
      for(int m=0;m<6;m++){
        int pairs=m<2?1:64, mode=(m==0||m==2)?0:1;
        for(int k=0;k<64;k++){
            if(m==5) offs[k]=base+(size_t)k*65536+64*(k%64);
            else if(m==4) offs[k]=base+(size_t)((k*37)%64)*256;
            else offs[k]=base+(size_t)k*256;
        }
        run(pairs,mode); r[m][rd]=run(pairs,mode);
      }
    }
    if(id==0){for(int m=0;m<6;m++){printf("%-26s",name[m]);for(int rd=0;rd<rounds;rd++)printf(" %7.1f",r[m][rd]);printf("\n");}waitpid(c,0,0);}
    return 0;
}
