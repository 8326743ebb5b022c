/* The positions of the fill ops' arguments: their semantics (ops/fill.c)
 * define the tables and read them, their CPU kernels (backend/cpu/fill.c)
 * read them. */
#ifndef DPM_OPS_FILL_H
#define DPM_OPS_FILL_H

/* Arguments every fill has, first in each table. */
enum { FILL_ARG_SHAPE, FILL_ARG_SEED, FILL_ARG_FIRST_OWN };
/* GaussianFill's own, UniformFill's and ConstantFill's. */
enum { G_MEAN = FILL_ARG_FIRST_OWN, G_STD };
enum { U_MIN = FILL_ARG_FIRST_OWN, U_MAX };
enum { C_VALUE = FILL_ARG_FIRST_OWN, C_DTYPE };

#endif
