/* The counters of common/workcount.h. */
#include "common/workcount.h"

atomic_ulong dpm_work_done[DPM_WORK_COUNT];
