/* A small test runner: TEST(name) registers a test at load time; CHECK*
 * macros fail the current test (and return from it) with file:line. The
 * runner (tests/unit/main.c) prints one line per test and closes with
 * "N passed, N failed". Single-threaded. */
#ifndef DPM_TEST_H
#define DPM_TEST_H

#include <math.h>
#include <stdio.h>
#include <string.h>

typedef void (*dpm_test_fn)(void);
void dpm_test_register(const char *name, const char *file, dpm_test_fn fn);
void dpm_test_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int dpm_test_has_failed(void);
/* Records that a check measured an error of `measured` against its
 * tolerance `tol` (> 0; CHECK_NEAR and CHECK_WITHIN call it). The runner
 * prints each test's largest measured / tol and, at the end, the run's three
 * largest, so that a check that sits near its tolerance on this CPU shows
 * before another CPU's rounding fails it. */
void dpm_test_margin(const char *file, int line, double measured, double tol);

#define TEST(name)                                                                       \
  static void test_##name(void);                                                         \
  __attribute__((constructor)) static void register_##name(void) {                       \
    dpm_test_register(#name, __FILE__, test_##name);                                     \
  }                                                                                      \
  static void test_##name(void)

#define CHECK(c)                                                                         \
  do {                                                                                   \
    if (!(c)) {                                                                          \
      dpm_test_fail(__FILE__, __LINE__, "%s", #c);                                       \
      return;                                                                            \
    }                                                                                    \
  } while (0)

#define CHECK_INT(a, b)                                                                  \
  do {                                                                                   \
    long long a_ = (long long)(a), b_ = (long long)(b);                                  \
    if (a_ != b_) {                                                                      \
      dpm_test_fail(__FILE__, __LINE__, "%s == %lld, expected %lld", #a, a_, b_);        \
      return;                                                                            \
    }                                                                                    \
  } while (0)

#define CHECK_NEAR(a, b, tol)                                                            \
  do {                                                                                   \
    double a_ = (double)(a), b_ = (double)(b);                                           \
    dpm_test_margin(__FILE__, __LINE__, fabs(a_ - b_), (double)(tol));                   \
    if (!(fabs(a_ - b_) <= (tol))) {                                                     \
      dpm_test_fail(__FILE__, __LINE__, "%s == %.9g, expected %.9g (tol %g)", #a, a_,    \
                    b_, (double)(tol));                                                  \
      return;                                                                            \
    }                                                                                    \
  } while (0)

/* Checks that a measured error (a difference, a relative difference) is
 * at most its tolerance; NaN fails, and so does a negative one (the
 * measuring helpers' "could not run"). */
#define CHECK_WITHIN(measured, tol)                                                      \
  do {                                                                                   \
    double m_ = (double)(measured), t_ = (double)(tol);                                  \
    dpm_test_margin(__FILE__, __LINE__, m_, t_);                                         \
    if (!(m_ >= 0 && m_ <= t_)) {                                                        \
      dpm_test_fail(__FILE__, __LINE__, "%s == %.3g, tolerance %g", #measured, m_, t_);  \
      return;                                                                            \
    }                                                                                    \
  } while (0)

/* Checks that a string contains a substring. */
#define CHECK_HAS(s, sub)                                                                \
  do {                                                                                   \
    const char *s_ = (s), *sub_ = (sub);                                                 \
    if (!s_ || !strstr(s_, sub_)) {                                                      \
      dpm_test_fail(__FILE__, __LINE__, "%s = \"%s\" lacks \"%s\"", #s,                  \
                    s_ ? s_ : "(null)", sub_);                                           \
      return;                                                                            \
    }                                                                                    \
  } while (0)

#endif
