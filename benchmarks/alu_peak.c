/* Register-only multiply-accumulate loops, one per instruction sequence an FP32 or INT8
 * kernel of qbench (or of its peers) is built from. Each loop keeps its accumulators in
 * registers (one inline-asm statement per accumulator, so the compiler can neither hoist nor
 * merge them) and runs long enough to time with a monotonic clock. Prints one line per
 * sequence this CPU can run: "name macs_per_second". Driven by alu_peak.py. */
#include <immintrin.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define LOOPS 100000000L

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

typedef float v8f __attribute__((vector_size(32)));
typedef float v16f __attribute__((vector_size(64)));

/* One accumulator acc (operand c) updated by BODY; t is scratch; a, b, one are the operands.
 * R is the register class: "x" for ymm (AVX2), "v" for zmm (AVX-512). */
#define UPD(acc, BODY, R) \
    __asm__ volatile(BODY : [c] "+" R(acc), [t] "=&" R(t) : [a] R(a), [b] R(b), [one] R(one))

/* A timed loop: 10 accumulators of vector type V in register class R, each updated by BODY
 * (macs_per_op multiply-accumulates) once per iteration; compiled for the ISA isa. */
#define LOOP(isa, V, R, name, macs_per_op, BODY)                                    \
    __attribute__((target(isa), noinline)) static double name(void) {              \
        V a = {1}, b = {1}, one = {1}, c0 = {0}, c1 = c0, c2 = c0, c3 = c0;         \
        V c4 = c0, c5 = c0, c6 = c0, c7 = c0, c8 = c0, c9 = c0;                    \
        V t;                                                                        \
        double start = now();                                                       \
        for (long i = 0; i < LOOPS; i++) {                                          \
            UPD(c0, BODY, R); UPD(c1, BODY, R); UPD(c2, BODY, R); UPD(c3, BODY, R); \
            UPD(c4, BODY, R); UPD(c5, BODY, R); UPD(c6, BODY, R); UPD(c7, BODY, R); \
            UPD(c8, BODY, R); UPD(c9, BODY, R);                                     \
        }                                                                           \
        double seconds = now() - start;                                             \
        volatile V sink = c0 + c1 + c2 + c3 + c4 + c5 + c6 + c7 + c8 + c9;         \
        (void)sink; (void)t; (void)a; (void)b; (void)one;                           \
        return 10.0 * LOOPS * (macs_per_op) / seconds;                              \
    }
#define YMM_LOOP(name, macs, BODY) LOOP("avx2,fma", v8f, "x", name, macs, BODY)
#define YMM_LOOP_FOR(isa, name, macs, BODY) LOOP(isa, v8f, "x", name, macs, BODY)
#define ZMM_LOOP(name, macs, BODY) \
    LOOP("avx512f,avx512bw,avx512vnni", v16f, "v", name, macs, BODY)

/* FP32: one FMA, 8 or 16 MACs. */
YMM_LOOP(fma_ymm, 8, "vfmadd231ps %[b], %[a], %[c]")
ZMM_LOOP(fma_zmm, 16, "vfmadd231ps %[b], %[a], %[c]")
/* Exact int16 pairs (qbench's avx2 / avx512bw paths): vpmaddwd + vpaddd, 16 or 32 MACs. */
YMM_LOOP(pmaddwd_ymm, 16, "vpmaddwd %[b], %[a], %[t]\n\tvpaddd %[t], %[c], %[c]")
ZMM_LOOP(pmaddwd_zmm, 32, "vpmaddwd %[b], %[a], %[t]\n\tvpaddd %[t], %[c], %[c]")
/* uint8 x int8 pairs saturating at int16 (FBGEMM's AVX2 path, which needs reduce_range):
 * vpmaddubsw + vpmaddwd by ones + vpaddd, 32 MACs. */
YMM_LOOP(pmaddubsw_ymm, 32,
         "vpmaddubsw %[b], %[a], %[t]\n\tvpmaddwd %[one], %[t], %[t]\n\tvpaddd %[t], %[c], %[c]")
/* AVX-VNNI: one 256-bit vpdpbusd, 32 MACs. */
YMM_LOOP_FOR("avx2,avxvnni", vpdpbusd_ymm, 32, "%{vex%} vpdpbusd %[b], %[a], %[c]")
/* AVX-512 VNNI: one vpdpbusd, 64 MACs. */
ZMM_LOOP(vpdpbusd_zmm, 64, "vpdpbusd %[b], %[a], %[c]")

/* AMX: tdpbusd on 4 accumulator tiles of 16 x 16 int32 from A and B tiles of 16 rows of 64
 * bytes already loaded, 16 * 16 * 64 = 16384 MACs each. Linux gives a process the tile state
 * only on request (arch_prctl ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA): a CPU without AMX, or
 * a kernel that refuses, answers non-zero and the row is not printed. */
struct tile_config { unsigned char palette, start, reserved[14]; unsigned short colsb[16];
                     unsigned char rows[16]; };

static int amx_granted(void) { return syscall(SYS_arch_prctl, 0x1023, 18) == 0; }

__attribute__((target("amx-tile,amx-int8"), noinline)) static double tdpbusd_tile(void) {
    static unsigned char operands[1024] __attribute__((aligned(64)));
    struct tile_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) { cfg.colsb[t] = 64; cfg.rows[t] = 16; }
    _tile_loadconfig(&cfg);
    _tile_loadd(4, operands, 64); _tile_loadd(5, operands, 64);
    _tile_loadd(6, operands, 64); _tile_loadd(7, operands, 64);
    _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
    long loops = LOOPS / 10;
    double start = now();
    for (long i = 0; i < loops; i++) {
        _tile_dpbusd(0, 4, 6); _tile_dpbusd(1, 4, 7); _tile_dpbusd(2, 5, 6); _tile_dpbusd(3, 5, 7);
    }
    double seconds = now() - start;
    _tile_release();
    return 4.0 * loops * 16384 / seconds;
}

int main(void) {
    __builtin_cpu_init();
    printf("fma_ymm %.6e\n", fma_ymm());
    printf("pmaddwd_ymm %.6e\n", pmaddwd_ymm());
    printf("pmaddubsw_ymm %.6e\n", pmaddubsw_ymm());
    if (__builtin_cpu_supports("avxvnni"))
        printf("vpdpbusd_ymm %.6e\n", vpdpbusd_ymm());
    if (__builtin_cpu_supports("avx512bw")) {
        printf("fma_zmm %.6e\n", fma_zmm());
        printf("pmaddwd_zmm %.6e\n", pmaddwd_zmm());
    }
    if (__builtin_cpu_supports("avx512vnni"))
        printf("vpdpbusd_zmm %.6e\n", vpdpbusd_zmm());
    if (amx_granted())
        printf("tdpbusd_tile %.6e\n", tdpbusd_tile());
    return 0;
}
