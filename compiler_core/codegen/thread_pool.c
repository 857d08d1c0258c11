/* The thread pool that runs a compiled model's parallel loops (codegen/parallel.py), linked
 * into every model library that has them.
 *
 *     void tf_parallel_for(tf_chunk_fn fn, void *ctx, int64_t start, int64_t stop, int threads);
 *
 * runs fn(ctx, lo, hi) over chunks that cover [start, stop) once each, on `threads` threads
 * (the caller's one of them), and returns when every chunk is done.
 *
 * Why not libgomp's GOMP_parallel: its team ends at a barrier that waits for every thread,
 * so when another process holds one of the CPUs (a second job's compile on the same
 * worker, another tenant), every region waits for the thread that shares it with that
 * process while the others idle. AMD EPYC (LLVM: znver5), 2 CPUs, ResNet-50 at 2 threads
 * beside a busy loop pinned to one CPU: libgomp median 64.0 ms, 90th percentile 186.7 ms
 * (124.4 at the 75th); this pool 57.1 and 63.8 (1 thread: 44.9 either way).
 *
 * Here each thread owns the contiguous run of the items that static scheduling gives it
 * (so a thread reads in one kernel what it wrote in the previous one), claims it chunk by
 * chunk, and when its own run is claimed takes chunks of the others' runs: a thread that
 * does not turn up leaves its items to the others, and the caller waits only for chunks
 * that were claimed and are being run.
 *
 * A run's claim word is a ticket: the job's tag above TAG_SHIFT, the next unclaimed item
 * below. Claims are compare-and-swaps on it, so a thread still looking at a finished job
 * (its fields since rewritten for the next one) cannot claim: the caller closes every
 * ticket with the next job's tag before it rewrites the fields, and opens them after.
 */
#define _GNU_SOURCE
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

typedef void (*tf_chunk_fn)(void *ctx, int64_t lo, int64_t hi);

#define MAX_THREADS 64
/* the tag is the whole job count: a thread would have to stall mid-claim for 2^32 jobs
 * (half an hour of back-to-back regions) to see its ticket value again */
#define TAG_SHIFT 32
#define INDEX_MASK ((UINT64_C(1) << TAG_SHIFT) - 1)
#define CLOSED INDEX_MASK
/* chunks per thread's run: small enough to share a late thread's run, few enough that a
 * loop of many tiny iterations makes few claims */
#define CHUNKS_PER_RUN 4
/* An idle worker spins this long for the next job before it sleeps: the parallel kernels
 * of one model run follow one another within microseconds, and a futex wake costs tens of
 * them on a VM (the caller does not wait for it: it starts on the items meanwhile). */
#define IDLE_SPIN_NS 200000L
/* The caller, waiting for claimed chunks, yields its CPU after this many spins (a worker
 * that shares its CPU gets to finish). */
#define JOIN_SPINS 4096
/* Kernels keep their scratch below 128 KiB (ir/loops.py MAX_SCRATCH_BYTES); as glibc's
 * default for new threads (8 MB where RLIMIT_STACK allows) but fixed, and small enough
 * that many loaded models' pools fit a child's address-space limit. */
#define WORKER_STACK_BYTES (4u << 20)

#if defined(__x86_64__)
#include <xmmintrin.h>
#define cpu_relax() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define cpu_relax() __asm__ __volatile__("yield" ::: "memory")
#else
#define cpu_relax() ((void)0)
#endif

struct run {                          /* one thread's items: [ticket's index, end) */
    _Atomic uint64_t ticket;
    _Atomic int64_t end;
    _Atomic int64_t grain;
} __attribute__((aligned(64)));

static struct {
    struct run run[MAX_THREADS];
    /* the job: one cache line, written by the caller once per job */
    _Atomic uint32_t job __attribute__((aligned(64)));  /* bumped per job: idle workers wait on it */
    _Atomic(tf_chunk_fn) fn;
    _Atomic(void *) ctx;
    _Atomic int sleepers;
    _Atomic int quit;
    _Atomic int64_t pending __attribute__((aligned(64)));  /* items not yet done */
    int team;                         /* threads of a job, the caller's included */
    int asked;                        /* the team asked for (more than could be started?) */
    uint32_t born;                    /* `job` when the workers were started */
    long idle_spin_ns;
    int fork_handler;
    pthread_t worker[MAX_THREADS];
} pool = {.team = 1, .asked = 1};

static long futex(_Atomic uint32_t *word, int op, uint32_t value) {
    return syscall(SYS_futex, (uint32_t *)word, op, value, NULL, NULL, 0);
}

static long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000L + t.tv_nsec;
}

/* Claims and runs chunks of job `job`: this thread's run first, then the others'. The
 * items done are counted off `pending` once per run visited, not per chunk: the count's
 * cache line is the one every thread writes. */
static void work(int self, uint32_t job) {
    uint64_t tag = (uint64_t)job << TAG_SHIFT;
    for (int i = 0; i < pool.team; i++) {
        struct run *r = &pool.run[(self + i) % pool.team];
        int64_t done = 0;
        uint64_t t = atomic_load_explicit(&r->ticket, memory_order_acquire);
        while ((t & ~INDEX_MASK) == tag) {  /* else a later job's: this one is all done */
            int64_t lo = (int64_t)(t & INDEX_MASK);
            int64_t end = atomic_load_explicit(&r->end, memory_order_relaxed);
            if (lo >= end)
                break;
            int64_t grain = atomic_load_explicit(&r->grain, memory_order_relaxed);
            int64_t hi = end - lo > grain ? lo + grain : end;
            tf_chunk_fn fn = atomic_load_explicit(&pool.fn, memory_order_relaxed);
            void *ctx = atomic_load_explicit(&pool.ctx, memory_order_relaxed);
            /* fails, reloading t, if anyone claimed or the job changed since t was read */
            if (!atomic_compare_exchange_weak_explicit(&r->ticket, &t, t + (uint64_t)(hi - lo),
                                                       memory_order_acq_rel,
                                                       memory_order_acquire))
                continue;
            fn(ctx, lo, hi);
            done += hi - lo;
            t = atomic_load_explicit(&r->ticket, memory_order_acquire);
        }
        if (done)
            atomic_fetch_sub_explicit(&pool.pending, done, memory_order_release);
        if ((t & ~INDEX_MASK) != tag)
            return;
    }
}

static uint32_t wait_for_job(uint32_t seen) {
    uint32_t job;
    long start = now_ns();
    for (unsigned n = 1;; n++) {
        if ((job = atomic_load_explicit(&pool.job, memory_order_acquire)) != seen)
            return job;
        cpu_relax();
        if ((n & 255) == 0 && now_ns() - start > pool.idle_spin_ns)
            break;
    }
    atomic_fetch_add(&pool.sleepers, 1);  /* seq_cst, against the caller's store of job */
    while ((job = atomic_load(&pool.job)) == seen)
        futex(&pool.job, FUTEX_WAIT_PRIVATE, seen);
    atomic_fetch_sub(&pool.sleepers, 1);
    return job;
}

static void *worker_main(void *arg) {
    int self = (int)(intptr_t)arg;
    uint32_t seen = pool.born;
#if defined(__x86_64__)
    /* denormals as zero, as in the caller's thread while the model runs (denormals.py);
     * a worker runs nothing else */
    _mm_setcsr(_mm_getcsr() | 0x8040);
#endif
    for (;;) {
        seen = wait_for_job(seen);
        if (atomic_load(&pool.quit))
            return NULL;
        work(self, seen);
    }
}

static void stop_workers(void) {
    if (pool.team <= 1)
        return;
    atomic_store(&pool.quit, 1);
    atomic_fetch_add(&pool.job, 1);
    futex(&pool.job, FUTEX_WAKE_PRIVATE, INT_MAX);
    for (int w = 1; w < pool.team; w++)
        pthread_join(pool.worker[w], NULL);
    atomic_store(&pool.quit, 0);
    pool.team = 1;
}

/* The child of a fork has the caller's thread only. */
static void forget_workers(void) {
    pool.team = 1;
    pool.asked = 1;
    atomic_store(&pool.sleepers, 0);
}

__attribute__((destructor)) static void tf_pool_unload(void) {
    stop_workers();  /* before the code the workers run is unmapped */
}

static int available_cpus(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0)
        return INT_MAX;
    return CPU_COUNT(&set);
}

/* A team of `threads`, or as many as could be started. */
static void ensure_team(int threads) {
    if (pool.asked == threads)
        return;
    stop_workers();
    pool.asked = threads;
    if (!pool.fork_handler)
        pool.fork_handler = pthread_atfork(NULL, NULL, forget_workers) == 0;
    /* more threads than CPUs: a spinning worker would take the CPU of the one it waits for */
    pool.idle_spin_ns = threads > available_cpus() ? 0 : IDLE_SPIN_NS;
    pool.born = atomic_load(&pool.job);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, WORKER_STACK_BYTES);
    int team = 1;
    while (team < threads &&
           pthread_create(&pool.worker[team], &attr, worker_main, (void *)(intptr_t)team) == 0)
        team++;
    pthread_attr_destroy(&attr);
    pool.team = team;
}

static void wait_until_done(void) {
    for (unsigned n = 1; atomic_load_explicit(&pool.pending, memory_order_acquire) != 0; n++) {
        if (n < JOIN_SPINS)
            cpu_relax();
        else
            sched_yield();
    }
}

__attribute__((visibility("hidden")))
void tf_parallel_for(tf_chunk_fn fn, void *ctx, int64_t start, int64_t stop, int threads) {
    int64_t total = stop - start;
    if (threads > MAX_THREADS)
        threads = MAX_THREADS;
    /* tickets hold item indexes below CLOSED */
    int shared = threads > 1 && total > 1 && start >= 0 && stop < (int64_t)CLOSED;
    if (shared)
        ensure_team(threads);
    if (!shared || pool.team <= 1) {
        fn(ctx, start, stop);
        return;
    }
    uint32_t job = atomic_load_explicit(&pool.job, memory_order_relaxed) + 1;
    uint64_t tag = (uint64_t)job << TAG_SHIFT;
    int team = pool.team;
    for (int t = 0; t < team; t++)  /* acquire: the fields' rewrite stays after it */
        atomic_exchange_explicit(&pool.run[t].ticket, tag | CLOSED, memory_order_acq_rel);
    atomic_store_explicit(&pool.fn, fn, memory_order_relaxed);
    atomic_store_explicit(&pool.ctx, ctx, memory_order_relaxed);
    atomic_store_explicit(&pool.pending, total, memory_order_relaxed);
    int64_t share = (total + team - 1) / team;
    for (int t = 0; t < team; t++) {
        int64_t lo = start + t * share < stop ? start + t * share : stop;
        int64_t hi = lo + share < stop ? lo + share : stop;
        int64_t grain = (hi - lo + CHUNKS_PER_RUN - 1) / CHUNKS_PER_RUN;
        atomic_store_explicit(&pool.run[t].end, hi, memory_order_relaxed);
        atomic_store_explicit(&pool.run[t].grain, grain > 0 ? grain : 1, memory_order_relaxed);
        atomic_store_explicit(&pool.run[t].ticket, tag | (uint64_t)lo, memory_order_release);
    }
    atomic_store(&pool.job, job);  /* seq_cst, against a worker's count of sleepers */
    if (atomic_load(&pool.sleepers))
        futex(&pool.job, FUTEX_WAKE_PRIVATE, INT_MAX);
    work(0, job);
    wait_until_done();
}
