/* check.h: the assertion macros of kiln's C test programs. CHECK records a failure and goes on;
 * XFAIL marks a known bug (cond states the correct behaviour and is expected false today: a bug
 * that gets fixed fails the test until the XFAIL becomes a CHECK). main returns failures != 0. */
#ifndef KL_TEST_CHECK_H
#define KL_TEST_CHECK_H
#include <stdio.h>

static int failures;
#define CHECK(cond, ...)                                    \
  do {                                                      \
    if (!(cond)) {                                          \
      failures++;                                           \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                         \
      fputc('\n', stderr);                                  \
    }                                                       \
  } while (0)
#endif
