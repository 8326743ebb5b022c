/* The position of Dropout's argument (and DropoutGradient's, the same
 * table), which its semantics (ops/dropout.c) define and read and its CPU
 * kernels (backend/cpu/dropout.c) read. */
#ifndef DPM_OPS_DROPOUT_H
#define DPM_OPS_DROPOUT_H

enum { DROPOUT_ARG_RATIO };

#endif
