#ifndef DOT_H
#define DOT_H
#ifdef __cplusplus
extern "C" {
#endif
/* The dot product of two int8 vectors, accumulated in 32 bits (a matmul's inner loop). */
int dot_s8(const signed char *a, const signed char *b, int n);
#ifdef __cplusplus
}
#endif
#endif
