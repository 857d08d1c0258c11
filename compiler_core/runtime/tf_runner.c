/* tf_runner: run a Tensorforge model.so on raw input files, write raw output files.
 *
 * The native runner for artifacts of another architecture, run under user-mode emulation
 * (compiler_core/runtime/emulation.py builds it with the target's cross gcc and runs it as
 * `qemu-<arch> -L /usr/<arch>-linux-gnu tf_runner ...`). It knows nothing of meta.json: the
 * caller passes every tensor's byte size, read from meta.json, and the runner checks each
 * input file against it before anything runs.
 *
 * usage: tf_runner MODEL.so THREADS RUNS NIN NOUT (IN_FILE BYTES){NIN} (OUT_FILE BYTES){NOUT}
 * stdout: one "run_ms <milliseconds>" line per run; "model_error <k>" when the model returns k.
 * exit status: 0 done, 2 bad usage or I/O (message on stderr), 3 the model returned an error.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

typedef int (*run_fn)(const void *const *, void *const *, void *);
typedef size_t (*size_fn)(void);
typedef int (*threads_fn)(int);

static void die(const char *what, const char *detail) {
    fprintf(stderr, "tf_runner: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
    exit(2);
}

static long long parse_count(const char *text, const char *what) {
    char *end = NULL;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno || end == text || *end || v < 0) die(what, text);
    return v;
}

/* 64-byte aligned, never zero-sized (a tensor may be empty). */
static void *alloc64(long long bytes) {
    size_t n = ((size_t)bytes + 63) / 64 * 64;
    void *p = aligned_alloc(64, n ? n : 64);
    if (!p) die("out of memory", NULL);
    return p;
}

static void *read_input(const char *path, long long bytes) {
    struct stat st;
    if (stat(path, &st) != 0) die("cannot open input", path);
    if ((long long)st.st_size != bytes) {
        fprintf(stderr, "tf_runner: %s has %lld bytes, the model expects %lld\n", path,
                (long long)st.st_size, bytes);
        exit(2);
    }
    void *buf = alloc64(bytes);
    FILE *f = fopen(path, "rb");
    if (!f || fread(buf, 1, (size_t)bytes, f) != (size_t)bytes) die("cannot read input", path);
    fclose(f);
    return buf;
}

static void write_output(const char *path, const void *buf, long long bytes) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(buf, 1, (size_t)bytes, f) != (size_t)bytes || fclose(f) != 0)
        die("cannot write output", path);
}

static void *symbol(void *lib, const char *name) {
    void *p = dlsym(lib, name);
    if (!p) die("model.so lacks the entry point", name);
    return p;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int main(int argc, char **argv) {
    if (argc < 6) die("usage: tf_runner MODEL.so THREADS RUNS NIN NOUT (FILE BYTES)...", NULL);
    int threads = (int)parse_count(argv[2], "bad THREADS");
    long long runs = parse_count(argv[3], "bad RUNS");
    long long nin = parse_count(argv[4], "bad NIN"), nout = parse_count(argv[5], "bad NOUT");
    if (argc != 6 + 2 * (nin + nout)) die("expected a FILE BYTES pair per input and output", NULL);
    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) die("cannot load the model", dlerror());
    run_fn run = (run_fn)symbol(lib, "tf_run_with_arena");
    ((threads_fn)symbol(lib, "tf_set_num_threads"))(threads);
    void *arena = alloc64((long long)((size_fn)symbol(lib, "tf_arena_size"))());
    const void **ins = calloc((size_t)nin + 1, sizeof(void *));
    void **outs = calloc((size_t)nout + 1, sizeof(void *));
    long long *out_bytes = calloc((size_t)nout + 1, sizeof(long long));
    if (!ins || !outs || !out_bytes) die("out of memory", NULL);
    char **pair = argv + 6;
    for (long long i = 0; i < nin; i++, pair += 2)
        ins[i] = read_input(pair[0], parse_count(pair[1], "bad input BYTES"));
    for (long long i = 0; i < nout; i++)
        outs[i] = alloc64(out_bytes[i] = parse_count(pair[2 * i + 1], "bad output BYTES"));
    for (long long r = 0; r < runs; r++) {
        double t0 = now_ms();
        int rc = run(ins, outs, arena);
        if (rc != 0) {
            printf("model_error %d\n", rc);
            return 3;
        }
        printf("run_ms %.6f\n", now_ms() - t0);
    }
    for (long long i = 0; i < nout; i++) write_output(pair[2 * i], outs[i], out_bytes[i]);
    return 0;
}
